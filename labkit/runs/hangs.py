"""Plant one fault in a short run of collectives and keep what tools see.

    torchrun --nproc-per-node 3 -m labkit.runs.hangs \
        --fault skip --culprit 2 --at 2 --timeout-s 2
    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node 3 \
        -m labkit.runs.hangs --fault order --culprit 2 --at 2

Each of ``--steps`` steps is what data parallelism does: all-reduce the
gradients, then broadcast rank 0's parameters. In step ``--at`` rank
``--culprit`` does one thing wrong (``--fault``):

- ``skip``: it skips the all-reduce (a branch only it took);
- ``shape``: its gradient has one element more (a model built another way);
- ``order``: it broadcasts before it all-reduces;
- ``dead``: it SIGKILLs itself (a lost GPU, an OOM kill);
- ``slow``: its data loader sleeps ``--sleep-s`` seconds, past the timeout;
- ``none``: nothing (the control).

Three tools look at it. ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (set by the
launcher) checks every collective's fingerprint on all ranks before it
runs. The flight recorder (``TORCH_FR_BUFFER_SIZE``, set here before the
process group starts) keeps each rank's last collectives; gloo has no
watchdog to dump it on a timeout as NCCL's does
(``TORCH_NCCL_DUMP_ON_TIMEOUT``), so a thread here plays that part: when
this rank has waited ``--stuck-s`` in one collective it asks every rank,
through the process group's store, to write its record
(``fr/rank_<r>``), and runs ``py-spy dump`` on every rank
(``pyspy/rank_<r>.txt``) while they are still stuck. Every rank then waits
for the process-group timeout (``--timeout-s``), writes the error it got
into ``rank-<r>.json`` and exits 0; only ``dead`` fails the launch.
``labkit.measure.hangs`` reads all three.
"""
from __future__ import annotations

import argparse
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

FAULTS = ("none", "skip", "shape", "order", "dead", "slow")
DUMP_KEY = "hangs/dump"
RING = 64   # collectives each rank's flight recorder keeps


def fr_env() -> dict:
    """What turns the flight recorder on (read when the group starts)."""
    return {"TORCH_FR_BUFFER_SIZE": str(RING)}


def normalised(raw: bytes, world_size: int) -> dict:
    """The recorder's dump as the analyzer reads it. On gloo (torch 2.13)
    the default group's ``pg_config`` is keyed ``""`` while its entries
    name the group ``"0"``, and ``fr_trace`` fails on that key; this keys
    the config by the entries' name. Nothing recorded is changed."""
    dump = pickle.loads(raw)
    names = {e["process_group"][0]: e["process_group"][1]
             for e in dump.get("entries", [])}
    config = dict(dump.get("pg_config", {}))
    if "" in config:
        ranks = config.pop("")["ranks"]
        for name, desc in names.items() or [("0", "default_pg")]:
            config.setdefault(name, {"name": name, "desc": desc,
                                     "ranks": ranks})
    if not config:
        config = {"0": {"name": "0", "desc": "default_pg",
                        "ranks": str(list(range(world_size)))}}
    dump["pg_config"] = config
    return dump


class Recorder:
    """This rank's side of the dump: the flight recorder to a file, and
    ``py-spy dump`` of every rank, once, when any rank asks."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, store,
                 stuck_s: float):
        self.run_dir, self.rank, self.world = run_dir, rank, world_size
        self.store, self.stuck_s = store, stuck_s
        self.entered = None          # (time, what) while in a collective
        self.dumped = threading.Event()
        self.finished = threading.Event()   # dumped (and spied, if asked)
        self.lock = threading.Lock()
        store.set(f"hangs/pid/{rank}", str(os.getpid()))
        threading.Thread(target=self._watch, daemon=True).start()

    def collective(self, what: str):
        rec = self

        class _In:
            def __enter__(self):
                rec.entered = (time.monotonic(), what)

            def __exit__(self, *exc):
                rec.entered = None
        return _In()

    def dump_fr(self) -> None:
        with self.lock:
            if self.dumped.is_set():
                return
            import torch._C._distributed_c10d as c10d
            out = self.run_dir / "fr" / f"rank_{self.rank}"
            out.parent.mkdir(parents=True, exist_ok=True)
            data = normalised(c10d._dump_fr_trace(), self.world)
            tmp = out.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(data))
            tmp.replace(out)
            self.dumped.set()

    def ask(self) -> None:
        """Ask every rank to dump (the first asker wins)."""
        try:
            self.store.compare_set(DUMP_KEY, "", str(self.rank))
        except Exception:
            pass

    def _watch(self) -> None:
        try:
            self._poll()
        finally:
            self.finished.set()

    def _poll(self) -> None:
        while not self.dumped.is_set():
            time.sleep(0.05)
            try:
                who = self.store.check([DUMP_KEY]) and int(
                    self.store.get(DUMP_KEY))
            except Exception:
                return          # the store is gone: the run ended
            if who is not False:
                if who == self.rank:   # py-spy first: the dump below
                    self.spy()         # waits for the collective (gloo)
                self.dump_fr()
                return
            e = self.entered
            if e and time.monotonic() - e[0] > self.stuck_s:
                self.ask()

    def spy(self) -> None:
        """``py-spy dump`` of every rank's Python stack, now."""
        mine = Path(sys.executable).parent / "py-spy"   # the pinned one
        exe = str(mine) if mine.exists() else shutil.which("py-spy")
        folder = self.run_dir / "pyspy"
        folder.mkdir(parents=True, exist_ok=True)
        procs = {}
        for r in range(self.world):   # all at once: they are stuck now
            pid = self.store.get(f"hangs/pid/{r}").decode()
            procs[r] = subprocess.Popen(
                [exe, "dump", "--pid", pid], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,
                # not in the rank's process group: torchrun's SIGTERM to
                # the ranks would end it mid-dump (the launcher's guard
                # still ends it, a descendant, with the run)
                start_new_session=True)
        for r, p in procs.items():
            try:
                text = p.communicate(timeout=20)[0]
            except subprocess.TimeoutExpired:
                p.kill()
                text = p.communicate()[0]
            (folder / f"rank_{r}.txt").write_text(text)


