"""scripts/grading/rank_cgroup.py: a memory cgroup per rank of a rerun,
where the grader has one to give: a page a rank parks outside its
process (a tmpfs file, unmapped) is charged to it all the same; without
one (not root, not a cgroup), ``open`` gives None and the hub reads
``/proc`` alone; the ranks' cgroups are gone once closed."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import limits  # noqa: E402
from grading.memory import parts  # noqa: E402
from grading.rank_cgroup import ENV, RankCgroups  # noqa: E402


def memory_root():
    """A memory cgroup (v1) of this test's own beneath ours, or None."""
    if (limits.CGROUP / "cgroup.controllers").exists():
        return None
    base = limits.CGROUP / "memory" / limits._own("memory").lstrip("/")
    d = base / f"rank-cgroup-test-{os.getpid()}"
    try:
        d.mkdir()
    except OSError:
        return None
    return d


def test_without_a_cgroup_the_hub_reads_proc_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert RankCgroups.open(2) is None
    # a folder that is no cgroup: refused, and nothing left in it
    assert RankCgroups.open(2, root=tmp_path) is None
    assert not list(tmp_path.iterdir())


def test_a_page_parked_outside_the_process_is_charged_to_its_rank():
    root = memory_root()
    if root is None:
        pytest.skip("no writable memory cgroup (v1) here")
    cg = RankCgroups.open(2, root=root)
    try:
        assert cg is not None and len(cg.dirs) == 2
        r, w = os.pipe()              # the rank's "parked"
        r2, w2 = os.pipe()            # the test's "read"
        pid = os.fork()
        if pid == 0:                  # rank 1: parks 8 MiB in a tmpfs file
            try:
                cg.enter(1)
                with open(f"/dev/shm/parked-{os.getpid()}", "wb") as f:
                    f.write(b"x" * (8 << 20))
                os.write(w, b"1")
                os.read(r2, 1)
            finally:
                os.unlink(f"/dev/shm/parked-{os.getpid()}")
                os._exit(0)
        assert os.read(r, 1) == b"1"
        got, other = cg.read(1), cg.read(0)
        anon, shmem = parts(pid)
        os.write(w2, b"1")
        os.waitpid(pid, 0)
        for fd in (r, w, r2, w2):
            os.close(fd)
        # /proc does not see it; the rank's cgroup does
        assert shmem < 1 << 20 and got["shmem"] >= 8 << 20, (shmem, got)
        assert other["shmem"] == 0
    finally:
        if cg is not None:
            cg.close()
        root.rmdir()
    assert not any(d.exists() for d in cg.dirs)


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["key", "hostile_zero_parked"])
def test_on_the_hub_with_a_cgroup_per_rank(tmp_path, name):
    """Lab 4 on forked ranks, each in its memory cgroup: the answer key
    at full marks, what a rank holds as the probe begins (the kernel's
    memory charged to it included) under the staging bound by more than
    three quarters of a mebibyte; the second moment parked in a file of
    the rank's folder: 0 on "state". The ranks' cgroups are gone."""
    from labkit import buildit
    from labkit.buildit import counted, held, zero_state
    from test_grading_ranks import (HIDDEN, WORLD, fixture, fresh_fork_ranks,
                                    key_source)
    root = memory_root()
    if root is None:
        pytest.skip("no writable memory cgroup (v1) here")
    try:
        src = key_source() if name == "key" else fixture(name)
        got = fresh_fork_ranks("zero", src, HIDDEN, WORLD, tmp_path, 120,
                               True, str(root))
        assert not [d for d in root.iterdir() if d.is_dir()]
    finally:
        root.rmdir()
    assert got["error"] is None, got["error"]
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert [len(c) for c in got["hub"]["cgroup"]] == \
        [len(r) for r in got["hub"]["rss"]]
    if name != "key":
        assert not rows["state"]["passed"], rows["state"]
        return
    assert all(r["passed"] for r in rows.values()), rows
    out, _ = counted.apply(buildit.harness("zero"), got)
    course = zero_state.course_bytes(got["config"])
    extra = [held.held(out, i, r["probe_rss"]) - course
             for i, r in enumerate(out["ranks"])]
    assert max(extra) < held.NOISE - (3 << 18), extra


SH = ('echo "${GRADING_CGROUP:-none}"; [ -n "$GRADING_CGROUP" ] || exit 0; '
      'd="$GRADING_CGROUP/rank-0"; mkdir "$d" && echo 0 > "$d/cgroup.procs"'
      ' && grep "^shmem " "$d/memory.stat"')


@pytest.mark.skipif(not limits.probe(), reason="cgroups not writable")
def test_a_rerun_s_jail_gets_its_memory_cgroup_and_no_other(tmp_path):
    """The grader binds a rerun's memory cgroup into its jail (its ranks
    join cgroups of their own beneath it there); the student's jail gets
    none; both are gone, with the ranks' cgroups, once stopped."""
    from grading import jail
    j = jail.choose()
    if j is None or not j.rank_cgroups:
        pytest.skip("no jail, or no memory cgroup per rank here")
    box = j.box(f"rank-cgroup-jail-{os.getpid()}")
    (tmp_path / "c" / "_build").mkdir(parents=True)   # a course copy's
    got, cells = {}, []
    try:
        for what in ("rerun", "student"):
            (tmp_path / what).mkdir()
            p = j.start(["/bin/sh", "-c", SH], work=tmp_path / what,
                        course=tmp_path / "c", env={"PATH": "/usr/bin:/bin"},
                        box=box, trusted=True, what=what)
            got[what] = p.communicate(timeout=30)[0].decode().split()
            cells += p.cgroups
            j.stop(p)
    finally:
        box.close()
    where = "/grading/cgroup" if j.sandboxed else str(cells[0])
    assert got["rerun"][:2] == [where, "shmem"], got
    assert got["student"] == ["none"], got
    assert not any(d.exists() for d in cells + box.dirs)
