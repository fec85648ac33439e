"""Build-it parts: the student writes the distributed code, real ranks run it.

    from labkit import buildit
    result = buildit.run("sharding", BucketedDDP)  # plain JSON-able dict
    buildit.show(result)                           # one row per check
    buildit.problem("sharding")                    # what is checked
    buildit.expect(result, "sharding", "grads")    # hidden tests: a fresh
                                                   # run, AssertionError(reason)

How a student's code reaches the ranks
--------------------------------------
A student writes a class or function in one notebook cell. ``run`` finds
the text of that cell (IPython keeps every executed cell in ``linecache``
under the file name its code objects carry), writes it to
``<temp>/student.py`` and launches :mod:`labkit.runs.tools.buildit` with
:func:`labkit.launch.launch` on real gloo ranks. Every rank imports the file
by path and runs the lab's *harness* (``labkit.buildit.<lab>``): the
harness drives the student's code, computes a single-process reference on
the same data, and counts every collective with
:class:`labkit.measure.collectives.CollectiveCounter`. Each rank writes
plain numbers, lists and strings; ``run`` returns them as one dict. The
cell must therefore be self-contained (its own imports).

Grading reads only that dict: ``grade(result)`` gives one row per check
(points, passed, measured, expected and, when it fails, a reason written
for the student). No live object of the student's kernel is consulted, so
hidden tests can run outside the kernel on the exported dict. The dict
carries the source it ran, and the hidden tests (``expect``) grade a fresh
run of that source, never the numbers a kernel hands over (``verified``).
Under ``make grade`` that rerun runs in a jail of its own (``RERUN``, set
by scripts/grading/evaluate.py), and what the ranks hand back is only
plain data: the final tensors (parameters, gradients, outputs) that the
checks compare, here, with a reference they compute themselves
(``reference`` of each harness), so that a rank that forges its report
must still produce the right tensors. There the counts come from outside
the ranks too: their collectives are performed and counted by the rerun's
own process (a hub, scripts/grading/hub.py), whose count replaces what the
ranks say (:mod:`labkit.buildit.counted`). The ranks always run on gloo
(the harness's tensors are CPU tensors), whatever GPUs the machine has.
"""
from __future__ import annotations

import functools
import importlib
import json
import os
import re
import tempfile
from pathlib import Path

from labkit.buildit.source import source_of  # noqa: F401 (the API)

# lab name (the lab's module name) -> ranks it runs on
LABS = {"sharding": 2, "zero": 2, "tensor_parallel": 2,
        "pipeline_parallel": 4}
LABS["experts"] = 4     # lab 13 (labkit/buildit/experts.py)
LABS["fsdp"] = 2        # lab 3, FSDP (labkit/buildit/fsdp.py)
LABS["context_parallel"] = 4  # lab 11 (buildit/context_parallel.py)
LABS["optimizers"] = 2  # lab 19, Muon (labkit/buildit/optimizers.py)
TIMEOUT_S = 90.0
# errors a rank gets because ANOTHER rank failed
_KNOCK_ON = ("Connection closed", "Connection reset", "never came",
             "crashed or hung")
# ``fn(lab, source) -> dict``: where a hidden test's rerun runs (grading
# sets it: a jail of its own); None: here, with ``run``
RERUN = None
# set (to "1") by grading in the student's jail only: ``run`` launches
# nothing there and hands over the source; the hidden tests grade the
# grader's own rerun of it anyway (``verified``), so the student's run
# would be one launch of every rank for nothing
DEFER = "LABKIT_BUILDIT_DEFER"


def hidden_world(lab: str) -> int:
    """The ranks of the hidden tests' rerun (a harness's ``HIDDEN_WORLD``,
    else the lab's)."""
    return getattr(harness(lab), "HIDDEN_WORLD", LABS[lab])


def harness(lab: str):
    if lab not in LABS:
        raise ValueError(f"unknown build-it lab {lab!r}: choose from "
                         f"{', '.join(LABS)}")
    return importlib.import_module(f"labkit.buildit.{lab}")


