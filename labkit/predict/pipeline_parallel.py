"""Pipeline parallelism: bubble, memory, point-to-point volume, schedules.

    python -m labkit pipeline --schedule 1f1b --stages 4 --microbatches 8
    python -m labkit pipeline --schedule interleaved --stages 4 \
        --microbatches 8 --chunks 2 --plot interleaved.png

Notation of Narayanan et al. 2021 ("Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21): ``p`` pipeline stages
(ranks), ``m`` micro-batches per iteration, ``v`` model chunks per rank
(interleaved schedule), ``t_f`` and ``t_b`` the forward and backward time of
one micro-batch through one stage.

Two kinds of answer live here:

- closed forms from the papers (:func:`bubble_fraction`,
  :func:`first_stage_activations`, :func:`p2p_bytes`), and
- a schedule simulator (:func:`simulate`) that lays the operations of GPipe,
  1F1B and interleaved 1F1B out in time from their order on each rank and
  their dependencies alone; the tests hold it to the closed forms, and
  :func:`plot_timeline` draws it (the figure of the papers, generated).

Pure Python: no torch. matplotlib is imported only when a plot is drawn.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check(schedule: str, stages: int, microbatches: int,
           chunks: int = 1) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: choose from "
                         f"{', '.join(SCHEDULES)}")
    for name, v in (("stages", stages), ("microbatches", microbatches),
                    ("chunks", chunks)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if schedule != "interleaved" and chunks != 1:
        raise ValueError(f"--chunks {chunks} needs the interleaved schedule "
                         f"({schedule} has one chunk per rank)")
    if schedule == "interleaved" and microbatches % stages:
        # Megatron's interleaved schedule walks micro-batches in groups of p
        # (Narayanan et al. 2021, Sec. 2.2.2).
        raise ValueError(f"the interleaved schedule needs micro-batches "
                         f"({microbatches}) to be a multiple of the stages "
                         f"({stages})")


# --------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------

def bubble_fraction(schedule: str, stages: int, microbatches: int,
                    chunks: int = 1) -> float:
    """Pipeline bubble time over ideal time, ``t_pb / t_id``.

    GPipe and 1F1B: ``(p - 1) / m`` (Narayanan et al. 2021, Sec. 2.2.1:
    ``t_pb = (p - 1)(t_f + t_b)``, ``t_id = m (t_f + t_b)``); 1F1B changes
    the memory, not the bubble. Interleaved 1F1B with ``v`` chunks per
    rank: ``(p - 1) / (v m)`` (Sec. 2.2.2). Note the denominator is the
    ideal time, not the step time: the share of the step a rank is idle is
    :func:`idle_fraction`.
    """
    _check(schedule, stages, microbatches, chunks)
    return (stages - 1) / (chunks * microbatches)


def idle_fraction(schedule: str, stages: int, microbatches: int,
                  chunks: int = 1) -> float:
    """Share of the step a rank waits: ``t_pb / (t_id + t_pb)``."""
    b = bubble_fraction(schedule, stages, microbatches, chunks)
    return b / (1 + b)


def first_stage_activations(schedule: str, stages: int, microbatches: int,
                            chunks: int = 1) -> float:
    """Micro-batches of activations the first stage holds at its peak.

    In units of one micro-batch through one whole stage (``L/p`` layers).
    GPipe keeps every forward until the backward phase: ``m``. 1F1B
    (PipeDream-Flush) keeps at most ``p`` in flight (Narayanan et al. 2021,
    Sec. 2.2.1). Interleaved 1F1B keeps ``p + (p - 1)/v``, i.e. the memory of
    1F1B times ``1 + (p - 1)/(p v)`` (Korthikanti et al. 2022, Sec. 4.2.3).
    Multiply by ``L/p`` times the per-layer activation bytes of
    :mod:`labkit.predict.memory` to get bytes.
    """
    _check(schedule, stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b":
        return float(min(p, m))
    if m == p:  # Megatron runs every forward first when m == p
        return float(m)
    return p + (p - 1) / v


def p2p_bytes(micro_batch: int, seq: int, hidden: int, microbatches: int,
              chunks: int = 1, bytes_per_element: int = 2,
              tensor_parallel: int = 1, scatter_gather: bool = False) -> int:
    """Bytes one interior rank sends per iteration (forward + backward).

    Each micro-batch crosses a stage boundary forward as a ``b x s x h``
    activation and backward as a gradient of the same shape (Narayanan et
    al. 2021, Sec. 3.2); interleaving crosses ``v`` times as many
    boundaries (Sec. 2.2.2: "the amount of communication also increases by
    v"). With tensor parallelism the ``t`` ranks of a stage hold the same
    activation; the scatter/gather optimisation (Sec. 4.1) sends only
    ``1/t`` of it from each of them.
    """
    for name, v in (("micro_batch", micro_batch), ("seq", seq),
                    ("hidden", hidden), ("microbatches", microbatches),
                    ("chunks", chunks), ("tensor_parallel", tensor_parallel)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v!r}")
    per_message = micro_batch * seq * hidden * bytes_per_element
    if scatter_gather:
        per_message //= tensor_parallel
    return 2 * microbatches * chunks * per_message


# --------------------------------------------------------------------------
# Schedules: the order of operations on each rank
# --------------------------------------------------------------------------

def rank_order(schedule: str, stages: int, microbatches: int,
               chunks: int = 1) -> dict[int, list[tuple[str, int, int]]]:
    """``{rank: [(kind, microbatch, chunk), ...]}`` in execution order.

    ``kind`` is ``"F"`` or ``"B"``; ``chunk`` is the model chunk on that
    rank (global stage ``chunk * p + rank``). GPipe: all forwards, then all
    backwards. 1F1B: ``p - rank - 1`` warm-up forwards, then one forward and
    one backward in turn, then the remaining backwards (PipeDream-Flush,
    Narayanan et al. 2021, Fig. 4 top). Interleaved: Megatron-LM's order
    (``forward_backward_pipelining_with_interleaving``): forwards walk the
    chunks in groups of ``p`` micro-batches, with ``2(p - rank - 1) +
    (v - 1)p`` warm-up forwards.
    """
    _check(schedule, stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
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


# --------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Op:
    """One forward or backward of one micro-batch through one stage."""
    rank: int
    stage: int        # global stage index, 0 .. p*v - 1
    chunk: int        # model chunk on this rank
    kind: str         # "F" or "B"
    microbatch: int
    start: float
    end: float


@dataclass
class Timeline:
    schedule: str
    stages: int
    microbatches: int
    chunks: int
    ops: list[Op]
    makespan: float
    busy: list[float]                 # per rank
    peak_activations: list[float]     # per rank, in whole-stage micro-batches
    extra: dict = field(default_factory=dict)

    @property
    def bubble(self) -> float:
        """Measured like the papers: (time - busy) / busy, over all ranks."""
        busy = sum(self.busy)
        return (self.stages * self.makespan - busy) / busy

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("ops")
        d["bubble"] = self.bubble
        return d


def simulate(schedule: str, stages: int, microbatches: int, chunks: int = 1,
             forward: float = 1.0, backward: float = 2.0,
             comm: float = 0.0) -> Timeline:
    """Lay a schedule out in time.

    ``forward`` and ``backward`` are the times of one micro-batch through a
    whole stage (``L/p`` layers); a chunk of the interleaved schedule takes
    ``1/v`` of them. ``comm`` is the delay of one point-to-point transfer
    between ranks. Each rank runs its operations in :func:`rank_order`; an
    operation starts when the rank is free and its input has arrived
    (forward from the previous stage, backward from the next one).
    """
    _check(schedule, stages, microbatches, chunks)
    if forward <= 0 or backward <= 0 or comm < 0:
        raise ValueError("forward and backward must be > 0, comm >= 0")
    p, v = stages, chunks
    n_stages = p * v
    order = rank_order(schedule, p, microbatches, v)
    cost = {"F": forward / v, "B": backward / v}
    end: dict[tuple[str, int, int], float] = {}     # (kind, stage, mb)
    pos = {r: 0 for r in range(p)}
    free = {r: 0.0 for r in range(p)}
    ops: list[Op] = []

    def ready(kind: str, stage: int, mb: int) -> float | None:
        """When the input of this operation is there (None: not yet)."""
        if kind == "F":
            if stage == 0:
                return 0.0
            dep = ("F", stage - 1, mb)
        elif stage == n_stages - 1:
            dep = ("F", stage, mb)        # the loss, on the same rank
            return end.get(dep)
        else:
            dep = ("B", stage + 1, mb)
        t = end.get(dep)
        return None if t is None else t + comm

    remaining = sum(len(o) for o in order.values())
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, mb, chunk = order[r][pos[r]]
                stage = chunk * p + r
                t_in = ready(kind, stage, mb)
                if t_in is None:
                    break
                start = max(free[r], t_in)
                stop = start + cost[kind]
                end[(kind, stage, mb)] = stop
                free[r] = stop
                ops.append(Op(r, stage, chunk, kind, mb, start, stop))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # a wrong order would wait forever
            raise RuntimeError(f"{schedule}: the schedule deadlocks")
    makespan = max(o.end for o in ops)
    busy = [sum(o.end - o.start for o in ops if o.rank == r)
            for r in range(p)]
    peak = []
    for r in range(p):
        held = top = 0.0
        for kind, _, _ in order[r]:
            held += (1 if kind == "F" else -1) / v
            top = max(top, held)
        peak.append(top)
    ops.sort(key=lambda o: (o.rank, o.start))
    return Timeline(schedule, p, microbatches, v, ops, makespan, busy, peak,
                    {"forward": forward, "backward": backward, "comm": comm})


# --------------------------------------------------------------------------
# The picture
# --------------------------------------------------------------------------

COLORS = {"F": ("#4C72B0", "#9DB7DB"), "B": ("#DD8452", "#F1C3A6")}


def plot_timeline(ops, ranks: int | None = None, ax=None,
                  title: str | None = None, unit: str = "time",
                  labels: bool = True):
    """Draw operations as a Gantt chart, one row per rank (rank 0 on top).

    ``ops`` are :class:`Op` or dicts with the same keys (a measured run
    writes those). Forwards are blue, backwards orange; the second chunk of
    an interleaved rank is drawn lighter. Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt  # only when drawing

    rows = [o if isinstance(o, dict) else asdict(o) for o in ops]
    ranks = ranks or (1 + max(o["rank"] for o in rows))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * ranks))
    span = max(o["end"] for o in rows) - min(o["start"] for o in rows)
    for o in rows:
        width = o["end"] - o["start"]
        color = COLORS[o["kind"]][o.get("chunk", 0) % 2]
        ax.barh(o["rank"], width, left=o["start"], height=0.8, color=color,
                edgecolor="white", linewidth=0.5)
        if labels and width > span / 60:
            ax.text(o["start"] + width / 2, o["rank"], str(o["microbatch"]),
                    ha="center", va="center", fontsize=7,
                    color="white" if o.get("chunk", 0) % 2 == 0 else "black")
    ax.set_yticks(range(ranks))
    ax.set_yticklabels([f"rank {r}" for r in range(ranks)])
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_xlabel(unit)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def add_arguments(p) -> None:
    p.add_argument("--schedule", choices=SCHEDULES, required=True)
    p.add_argument("--stages", type=int, required=True,
                   help="pipeline stages p (one per rank)")
    p.add_argument("--microbatches", type=int, required=True,
                   help="micro-batches per iteration m")
    p.add_argument("--chunks", type=int, default=1,
                   help="model chunks per rank v (interleaved only)")
    p.add_argument("--forward", type=float, default=1.0,
                   help="forward time of one micro-batch through one stage")
    p.add_argument("--backward", type=float, default=2.0,
                   help="backward time (default 2x forward)")
    p.add_argument("--comm", type=float, default=0.0,
                   help="point-to-point delay between stages")
    p.add_argument("--plot", metavar="FILE",
                   help="save the timeline picture (png, svg, pdf)")
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    tl = simulate(args.schedule, args.stages, args.microbatches, args.chunks,
                  args.forward, args.backward, args.comm)
    formula = bubble_fraction(args.schedule, args.stages, args.microbatches,
                              args.chunks)
    first = first_stage_activations(args.schedule, args.stages,
                                    args.microbatches, args.chunks)
    out = {"schedule": args.schedule, "stages": args.stages,
           "microbatches": args.microbatches, "chunks": args.chunks,
           "bubble_formula": formula, "bubble_simulated": tl.bubble,
           "idle_fraction": formula / (1 + formula),
           "step_time": tl.makespan,
           "ideal_time": args.microbatches * (args.forward + args.backward),
           "first_stage_activations": first,
           "peak_activations_per_rank": tl.peak_activations}
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        ax = plot_timeline(tl.ops, args.stages, title=(
            f"{args.schedule}: p={args.stages}, m={args.microbatches}"
            + (f", v={args.chunks}" if args.chunks > 1 else "")
            + f", bubble {tl.bubble:.3f}"))
        ax.figure.tight_layout()
        ax.figure.savefig(args.plot, dpi=120)
        plt.close(ax.figure)
        out["plot"] = args.plot
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    formula_text = ("(p-1)/(v*m)" if args.schedule == "interleaved"
                    else "(p-1)/m")
    print(f"schedule                {args.schedule}\n"
          f"stages p                {args.stages}\n"
          f"micro-batches m         {args.microbatches}\n"
          f"chunks per rank v       {args.chunks}\n"
          f"bubble {formula_text:<16s} {formula:.4f}  "
          "(Narayanan et al. 2021, Sec. 2.2)\n"
          f"bubble, simulated       {tl.bubble:.4f}\n"
          f"idle share of the step  {out['idle_fraction']:.1%}\n"
          f"step time               {tl.makespan:g}  (ideal "
          f"{out['ideal_time']:g}, in units of --forward)\n"
          f"first stage holds       {first:g} micro-batches of activations")
    if args.plot:
        print(f"timeline                {args.plot}")
    return 0
