"""Run the check's steps under one deadline, each in its own process group.

    python scripts/gpu_check.py --deadline 300 --archive /tmp/x.tgz

A step starts only if its estimate fits in what is left of the deadline
(else it is skipped and listed); a started step's timeout is at most what
is left. A step runs in a session of its own (``start_new_session``): at
its timeout the whole process group is killed (SIGTERM, then SIGKILL
after :data:`GRACE_S`), torchrun's ranks included; the step's direct child
also dies with the check (``PR_SET_PDEATHSIG``) if the check is killed
outright. summary.json and the archive are rewritten after every step
(archive.py); SIGTERM/SIGINT/SIGHUP stop the running step's group and
write them once more. A failing step's last log lines are printed.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import archive as A
from .plan import BUDGET_S, ROOT, Step, plan_text

GRACE_S = 5.0
TAIL = 20               # log lines printed for a failing step
RESERVE_S = 5.0         # kept for the last summary and archive
CRASH = "Traceback (most recent call last):"


def _die_with_parent() -> None:
    """In the child: SIGKILL when the check dies (Linux; else nothing)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: SET
    except (OSError, AttributeError):
        pass


def kill_group(pgid: int) -> None:
    """SIGTERM the group, SIGKILL what is left after GRACE_S."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        t = time.monotonic() + wait
        while time.monotonic() < t:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


class Check:
    """One run of the plan: the results so far, the step running now."""

    def __init__(self, out: Path, plan: list[Step], dry: bool,
                 deadline_s: float, archive: Path | None, env: dict,
                 t0: float | None = None):
        self.out, self.plan, self.dry = out, plan, dry
        self.deadline_s, self.archive, self.env = deadline_s, archive, env
        self.t0 = time.monotonic() if t0 is None else t0
        self.results: list[dict] = []
        self.running: dict | None = None     # {"step", "pgid"}
        self.finished = False

    def left(self) -> float:
        return self.deadline_s - (time.monotonic() - self.t0)

    def summary(self) -> dict:
        s = {"dry": self.dry, "out": str(self.out),
             "est_total_s": sum(x.est_s for x in self.plan),
             "budget_s": BUDGET_S, "deadline_s": self.deadline_s,
             "elapsed_s": round(time.monotonic() - self.t0, 1),
             "finished": self.finished, "running": self.running,
             "steps": self.results,
             "skipped": [r["step"] for r in self.results
                         if r["status"] == "skipped"],
             "when": dt.datetime.now(dt.timezone.utc).isoformat(
                 timespec="seconds")}
        vfile = self.out / "versions.json"
        if vfile.is_file():
            try:
                s["versions"] = json.loads(vfile.read_text())
            except ValueError:
                pass
        return s

    def save(self) -> None:
        A.write(self.out, self.summary(), self.archive)

    def run_step(self, s: Step) -> dict:
        cmd = s.dry_cmd if self.dry and s.dry_cmd else s.cmd
        timeout = min(s.timeout_s, max(self.left() - RESERVE_S, 1.0))
        log = self.out / f"{s.name}.log"
        t0 = time.monotonic()
        status, rc = "ok", None
        with open(log, "w") as f:
            f.write("$ " + " ".join(map(str, cmd)) + "\n")
            f.flush()
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                 env={**self.env, **s.env}, cwd=ROOT,
                                 start_new_session=True,
                                 preexec_fn=_die_with_parent)
            self.running = {"step": s.name, "pgid": p.pid}
            self.save()                   # who runs now, for a reader
            try:
                rc = p.wait(timeout=timeout)
                status = "ok" if rc in s.ok_exits else "failed"
            except subprocess.TimeoutExpired:
                status = "timeout"
                f.write(f"\n[gpu_check] timed out after {timeout:.0f} s "
                        f"(step timeout {s.timeout_s:.0f} s, deadline "
                        f"{self.deadline_s:.0f} s): killing its process "
                        "group\n")
                f.flush()
            finally:
                kill_group(p.pid)          # nothing of the step outlives it
                p.wait()
                self.running = None
        text = log.read_text(errors="replace")
        if status == "ok" and rc != 0 and CRASH in text:
            status = "failed"     # a crash, not a finding (preflight's 1/2)
        lines = text.splitlines()
        return {"step": s.name, "status": status, "exit": rc,
                "seconds": round(time.monotonic() - t0, 1),
                "est_s": s.est_s, "timeout_s": round(timeout, 1),
                "log": log.name, "cmd": " ".join(map(str, cmd)),
                "tail": lines[-TAIL:]}

    def __call__(self) -> dict:
        for s in self.plan:
            if self.dry and not s.cpu_safe:
                r = {"step": s.name, "status": "planned", "est_s": s.est_s,
                     "timeout_s": s.timeout_s}
            elif s.est_s > self.left() - RESERVE_S:
                r = {"step": s.name, "status": "skipped", "est_s": s.est_s,
                     "reason": f"needs ~{s.est_s:.0f} s, "
                               f"{max(self.left(), 0):.0f} s left of the "
                               f"{self.deadline_s:.0f} s deadline"}
                print(f"skipped  {s.name:18s} ({r['reason']})", flush=True)
            else:
                r = self.run_step(s)
                print(f"{r['status']:8s} {s.name:18s} {r['seconds']:6.1f} s "
                      f" (est {s.est_s:.0f}, timeout {r['timeout_s']:.0f})",
                      flush=True)
                if r["status"] in ("failed", "timeout"):
                    print(f"--- last {TAIL} lines of {self.out / r['log']}:")
                    print("\n".join(r["tail"]), flush=True)
            self.results.append(r)
            self.save()
        self.finished = True
        self.save()
        return self.summary()


def run(out: Path, plan: list[Step], dry: bool, deadline_s: float,
        archive: Path | None, env, t0: float | None = None) -> dict:
    """``env``: the steps' environment, or a function that makes it (the
    wheels' install, timed inside the deadline)."""
    out.mkdir(parents=True, exist_ok=True)
    print(plan_text(plan, dry, deadline_s), flush=True)
    check = Check(out, plan, dry, deadline_s, archive, {}, t0)

    def stop(signum, frame):
        if check.running:
            kill_group(check.running["pgid"])
        check.results.append({"step": (check.running or {}).get("step"),
                              "status": "interrupted",
                              "signal": signal.Signals(signum).name})
        check.running = None
        check.save()
        print(f"gpu_check: {signal.Signals(signum).name}: stopped; "
              f"{out / 'summary.json'} written", file=sys.stderr)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    check.save()                       # an archive exists from the start
    check.env = env() if callable(env) else env
    return check()
