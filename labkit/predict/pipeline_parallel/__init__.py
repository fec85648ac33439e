"""Pipeline parallelism: bubble, memory, point-to-point volume, schedules.

    python -m labkit pipeline --schedule 1f1b --stages 4 --microbatches 8
    python -m labkit pipeline --schedule interleaved --stages 4 \
        --microbatches 8 --chunks 2 --plot interleaved.png

Notation of Narayanan et al. 2021 ("Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21): ``p`` pipeline stages
(ranks), ``m`` micro-batches per iteration, ``v`` model chunks per rank
(interleaved schedule), ``t_f`` and ``t_b`` the forward and backward time of
one micro-batch through one stage.

Two kinds of answer, one file each, all reachable from here:

- closed forms from the papers (:func:`bubble_fraction`,
  :func:`first_stage_activations`, :func:`p2p_bytes`:
  :mod:`labkit.predict.pipeline_parallel.costs`), and
- a schedule simulator (:func:`simulate`,
  :mod:`labkit.predict.pipeline_parallel.simulator`) that lays the operations of
  GPipe, 1F1B and interleaved 1F1B out in time from their order on each
  rank (:func:`rank_order`, :mod:`labkit.predict.pipeline_parallel.schedules`) and
  their dependencies alone; the tests hold it to the closed forms, and
  :func:`plot_timeline` (:mod:`labkit.predict.pipeline_parallel.plot`) draws it
  (the figure of the papers, generated).

This file is the command line. Pure Python: no torch. matplotlib is
imported only when a plot is drawn.

The folder: ``schedules`` (with chapter 18's ZB-H1, ZB-V and DualPipeV,
whose backward is split into ``I`` and ``W``), ``costs``, ``simulator``,
``plot``, ``partition``, ``zero_bubble`` (the split's FLOPs, bytes and
chapter 18's table) and the per-stage bytes (``stage_bytes``,
``stage_bytes_moe``); never importing this ``__init__``. Pure Python.
"""
from __future__ import annotations

import json

from labkit.predict.pipeline_parallel.costs import (  # noqa: F401 (re-exported)
    bubble_fraction, first_stage_activations, idle_fraction, p2p_bytes)
from labkit.predict.pipeline_parallel.plot import (  # noqa: F401 (re-exported)
    COLORS, plot_timeline)
from labkit.predict.pipeline_parallel.schedules import (  # noqa: F401 (re-exported)
    SCHEDULES, _check, rank_order)
from labkit.predict.pipeline_parallel.simulator import (  # noqa: F401 (re-exported)
    Op, Timeline, simulate)


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


def save_figure(fig, path) -> None:
    """The picture rendered in memory, then written under a temporary name
    and renamed (``labkit.disk.write_atomic``): a full disk is one line
    naming ``path`` and leaves no empty file under it."""
    import io
    import os
    from pathlib import Path

    from labkit import disk
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix[1:].lower() or "png",
                dpi=120)
    data = buf.getvalue()
    disk.write_atomic(path, data)
    os.chmod(path, 0o644)          # a picture to share, not a secret
    if Path(path).stat().st_size != len(data):     # the write, checked
        raise OSError(f"{path}: {Path(path).stat().st_size} bytes "
                      f"written, {len(data)} drawn")


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
        save_figure(ax.figure, args.plot)
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
