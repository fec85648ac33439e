"""``arch_flops`` against torch's own count: a decoder built by transformers
from a config, one forward under ``FlopCounterMode``, equals the record's
forward FLOPs (a third of the iteration's model FLOPs) exactly."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from labkit.predict.model import hf_config  # noqa: E402
from labkit.predict.model.flops_arch import arch_flops  # noqa: E402

SEQ = 64

# Small configs of two families the record reads; every layer dense, so
# torch runs exactly the matmuls a token's route visits.
CONFIGS = {
    "deepseek_v3": dict(  # MLA: scores 48 wide, values 24 (v_head_dim)
        vocab_size=512, hidden_size=256, intermediate_size=512,
        moe_intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64,
        kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16,
        v_head_dim=24, first_k_dense_replace=2, n_routed_experts=8,
        num_experts_per_tok=2, n_group=1, topk_group=1,
        max_position_embeddings=256, tie_word_embeddings=False),
    "llama": dict(  # GQA: 4 query heads share 2 K/V heads
        vocab_size=512, hidden_size=256, intermediate_size=688,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, tie_word_embeddings=False),
}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_forward_flops_equal_flop_counter(kind):
    cfg = transformers.AutoConfig.for_model(kind, **CONFIGS[kind])
    # eager attention: explicit matmuls torch counts (its CPU flash kernel
    # for GQA is not in FlopCounterMode's table and would count 0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    x = torch.randint(0, cfg.vocab_size, (1, SEQ))
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(x)
    d = cfg.to_dict()
    d["model_type"] = kind
    predicted = arch_flops(hf_config.read(d), batch=1, seq=SEQ)
    assert fc.get_total_flops() == predicted["model_flops"] / 3

