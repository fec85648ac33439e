"""HTA's rules, one by one, and the whole breakdown beside HTA itself.

HolisticTraceAnalysis (a test-only dependency) runs once per module on
every synthetic trace of ``tests/kineto_traces.py`` (one rank each, in the
folder layout HTA reads) and once on each real trace folder under
``../shared/traces`` (HTA's own test data, MIT). Ours must agree within one
percentage point on idle, compute, non-compute and overlap.
"""
import logging
import math
from pathlib import Path

import pytest

import kineto_traces as K
from labkit.measure.trace import hta_breakdown as H
from labkit.measure import profiling as P

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
REAL = {"a100-8rank-alltoall": TRACES / "gpu-a100-8rank-alltoall",
        "128rank-sampled": TRACES / "gpu-128rank-sampled"}
COLUMNS = ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg")
# HTA 0.5.0 still uses pandas' inplace=True, deprecated in pandas 3 (PDEP-8)
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]


# -- the rules ----------------------------------------------------------------

def test_kernel_classes_are_htas():
    t = H.kernel_type
    assert t(K.NCCL) == H.COMMUNICATION
    assert t(K.COPY) == t(K.SET) == t("dma_copy") == H.MEMORY
    assert t(K.GEMM) == t(K.ELEM) == H.COMPUTATION
    # ".*(Memcpy)" anywhere, but "Memset" only at the start (re.match)
    assert t("void cub::DeviceMemcpy()") == H.OTHER
    assert t("void foo_Memset_kernel()") == H.COMPUTATION
    assert t("Stream Sync") == t("Event Sync") == H.OTHER
    assert t("ncclDevKernel_AllGather") == H.COMMUNICATION


def test_merge_joins_touching_kernels_and_keeps_negative_groups():
    assert H.merge([(5, 7), (0, 2), (2, 3), (6, 9)]) == [(0, 3), (5, 9)]
    # a rounded 0.4 us kernel [161, 160): its own group, -1 us
    groups = H.merge([(100, 151), (161, 160), (171, 170), (181, 200)])
    assert groups == [(100, 151), (161, 160), (171, 170), (181, 200)]
    assert H.busy(groups) == 51 - 1 - 1 + 19


def test_overlap_and_temporal_by_construction():
    comp, comm = [(0, 10), (20, 30)], [(5, 25)]
    assert H.overlap(comm, comp) == 10
    d = H.temporal([(0, 10, H.COMPUTATION), (5, 25, H.COMMUNICATION),
                    (20, 30, H.COMPUTATION), (40, 50, H.MEMORY)])
    assert d.pop("groups")["all"] == [(0, 30), (40, 50)]
    assert d == {"start": 0, "span": 50, "idle": 10, "compute": 20,
                 "non_compute": 20, "comm": 20, "overlap": 10}
    assert H.pctg(1, 3) == 33.33 and H.pctg(1, 0) is None
    with pytest.raises(ValueError):
        H.temporal([])


# -- beside HTA ------------------------------------------------------------------

def _hta(trace_dir):
    hta = pytest.importorskip(
        "hta.trace_analysis",
        reason="HolisticTraceAnalysis (test-only dependency) not installed")
    from hta.common.trace import Trace
    logging.getLogger("hta").setLevel(logging.ERROR)
    # TraceAnalysis(trace_dir=...) parses the ranks in a fork()ed Pool; forked
    # from a pytest-xdist worker that holds threads, a child can deadlock on a
    # lock copied held (the landing CI hung 600 s here). Parse in-process.
    ta = hta.TraceAnalysis.__new__(hta.TraceAnalysis)
    ta.t = Trace(trace_dir=str(trace_dir))
    ta.t.load_traces(use_multiprocessing=False, use_memory_profiling=False)
    tb = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    ov = ta.get_comm_comp_overlap(visualize=False).set_index("rank")
    return {r: {**{c: float(tb.loc[r, c]) for c in COLUMNS},
                "comp_comm_overlap_pctg":
                    float(ov.loc[r, "comp_comm_overlap_pctg"])}
            for r in tb.index}


def assert_agrees(ours: dict, hta: dict, label: str):
    for c in (*COLUMNS, "comp_comm_overlap_pctg"):
        o, h = ours[c], hta[c]
        if o is None or math.isnan(h):      # no communication at all
            assert o is None and math.isnan(h), (label, c, o, h)
        else:
            assert abs(o - h) <= 1.0, (label, c, o, h)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic")
    names = list(K.SCENARIOS)
    for rank, name in enumerate(names):
        K.write(folder, rank, K.SCENARIOS[name]())
    return names, P.analyze(folder), _hta(folder)


@pytest.mark.parametrize("name", list(K.SCENARIOS))
def test_synthetic_trace_agrees_with_hta(synthetic, name):
    names, ours, hta = synthetic
    rank = names.index(name)
    assert_agrees(ours["ranks"][rank]["total"]["hta"], hta[rank], name)


@pytest.fixture(scope="module", params=list(REAL))
def real(request):
    folder = REAL[request.param]
    if not folder.is_dir():
        pytest.skip(f"real GPU traces not found in {TRACES} (a sibling "
                    "folder 'shared/traces' of the repository)")
    return request.param, P.analyze(folder), _hta(folder)


def test_real_traces_agree_with_hta(real):
    label, ours, hta = real
    assert sorted(hta) == [r["rank"] for r in ours["ranks"]]
    for r in ours["ranks"]:
        assert_agrees(r["total"]["hta"], hta[r["rank"]], label)
        # the shares we show are HTA's, split further
        t = r["total"]
        assert t["compute_pct"] == pytest.approx(
            hta[r["rank"]]["compute_time_pctg"], abs=0.01)
        assert t["data_pct"] + t["idle_pct"] == pytest.approx(
            hta[r["rank"]]["idle_time_pctg"], abs=0.01)
