"""PeakBytes (the CPU peak of live tensor bytes) and the snapshot reader."""
import torch

from labkit.measure.fit import MemoryHistory, PeakBytes, read_snapshot
from labkit.measure.memory import model_state_bytes
from labkit.nn.model import GPTConfig, batch, build
from labkit.training.train import make_optimizer


def test_peak_covers_states_and_its_composition_adds_up():
    c = GPTConfig()
    model = build(c)
    opt = make_optimizer(model)
    for step in range(2):
        x, y = batch(c, 4, step)
        with PeakBytes(model, opt) as peak:
            model(x, y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    states = model_state_bytes(model, opt)
    assert peak.bytes > states["params"] + states["optimizer"]
    assert sum(peak.composition.values()) == peak.bytes
    assert peak.composition["model state"] >= states["params"]


def test_memory_history_is_a_no_op_on_cpu(tmp_path):
    with MemoryHistory(torch.device("cpu"), tmp_path / "s.pickle") as h:
        pass
    assert h.path is None and not (tmp_path / "s.pickle").exists()


def test_read_snapshot_groups_live_blocks_by_owner():
    frame = {"filename": "/x/labkit/nn/model.py", "line": 70, "name": "forward"}
    other = {"filename": "/y/site.py", "line": 1, "name": "f"}
    snap = {"segments": [{"blocks": [
        {"size": 512, "state": "active_allocated", "frames": [frame]},
        {"size": 256, "state": "active_allocated", "frames": [other,
                                                               frame]},
        {"size": 1024, "state": "inactive", "frames": [frame]},
        {"size": 128, "state": "active_allocated", "frames": []}]}]}
    got = read_snapshot(snap)
    assert got["allocated"] == 896
    assert got["top"][0] == ("model.py:70 forward", 768)


def test_memory_history_records_python_stacks_only(monkeypatch, tmp_path):
    """C++ frames (the default stacks="all") are symbolised at every
    allocation: slow on 8 ranks, and read_snapshot reads Python frames."""
    import torch.cuda.memory as M
    calls = []
    monkeypatch.setattr(M, "_record_memory_history",
                        lambda *a, **k: calls.append(k))
    monkeypatch.setattr(M, "_dump_snapshot", lambda path: None)
    with MemoryHistory(torch.device("cuda", 0), tmp_path / "s.pickle"):
        pass
    assert calls[0]["stacks"] == "python"
    assert calls[-1] == {"enabled": None}
