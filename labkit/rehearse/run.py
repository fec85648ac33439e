"""Rehearse a GPU profile on this CPU: preflight, every lab, one report.

    python -m labkit.rehearse --profile gpu8 [--node h100x8] [--only fit]
    python scripts/run_labs.py --profile gpu8 --rehearse   # the same

First the runner's preflight lines for the described node
(:func:`labkit.preflight.gpu_lines`: GPUs, each lab's memory, the OOMs
labs expect); then each lab as :mod:`labkit.rehearse.labs` plans it.
A problem is ONE line naming the lab, the launch or case, the rank and
the rule (:func:`labkit.rehearse.report.failures`); the exit status is 1 when there is one.
Values fake tensors cannot produce are counted as "not rehearsed".
"""
from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

from labkit.rehearse.labs import CELLS, lab_plans
from labkit.rehearse.node import describe
from labkit.rehearse.report import failures, table  # noqa: F401 (API)


def _clean(x):
    """A record with NaN (a value not rehearsed) shown as such."""
    if isinstance(x, float) and math.isnan(x):
        return "not rehearsed"
    if isinstance(x, dict):
        return {k: ("not rehearsed" if "second" in k or k.endswith("_s")
                    and x[k] is not None else _clean(v))
                for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _rank(main, world_size, rank, argv, run_dir):
    """One rank, in a forked child (:mod:`labkit.rehearse.isolate`)."""
    from labkit.rehearse.isolate import rank_apart
    return rank_apart(main, world_size, rank, argv, run_dir)


def _scratch_run_dir(module: str) -> Path:
    import tempfile
    root = Path(__file__).resolve().parents[2] / "_build" / "rehearse" / "runs"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=module.rsplit(".", 1)[-1] + "-",
                                 dir=root))


def rehearse_ranks(module, world_size, argv, node, where="",
                   ranks="auto", run_dir=None) -> dict:
    """The ranks of one launch of ``module`` (its ``main(argv)``):
    ``ranks="all"``, or ``"auto"``: rank 0 and the last, every rank when
    rank 0 sends or receives point to point (pairing is checked across
    all). Returns the ranks' rows, their records (a rank not rehearsed
    gets the last rehearsed rank's, marked ``rehearsed_as``), the
    problems (one line each) and ``oom``: the first rank whose peak
    exceeds the node's memory, or None. ``run_dir``: the ranks' folder
    (``LABKIT_RUN_DIR``), as the launch's; default a new one under
    ``_build/rehearse/runs`` (never the caller's working directory)."""
    from labkit.rehearse.nccl import deadlocks
    main = importlib.import_module(module).main
    run_dir = str(run_dir or _scratch_run_dir(module))
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    out = {"ranks": [], "problems": [], "oom": None, "records": []}
    done: dict = {}
    order = list(range(world_size))
    todo = order if ranks == "all" else [0]
    while todo:
        for rank in todo:
            done[rank] = _rank(main, world_size, rank, argv, run_dir)
        todo = []
        if ranks == "auto" and len(done) == 1 and world_size > 1:
            todo = (order[1:] if done[0].p2p
                    else [world_size - 1])
    for rank, r in sorted(done.items()):
        out["ranks"].append({"rank": rank, "peak_bytes": r.peak,
                             "host_peak_bytes": r.host_peak,
                             "not_rehearsed": r.not_rehearsed,
                             "record": _clean(r.record)})
        if r.error:
            out["problems"].append(f"{where}, rank {rank}: error: "
                                   f"{r.error}")
        out["problems"] += [f"{where}: device rule: {v}"
                            for v in r.violations[:1]]
        if r.peak > node.memory and out["oom"] is None:
            out["oom"] = {"rank": rank, "peak": r.peak}
    # pairing holds for whole logs: a rank that stopped on an error (said
    # above) posted only part of its sends and receives
    if len(done) == world_size and not any(r.error for r in done.values()):
        out["problems"] += [f"{where}: nccl rule: {d}" for d in
                            deadlocks({k: r.p2p
                                       for k, r in done.items()})]
    stand_in = done[max(done)].record or {}
    out["records"] = [done[i].record if i in done else
                      {**stand_in, "rank": i, "rehearsed_as": max(done)}
                      for i in order]
    return out


def rehearse_launch(lab, launch, node) -> dict:
    """Every rank of one launch; the NCCL rules per rank and across."""
    from labkit.launch.request import as_argv
    where = f"lab {lab}: launch {launch.module} x {launch.world_size}"
    row = {"module": launch.module, "world_size": launch.world_size,
           "ranks": [], "problems": []}
    if launch.world_size > node.gpus:
        row["skipped"] = f"needs >= {launch.world_size} GPUs"
        return row
    res = rehearse_ranks(launch.module, launch.world_size,
                         as_argv(launch.params), node, where, ranks="all")
    row["ranks"], row["problems"] = res["ranks"], res["problems"]
    from labkit.rehearse.limits import fake_limit, limit_reason
    if row["problems"] and all(fake_limit(p) for p in row["problems"]):
        row["not_rehearsed"] = limit_reason(row["problems"][0])
        row["problems"] = []      # what fake tensors cannot do: listed
    if res["oom"]:
        row["problems"].append(
            f"{where}, rank {res['oom']['rank']}: device memory: peak "
            f"{res['oom']['peak'] / 1e9:.1f} GB > {node.memory / 1e9:.1f} "
            "GB (CUDA out of memory)")
    return row


