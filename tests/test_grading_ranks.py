"""scripts/grading/ranks.py: a build-it rerun's ranks, forked from one
process that imported torch: the same result as ``buildit.run`` for the
answer key, a crash and a hang as reasons, and no rank can write on the
channel its parent keeps to the grader."""
import atexit
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading.ranks import fork_ranks  # noqa: E402
from labkit import buildit  # noqa: E402
from labkit.buildit.sharding import numels  # noqa: E402

pytestmark = pytest.mark.distributed
HIDDEN = buildit.harness("zero").HIDDEN


def master_key(stem: str, marker: str) -> str:
    """The answer key: the master's cell holding ``marker``, its solution
    markers dropped (what a student who solved it hands in)."""
    nb = json.loads((ROOT / "labs" / "assignments" / f"{stem}.ipynb")
                    .read_text())
    cell = next("".join(c["source"]) for c in nb["cells"]
                if marker in "".join(c["source"]))
    return "\n".join(ln.replace("  # SOLUTION", "")
                     for ln in cell.splitlines()
                     if ln.strip() not in ("# BEGIN SOLUTION",
                                           "# END SOLUTION")) + "\n"


def fixture(name: str) -> str:
    """A fixture's source; one whose first line reads ``# appended to:
    X.py`` (a hostile twist on a wrong implementation, or on another
    hostile fixture) after X's, as X's own source resolves."""
    text = (FIXTURES / f"{name}.py").read_text()
    head = text.split("\n", 1)[0]
    if head.startswith("# appended to: "):
        base = head.removeprefix("# appended to: ").strip()
        text = fixture(base.removesuffix(".py")) + "\n\n" + text
    return text


def key_source() -> str:
    return master_key("04_zero", "class ShardedAdam")


# one process serves every ``fresh_fork_ranks`` of a pytest run: it
# imports torch and the grader once (2.8 s of CPU a process), runs
# nothing, and forks a child per call, which calls ``fork_ranks`` as the
# grader's rerun does (one call per process: what a hub did before must
# not be in the next ranks' memory). It ends when its stdin closes; the
# answers come on a pipe of their own (argv[2])
SERVE = """import json, os, pathlib, sys
sys.path.insert(0, sys.argv[1])
import torch._dynamo, labkit.runs.tools.buildit
from grading.ranks import fork_ranks
out = os.fdopen(int(sys.argv[2]), "w")
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            a = json.loads(line)
            got = fork_ranks(a[0], a[1], a[2], a[3], pathlib.Path(a[4]),
                             *a[5:])
            out.write(json.dumps(got) + chr(10))
            out.flush()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
"""
_SERVER: list = []


