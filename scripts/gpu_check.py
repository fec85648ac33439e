"""One prepared GPU check: the most GPU surface in <= 9 minutes on one GPU.

    make gpu-check                       # on a GPU machine
    make gpu-check DRY=1                 # anywhere: the plan, CPU-safe parts
    python scripts/gpu_check.py --out /tmp/gc --archive $OUT/gpu-check.tgz
    python3 scripts/gpu_check.py --dry --deadline 300 --archive /tmp/x.tgz

Every step runs as its own process group under its own timeout, and the
whole check under ``--deadline`` (default 540 s): a step that no longer
fits is skipped and listed, a timed-out step's whole group is killed.
Its command, output, exit status and seconds go to ``<out>/<step>.log``;
``<out>/summary.json`` and the ``--archive`` (one flat .tar.gz <= 16 MB,
traces dropped first) are rewritten after every step, so a check killed
at its limit leaves its last finished step to read (default ``<out>``:
``_build/gpu-check/<stamp>/``). A failing step does not stop the next;
its last log lines are printed. The parts: ``scripts/gpucheck/``. The
steps, for one H100/H200-class GPU (estimates in ``gpucheck/plan.py``;
the plan's total is <= 540 s):

1. ``versions``: Python, torch, CUDA, NCCL, DeepSpeed, ... and
   ``nvidia-smi`` as the check ran them (``versions.json``);
2. ``preflight_gpu1`` / ``preflight_gpu8``: ``python -m labkit preflight``
   (gpu8 without the bus-bandwidth probe: one GPU cannot host 8 ranks);
3. ``zero``: DeepSpeed ZeRO-0..3 and CPU offload at one rank, bf16, a
   small GPT, each variant's bytes checked with lab 4's explanation rule
   (``labkit.measure.zero.expected.expected_bytes``);
4. ``lab_memory``: lab 1 through the runner (``--profile gpu1 --only
   memory``);
5. ``lab_profiling``: lab 7 on gpu1 (a profiled run, the doctor and HTA
   side by side);
6. ``checkpoint``: kill-and-resume at one rank, resumed losses against
   the uninterrupted reference, bit for bit (``LABKIT_DETERMINISTIC=1``);
7. ``benchmark`` / ``benchmark_compile``: ``scripts/benchmark_gpu.py``
   eager and with ``--compile``, the wide configuration (8 layers x
   4096) at batch 8, bf16 weights with an fp32 master copy, beside the
   GPU's measured bf16 matmul ceiling.

Not here (they need >= 2 GPUs): every lab's gpu8 profile, labs 2-6 and 9
on gpu1 (world sizes >= 2), lab 8's hang and reshard cells, the NCCL
busbw probe; see docs/running-labs.md.

The machine's own torch is used as it is. Other packages it lacks travel
as wheels in ``.whl/`` (``make gpu-wheels`` downloads them here); when that
folder exists they are installed once per machine with ``pip --no-index
--target _build/gpu-check/site`` (a rerun finds them there) and put on
``PYTHONPATH`` for every step (torch never: the machine's build stays).
``--dry`` prints the plan and runs only the steps marked CPU-safe, on the
CPU (``zero`` and ``checkpoint`` at a tiny size, fp32 on gloo).
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpucheck import inside, runner  # noqa: E402
from gpucheck.plan import (BUDGET_S, ROOT, ZERO_VARIANTS, Step,  # noqa
                           plan_text, steps)
from gpucheck.wheels import WHEELS, install_wheels, step_env  # noqa: E402


def main(argv=None) -> int:
    t0 = time.monotonic()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry", action="store_true",
                   help="print the plan; run only the CPU-safe steps")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default _build/gpu-check/<stamp>)")
    p.add_argument("--only", action="append", default=[],
                   help="run only this step (repeatable)")
    p.add_argument("--deadline", type=float, default=BUDGET_S,
                   metavar="SECONDS", help="for the whole check (default "
                   f"{BUDGET_S}): steps that no longer fit are skipped")
    p.add_argument("--archive", type=Path,
                   help="one .tar.gz (<= 16 MB) of the results, rewritten "
                        "after every step")
    p.add_argument("--step", help=argparse.SUPPRESS)   # one step, inside
    p.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.deadline <= 0:
        p.error("--deadline must be > 0 seconds")
    out = a.out or ROOT / "_build" / "gpu-check" / dt.datetime.now(
        dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if a.step:
        out.mkdir(parents=True, exist_ok=True)
        fn = {"versions": lambda: inside.versions(out) and 0,
              "zero": lambda: inside.zero(out, a.cpu),
              "checkpoint": lambda: inside.checkpoint(out, a.cpu)}[a.step]
        return fn() or 0
    plan = steps(out)
    known = {s.name for s in plan}
    if set(a.only) - known:
        p.error(f"unknown step(s) {sorted(set(a.only) - known)}; known: "
                f"{sorted(known)}")
    if a.only:
        plan = [s for s in plan if s.name in a.only]
    summary = runner.run(
        out, plan, a.dry, a.deadline, a.archive,
        lambda: step_env({} if a.dry else install_wheels(out)), t0)
    failed = [r["step"] for r in summary["steps"]
              if r["status"] in ("failed", "timeout")]
    skipped = summary["skipped"]
    print(f"=> {'FAILED: ' + ', '.join(failed) if failed else 'ok'}"
          f"{'; skipped (deadline): ' + ', '.join(skipped) if skipped else ''}"
          f" ({out}{', ' + str(a.archive) if a.archive else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    if shutil.which("nvidia-smi") is None and "--dry" not in sys.argv \
            and "--step" not in sys.argv:
        print("note: no nvidia-smi on this machine; use --dry for the plan",
              file=sys.stderr)
    sys.exit(main())
