"""Each lab's notebook executed under rehearsal: its cells, its launches.

    rows = rehearse_notebook("fit", load_profile("gpu8")["fit"], "gpu8",
                             describe("h100x8"))

The runner's path: papermill writes the profile's parameters into the
notebook (as ``scripts/run_labs.py`` does, ``profile`` and ``results_dir``
included), then a kernel executes every code cell in order, the
``gpu``-tagged ones too, with ``LABKIT_REHEARSE`` naming the node: each
``launch()`` of a cell runs its ranks on fake tensors at the real world
size (:mod:`labkit.rehearse.hook`). Execution goes on after a cell's
error, so that every cell is seen, and each cell gets one status:

- ``ran``: executed; its launches (module, world size, peak per GPU) are
  listed with it;
- ``failure``: a launch raised (a device or NCCL rule, a CUDA OOM the
  cell did not catch, a rank's error or exit status -- the last two only
  when every cell before it completed), or the cell's own
  code is wrong (a name, an attribute, an import or a syntax error with
  every cell before it complete), or the lab's own parameter check
  (``check(lab, globals())``) refused the profile's values: one line
  naming the lab, the cell and the rule;
- ``not rehearsed``: the cell stopped on what fake ranks cannot give (a
  launch in another interpreter or on more GPUs than the node has, an
  operator fake tensors cannot run; a measured value, NaN here, that the
  cell checks or plots; a CUDA-only call such as ``nvidia-smi``), or on
  what a cell before it that did not complete would have defined; or ran
  past :data:`CELL_TIMEOUT_S` on this CPU and was interrupted): listed
  with its reason, never skipped in silence.

The executed notebook is not kept: what a reader sees comes from real runs.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path

from labkit.rehearse.env import ENV, LOG

LABS = Path(__file__).resolve().parents[2] / "labs"
# a fake rank at real size costs seconds per step on 2 cores: lab 1
# trains five strategies of a 1.4B model in one cell (past 600 s under
# load); a cell past it is interrupted and listed, the next cells run
CELL_TIMEOUT_S = int(os.environ.get("LABKIT_REHEARSE_CELL_TIMEOUT_S", 1800))
# what a rehearsed rank raises for a broken rule (hook.py, run.py)
RULES = ("device rule", "nccl rule", "(rehearsed)",
         "Expected all tensors to be on the same device",
         "Tensors must be CUDA")
CODE_ERRORS = ("NameError", "SyntaxError", "ImportError",
               "ModuleNotFoundError", "AttributeError", "IndentationError")


def notebook(lab: str) -> Path:
    found = sorted(LABS.glob(f"[0-9][0-9]_{lab}.ipynb"))
    if not found:
        raise ValueError(f"no notebook for lab {lab!r} in {LABS}")
    return found[0]


# the lab's parameter check (labkit.lab.check): a refusal there is the
# profile's fault, never a value fake tensors cannot produce
_CHECK_CELL = re.compile(r"\bcheck\(\s*[\"']\w+[\"']\s*,\s*globals\(\)")


def _status(cell: dict, error, events: list, earlier: list) -> tuple:
    """(status, reason) of one executed cell; see the module doc."""
    if error is None:
        return "ran", ""
    ename, evalue = error
    line = f"{ename}: {(evalue or '').strip().splitlines()[0][:300]}" \
        if (evalue or "").strip() else ename
    if ename == "KeyboardInterrupt":    # nbclient's interrupt on timeout
        return "not rehearsed", (f"ran past the rehearsal's {CELL_TIMEOUT_S}"
                                 " s per cell on this CPU (interrupted; "
                                 "LABKIT_REHEARSE_CELL_TIMEOUT_S)")
    skipped = [e["not_rehearsed"] for e in events if "not_rehearsed" in e]
    if skipped:
        return "not rehearsed", f"launch not rehearsed: {skipped[0]}"
    rule = any(r in (evalue or "") for r in RULES) or any(
        r in p for e in events for p in e["problems"] for r in RULES)
    if ename == "LaunchError" or rule or any(e["problems"] for e in events):
        if earlier and not rule:   # a rank's error on what an earlier
            # cell did not make (lab 8's reshard reads cell 7's checkpoint)
            return "not rehearsed", (f"after cell {earlier[-1]}, which did "
                                     f"not complete: {line}")
        return "failure", line
    src = cell.get("source", "")
    src = "".join(src) if isinstance(src, list) else src
    if _CHECK_CELL.search(src):   # the lab refused the profile's values
        return "failure", f"the lab's check refused the parameters: {line}"
    if earlier:   # a cell before stopped: what it defines is missing
        return "not rehearsed", (f"after cell {earlier[-1]}, which did not "
                                 f"complete: {line}")
    if ename in CODE_ERRORS:
        return "failure", f"the cell's code: {line}"
    return "not rehearsed", f"reads a value fake ranks cannot produce: {line}"


def rehearse_notebook(lab: str, params: dict, profile: str, node,
                      nb_path: Path | None = None) -> dict:
    """Execute lab ``lab``'s notebook under rehearsal; its cells' rows."""
    import nbformat
    import papermill as pm
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError
    from labkit.launch.request import checkout_pythonpath
    nb_path = nb_path or notebook(lab)
    out = {"notebook": nb_path.name, "cells": []}
    # under _build, as the runner's results are: a lab that keeps its
    # files out of the source tree (lab 8's checkpoints) checks where
    scratch = LABS.parent / "_build" / "rehearse"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{lab}-", dir=scratch) as tmp:
        tmp = Path(tmp)
        log = tmp / "launches.jsonl"
        log.touch()
        prepared = tmp / nb_path.name
        pm.execute_notebook(str(nb_path), str(prepared), prepare_only=True,
                            parameters={**params, "profile": profile,
                                        "results_dir": str(tmp / "out")},
                            progress_bar=False, log_output=False)
        nb = nbformat.read(prepared, as_version=4)
        # cells are named by their index in the lab's own notebook
        injected = [i for i, c in enumerate(nb.cells) if
                    "injected-parameters" in c.metadata.get("tags", [])]
        seen = {"offset": 0, "earlier": []}

        def executed(cell, cell_index, execute_reply, **_):
            text = log.read_text()
            events = [json.loads(x) for x in
                      text[seen["offset"]:].splitlines() if x.strip()]
            seen["offset"] = len(text)
            error = next(((o.get("ename"), o.get("evalue"))
                          for o in cell.get("outputs", [])
                          if o.get("output_type") == "error"), None)
            index = cell_index - sum(i < cell_index for i in injected)
            if cell_index in injected:
                return
            status, reason = _status(cell, error, events, seen["earlier"])
            if status != "ran":
                seen["earlier"].append(index)
            out["cells"].append({
                "cell": index, "id": cell.get("id"),
                "tags": cell.metadata.get("tags", []), "status": status,
                "reason": reason, "launches": [
                    {k: e.get(k) for k in ("module", "world_size", "oom",
                                           "notes", "seconds",
                                           "not_rehearsed")}
                    | {"peak_bytes": max((r["peak_bytes"] for r in
                                          e.get("ranks", [])), default=0),
                       "ranks": [r["rank"] for r in e.get("ranks", [])],
                       "problems": e.get("problems", []),
                       "rank_rows": e.get("ranks", [])}
                    for e in events]})
        env = {ENV: node.source or node.name, LOG: str(log)}
        saved = {k: os.environ.get(k) for k in (*env, "PYTHONPATH")}
        os.environ.update(env)
        os.environ["PYTHONPATH"] = checkout_pythonpath(dict(os.environ))
        t0 = time.perf_counter()
        started = {}

        def start(cell, cell_index, **_):
            started.update(cell=cell, index=cell_index - sum(
                i < cell_index for i in injected))
        try:
            NotebookClient(nb, timeout=CELL_TIMEOUT_S, allow_errors=True,
                           interrupt_on_timeout=True,
                           kernel_name="python3",
                           resources={"metadata": {"path": str(nb_path.parent)}},
                           on_cell_start=start,
                           on_cell_executed=executed).execute()
        except DeadKernelError:   # killed (memory) or crashed: one line
            out["cells"].append({
                "cell": started.get("index"),
                "id": started.get("cell", {}).get("id"),
                "tags": [], "status": "failure", "launches": [],
                "reason": "the kernel died while executing this cell "
                "(killed, e.g. out of the machine's memory, or crashed); "
                "the cells after it were not executed"})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def failures(lab: str, res: dict) -> list[str]:
    """One line per failing cell: the lab, the cell, the rule."""
    return [f"lab {lab}: cell {c['cell']} ({c['id']}): {c['reason']}"
            for c in res["cells"] if c["status"] == "failure"]
