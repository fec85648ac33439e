"""Smoke-test a build-it from the notebook: one rank here, then real ranks.

    from labkit import buildit
    buildit.smoke("zero", ShardedAdam)          # 1 rank in this kernel,
                                                # then 2 real ranks
    buildit.smoke("zero", ShardedAdam, ranks=False)   # the kernel only
    buildit.smoke("zero", ShardedAdam, run_dir="zero-run")  # keep the run

Why two steps
-------------
``buildit.run`` copies the cell to real ranks; an exception there comes
back as one line ("your line 12: ...") and the ranks' prints stay in
their logs. Most first bugs (a wrong shape, a name error, a hook that
never fires) need no second rank to show, and are easier to find where
the student is: so ``smoke`` first runs the *same harness* on a one-rank
gloo group inside the kernel, on the student's live objects. Prints show
in the cell, an exception keeps its full traceback (``%debug`` works),
and the table of checks is the one-rank run's (with one rank, ZeRO's
shard is the whole model and a pipeline has one stage: it tests the code
path, not the distribution). Then, unless ``ranks=False``, it launches
the real run as ``buildit.run`` does, in ``run_dir`` (a new folder, kept;
a temporary one by default, named in the output), and when that run
fails it prints the student's line and the end of each rank's log, the
student's prints included (``tails``).

The one-rank group is made here and destroyed after (a kernel that
already has a process group keeps it and is refused: one line).
"""
from __future__ import annotations

import tempfile
import types
from pathlib import Path

TAIL_LINES = 15


def _one_rank(h, lab: str, objs, config: dict | None) -> dict:
    import torch
    import torch.distributed as tdist

    from labkit.dist import Context
    if tdist.is_initialized():
        raise RuntimeError("buildit.smoke makes its own one-rank group: this "
                           "kernel already has a process group (restart "
                           "the kernel, or call buildit.run)")
    mod = types.SimpleNamespace(**{o.__name__: o for o in objs})
    mod.__name__ = getattr(objs[0], "__module__", None) if objs else None
    cfg = {**h.CONFIG, **(config or {})}
    tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0,
                             world_size=1)
    try:
        ctx = Context(rank=0, world_size=1, local_rank=0, backend="gloo",
                      device=torch.device("cpu"))
        with torch.random.fork_rng():   # the kernel's RNG stays as it was
            try:
                got = h.rank_run(ctx, mod, cfg)
            except Exception as e:
                e.add_note(f"(buildit.smoke: your code raised this on a "
                           f"one-rank run of {lab!r} in this kernel; the "
                           "traceback's last frames in your cell are "
                           "your line)")
                raise
    finally:
        tdist.destroy_process_group()
    return {"lab": lab, "config": cfg, "source": None, "error": None,
            "ranks": [got]}


def tails(run_dir, lines: int = TAIL_LINES) -> dict[int, str]:
    """The last ``lines`` lines of each rank's stdout and stderr in a run
    folder (``buildit.run(..., run_dir=...)``), by rank."""
    from labkit.launch.report import rank_logs
    out = {}
    for rank, files in sorted(rank_logs(Path(run_dir)).items()):
        text = []
        for f in files:
            got = f.read_text(errors="replace").splitlines()[-lines:]
            if got:
                text.append(f"[{f.stem}]\n" + "\n".join(got))
        out[rank] = "\n".join(text) or "(empty)"
    return out


def smoke(buildit, lab: str, *objs, ranks: bool = True, run_dir=None,
          config: dict | None = None) -> dict:
    """Run part ``lab`` on ``objs`` on one rank in this kernel, then (unless
    ``ranks=False``) on real ranks in ``run_dir``; show each run's checks
    and, for a failed real run, each rank's log tail. Returns the last
    run's result (``buildit.run``'s dict). A part whose harness sets
    ``NO_ONE_RANK`` (the reason: a ring needs a peer) skips the one-rank
    run and says why. ``buildit``: the package whose ``harness``, ``run``,
    ``show`` and ``LABS`` it calls (passed in, so this module never
    imports its package: no import circle)."""
    why_not = getattr(buildit.harness(lab), "NO_ONE_RANK", None)
    if why_not:   # a part that needs a peer (a ring) has no one-rank run
        print(f"one rank, in this kernel ({lab}): not run: {why_not}")
        result = None
    else:
        result = _one_rank(buildit.harness(lab), lab, objs, config)
        print(f"one rank, in this kernel ({lab}): your code ran")
        buildit.show(result)
    if not ranks:
        return result
    run_dir = Path(run_dir or tempfile.mkdtemp(prefix=f"buildit-{lab}-"))
    n = buildit.LABS[lab]
    # the launch runs ranks unbuffered: their prints are in the logs
    result = buildit.run(lab, *objs, config=config, run_dir=run_dir)
    print(f"\n{n} real ranks ({lab}), run folder {run_dir}:")
    if result.get("error"):
        print(f"the run failed: {result['error']}")
        for rank, text in tails(run_dir).items():
            print(f"\n--- rank {rank}, end of its log ---\n{text}")
    buildit.show(result)
    return result
