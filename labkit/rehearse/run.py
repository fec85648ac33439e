"""Rehearse a GPU profile on this CPU: preflight, every lab, one report.

    python -m labkit.rehearse --profile gpu8 [--node h100x8] [--only fit]
    python scripts/run_labs.py --profile gpu8 --rehearse   # the same

First the runner's preflight lines for the described node
(:func:`labkit.preflight.gpu_lines`: GPUs, each lab's memory, the OOMs
labs expect); then each lab as :mod:`labkit.rehearse.labs` plans it.
A problem is ONE line naming the lab, the launch or case, the rank and
the rule (:func:`failures`); the exit status is 1 when there is one.
Values fake tensors cannot produce are counted as "not rehearsed".
"""
from __future__ import annotations

import importlib
import json
import math

from labkit.rehearse.labs import CELLS, lab_plans
from labkit.rehearse.node import describe


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


def rehearse_launch(lab, launch, node) -> dict:
    """Every rank of one launch; the NCCL rules per rank and across."""
    from labkit.launch.request import as_argv
    from labkit.rehearse.nccl import deadlocks
    from labkit.rehearse.world import rehearsed_rank
    main = importlib.import_module(launch.module).main
    where = f"lab {lab}: launch {launch.module} x {launch.world_size}"
    row = {"module": launch.module, "world_size": launch.world_size,
           "ranks": [], "problems": []}
    if launch.world_size > node.gpus:
        row["skipped"] = f"needs >= {launch.world_size} GPUs"
        return row
    logs = {}
    for rank in range(launch.world_size):
        with rehearsed_rank(launch.world_size, rank) as r:
            r.main(main, as_argv(launch.params))
        logs[rank] = r.rules.p2p
        row["ranks"].append({"rank": rank, "peak_bytes": r.peak,
                             "not_rehearsed": r.not_rehearsed,
                             "record": _clean(r.record)})
        if r.error:
            row["problems"].append(f"{where}, rank {rank}: error: "
                                   f"{r.error}")
        row["problems"] += [f"{where}: device rule: {v}"
                            for v in r.rules.violations[:1]]
        if r.peak > node.memory:
            row["problems"].append(
                f"{where}, rank {rank}: device memory: peak "
                f"{r.peak / 1e9:.1f} GB > {node.memory / 1e9:.1f} GB "
                "(CUDA out of memory)")
    row["problems"] += [f"{where}: nccl rule: {d}"
                        for d in deadlocks(logs)]
    return row


def rehearse_cases(lab, plan, node, workers=None, cache=None) -> list:
    """The lab's dry-run cases against the node's memory. ``cache``: the
    steps already run (:func:`rehearse` runs every lab's cases in one
    pool of workers, as ``labkit.dryrun.cli.dry_profile`` does)."""
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
        gb = f"peak {row['peak'] / 1e9:.1f} GB vs {node.memory / 1e9:.1f} GB"
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


def rehearse(profile_name: str, node_name: str | None = None,
             only=None, workers=None) -> dict:
    from labkit.preflight import gpu_lines, load_profile
    from labkit.preflight_check import lab_ranks
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
    plans = lab_plans(profile)
    runs = {lab for lab, plan in plans.items() if not plan.listed and
            lab_ranks(profile[lab] or {}) <= node.gpus}
    cache: dict = {}    # one pool for every lab's cases
    run_all([c for lab in runs for c in plans[lab].cases], cache,
            workers or len(os.sched_getaffinity(0)))
    for lab, plan in plans.items():
        if plan.listed:
            out["labs"][lab] = {"listed": plan.listed}
            continue
        if lab_ranks(profile[lab] or {}) > node.gpus and not plan.launches:
            out["labs"][lab] = {"listed": f"needs >= "
                                f"{lab_ranks(profile[lab])} GPUs; the node "
                                f"has {node.gpus} (run_labs skips it)"}
            continue
        res = {"notes": plan.notes}
        if plan.launches:
            res["launches"] = [rehearse_launch(lab, la, node)
                               for la in plan.launches]
        if plan.cases:
            res["cases"] = rehearse_cases(lab, plan, node, cache=cache)
        out["labs"][lab] = res
    out["failures"] = failures(out)
    return out


def failures(report: dict) -> list[str]:
    """One line per problem: lab, launch or case, rank, rule."""
    lines = [f"preflight: {c['name']}: {c['found']} (need {c['need']})"
             for c in report["preflight"] if c["status"] == "fail"]
    for res in report["labs"].values():
        for row in res.get("launches", []) + res.get("cases", []):
            lines += row["problems"]
    return lines


def table(report: dict) -> str:
    lines = [f"rehearsal of profile {report['profile']} on "
             f"{report['node']} (fake tensors; nothing timed)"]
    for c in report["preflight"]:
        lines.append(f"  preflight {c['status'].upper():4s} {c['name']}: "
                     f"{c['found']}; needs {c['need']}")
    for lab, res in report["labs"].items():
        if "listed" in res:
            lines.append(f"{lab}: not rehearsed: {res['listed']}")
            continue
        bad = sum(len(r["problems"]) for r in res.get("launches", [])
                  + res.get("cases", []))
        lines.append(f"{lab}: {'OK' if not bad else f'{bad} problem(s)'}")
        for la in res.get("launches", []):
            peak = max((r["peak_bytes"] for r in la["ranks"]), default=0)
            lines.append(f"  launch {la['module']} x {la['world_size']}: "
                         + (la.get("skipped") or
                            f"{len(la['ranks'])} ranks, peak "
                            f"{peak / 1e9:.1f} GB per GPU, "
                            f"{sum(r['not_rehearsed'] for r in la['ranks'])}"
                            " values not rehearsed"))
        for c in res.get("cases", []):
            oom = (" (OOM expected: seen)" if c["expect_oom"] and not
                   c["fits"] else " (OOM expected: NOT seen)"
                   if c["expect_oom"] else "")
            lines.append(f"  case {c['variant']}: peak "
                         f"{c['peak'] / 1e9:.1f} GB, "
                         f"{'fits' if c['fits'] else 'does not fit'}{oom}")
        lines += [f"  note: {n}" for n in res.get("notes", [])]
    lines.append(f"every lab: {report['cells']}")
    fails = report["failures"]
    lines += [f"FAIL {f}" for f in fails]
    lines.append(f"=> {'OK' if not fails else f'{len(fails)} failure(s)'}")
    return "\n".join(lines)


def from_runner(profile: str, node: str | None, only: list) -> int:
    """``run_labs.py --rehearse``: the table, exit 1 on a failure, 2 (one
    line) for a node that is not described."""
    import sys
    try:
        report = rehearse(profile, node, only or None)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
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
    a = ap.parse_args(argv)
    try:
        report = rehearse(a.profile, a.node, a.only or None)
    except ValueError as e:
        ap.exit(2, f"{e}\n")
    print(json.dumps(report, indent=1, default=str) if a.json
          else table(report))
    return 1 if report["failures"] else 0