def run(lab: str, *objs, sources: dict | None = None, config: dict | None
        = None, timeout: float = TIMEOUT_S, run_dir=None,
        defer: bool | None = None, world: int | None = None) -> dict:
    """Run the student's ``objs`` on real ranks; a plain dict of results.

    ``sources``: ``{name: source text}`` to run several implementations in
    one launch instead (tests); then the dict maps each name to its result.
    A crash, a deadlock or a timeout is a result too (``error``), so that
    grading gives it 0 with the reason instead of stopping. ``defer``:
    hand over the source without launching (default: ``DEFER`` in the
    environment); a hidden test's rerun never defers. ``world``: ranks
    (default: the lab's).
    """
    from labkit.launch import LaunchError, launch
    if os.environ.get("LABKIT_BUILDIT_RANK"):
        raise RuntimeError("buildit.run(...) is in the cell of your code, "
                           "which every rank imports: move it to a cell of "
                           "its own")
    h = harness(lab)
    cfg = {**h.CONFIG, **(config or {})}
    many = sources is not None
    sources = sources if many else {"student": source_of(*objs)}
    if defer is None:
        defer = os.environ.get(DEFER) == "1"
    if defer:
        out = {n: {"lab": lab, "config": cfg, "source": text, "error": None,
                   "ranks": [], "deferred": True}
               for n, text in sources.items()}
        return out if many else out["student"]
    with tempfile.TemporaryDirectory(prefix=f"buildit-{lab}-") as tmp:
        files = []
        for name, text in sources.items():
            f = Path(tmp) / f"{name}.py"
            f.write_text(text)
            files.append(str(f))
        args = ["--lab", lab, "--config", json.dumps(cfg), "--code", *files]
        run_dir = Path(run_dir or Path(tmp) / "run")
        try:
            ranks = launch("labkit.runs.tools.buildit", world or LABS[lab], args,
                           timeout=timeout * len(files), run_dir=run_dir,
                           backend="gloo")
        except LaunchError as e:
            err = "your code crashed or hung a rank: " + \
                str(e).splitlines()[0][:300]
            saved = [json.loads(f.read_text())
                     for f in sorted(run_dir.glob("rank-*.json"))]
            ranks = saved + [{"results": {n: {"error": err}
                                          for n in sources}}]
    out = collect(lab, cfg, sources, ranks)
    return out if many else out["student"]


def collect(lab: str, cfg: dict, sources: dict, ranks: list) -> dict:
    """``{name: result}`` from the ranks' records (``rank-*.json``) of a
    launch of ``labkit.runs.tools.buildit`` (``run``; grading's own spawner)."""
    out = {}
    for name in sources:
        per_rank = [r["results"][name] for r in ranks]
        # the student's own error first, then what it did to the others
        errors = sorted((r["error"] for r in per_rank if r.get("error")),
                        key=lambda x: any(w in x for w in _KNOCK_ON))
        out[name] = {"lab": lab, "config": cfg, "source": sources[name],
                     "error": errors[0] if errors else None,
                     "ranks": per_rank}
    return out


@functools.lru_cache(maxsize=8)
def _rerun(lab: str, source: str) -> str:
    h = harness(lab)
    if RERUN is None:
        got = run(lab, sources={"student": source}, config=h.HIDDEN,
                  defer=False, world=hidden_world(lab))
        got = got["student"]
    else:
        got = RERUN(lab, source)
    got = dict(got) if type(got) is dict else {}
    if RERUN is not None and not got.get("error") and (
            type(got.get("wire_bytes")) is not int or
            hasattr(h, "from_hub") and type(got.get("hub")) is not dict):
        got["error"] = "the rerun did not say what its ranks sent"
    ranks = got.get("ranks")
    if not got.get("error") and not (
            type(ranks) is list and len(ranks) == hidden_world(lab)
            and all(type(r) is dict for r in ranks)):
        got["error"] = "the rerun gave no result for every rank"
    # what was run is ours, whatever the ranks say: the rerun's own seed
    # of the data it dealt the ranks (labkit.buildit.dealt) too
    cfg = {**h.CONFIG, **h.HIDDEN}
    if RERUN is not None and hasattr(h, "share"):
        if type(got.get("data_seed")) is int:
            cfg["data_seed"] = got["data_seed"]
        elif not got.get("error"):
            got["error"] = "the rerun did not say which data it dealt"
    got.update(lab=lab, config=cfg, source=source)
    if got.get("error") is not None:
        got["error"] = str(got["error"])[:400]
    return json.dumps(got)


def verified(result: dict, lab: str) -> dict:
    """Run ``result["source"]`` again, here, as part ``lab`` on the
    harness's ``HIDDEN`` configuration (other sizes, caps, micro-batches
    than the student ran), and return that result.

    What a student's kernel hands over (numbers, configuration) can be
    forged; its source cannot pretend to be other code. The hidden tests
    grade this second run (once per source and process: cached)."""
    harness(lab)
    source = result.get("source") if isinstance(result, dict) else None
    if not isinstance(source, str):
        return {"lab": lab, "config": {}, "source": None, "ranks": [],
                "error": "no code to run: call buildit.run(...) with the "
                "class or function you wrote"}
    return json.loads(_rerun(lab, source))


