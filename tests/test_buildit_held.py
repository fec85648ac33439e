"""labkit.buildit.held: what a rank holds as the grader's memory probe
begins, against the hub's reading before the student's code (plain
data; tests/test_grading_ranks.py and test_grading_points.py run it on
forked ranks with the staging fixtures)."""
import os

from labkit.buildit import held


def result(base):
    return {"hub": {"base": base}, "ranks": [{}] * len(base)}


def test_held_is_the_growth_since_the_hub_s_reading_before_the_code():
    r = result([100, 200])
    assert held.held(r, 0, 150) == 50 and held.held(r, 1, 200) == 0
    assert held.held(r, 1, -1) is None           # a reading the hub lacks
    assert held.held(result([-1]), 0, 150) is None   # base never read
    assert held.held({"hub": {}}, 0, 150) is None
    assert held.held(r, 0, "150") is None        # not the hub's record


def test_check_allows_the_course_s_bytes_and_the_noise_only():
    r = result([1000, 1000])
    course = 4096
    assert held.check(r, [1000 + course + held.NOISE] * 2, course) is None
    why = held.check(r, [1000, 1000 + course + held.NOISE + 1], course)
    assert why.startswith("as the grader's memory probe began, a rank "
                          f"held {held.NOISE + 1} B")
    assert "before your code was imported" in held.check(
        result([-1, 1000]), [2000, 2000], course)
    assert "no count" in held.check(r, [], course)


def test_release_gives_freed_memory_back():
    """``release`` collects cycles and trims the heap: a cycle holding
    4 MiB in small blocks (under the mmap threshold) leaves the count."""
    def resident() -> int:
        with open(f"/proc/{os.getpid()}/status") as f:
            return 1024 * sum(int(ln.split()[1]) for ln in f
                              if ln.startswith("RssAnon"))
    a = {"blocks": [bytearray(b"x" * 32768) for _ in range(128)]}
    a["self"] = a                                # a cycle
    before = resident()
    del a
    held.release()
    assert resident() < before - (2 << 20)
