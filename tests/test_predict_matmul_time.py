"""labkit.predict.choosing.matmul_time: the planner's matmuls on the
roofline -- the assumed efficiency above the ridge point, less below it,
and the planner's compute time divided by it."""
import pytest

from labkit.predict import roofline as R
from labkit.predict.model import arch as A
from labkit.predict.model.flops import peak_tflops
from labkit.predict.choosing import ArchModel, Cluster, plan
from labkit.predict.choosing.matmul_time import (layer_matmuls,
                                                 matmul_efficiency)

REC = A.llama(4, 1024, 8, 2, 2816, 32000, max_seq=2048)
M = ArchModel(REC, 2048)


def test_a_dense_layer_above_the_ridge_reaches_the_assumed_efficiency():
    assert matmul_efficiency(M, 2048, 1, "h100-sxm", 0.5) == 0.5
    # no data-sheet bandwidth: the assumption as it is
    assert matmul_efficiency(M, 1, 1, "no-such-chip", 0.5) == 0.5


def test_a_thin_matmul_is_bound_by_its_bytes():
    """One token per rank: every matmul reads its whole weight for 2 k n
    FLOPs, far below the ridge; the reached fraction is FLOPs over the
    peak times the bytes' time."""
    peak, hbm = peak_tflops("h100-sxm") * 1e12, R.chip("h100")[1]
    ops = layer_matmuls(M, 1, 8)
    assert len(ops) == 7 and all(o.count == 3 for o in ops)   # SwiGLU
    flops = sum(o.flops * o.count for o in ops)
    seconds = sum(o.nbytes * o.count for o in ops) / hbm
    eff = matmul_efficiency(M, 1, 8, "h100-sxm", 0.5)
    assert eff == pytest.approx(flops / (peak * seconds))
    assert eff < 0.01


def test_the_planner_divides_its_flops_by_the_roofline_share():
    """A layout of few tokens per rank takes longer than the FLOPs at
    the assumed 50 %: its compute is the FLOPs at the roofline's share."""
    short = ArchModel(REC, 16)
    x = plan(short, 8, Cluster(8, 8, "h100-80gb"), tp=8, pp=1,
             zero=(0,), recompute=("none",), sequence_parallel=(False,),
             micro_batch=1)[0]
    eff = matmul_efficiency(short, 16, 8, "h100-sxm", 0.5)
    assert eff < 0.5
    peak = peak_tflops("h100-sxm") * 1e12
    mb_flops = short.hardware_flops(1, "none") / 8
    assert x.time["compute"] == pytest.approx(
        x.microbatches * mb_flops / (peak * eff))