def load_batch(slow: bool, sleep_s: float) -> None:
    """The data loader; the planted ``slow`` fault sleeps here."""
    if slow:
        time.sleep(sleep_s)


def step(i: int, a, rank: int, rec: Recorder, grad, params) -> None:
    import torch
    import torch.distributed as tdist
    planted = rank == a.culprit and i == a.at
    fault = a.fault if planted else "none"
    load_batch(fault == "slow", a.sleep_s)
    if fault == "dead":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "order":
        with rec.collective("broadcast"):
            tdist.broadcast(params, 0)
    if fault != "skip":
        g = torch.ones(grad.numel() + 1) if fault == "shape" else grad
        with rec.collective("all_reduce"):
            tdist.all_reduce(g)
    if fault != "order":
        with rec.collective("broadcast"):
            tdist.broadcast(params, 0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fault", choices=FAULTS, default="skip")
    p.add_argument("--culprit", type=int, default=1)
    p.add_argument("--at", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--numel", type=int, default=1024)
    p.add_argument("--timeout-s", type=float, default=3.0)
    p.add_argument("--stuck-s", type=float, default=None,
                   help="dump after this long in one collective "
                   "(default: a quarter of the timeout)")
    p.add_argument("--sleep-s", type=float, default=None,
                   help="the slow rank's sleep (default: 2 timeouts)")
    a = p.parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not 0 <= a.at < a.steps or not 0 <= a.culprit < world:
        p.error("--at must be a step of the run, --culprit a rank")
    if not a.timeout_s > 0:
        p.error("--timeout-s must be > 0")
    a.stuck_s = a.stuck_s or a.timeout_s / 4
    a.sleep_s = a.sleep_s or 2 * a.timeout_s
    os.environ.update(fr_env())
    import torch
    import torch.distributed as tdist

    from labkit import dist
    ctx = dist.init(timeout_s=a.timeout_s)
    run_dir = Path(os.environ.get("LABKIT_RUN_DIR", "."))
    store = tdist.distributed_c10d._get_default_store()
    rec = Recorder(run_dir, ctx.rank, ctx.world_size, store, a.stuck_s)
    # torchrun's agent stops the survivors of a dead rank with SIGTERM:
    # finish the dump and py-spy first, as NCCL's dump on an abort would
    signal.signal(signal.SIGTERM, lambda *_: (rec.finished.wait(10),
                                              rec.dump_fr(),
                                              os._exit(143)))
    tdist.barrier()
    grad = torch.ones(a.numel)
    params = torch.ones(a.numel)
    error, failed_step, t0 = None, None, time.monotonic()
    for i in range(a.steps):
        try:
            step(i, a, ctx.rank, rec, grad, params)
        except Exception as e:   # the timeout, a mismatch, a dead peer
            error, failed_step = str(e).splitlines()[0][:2000], i
            break
    waited = time.monotonic() - t0
    if error:
        rec.ask()
        rec.finished.wait(60)    # its dump, and the asker's py-spy
    rec.dump_fr()
    dist.save(ctx, {"fault": a.fault, "culprit": a.culprit, "at": a.at,
                    "error": error, "failed_step": failed_step,
                    "seconds": waited, "timeout_s": a.timeout_s,
                    "debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG", "")})
    os._exit(0)   # a broken group must not hang the exit


if __name__ == "__main__":
    main()