def _server() -> list:
    import subprocess
    if _SERVER and _SERVER[0].poll() is None:
        return _SERVER
    r, w = os.pipe()
    p = subprocess.Popen([sys.executable, "-c", SERVE, str(ROOT / "scripts"),
                          str(w)], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, pass_fds=(w,),
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(w)
    _SERVER[:] = [p, os.fdopen(r)]
    atexit.register(_stop, p)
    return _SERVER


def _stop(p) -> None:
    """Its stdin closed, the server ends: waited for here."""
    try:
        p.stdin.close()
        p.wait(timeout=30)
    except Exception:  # noqa: BLE001 - then killed
        p.kill()
        p.wait()


def fresh_fork_ranks(*args) -> dict:
    """``fork_ranks`` from another process, as the grader's rerun calls
    it: a pytest worker that ran backward on engine threads before
    (another test) leaves forked children that autograd refuses
    (PyTorch's wiki, "Autograd and Fork"), which no grading process ever
    is. That process (``SERVE``) runs no backward itself (the hub only
    reduces), so it serves every call of this run."""
    import select
    p, results = _server()
    p.stdin.write(json.dumps([str(a) if isinstance(a, Path) else a
                              for a in args]) + "\n")
    p.stdin.flush()
    ready = select.select([results], [], [], 300)[0]
    line = results.readline() if ready else ""
    if not line:
        p.kill()
        why = p.stderr.read()[-2000:] if ready else "no result in 300 s"
        _SERVER.clear()
        raise AssertionError(f"fork_ranks gave no result: {why}")
    return json.loads(line)


def test_the_key_scores_full_marks_on_forked_ranks(tmp_path):
    got = fresh_fork_ranks("zero", key_source(), HIDDEN, 2, tmp_path, 120)
    assert got["error"] is None, got["error"]
    assert len(got["ranks"]) == 2
    assert buildit.score(got)[0] == buildit.score(got)[1] > 0


@pytest.mark.parametrize("source, why", [
    # the rank that exits first may take the other down with it (exit 1,
    # a closed connection): its own exit is in the reason either way
    ("import os\nos._exit(5)\n", ": exit 5"),
    ("import time\ntime.sleep(600)\n", "hung (killed after 4 s)")])
def test_a_crash_or_a_hang_is_a_reason(tmp_path, source, why):
    got = fork_ranks("zero", source, HIDDEN, 2, tmp_path, 4)
    assert why in got["error"], got["error"]
    assert buildit.score(got)[0] == 0


@pytest.mark.parametrize("hub", [False, True])
def test_no_rank_writes_on_the_parents_channel(tmp_path, hub):
    r, w = os.pipe()
    forge = (f"import os\nfor fd in range(3, 64):\n    try:\n"
             f"        os.write(fd, b'forged\\n')\n    except OSError:\n"
             f"        pass\n")
    got = fork_ranks("zero", forge, HIDDEN, 2, tmp_path, 30, hub=hub)
    os.close(w)
    assert os.read(r, 100) == b""
    os.close(r)
    assert got["error"]   # and it is no ShardedAdam


# the grader's hub (grading/hub.py): the ranks' group is its, and the
# counts a part is graded on are its own, not the ranks'
FIXTURES = ROOT / "tests" / "buildit"


WORLD = buildit.hidden_world("zero")     # 4: the memory probe's bounds
PROBE = 2 * HIDDEN["probe"]["steps"] + 3


def test_the_key_on_the_hub_scores_full_marks_with_the_hubs_counts(
        tmp_path):
    got = fresh_fork_ranks("zero", key_source(), HIDDEN, WORLD, tmp_path,
                           120, True)
    assert got["error"] is None, got["error"]
    wins = got["hub"]["windows"]
    # the constructor's window, then two per step (backward, step()), on
    # each rank, then the memory probe's; every reduce-scatter in
    # backward, every all-gather after
    main = 2 * HIDDEN["steps"] + 1
    assert [len(w) for w in wins] == [main + PROBE] * WORLD
    assert {c[0] for w in wins[0][1:main:2] for c in w} == \
        {"reduce_scatter"}
    assert {c[0] for w in wins[0][2:main:2] for c in w} == {"all_gather"}
    assert got["hub"]["outside"] == [{}] * WORLD
    # the hub read every rank's memory as each window opened
    assert [len(r) for r in got["hub"]["rss"]] == [main + PROBE] * WORLD
    rows = {r["check"]: r for r in
            buildit.grade({**got, "loopback_bytes": 0})}
    assert all(r["passed"] for r in rows.values()), rows
    assert "grader-measured" in rows["state"]["expected"]
    # beside the staging checks (labkit.buildit.held): what a rank holds
    # as the probe begins, beyond the hub's reading before the student's
    # code and the probe's own model and data, is a mebibyte under the
    # noise allowed
    from labkit.buildit import counted, held, zero_state
    out, err = counted.apply(buildit.harness("zero"), got)
    course = zero_state.course_bytes(got["config"])
    extra = [held.held(out, i, r["probe_rss"]) - course
             for i, r in enumerate(out["ranks"])]
    assert err is None and max(extra) < held.NOISE - (1 << 20), extra
    # ... and at every call of its backward passes, and as they end, it
    # holds a mebibyte less than the most allowed there
    assert [[len(c) for c in r] for r in got["hub"]["call_rss"]] == \
        [[len(w) for w in r] for r in wins]
    most = max(max(r["held_rss_per_step"]) for r in out["ranks"])
    assert most < zero_state.held_limit(got["config"], WORLD) - (1 << 20)


@pytest.mark.parametrize("fixture", ["zero_full_adam", "hostile_zero_kept"])
def test_full_adam_fails_state_on_the_grader_s_memory_count(tmp_path,
                                                            fixture):
    """Full Adam on every rank keeps 8 Psi where ZeRO-2 keeps 16 Psi / N
    at most: the hub's count of the probe's memory (8n = 16.8 MB against
    4n = 8.4 MB at N = 4) fails it, also when the rank rewrote the
    harness's own measure (``kept_bytes``) to report the shard's bytes."""
    got = fresh_fork_ranks("zero", (FIXTURES / f"{fixture}.py").read_text(),
                           HIDDEN, WORLD, tmp_path, 120, True)
    got = {**got, "loopback_bytes": 0}
    rows = {r["check"]: r for r in buildit.grade(got)}
    assert not rows["state"]["passed"]
    assert "the grader counted" in rows["state"]["reason"]
    assert rows["params"]["passed"] and rows["bytes"]["passed"]
    if fixture == "hostile_zero_kept":         # its word: the shard's
        from labkit.buildit import zero
        low, high = zero.state_bounds(got["config"], WORLD)
        assert all(low <= r["state_bytes"] <= high for r in got["ranks"])


@pytest.mark.parametrize("fixture, why", [
    ("hostile_zero_counter", "the counter saw all_gather"),
    ("hostile_zero_marks", "outside the steps the grader counts")])
def test_a_rank_that_rewrites_its_counter_gets_the_hubs_count(
        tmp_path, fixture, why):
    """An all-reduce behind a counter rewritten to report reduce-scatters
    (it would score "bytes" on ranks that count themselves), or hidden
    between the hub's windows: 0 on the bytes."""
    got = fresh_fork_ranks("zero", (FIXTURES / f"{fixture}.py").read_text(),
                           HIDDEN, WORLD, tmp_path, 120, True)
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert rows["bytes"]["points"] == 0
    assert why in rows["bytes"]["reason"], rows["bytes"]["reason"]


def test_a_rank_that_keeps_its_gradients_fails_freed_on_the_memory_count(
        tmp_path):
    """ZeRO-2's reduce-scatters in backward (the hub counts them) but no
    gradient freed, and the harness's measuring hook dropped
    (tests/buildit/hostile_zero_kept_grads.py): its own peak, 0, would
    score "freed"; the hub's memory count over the probe's backward holds
    every gradient: 0 on "freed", the rest full."""
    got = fresh_fork_ranks("zero", (FIXTURES / "hostile_zero_kept_grads.py")
                           .read_text(), HIDDEN, WORLD, tmp_path, 120, True)
    got = {**got, "loopback_bytes": 0}
    rows = {r["check"]: r for r in buildit.grade(got)}
    assert {c for c, r in rows.items() if not r["passed"]} == {"freed"}
    assert "over backward (the grader counted)" in rows["freed"]["reason"]
    assert all(p == 0 for r in got["ranks"] for p in
               r["grad_peak_per_step"])      # the lie
    from labkit.buildit import zero
    without_hub = {k: v for k, v in got.items() if k != "hub"}
    assert zero.check_freed(without_hub)[0]  # which its word would pass


def test_a_rank_that_hides_its_gradient_peak_gets_the_hubs_count(tmp_path):
    """ZeRO-1 that drops the harness's hook measuring its live gradients
    (tests/buildit/hostile_zero_peak.py): its own record says a peak of 0,
    which scored "freed"; the hub counted no reduce-scatter in backward:
    0 on "freed", the other checks as ZeRO-1's."""
    got = fresh_fork_ranks("zero", (FIXTURES / "hostile_zero_peak.py")
                           .read_text(), HIDDEN, WORLD, tmp_path, 120, True)
    got = {**got, "loopback_bytes": 0}
    rows = {r["check"]: r for r in buildit.grade(got)}
    assert {c for c, r in rows.items() if not r["passed"]} == {"freed"}
    assert "during backward (the grader counted)" in rows["freed"]["reason"]
    assert all(p == 0 for r in got["ranks"] for p in
               r["grad_peak_per_step"])      # the lie
    # with the reduce-scatters in backward, its word (the peak) would have
    # scored; the hub's memory count of the probe's backward does not
    from labkit.buildit import counted, zero
    h = buildit.harness("zero")
    out, err = counted.apply(h, got)
    assert err is None
    moved = {**out, "ranks": [{**r, "backward_bytes_per_step":
                               r["bytes_per_step"]} for r in out["ranks"]]}
    assert zero.check_freed({k: v for k, v in moved.items()
                             if k != "hub"})[0]
    assert not zero.check_freed(moved)[0]



@pytest.mark.parametrize("name, check", [
    ("hostile_zero_ballast", "state"), ("hostile_zero_hook_ballast", "freed"),
    ("hostile_zero_state_ballast", "freed")])
def test_memory_staged_between_the_hub_s_readings_fails(tmp_path, name,
                                                        check):
    """issue 49 (2): full Adam with a block allocated at import and freed
    as the probe's optimizer is built (its growth inside the bounds), and
    gradients never freed hidden by a block each backward's first hook
    frees (its growth under Phi / 2), the block gone after the last step
    or kept as state there (inside the state's bound at N = 4): staged
    differences of the hub's readings, all 0 on that check, by the hub's
    reading before the student's code, at each window and at each
    collective of a backward."""
    from labkit.buildit import counted, zero_state
    got = fresh_fork_ranks("zero", fixture(name), HIDDEN, WORLD,
                           tmp_path, 120, True)
    got = {**got, "loopback_bytes": 0}
    rows = {r["check"]: r for r in buildit.grade(got)}
    assert not rows[check]["passed"], rows[check]
    assert rows["params"]["passed"] and rows["bytes"]["passed"]
    out, err = counted.apply(buildit.harness("zero"), got)
    assert err is None
    cfg = got["config"]
    if check == "state":          # the staged growth: inside the bounds
        low, high = zero_state.rss_bounds(cfg, WORLD)
        assert all(low <= r["state_rss"] <= high for r in out["ranks"])
        assert "as the grader's memory probe began" in \
            rows["state"]["reason"]
    else:                         # ... under Phi / 2, the rest full
        phi = 4 * sum(numels(cfg["probe"]["sizes"]))
        assert all(max(r["grads_rss_per_step"]) <= phi // 2
                   for r in out["ranks"])
        assert rows["state"]["passed"]
        if name == "hostile_zero_hook_ballast":
            assert "as a backward pass began" in rows["freed"]["reason"]
            return
        # the block is there after the last step too: every window's
        # reading passes it; the readings at the calls do not
        no_calls = {**out, "ranks": [
            {k: v for k, v in r.items() if k != "held_rss_per_step"}
            for r in out["ranks"]]}
        from labkit.buildit import zero
        assert zero.check_freed(no_calls)[0]
        assert "during a backward pass" in rows["freed"]["reason"]
        limit = zero_state.held_limit(cfg, WORLD)
        assert all(max(r["held_rss_per_step"]) > limit + (1 << 20)
                   for r in out["ranks"])

