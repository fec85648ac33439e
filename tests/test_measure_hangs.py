"""Reading the tools' words: the DETAIL messages, the analyzer's report
and py-spy's stacks, by majority (texts as the tools print them, from
lab 17's runs)."""
from labkit.measure import hangs as M

FP = ("Detected mismatch between collectives on ranks. Rank {me} is "
      "running collective: CollectiveFingerPrint(SequenceNumber=5, "
      "OpType={a}, TensorShape=[{sa}], TensorDtypes=Float), but Rank "
      "{other} is running collective: CollectiveFingerPrint("
      "SequenceNumber=5, OpType={b}, TensorShape=[{sb}], "
      "TensorDtypes=Float).")


def test_detail_culprit_is_named_by_the_others():
    recs = [{"error": FP.format(me=0, other=2, a="ALLREDUCE", sa=8,
                                b="ALLREDUCE", sb=9)},
            {"error": FP.format(me=1, other=2, a="ALLREDUCE", sa=8,
                                b="ALLREDUCE", sb=9)},
            {"error": FP.format(me=2, other=0, a="ALLREDUCE", sa=9,
                                b="ALLREDUCE", sb=8)}]
    said = M.detail_culprit(recs)
    assert (said["rank"], said["seq"], said["shape"]) == (2, 5, "9")


def test_two_ranks_accuse_each_other_and_name_no_one():
    recs = [{"error": FP.format(me=0, other=1, a="ALLREDUCE", sa=8,
                                b="BROADCAST", sb=8)},
            {"error": FP.format(me=1, other=0, a="BROADCAST", sa=8,
                                b="ALLREDUCE", sb=8)}]
    assert M.detail_culprit(recs)["rank"] is None
    assert M.detail_culprit([{"error": None}])["rank"] is None


def test_analyzer_text_missing_rank_and_type_mismatch():
    text = ("Not all ranks joining collective, sequence number: 6\n"
            "collective: gloo:all_reduce\nmissing ranks: {2}\n")
    said = M._read_fr_text(text, {0: 1, 1: 1, 2: 1})
    assert (said["rank"], said["seq"], said["op"]) == (2, 6, "all_reduce")
    text = ("Collective sequence number: 6 has errors\ncollective: "
            "gloo:all_reduce\nerror msg: Culprit rank 2; Error type: "
            "COLLECTIVE_TYPE_MISMATCH\n")
    assert M._read_fr_text(text, {0: 1, 1: 1, 2: 1})["rank"] == 2
    # all ranks but the reference named: the reference is the odd one
    text = "Culprit rank 1; ... Culprit rank 2; ..."
    assert M._read_fr_text(text, {0: 1, 1: 1, 2: 1})["rank"] == 0


SPY = ('Process 1: python -m labkit.runs.hangs\n\nThread 1 (idle): '
       '"MainThread"\n    {f} (x.py:1)\n    main (y.py:2)\n')


def test_pyspy_odd_frame_and_dead_rank(tmp_path):
    for r, f in enumerate(["all_reduce", "all_reduce", "load_batch"]):
        (tmp_path / f"rank_{r}.txt").write_text(SPY.format(f=f))
    said = M.pyspy_culprit(tmp_path, 3)
    assert (said["rank"], said["op"]) == (2, "load_batch")
    (tmp_path / "rank_1.txt").write_text(
        "Error: Failed to get process executable name.")
    assert M.pyspy_culprit(tmp_path, 3)["rank"] == 1
    assert M.last_frame("no threads here") is None
