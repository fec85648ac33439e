"""Lab 19's build-it (labkit.buildit.optimizers): Muon's Newton-Schulz
over row-sharded matrices, gathered or dealt, graded on 2 gloo ranks
against torch.optim.Muon in one process; one that orthogonalises its own
rows only, or all-reduces, loses the checks it should."""
import pytest

from labkit import buildit

pytestmark = pytest.mark.distributed

GATHER = '''
import torch
import torch.distributed as dist


def whole_ns(rows, ns):
    w, r = dist.get_world_size(), dist.get_rank()
    full = rows.new_empty((w * rows.shape[0], rows.shape[1]))
    dist.all_gather_into_tensor(full, rows)
    return ns(full).float().chunk(w)[r].contiguous()
'''

DEALT = '''
import torch
import torch.distributed as dist

calls = [0]


def whole_ns(rows, ns):
    w, r = dist.get_world_size(), dist.get_rank()
    root = calls[0] % w
    calls[0] += 1
    parts = [torch.empty_like(rows) for _ in range(w)] if r == root \\
        else None
    dist.gather(rows, parts, dst=root)
    chunks = None
    if r == root:
        chunks = [c.contiguous() for c in
                  ns(torch.cat(parts)).float().chunk(w)]
    out = torch.empty_like(rows)
    dist.scatter(out, chunks, src=root)
    return out
'''

LOCAL = '''
def whole_ns(rows, ns):
    return ns(rows).float()
'''

REDUCED = '''
import torch
import torch.distributed as dist


def whole_ns(rows, ns):
    w, r = dist.get_world_size(), dist.get_rank()
    full = torch.zeros(w * rows.shape[0], rows.shape[1])
    full[r * rows.shape[0]:(r + 1) * rows.shape[0]] = rows
    dist.all_reduce(full)
    return ns(full).float().chunk(w)[r].contiguous()
'''


@pytest.fixture(scope="module")
def graded():
    out = buildit.run("optimizers", sources={
        "gather": GATHER, "dealt": DEALT, "local": LOCAL,
        "reduced": REDUCED})
    return {name: {row["check"]: row["passed"]
                   for row in buildit.grade(res)}
            for name, res in out.items()}


def test_gathered_and_dealt_get_full_marks(graded):
    assert graded["gather"] == {"params": True, "bytes": True,
                                "whole": True}
    assert graded["dealt"] == graded["gather"]


def test_own_rows_only_and_all_reduce_lose_their_checks(graded):
    assert graded["local"] == {"params": False, "bytes": False,
                               "whole": False}
    assert graded["reduced"] == {"params": True, "bytes": False,
                                 "whole": True}


def test_the_problem_names_every_check():
    assert [p["check"] for p in buildit.problem("optimizers")] == \
        ["params", "bytes", "whole"]
