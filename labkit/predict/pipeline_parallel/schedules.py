"""Pipeline schedules: the order of operations on each rank (pure Python).

    from labkit.predict.pipeline_parallel.schedules import rank_order
    rank_order("1f1b", 4, 8)[0]   # [("F", 0, 0), ("F", 1, 0), ...]

Notation of Narayanan et al. 2021 ("Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21): ``p`` stages,
``m`` micro-batches, ``v`` model chunks per rank. GPipe runs every forward
then every backward; 1F1B (PipeDream-Flush, Fig. 4 top) alternates after
a warm-up; interleaved 1F1B (Sec. 2.2.2) follows Megatron-LM's order.
:func:`_check` is the one check of a schedule's parameters that the
closed forms (:mod:`labkit.predict.pipeline_parallel.costs`) and the simulator
(:mod:`labkit.predict.pipeline_parallel.simulator`) share.

Past 1F1B (``SPLIT``, chapter 18) the backward is two operations: ``I``,
the gradient of the stage's input, which the previous stage waits for,
and ``W``, the gradient of its weights, which nobody waits for and can
run later (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR,
Sec. 2). ``zb-h1`` is their ZB-H1 (Sec. 3.1: 1F1B with each rank's
``W`` deferred by its rank, the bubble ``(p - 1)(t_F + t_I - t_W)``, the
memory of 1F1B); ``zbv`` their ZB-V (Sec. 6: two chunks per rank in a V,
stage ``r`` and ``2p - 1 - r``, so the last stage sits on rank 0 beside
the first); ``dualpipev`` DeepSeek-V3's DualPipe folded into the same V
(DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", Sec. 3.2.1), which
pairs one chunk's forward with the other's full backward. The orders
are those of torch 2.13's ``ScheduleInterleavedZeroBubble`` (one stage
per rank), ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV``
(``torch.distributed.pipelining.schedules``), written out here so that
the prediction needs no torch; lab 18 checks them against the order
each rank really ran. A DualPipeV pair runs its forward, then its
backward: overlapping the two needs a second stream, which a CPU rank
has not.
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved")   # closed forms (costs)
SPLIT = ("zb-h1", "zbv", "dualpipev")         # backward split into I, W
ALL = SCHEDULES + SPLIT
V_SHAPE = ("zbv", "dualpipev")                # stages r and 2p - 1 - r


def _check(schedule: str, stages: int, microbatches: int,
           chunks: int = 1) -> None:
    if schedule not in ALL:
        raise ValueError(f"unknown schedule {schedule!r}: choose from "
                         f"{', '.join(ALL)}")
    for name, v in (("stages", stages), ("microbatches", microbatches),
                    ("chunks", chunks)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if schedule in V_SHAPE:
        if chunks != 2:
            raise ValueError(f"{schedule} runs two chunks per rank (the "
                             f"V), got chunks={chunks}")
        if microbatches < 2 * stages:
            # torch's ScheduleDualPipeV refuses fewer micro-batches than
            # stages (2p); ZB-V fills its V only from 2p - 1 on
            raise ValueError(f"{schedule} needs micro-batches >= 2 x "
                             f"stages ({2 * stages}), got {microbatches}")
        return
    if schedule == "zb-h1" and microbatches < stages:
        raise ValueError(f"zb-h1 needs micro-batches >= stages "
                         f"({stages}), got {microbatches}")
    if schedule != "interleaved" and chunks != 1:
        raise ValueError(f"--chunks {chunks} needs the interleaved schedule "
                         f"({schedule} has one chunk per rank)")
    if schedule == "interleaved" and microbatches % stages:
        # Megatron's interleaved schedule walks micro-batches in groups of p
        # (Narayanan et al. 2021, Sec. 2.2.2).
        raise ValueError(f"the interleaved schedule needs micro-batches "
                         f"({microbatches}) to be a multiple of the stages "
                         f"({stages})")


def rank_order(schedule: str, stages: int, microbatches: int,
               chunks: int = 1) -> dict[int, list[tuple[str, int, int]]]:
    """``{rank: [(kind, microbatch, chunk), ...]}`` in execution order.

    ``kind`` is ``"F"`` or ``"B"`` (``"I"`` and ``"W"`` in ``SPLIT``);
    ``chunk`` is the model chunk on that rank (global stage
    :func:`stage_index`). GPipe: all forwards, then all
    backwards. 1F1B: ``p - rank - 1`` warm-up forwards, then one forward and
    one backward in turn, then the remaining backwards (PipeDream-Flush,
    Narayanan et al. 2021, Fig. 4 top). Interleaved: Megatron-LM's order
    (``forward_backward_pipelining_with_interleaving``): forwards walk the
    chunks in groups of ``p`` micro-batches, with ``2(p - rank - 1) +
    (v - 1)p`` warm-up forwards.
    """
    _check(schedule, stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
    if schedule in SPLIT:
        make = {"zb-h1": _zb_h1, "zbv": _zbv, "dualpipev": _dualpipev}
        return {r: make[schedule](p, m, r) for r in range(p)}
    order: dict[int, list[tuple[str, int, int]]] = {}
    for r in range(p):
        if schedule == "gpipe":
            ops = [("F", i, 0) for i in range(m)] + \
                  [("B", i, 0) for i in range(m)]
        elif schedule == "1f1b":
            warm = min(p - r - 1, m)
            ops = [("F", i, 0) for i in range(warm)]
            for i in range(m - warm):
                ops += [("F", warm + i, 0), ("B", i, 0)]
            ops += [("B", i, 0) for i in range(m - warm, m)]
        else:
            total = m * v

            def unit(k: int, forward: bool) -> tuple[int, int]:
                in_group = k % (p * v)
                chunk = in_group // p
                mb = (k // (p * v)) * p + in_group % p
                return mb, (chunk if forward else v - 1 - chunk)

            warm = total if m == p else min(2 * (p - r - 1) + (v - 1) * p,
                                            total)
            ops = [("F", *unit(k, True)) for k in range(warm)]
            for k in range(total - warm):
                ops += [("F", *unit(warm + k, True)), ("B", *unit(k, False))]
            ops += [("B", *unit(k, False)) for k in range(total - warm, total)]
        order[r] = ops
    return order


def stage_index(schedule: str, stages: int, rank: int, chunk: int) -> int:
    """The global stage of ``chunk`` on ``rank``: ``chunk * p + rank``
    (looped), or the V's ``rank`` and ``2p - 1 - rank``."""
    if schedule in V_SHAPE:
        return rank if chunk == 0 else 2 * stages - 1 - rank
    return chunk * stages + rank


