"""labkit.runs.compile on 2 gloo ranks with the aot_eager backend (the
graphs inductor would compile, no code generated: seconds on CPU): one
graph per block and no break inside it, FSDP2's hooks breaking the whole
model's graph, losses equal to eager, the same collectives."""
from __future__ import annotations

import pytest

from labkit.launch import launch


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.compile", 2, {"backend": "aot_eager",
                                             "steps": 3},
                  timeout=300, run_dir=tmp_path_factory.mktemp("compile"))


def test_one_graph_per_block_and_breaks_at_fsdp(ranks):
    for r in ranks:
        ex = r["explain"]
        assert ex["block"] == {"graphs": 1, "graph_breaks": 0,
                               "reasons": []}
        whole = ex["fsdp2_model"]
        assert "error" in whole or whole["graph_breaks"] >= 1


def test_losses_equal_and_collectives_unchanged(ranks):
    for r in ranks:
        e, c = r["eager"], r["compiled"]
        assert c["losses"] == pytest.approx(e["losses"], rel=1e-5)
        assert c["collectives"] == e["collectives"]
        assert e["collectives"]["all_gather"]["bytes"] > 0
    assert ranks[0]["ops"]["eager_block"]["total"] > 0


def test_the_run_reports_its_cache_and_device(ranks):
    for r in ranks:
        assert set(r["cache"]) == {"dir", "fx_hits", "fx_misses",
                                   "aot_hits", "aot_misses",
                                   "dropped_truncated"}
        assert r["device"].startswith("cpu")


def test_inductor_caches_under_the_checkout_unless_told(monkeypatch,
                                                         tmp_path):
    from labkit.runs import compile as C
    for k in ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE",
              "TORCHINDUCTOR_AUTOGRAD_CACHE"):
        monkeypatch.delenv(k, raising=False)
    assert C.use_cache() == str(C.CACHE)
    assert C.CACHE.parts[-2:] == (".cache", "inductor")
    import os
    assert os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert C.use_cache() == str(tmp_path)   # the benchmark's cold run


def test_a_kernel_cut_short_by_a_kill_is_dropped(tmp_path):
    """A compile killed midway leaves a truncated .so at its final path,
    which every later run would fail to load: it is deleted (compiled
    again); whole kernels and files still being written are kept."""
    import os
    import time

    import torch

    from labkit.runs import compile as C
    real = next(p for p in (os.path.join(os.path.dirname(torch.__file__),
                                         "lib", n)
                            for n in ("libc10.so", "libshm.so"))
                if os.path.exists(p))
    data = open(real, "rb").read()
    (tmp_path / "a").mkdir()
    whole, cut, fresh = (tmp_path / "a" / "whole.so", tmp_path / "cut.so",
                         tmp_path / "fresh.so")
    whole.write_bytes(data)
    cut.write_bytes(data[:4096])
    fresh.write_bytes(data[:4096])
    old = time.time() - 600
    for f in (whole, cut):
        os.utime(f, (old, old))
    assert C.drop_truncated(tmp_path) == ["cut.so"]
    assert whole.exists() and fresh.exists() and not cut.exists()
