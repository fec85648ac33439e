"""labkit.predict.pipeline_parallel.stage_bytes: a pipeline stage's parameters and
activations read from the record. On the GPT they are the planner's old
closed forms float for float; on Llama 3.1 405B the untied 128K head, GQA
and SwiGLU change them as the module says."""
import itertools

import pytest

from labkit.predict.model import arch as A
from labkit.predict.model import params as P
from labkit.predict.pipeline_parallel import stage_bytes as SB
from labkit.predict import tensor_parallel as TP
from labkit.predict.memory import activation_bytes_per_layer
from labkit.predict.model.shapes import SHAPES, Model

L405 = A.preset("llama3.1-405b")


@pytest.mark.parametrize("m", list(SHAPES.values())
                         + [Model(4, 256, 8, 128, 1000)],
                         ids=lambda m: f"{m.layers}x{m.hidden}")
def test_gpt_activations_are_korthikanti_exactly(m):
    for t, sp, r, b in itertools.product((1, 2, 4, 8), (False, True),
                                         ("none", "selective", "full"),
                                         (1, 2)):
        if m.heads % t:
            continue
        old = activation_bytes_per_layer(m.seq, b, m.hidden, m.heads, tp=t,
                                         sequence_parallel=sp, recompute=r)
        new = SB.layer_activation_bytes(m.arch, m.seq, b, tp=t,
                                        sequence_parallel=sp, recompute=r)
        assert new == old, (t, sp, r, b)


@pytest.mark.parametrize("m", list(SHAPES.values()),
                         ids=lambda m: f"{m.layers}x{m.hidden}")
def test_gpt_stage_params_are_the_old_closed_form(m):
    for t, parts in itertools.product((1, 2, 8), ((m.layers,),
                                                  (1, m.layers - 1),
                                                  (2, m.layers - 4, 2))):
        if m.heads % t:      # the planner never splits heads unevenly
            continue
        layer = TP.layer_params(m.hidden, t)["total"]
        assert SB.layer_params(m.arch, t) == layer
        for i in range(len(parts)):
            old = parts[i] * layer
            if i == 0:
                old += m.vocab * m.hidden / t + m.seq * m.hidden
            elif i == len(parts) - 1:
                old += m.vocab * m.hidden / t
            assert SB.stage_params(m.arch, t, parts, i) == old


@pytest.mark.parametrize("name", ["llama3-8b", "llama3.1-405b",
                                  "llama2-70b", "llama-tiny", "gpt-tiny"])
def test_stages_sum_to_the_record(name):
    a = A.preset(name)
    parts = (1, a.layers - 1)
    total = sum(SB.stage_params(a, 1, parts, i) for i in (0, 1))
    # untied: every tensor once; tied: Megatron's copy on the last stage
    assert total == P.total(a) + (a.vocab * a.hidden if a.tied else 0)
    assert SB.stage_params(a, 1, (a.layers,), 0) == P.total(a)


def test_llama405b_last_stage_holds_the_128k_head():
    parts = (7,) + (8,) * 14 + (7,)            # Dubey et al. 2024
    layer = SB.layer_params(L405, 8)
    V, h = 128256, 16384
    assert SB.stage_params(L405, 8, parts, 0) == 7 * layer + V * h / 8
    assert SB.stage_params(L405, 8, parts, 15) == 7 * layer + V * h / 8 + h
    assert SB.stage_params(L405, 8, parts, 1) == 8 * layer
    # 16-bit logits and their gradient buffers: 4 s b h/t (1 + V/h)
    assert SB.logits_bytes(L405, 8192, 1, 8) == pytest.approx(
        4 * 8192 * (h + V) / 8)


def test_llama405b_activation_terms():
    k = SB.activation_terms(L405, 8)
    # no dropout masks; Q + 2 KV (1024 wide) + out 2 + SwiGLU 6 x 3.25 h
    assert k["replicated"] == 8
    assert k["split"] == pytest.approx(2 * (1 + 2 / 16) + 2 + 6 * 3.25)
    assert k["kv_extra"] == 0
    s, b = 8192, 1
    sbh = s * b * 16384
    sel = SB.layer_activation_bytes(L405, s, b, tp=8, recompute="selective")
    assert sel == pytest.approx(sbh * (8 + 23.75 / 8))
    sp = SB.layer_activation_bytes(L405, s, b, tp=8, sequence_parallel=True,
                                   recompute="selective")
    assert sp == pytest.approx(sbh * 31.75 / 8)
    # TP 16 > 8 KV heads: each rank keeps one whole K and V head
    k16 = SB.activation_terms(L405, 16)
    assert k16["kv_extra"] == 2 * 2 * (128 - 1024 / 16)
    assert SB.kv_width(L405, 16) == 128 and SB.kv_width(L405, 4) == 256
    assert SB.ring_buffer_bytes(L405, 8192, 1, 8) == 2 * 2 * 8192 * 128 * 2


def test_gqa_shrinks_activations_against_the_gpt_shape():
    g = Model(126, 16384, 128, 8192, 128000).arch
    a = SB.layer_activation_bytes(L405, 8192, 1, 8, recompute="selective")
    b = SB.layer_activation_bytes(g, 8192, 1, 8, recompute="selective")
    assert a < b


def test_bad_split_is_one_message():
    # 14 heads, 2 KV heads (Qwen2-0.5B's): tp 7 cannot place K/V evenly
    assert "KV heads" in SB.split_error(A.llama(2, 896, 14, 2, 4864, 256),
                                        7)
    assert SB.split_error(L405, 8) == ""
    moe = A.Arch(2, 64, 4, 256, positions="rope", experts=4, top_k=2,
                 expert_ffn=32)
    with pytest.raises(ValueError, match="plan_moe"):
        SB.layer_params(moe, 1)


def _vision():
    from pathlib import Path
    from labkit.predict.model import hf_config
    return hf_config.read(Path(__file__).parent / "data" /
                          "hf_configs_families" / "llama3.2-11b-vision.json")


def test_a_cross_attention_layer_is_priced_by_its_own_parameters():
    """Llama 3.2 Vision's eight gated cross-attention layers: the same
    four projections as a self-attention layer, plus per-head q/k norms
    and two tanh gates, replicated over TP; the stages sum to the
    record, and a text-only step computes only the self layers."""
    a = _vision()
    for tp in (1, 8):
        extra = SB.cross_layer_params(a, tp) - SB.layer_params(a, tp)
        assert extra == 2 * a.head_dim + 2
    for parts in ((40,), (10,) * 4, (9, 11, 10, 10), (5,) * 8):
        assert sum(SB.stage_params(a, 1, parts, i)
                   for i in range(len(parts))) == P.total(a)
    assert [SB.stage_layers(a, (9, 11, 10, 10), i) for i in range(4)] \
        == [(7, 2), (9, 2), (8, 2), (8, 2)]
    assert SB.computing_layers(a, (4, 36), 0) == 3    # layer 3: cross
    assert SB.computing_layers(A.preset("llama3-8b"), (16, 16), 1) == 16