def rehearse_cases(lab, plan, node, workers=None, cache=None) -> list:
    """The lab's dry-run cases against the node's memory: the counted
    peak plus the runtime floor, a margin kept free
    (:func:`labkit.predict.memory.job.on_gpu`, as preflight judges its
    predictions). ``cache``: the steps already run (:func:`rehearse`
    runs every lab's cases in one pool of workers, as
    ``labkit.dryrun.cli.dry_profile`` does)."""
    from labkit.predict.memory.job import MARGIN
    import os
    from labkit.dryrun.cli import run_all, run_cases
    if cache is None:
        cache = {}
        run_all(plan.cases, cache, workers or len(os.sched_getaffinity(0)))
    rows = run_cases(plan.cases, node.memory, cache)
    for row in rows:
        expect = row["variant"] in plan.expect_oom
        row["expect_oom"] = expect
        where = f"lab {lab}: case {row['variant']!r}, {row['role']}"
        row["problems"], row["warnings"] = [], []
        gb = (f"peak {row['peak'] / 1e9:.1f} GB + floor "
              f"{row['floor'] / 1e9:.1f} GB vs {node.memory / 1e9:.1f} GB,"
              f" {MARGIN:.0%} kept free")
        if not row["fits"] and not expect:
            row["problems"].append(f"{where}: device memory: {gb}: CUDA "
                                   "out of memory")
        if row["fits"] and expect:   # the cell records "no OOM": no failure
            row["warnings"].append(f"{where}: expected OOM not seen: {gb} "
                                   "(the lab's OOM cell will report none)")
        if not row["agrees"]:
            row["problems"].append(f"{where}: ledger rule: model states "
                                   f"{row['states_ratio']:.2f} x the ledger")
    return rows


# the labs whose notebooks `make test` executes under rehearsal (every
# cell; the others' launches and cases are rehearsed without their cells,
# see labkit.rehearse.labs): a fake rank at real size costs seconds per
# step on 2 cores, so a lab training 1.4B-7B models in several variants
# takes minutes; `--cells all` executes every notebook
CELLS_IN_TESTS = ("context_parallel",)


def rehearse(profile_name: str, node_name: str | None = None,
             only=None, workers=None, cells=CELLS_IN_TESTS) -> dict:
    """The rehearsal of one profile; ``cells``: the labs whose notebooks
    are executed (``"all"``: every one), see
    :mod:`labkit.rehearse.notebooks`."""
    from labkit.preflight import gpu_lines, load_profile
    from labkit.preflight.check import lab_ranks
    from dataclasses import asdict
    node = describe(node_name)
    profile = load_profile(profile_name)
    if only:
        profile = {k: v for k, v in profile.items() if k in only}
    pre = gpu_lines(load_profile(profile_name), node.gpus, node.gpu,
                    node.memory)
    out = {"profile": profile_name, "node": str(node),
           "preflight": [asdict(c) for c in pre], "labs": {},
           "cells": CELLS}
    import os
    from labkit.dryrun.cli import run_all
    plans = lab_plans(profile, node.memory)
    runs = {lab for lab, plan in plans.items() if not plan.listed and
            lab_ranks(profile[lab] or {}) <= node.gpus}
    cache: dict = {}    # one pool for every lab's cases
    run_all([c for lab in runs for c in plans[lab].cases], cache,
            workers or len(os.sched_getaffinity(0)))
    for lab, plan in plans.items():
        if plan.listed and not (cells == "all" or lab in cells):
            out["labs"][lab] = {"listed": plan.listed}
            continue
        # as scripts/run_labs.py: a lab needing more GPUs is not started
        if lab_ranks(profile[lab] or {}) > node.gpus:
            out["labs"][lab] = {"listed": f"needs >= "
                                f"{lab_ranks(profile[lab])} GPUs; the node "
                                f"has {node.gpus} (run_labs skips it)"}
            continue
        res = {"notes": plan.notes}
        if cells == "all" or lab in cells:
            from labkit.rehearse.notebooks import rehearse_notebook
            res["notebook"] = rehearse_notebook(lab, profile[lab] or {},
                                                profile_name, node)
        elif plan.launches:
            res["launches"] = [rehearse_launch(lab, la, node)
                               for la in plan.launches]
        if plan.cases:
            res["cases"] = rehearse_cases(lab, plan, node, cache=cache)
        out["labs"][lab] = res
    out["failures"] = failures(out)
    return out


def cells_arg(values: list) -> tuple | str:
    """``--cells`` values: none (the default set), labs, or ``all``."""
    if "all" in values:
        return "all"
    return tuple(values) or CELLS_IN_TESTS


def from_runner(profile: str, node: str | None, only: list,
                cells=()) -> int:
    """``run_labs.py --rehearse``: the table, exit 1 on a failure, 2 (one
    line) for a node that is not described."""
    import signal
    import sys

    def stop(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    old = {sig: signal.signal(sig, stop)
           for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        report = rehearse(profile, node, only or None,
                          cells=cells_arg(list(cells)))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:    # its pool's workers die with it
        print(f"rehearsal stopped ({e or 'SIGINT'}): nothing was kept",
              file=sys.stderr, flush=True)
        return 130
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    print(table(report), flush=True)
    return 1 if report["failures"] else 0


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="gpu8")
    ap.add_argument("--node", help="a recorded nvidia-smi description "
                    "(labkit/rehearse/nodes) or a file; default h100x8")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cells", action="append", default=[],
                    help="execute this lab's notebook (every cell), or "
                    "'all'; default: " + ", ".join(CELLS_IN_TESTS))
    a = ap.parse_args(argv)
    try:
        report = rehearse(a.profile, a.node, a.only or None,
                          cells=cells_arg(a.cells))
    except ValueError as e:
        ap.exit(2, f"{e}\n")
    print(json.dumps(report, indent=1, default=str) if a.json
          else table(report))
    return 1 if report["failures"] else 0
