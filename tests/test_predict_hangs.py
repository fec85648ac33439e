"""labkit.predict.hangs: the sequence numbers and who can see what."""
from labkit.predict import hangs as H


def test_sequence_numbers_count_the_barrier_and_two_ops_per_step():
    # measured on torch 2.13 gloo (lab 17): FR 6 and DETAIL 5 at step 2
    assert H.fr_seq(2) == 6 and H.detail_seq(2) == 5
    assert H.fr_seq(0) == H.detail_seq(0) + 1 == 2


def test_every_fault_has_a_tool_and_runs_split_by_tool():
    assert all(set(t) <= set(H.TOOLS) and t for t in H.NAMES.values())
    assert set(H.DETAIL_FAULTS) == {"skip", "shape", "order"}
    assert "shape" not in H.HANG_FAULTS and "dead" in H.HANG_FAULTS
    assert not H.majority_possible(2) and H.majority_possible(3)
