"""Which ranks hold the same K/V head when tensor parallelism outnumbers
the K/V heads (labkit.runs.tp.kv_copies), against the rows each rank really
keeps (labkit.runs.tp.gqa.head_rows). The sum of the copies' gradients is
run, and shown to be needed, in tests/test_runs_tp_gqa.py."""
import pytest

from labkit.predict.tensor_parallel.gqa import kv_split
from labkit.runs.tp import kv_copies as K
from labkit.runs.tp.gqa import head_rows, llama_record


@pytest.mark.parametrize("heads,kv_heads,tp", [
    (8, 2, 4), (8, 1, 8), (8, 2, 8), (16, 4, 8), (8, 8, 4), (8, 4, 2)])
def test_copy_ranks_hold_one_head_and_strided_ranks_do_not(heads, kv_heads,
                                                           tp):
    a = llama_record(64, heads, kv_heads, 16)
    reps = kv_split(a, tp)["replicas"]
    kv_rows = [(s.start, s.stop) for s in
               (head_rows(a, r, tp)[1] for r in range(tp))]
    groups = K.copy_ranks(list(range(tp)), reps)
    assert sorted(r for g in groups for r in g) == list(range(tp))
    assert all(len(g) == reps for g in groups)
    for g in groups:                      # one head's copies, and all
        assert len({kv_rows[r] for r in g}) == 1
    assert len({kv_rows[g[0]] for g in groups}) == len(groups)
    wrong = K.strided_ranks(list(range(tp)), reps)
    assert sorted(r for g in wrong for r in g) == list(range(tp))
    assert all(len(g) == reps for g in wrong)
    if 1 < reps < tp:                     # the mutant mixes heads
        assert all(len({kv_rows[r] for r in g}) > 1 for g in wrong)
    else:                                 # nothing to get wrong
        assert sorted(wrong) == sorted(groups)


def test_copy_ranks_keep_the_tp_groups_own_ranks():
    # a 2 x 4 mesh's second "tp" group: global ranks 4..7
    assert K.copy_ranks([4, 5, 6, 7], 2) == [[4, 5], [6, 7]]
    assert K.strided_ranks([4, 5, 6, 7], 2) == [[4, 6], [5, 7]]


def test_no_groups_and_no_sum_when_the_heads_go_round():
    a = llama_record(64, 8, 4, 16)
    assert K.kv_copy_groups([[0, 1], [2, 3]], a) == []   # no new_group
    assert K.group_of([], 0) is None
    K.sum_kv_grads([object()], None)      # nothing touched
