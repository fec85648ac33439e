"""labkit.buildit.smoke: a build-it run on one rank in the caller's own
process (prints and tracebacks where the student is), then on real ranks
whose failure shows each rank's log tail and the student's line."""
import importlib

import pytest

from labkit import buildit
from tests.test_buildit import key_of, solution_cell

# the module (``labkit.buildit.smoke`` is the function it exports)
S = importlib.import_module("labkit.buildit.smoke")
NAMES = {"zero": ["ShardedAdam"], "pipeline_parallel": ["one_f_one_b"],
         "tensor_parallel": ["ColumnParallelLinear", "RowParallelLinear"]}


def cell_objects(tmp_path, text, names):
    f = tmp_path / "cell.py"
    f.write_text(text)
    scope = {"__name__": "cell"}
    exec(compile(text, str(f), "exec"), scope)
    return [scope[n] for n in names]


@pytest.mark.parametrize("lab", sorted(NAMES))
def test_the_key_runs_on_one_rank_in_this_process(lab, tmp_path, capsys):
    objs = cell_objects(tmp_path, key_of(solution_cell(lab)), NAMES[lab])
    result = buildit.smoke(lab, *objs, ranks=False)
    assert len(result["ranks"]) == 1 and result["error"] is None
    assert "your code ran" in capsys.readouterr().out
    # with one rank the parameters still match the one-process reference
    first = buildit.harness(lab).CHECKS[0][0]
    assert next(r for r in buildit.grade(result)
                if r["check"] == first)["passed"]
    import torch.distributed as tdist
    assert not tdist.is_initialized()     # the group is gone again


def test_an_error_keeps_its_traceback_and_prints_show(tmp_path, capsys):
    text = ("class ShardedAdam:\n"
            "    def __init__(self, params, lr):\n"
            "        print('hello from __init__')\n"
            "        self.params = list(params)\n"
            "\n"
            "    def step(self):\n"
            "        raise ValueError('my bug')\n")
    (cls,) = cell_objects(tmp_path, text, ["ShardedAdam"])
    with pytest.raises(ValueError, match="my bug") as e:
        buildit.smoke("zero", cls, ranks=False)
    last = e.traceback[-1]
    assert str(last.path) == str(tmp_path / "cell.py") and \
        last.lineno + 1 == 7                      # the student's line
    assert any("one-rank run" in n for n in e.value.__notes__)
    assert "hello from __init__" in capsys.readouterr().out
    import torch.distributed as tdist
    assert not tdist.is_initialized()


def test_tails_reads_each_ranks_log(tmp_path):
    for rank in (0, 1):
        d = tmp_path / "logs" / "run" / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        (d / "stdout.log").write_text("".join(f"line {i}\n"
                                              for i in range(40)))
        (d / "stderr.log").write_text("")
    got = S.tails(tmp_path, lines=3)
    assert sorted(got) == [0, 1]
    assert got[1] == "[stdout]\nline 37\nline 38\nline 39"


@pytest.mark.distributed
def test_a_failing_real_run_shows_the_line_and_every_ranks_prints(
        tmp_path, capsys):
    text = ("import torch.distributed as dist\n"
            "\n"
            "\n"
            "class ShardedAdam:\n"
            "    def __init__(self, params, lr):\n"
            "        self.params = list(params)\n"
            "\n"
            "    def step(self):\n"
            "        print('rank', dist.get_rank(), 'steps')\n"
            "        if dist.get_rank() == 1:\n"
            "            raise ValueError('only on rank 1')\n")
    (cls,) = cell_objects(tmp_path, text, ["ShardedAdam"])
    result = buildit.smoke("zero", cls, run_dir=tmp_path / "run")
    out = capsys.readouterr().out
    assert "only on rank 1" in result["error"]
    assert "your line 11" in out
    assert "--- rank 0, end of its log ---" in out and "rank 0 steps" in out
    assert "--- rank 1, end of its log ---" in out and "rank 1 steps" in out
    assert str(tmp_path / "run") in out


def test_a_ring_has_no_one_rank_run_and_says_why(capsys):
    """Ring attention needs a neighbour: gloo has no pair with itself, so
    the kernel run is skipped with its reason instead of a gloo error."""
    assert buildit.smoke("context_parallel", print, ranks=False) is None
    out = capsys.readouterr().out
    assert "not run: a ring needs two ranks" in out
