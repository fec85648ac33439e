"""The CPU-window split: exclusive kinds in a fixed order, by construction
(times in microseconds)."""
import kineto_traces as K
from kineto_traces import ev
from labkit.measure.trace import cpu_window, kineto


def test_each_instant_goes_to_the_first_busy_kind(tmp_path):
    """GPU: compute [100,200), an all-reduce [150,300), a copy [250,320),
    the DataLoader on the CPU [280,400): in the window [0,400)."""
    events = K.kineto([(1, 0, 400), (2, 400, 100)], [
        (K.GEMM, 100, 100, 7, 10), (K.NCCL, 150, 150, 20, 11),
        (K.COPY, 250, 70, 7, 12)])
    events.append(ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter"
                     ".__next__", 280, 120, cat="user_annotation"))
    t = kineto.read(K.write(tmp_path, 0, events))
    assert cpu_window.ORDER[t.device][0] == "compute"
    d = cpu_window.split(t, 0, 400)
    assert d == {"compute": 100, "communication": 100, "other": 20,
                 "data": 80, "idle": 100, "comm_total": 150, "overlap": 50}
    assert cpu_window.idle_gaps(t, 0, 400) == [(0, 100)]
