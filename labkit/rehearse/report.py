"""What a rehearsal says: one line per problem, and the table it prints.

A problem names the lab, the launch, case or cell, the rank and the rule
broken (:func:`failures`); :func:`table` is the report a reader sees, with
the values fake tensors cannot produce counted as "not rehearsed".
"""
from __future__ import annotations


def failures(report: dict) -> list[str]:
    """One line per problem: lab, launch or case, rank, rule."""
    lines = [f"preflight: {c['name']}: {c['found']} (need {c['need']})"
             for c in report["preflight"] if c["status"] == "fail"]
    from labkit.rehearse.notebooks import failures as cell_failures
    for lab, res in report["labs"].items():
        for row in res.get("launches", []) + res.get("cases", []):
            lines += row["problems"]
        if "notebook" in res:
            lines += cell_failures(lab, res["notebook"])
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
                         + (la.get("skipped") or (
                            "not rehearsed: " + la["not_rehearsed"]
                            if la.get("not_rehearsed") else None) or
                            f"{len(la['ranks'])} ranks, peak "
                            f"{peak / 1e9:.1f} GB per GPU, "
                            f"{sum(r['not_rehearsed'] for r in la['ranks'])}"
                            " values not rehearsed"))
        for c in res.get("cases", []):
            oom = (" (OOM expected: seen)" if c["expect_oom"] and not
                   c["fits"] else " (OOM expected: NOT seen)"
                   if c["expect_oom"] else "")
            lines.append(f"  case {c['variant']}: peak "
                         f"{c['peak'] / 1e9:.1f} GB + floor "
                         f"{c['floor'] / 1e9:.1f} GB, "
                         f"{'fits' if c['fits'] else 'does not fit'} ("
                         f"{c['margin_bytes'] / 1e9:+.1f} GB left){oom}")
        if "notebook" in res:
            lines += _cell_lines(res["notebook"])
        lines += [f"  note: {n}" for n in res.get("notes", [])]
    lines.append(f"labs without 'notebook': {report['cells']}")
    fails = report["failures"]
    lines += [f"FAIL {f}" for f in fails]
    lines.append(f"=> {'OK' if not fails else f'{len(fails)} failure(s)'}")
    return "\n".join(lines)


def _cell_lines(nb: dict) -> list[str]:
    cells = nb["cells"]
    ran = sum(c["status"] == "ran" for c in cells)
    out = [f"  notebook {nb['notebook']}: {len(cells)} code cells, {ran} "
           f"ran, {sum(c['status'] == 'failure' for c in cells)} failed, "
           f"{sum(c['status'] == 'not rehearsed' for c in cells)} not "
           f"rehearsed ({nb['seconds']:.0f} s)"]
    for c in cells:
        for la in c["launches"]:
            out.append(f"    cell {c['cell']}: launch {la['module']} x "
                       f"{la['world_size']}: " + (
                           f"not rehearsed: {la['not_rehearsed']}"
                           if la.get("not_rehearsed") else
                           f"ranks {la['ranks']}, peak "
                           f"{la['peak_bytes'] / 1e9:.1f} GB per GPU"
                           + (" (OOM)" if la["oom"] else "")))
        if c["status"] == "not rehearsed":
            out.append(f"    cell {c['cell']}{' [gpu]' if 'gpu' in c['tags'] else ''}"
                       f": not rehearsed: {c['reason']}")
    return out