def grade(result: dict) -> list[dict]:
    """One row per check: name, points, max, passed, measured, expected,
    reason (empty when passed). Reads only the plain ``result``."""
    from labkit.buildit import counted
    h = harness(result["lab"])
    result, error = counted.apply(h, result)
    error = result.get("error") or error
    if not error and re.search(r"\blabkit\b", result.get("source") or ""):
        error = ("your code uses labkit, the course's own implementation: "
                 "the part asks for yours (torch and torch.distributed only)")
    wire = result.get("wire_bytes")
    # a harness without a floor (``min_wire``) has its checks only
    world = max(LABS[result["lab"]], len(result.get("ranks") or []))
    floor = h.min_wire(result["config"], world) \
        if hasattr(h, "min_wire") and type(wire) is int else 0
    if not error and type(wire) is int and wire < floor:
        error = (f"your ranks sent {wire} bytes in all, fewer than the "
                 f"{floor} that the collectives this part needs move at "
                 "the least: the run's report is not what the ranks did")
    rows = []
    for name, most, fn in h.CHECKS:
        if error:
            ok, measured, expected, reason = False, None, None, error
        else:
            try:
                ok, measured, expected, reason = fn(result)
            except Exception as e:  # noqa: BLE001 - the ranks' data is theirs
                ok, measured, expected, reason = False, None, None, (
                    f"the run did not produce what {name} needs "
                    f"({type(e).__name__})")
        rows.append({"check": name, "points": most if ok else 0,
                     "max": most, "passed": bool(ok), "measured": measured,
                     "expected": expected, "reason": "" if ok else reason})
    return rows


def score(result: dict) -> tuple[float, float]:
    rows = grade(result)
    return sum(r["points"] for r in rows), sum(r["max"] for r in rows)


def expect(result: dict, lab: str, check: str) -> None:
    """Raise ``AssertionError(reason)`` if ``check`` of part ``lab`` fails
    on a fresh run of the result's source (:func:`verified`): the hidden
    tests."""
    row = next((r for r in grade(verified(result, lab))
                if r["check"] == check), None)
    if row is None:
        raise KeyError(f"no check {check!r}")
    if not row["passed"]:
        raise AssertionError(row["reason"])


def expect_ran(result: dict) -> None:
    """Raise ``AssertionError`` if the run itself failed (public test: the
    checks are the hidden tests'). Prints nothing: otter's tests are
    doctests, and any output would fail them."""
    if isinstance(result, dict) and result.get("deferred") is True and \
            isinstance(result.get("source"), str) and \
            not result.get("error"):
        return   # under grading: the grader runs it (``DEFER``)
    if not isinstance(result, dict) or result.get("error") or \
            not result.get("ranks"):
        raise AssertionError((result or {}).get("error") or
                             "no run: call buildit.run(...) first")


def problem(lab: str) -> list[dict]:
    """What part ``lab`` checks and what the reference gives, per check
    (from the harness's configuration; nothing is launched)."""
    h = harness(lab)
    want = h.expected(h.CONFIG, LABS[lab])
    return [{"check": name, "points": most, "expected": want[name]}
            for name, most, _ in h.CHECKS]


def show(result: dict):
    """The checks as a table (a DataFrame in a notebook)."""
    import pandas as pd
    if isinstance(result, dict) and result.get("deferred") is True:
        print("not run here: the grader runs your code itself")
        return None
    df = pd.DataFrame(grade(result))
    try:
        from IPython.display import display
        display(df)
    except ImportError:  # plain Python
        print(df.to_string(index=False))
    return df

import labkit.buildit.smoke as _smoke  # noqa: E402 (never imports this)
from labkit.buildit.smoke import tails  # noqa: E402,F401


def smoke(lab: str, *objs, ranks: bool = True, run_dir=None,
          config: dict | None = None) -> dict:
    """One rank in this kernel, then real ranks: :func:`labkit.buildit
    .smoke.smoke` with this package's ``harness``, ``run`` and ``show``."""
    import sys
    return _smoke.smoke(sys.modules[__name__], lab, *objs, ranks=ranks,
                        run_dir=run_dir, config=config)
