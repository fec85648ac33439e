"""scripts/grading/memory.py: a process's memory as the kernel counts it,
read from outside; with ``returned`` a freed tensor leaves the count; what
a rank's own folder holds is counted too, so that state parked in a file
there between steps is held all the same."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading.memory import ENTRY, folder_bytes, resident  # noqa: E402

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from grading import memory
import torch
memory.returned()
for size in (8, 4, 16):                    # MiB, freed, then bigger
    t = torch.ones(size << 18)
    print("held", flush=True); sys.stdin.readline()
    del t
    print("freed", flush=True); sys.stdin.readline()
"""


def test_a_tensor_is_counted_while_it_lives_and_not_after():
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(ROOT / "scripts")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        for size in (8, 4, 16):
            assert p.stdout.readline().strip() == "held"
            held = resident(p.pid)
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "freed"
            freed = resident(p.pid)
            p.stdin.write("\n")
            p.stdin.flush()
            assert abs(held - freed - (size << 20)) < 256 << 10, \
                (size, held, freed)
    finally:
        p.kill()
        p.wait()
    assert resident(p.pid) == -1            # gone: no count


def test_a_folder_holds_its_files_pages_names_and_links(tmp_path):
    assert folder_bytes(tmp_path / "none") == 0
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"x" * (1 << 20))
    os.symlink("t" * 1000, tmp_path / "l")
    (tmp_path / "s.bin").open("wb").truncate(1 << 30)   # sparse: no pages
    got = folder_bytes(tmp_path)
    names = len("d") + len("a.bin") + len("l") + len("s.bin")
    assert 1 << 20 <= got - 4 * ENTRY - names - 1000 < (1 << 20) + 65536


@pytest.mark.distributed
def test_state_parked_in_the_rank_s_folder_is_counted(tmp_path):
    """Full Adam whose second moment lies in a file of the rank's
    temporary folder between steps (tests/buildit/hostile_zero_parked.py):
    its process keeps 4 Psi, inside the state's bound at N = 4; with its
    folder, the hub's count holds 8 Psi: 0 on "state", the rest as full
    Adam's."""
    from labkit import buildit
    from labkit.buildit import counted, zero_state
    from labkit.buildit.sharding import numels
    from test_grading_ranks import HIDDEN, WORLD, fixture, fresh_fork_ranks
    got = fresh_fork_ranks("zero", fixture("hostile_zero_parked"), HIDDEN,
                           WORLD, tmp_path, 120, True)
    assert got["error"] is None, got["error"]
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert not rows["state"]["passed"], rows["state"]
    assert "full Adam" in rows["state"]["reason"]
    assert rows["params"]["passed"] and rows["bytes"]["passed"]
    out, err = counted.apply(buildit.harness("zero"), got)
    assert err is None
    cfg = got["config"]
    low, high = zero_state.rss_bounds(cfg, WORLD)
    start = 2 * cfg["steps"] + 1          # the probe's first window
    parked = [f[-1] - f[start] for f in got["hub"]["folder"]]
    psi = sum(numels(cfg["probe"]["sizes"]))
    # Adam's second moment, 4 Psi (less the checked run's files it
    # overwrote: the same names, a smaller model)
    assert all(abs(p - 4 * psi) < 1 << 20 for p in parked), parked
    # without its folder, the process alone: inside the bounds
    assert all(low <= r["state_rss"] - p <= high
               for r, p in zip(out["ranks"], parked))
