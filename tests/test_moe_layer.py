"""labkit.nn.moe.router and labkit.nn.moe.layer: the router's rules, capacity
and drops against the formulas, the aux loss's two ends, the permuted
layer against a plain loop, and the decoder with experts against
transformers' own Mixtral / Qwen-MoE (test-only oracle)."""
import json
import re
from pathlib import Path

import pytest
import torch

from labkit import arch as A
from labkit.nn.model import build_arch
from labkit.nn.moe import router as R
from labkit.nn.moe.layer import MoE
from labkit.predict import experts as X

CONFIGS = Path(__file__).resolve().parent / "data" / "hf_configs_moe"
TINY = A.preset("llama-tiny").with_(experts=8, top_k=2, expert_ffn=16)


def test_softmax_top_k_normalised():
    logits = torch.randn(10, 8)
    w, idx, probs = R.route(logits, 2)
    torch.testing.assert_close(w.sum(-1), torch.ones(10))
    assert torch.equal(idx, logits.topk(2, -1).indices)
    raw, _, _ = R.route(logits, 2, norm_topk=False)
    torch.testing.assert_close(raw, probs.topk(2, -1).values)


def test_sigmoid_groups_stay_in_their_groups():
    logits = torch.randn(50, 16)
    w, idx, _ = R.route(logits, 4, "sigmoid", scaling=2.5, groups=4,
                        group_top_k=2)
    assert all(len(set((i // 4).tolist())) <= 2 for i in idx)
    torch.testing.assert_close(w.sum(-1), torch.full((50,), 2.5))


def test_bias_moves_the_choice_not_the_weights():
    logits = torch.zeros(5, 4)
    bias = torch.tensor([0.0, 0.0, 0.0, 1.0])
    w, idx, _ = R.route(logits, 1, "sigmoid", norm_topk=False, bias=bias)
    assert (idx == 3).all() and torch.allclose(w, torch.full((5, 1), .5))


@pytest.mark.parametrize("factor", [0.5, 1.0, 1.25, 2.0])
def test_drops_are_the_histogram_prediction(factor):
    g = torch.Generator().manual_seed(1)
    idx = torch.stack([torch.randperm(8, generator=g)[:2]
                       for _ in range(100)])
    idx[:30, 0] = 3                          # a hot expert
    idx[:30, 1] = torch.where(idx[:30, 1] == 3, 4, idx[:30, 1])
    cap = R.capacity(factor, 2, 100, 8)
    assert cap == X.capacity(factor, 2, 100, 8)
    keep = R.keep_within_capacity(idx, 8, cap)
    routed = R.counts(idx, 8).tolist()
    assert (~keep).sum().item() == X.dropped(routed, cap)
    assert R.counts(idx, 8, keep).tolist() == X.kept(routed, cap)


def test_first_choices_before_second_choices():
    idx = torch.tensor([[1, 0], [0, 1], [0, 1]])   # expert 0: C = 1
    keep = R.keep_within_capacity(idx, 2, 1)
    # token 1's first choice (0) beats token 0's second choice (0)
    assert keep.tolist() == [[True, False], [True, False], [False, False]]


def test_aux_loss_is_one_balanced_and_e_collapsed():
    e, t = 4, 8
    probs = torch.full((t, e), 1 / e)
    idx = torch.arange(t).remainder(e).unsqueeze(1)
    assert R.aux_loss(probs, idx, e).item() == pytest.approx(1.0)
    one = torch.zeros(t, e)
    one[:, 0] = 1
    assert R.aux_loss(one, torch.zeros(t, 1, dtype=torch.long),
                      e).item() == pytest.approx(e)


@pytest.mark.parametrize("factor", [None, 1.0, 1.25])
@pytest.mark.parametrize("shared", [0, 1])
def test_layer_equals_a_plain_loop(factor, shared):
    a = TINY.with_(shared_experts=shared)
    torch.manual_seed(0)
    m = MoE(a)
    m.capacity_factor = factor
    x = torch.randn(2, 24, a.hidden)
    got = m(x)
    flat = x.reshape(-1, a.hidden)
    w, idx, keep = m.route(flat)
    want = m.shared_out(flat) if shared else torch.zeros_like(flat)
    for e, expert in enumerate(m.experts):
        weight = (w * (idx == e) * keep).sum(-1, keepdim=True)
        want = want + weight * expert(flat)
    torch.testing.assert_close(got.reshape(-1, a.hidden), want)


def test_first_dense_layers_and_aux_loss_in_the_decoder():
    from labkit.nn.moe.layer import moe_blocks, total_aux_loss
    m = build_arch(TINY.with_(first_dense_layers=1))
    m(torch.randint(0, TINY.vocab, (2, 8)))
    assert len(moe_blocks(m)) == TINY.layers - 1
    assert total_aux_loss(m).item() > 0


HF = [(r"^embed\.tok\.", "model.embed_tokens."),
      (r"^blocks\.(\d+)\.ln1\.", r"model.layers.\1.input_layernorm."),
      (r"^blocks\.(\d+)\.ln2\.", r"model.layers.\1.post_attention_layernorm."),
      (r"^blocks\.(\d+)\.attn\.([qkvo])\.", r"model.layers.\1.self_attn.\2_proj."),
      (r"^blocks\.(\d+)\.attn\.([qk]_norm)\.", r"model.layers.\1.self_attn.\2."),
      (r"^blocks\.(\d+)\.mlp\.gate\.", r"model.layers.\1.mlp.gate."),
      (r"^blocks\.(\d+)\.mlp\.shared_gate\.",
       r"model.layers.\1.mlp.shared_expert_gate."),
      (r"^blocks\.(\d+)\.mlp\.shared\.(gate|up|down)\.",
       r"model.layers.\1.mlp.shared_expert.\2_proj."),
      (r"^head\.ln_f\.", "model.norm."), (r"^head\.out\.", "lm_head.")]


def _copy(ours, hf):
    theirs = dict(hf.named_parameters())
    with torch.no_grad():
        for n, p in ours.named_parameters():
            m = re.match(r"^blocks\.(\d+)\.mlp\.experts\.(\d+)\.(\w+)\.", n)
            if m:
                i, e, w = m.groups()
                pre = f"model.layers.{i}.mlp.experts."
                if w == "down":
                    p.copy_(theirs[pre + "down_proj"][int(e)])
                else:
                    gu = theirs[pre + "gate_up_proj"][int(e)]
                    f = gu.shape[0] // 2
                    p.copy_(gu[:f] if w == "gate" else gu[f:])
                continue
            for pat, rep in HF:
                if re.match(pat, n):
                    p.copy_(theirs[re.sub(pat, rep, n)])
                    break
            else:
                raise AssertionError(n)


@pytest.mark.parametrize("name", ["mixtral-tiny", "qwen2-moe-tiny",
                                  "qwen3-moe-tiny"])
def test_forward_equals_transformers(name):
    tf = pytest.importorskip("transformers")
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    config = tf.AutoConfig.for_model(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config).eval()
    ours = build_arch(A.from_hf_config(CONFIGS / f"{name}.json")).eval()
    _copy(ours, hf)
    idx = torch.randint(0, cfg["vocab_size"], (2, 12))
    with torch.no_grad():
        want = hf(input_ids=idx).logits
        got = ours(idx)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
