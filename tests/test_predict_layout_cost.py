"""labkit.predict.choosing.layout_cost: the replicated K/V heads' gradient
all-reduce in the step time (tp > KV heads), and the parts of a step
adding up to it."""
import pytest

from labkit.predict.model import arch as A
from labkit.predict import collectives as C
from labkit.predict.choosing import ArchModel, Cluster, plan

# 8 query heads, 2 K/V heads of 128: tp 4 keeps each K/V head on 2 ranks
REC = A.llama(4, 1024, 8, 2, 2816, 32000, max_seq=2048)


def _best(tp, pp=1):
    return plan(ArchModel(REC, 2048), 16, Cluster(8, 8, "h100-80gb"),
                tp=tp, pp=pp, zero=(0, 1), recompute=("none",),
                sequence_parallel=(False,), micro_batch=1)[0]


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (4, 1), (4, 2),
                                   (8, 1)])
def test_step_is_its_parts_and_kv_copies_cost_only_past_kv_heads(tp, pp):
    x = _best(tp, pp)
    t = x.time
    assert t["step"] == pytest.approx(
        t["compute"] + t["tp_comm"] + t["cp_exposed"] + t["bubble"]
        + t["p2p"] + t["dp_exposed"] + t["offload"] + t["kv_grad_sync"])
    if tp <= REC.kv_heads:
        assert t["kv_grad_sync"] == 0.0
        return
    # K and V of every layer of the slowest stage, 16-bit, summed over
    # the tp / kv_heads ranks holding the same head, inside the node
    layers = max(x.partition)
    nbytes = 2 * layers * 2 * REC.head_dim * REC.hidden
    link = Cluster(8, 8, "h100-80gb").intra
    assert t["kv_grad_sync"] == pytest.approx(C.collective_time(
        "all_reduce", nbytes, tp // REC.kv_heads, link, 0.8))


def test_cross_attention_layers_neither_compute_nor_keep_activations():
    """A text-only step skips Llama 3.2 Vision's cross-attention layers
    (transformers' MllamaTextModel): a stage keeps activations for its
    self layers only, and the stage with the most of them paces the
    pipeline, at the record's FLOPs per computing layer."""
    from pathlib import Path
    from labkit.predict.model import hf_config
    from labkit.predict.model.flops import peak_tflops
    from labkit.predict.pipeline_parallel import stage_bytes as SB
    from labkit.predict.choosing.layout_cost import stage_report
    from labkit.predict.choosing import Assumptions
    a = hf_config.read(Path(__file__).parent / "data" /
                       "hf_configs_families" / "llama3.2-11b-vision.json")
    m, c = ArchModel(a, 4096), Cluster(16, 8, "h100-80gb")
    parts = (9, 11, 10, 10)   # computing 7, 9, 8, 8 (two cross each)
    x = plan(m, 32, c, tp=4, pp=4, zero=(0,), recompute=("selective",),
             sequence_parallel=(True,), micro_batch=1, partition=parts)[0]
    one = SB.layer_activation_bytes(a, 4096, 1, tp=4, sequence_parallel=True,
                                    recompute="selective")
    for st in stage_report(m, x, Assumptions()):
        flight = min(4 - st["stage"], x.microbatches)
        busy = SB.computing_layers(a, parts, st["stage"])
        assert st["activations"] == flight * busy * one
    per_mb = m.hardware_flops(1, "selective")
    rate = peak_tflops(c.spec.peak) * 1e12 * 0.5
    assert x.time["compute"] == pytest.approx(
        x.microbatches * per_mb * 9 / 32 / 4 / rate)