def stage_rank(schedule: str, stages: int, stage: int) -> int:
    """The rank that holds global stage ``stage``."""
    if schedule in V_SHAPE:
        return stage if stage < stages else 2 * stages - 1 - stage
    return stage % stages


def _zb_h1(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """1F1B with B split: ``p - r - 1`` warm-up forwards; then each
    micro-batch's ``I`` after a forward, and from the ``r``-th on, the
    oldest ``W`` after it (torch: ``num_1f1b_microbatches = rank``)."""
    warm = min(p - r - 1, m)
    ops = [("F", i, 0) for i in range(warm)]
    w = 0
    for j in range(m):
        if j < m - warm:
            ops.append(("F", warm + j, 0))
        ops.append(("I", j, 0))
        if j >= r:
            ops.append(("W", w, 0))
            w += 1
    return ops + [("W", k, 0) for k in range(w, m)]


def _zbv(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """ZB-V (Qi et al. 2024, Sec. 6), as torch's ScheduleZBVZeroBubble
    lays it out: chunk 0 runs down the V, chunk 1 back up."""
    ops: list[tuple[str, int, int]] = []
    n = {"f0": 0, "f1": 0, "b0": 0, "b1": 0}

    def op(kind, c, key=None):
        key = key or f"{kind.lower()}{c}"
        ops.append((kind, n[key], c))
        n[key] += 1

    def iw(c):                 # I then W of the same micro-batch
        ops.append(("I", n[f"b{c}"], c))
        ops.append(("W", n[f"b{c}"], c))
        n[f"b{c}"] += 1

    for _ in range(2 * (p - r) - 1):
        op("F", 0)
    for _ in range(r):
        op("F", 1)
        op("F", 0)
    for _ in range(p - r):
        op("F", 1)
        iw(1)
    while n["f1"] < n["f0"] or n["f0"] < m:
        if n["f0"] < m:
            op("F", 0)
        iw(0)
        op("F", 1)
        iw(1)
    n["w0"], n["w1"] = n["b0"], n["b1"]
    for _ in range(r):
        op("I", 0, "b0")
        op("I", 1, "b1")
    for _ in range(p - r):
        op("I", 0, "b0")
        op("W", 0, "w0")
    while n["w1"] < n["b1"]:
        op("W", 1, "w1")
    while n["w0"] < n["b0"]:
        op("W", 0, "w0")
    return ops


def _dualpipev(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """DualPipeV, as torch's ScheduleDualPipeV lays it out (after
    deepseek-ai/DualPipe): a pair ``(F of one chunk; B of the other)``
    is written F then B, the order a rank without a second stream runs
    it in; ``W`` s wait in a queue for the cool-down."""
    ops: list[tuple[str, int, int]] = []
    count: dict[tuple[int, str], int] = {}
    queue: list[tuple[int, int]] = []

    def add(c: int, kind: str) -> None:
        key = (c, "I" if kind == "B" else kind)
        mb = count.get(key, 0)
        ops.append((kind, mb, c))
        count[key] = mb + 1
        if kind == "I":
            queue.append((c, mb))

    def weight() -> None:
        if queue:
            c, mb = queue.pop(0)
            ops.append(("W", mb, c))

    for _ in range((p - r - 1) * 2):
        add(0, "F")
    for _ in range(r + 1):
        add(0, "F")
        add(1, "F")
    for _ in range(p - r - 1):
        add(1, "I")
        weight()
        add(1, "F")
    for _ in range(m - 2 * p + r + 1):
        add(0, "F")            # the pair (F0; B1), or unpaired on the
        add(1, "B")            # last rank's first: the same order
        add(1, "F")
        add(0, "B")
    for _ in range(p - r - 1):
        add(1, "B")
        add(1, "F")
        add(0, "B")
    split = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            split = True
        add(1, "I" if split else "B")
        if i == (r + 1) // 2 and r % 2 == 0:
            split = True
        add(0, "I" if split else "B")
    for _ in range(p - r - 1):
        weight()
        add(0, "I" if split else "B")
    for _ in range(r + 1):
        weight()
    return ops
