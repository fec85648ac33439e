"""The rank side of a build-it part: import the student's file, run the harness.

    torchrun --nproc-per-node 2 -m labkit.runs.tools.buildit --lab sharding \
        --config '{}' --code student.py [other.py ...]

Every rank imports each ``--code`` file by path and calls
``labkit.buildit.<lab>.rank_run(ctx, module, config)``, which drives the
student's code against a single-process reference and the collective
counter and returns plain data. An exception in the student's code is a
result (``error``), not a crash, so that grading can give its reason. A
rank waiting for a message that never comes (a schedule that deadlocks)
gives up after ``rank_timeout_s`` (gloo's timeout). Started by
:func:`labkit.buildit.run`; see that module for the design.
"""
import argparse
import importlib.util
import json
import os
import traceback
from pathlib import Path

from labkit import dist
from labkit.buildit import harness


def load(path: str, index: int):
    spec = importlib.util.spec_from_file_location(
        f"buildit_student_{index}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def describe(e: BaseException, path: str) -> str:
    """The student's error in one line, with the line of their code."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename == path]
    where = f" (your line {frames[-1].lineno}: {frames[-1].line})" \
        if frames else ""
    msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    if "timed out" in str(e).lower():
        return ("a rank waited for a message or a collective that never "
                "came (the ranks' orders of communication do not match: "
                f"a deadlock){where}")
    return f"{type(e).__name__}: {msg}{where}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lab", required=True)
    p.add_argument("--config", default="{}")
    p.add_argument("--code", nargs="+", required=True)
    a = p.parse_args()
    cfg = json.loads(a.config)
    h = harness(a.lab)
    os.environ["LABKIT_BUILDIT_RANK"] = "1"  # a nested buildit.run refuses
    ctx = dist.init(timeout_s=cfg.get("rank_timeout_s", 30))
    results = {}
    for i, path in enumerate(a.code):
        try:
            results[Path(path).stem] = h.rank_run(ctx, load(path, i), cfg)
        except Exception as e:  # noqa: BLE001 - the student's error is data
            results[Path(path).stem] = {"error": describe(e, path)}
    dist.save(ctx, {"results": results})
    if any(r.get("error") for r in results.values()):
        # the other ranks may be stuck in a message this rank will never
        # send: leave now, so that they fail fast instead of at the timeout
        os._exit(0)
    dist.close()


if __name__ == "__main__":
    main()
