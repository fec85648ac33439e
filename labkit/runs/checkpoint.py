"""Train with FSDP2, checkpoint with DCP every k steps, survive a SIGKILL.

    torchrun --nproc-per-node 4 --max-restarts 1 -m labkit.runs.checkpoint \
        --ckpt-dir _build/checkpoints/resume --steps 8 --every 2 \
        --kill-rank 2 --kill-step 5 --reference

Every rank builds the tiny GPT from one seed, shards it with FSDP2
(``fully_shard``, ``labkit.training.wrap``) and trains ``--steps`` steps on batches
drawn by a :class:`Sampler` (a shuffled synthetic dataset with its own
generator). Every ``--every`` steps all ranks save one DCP checkpoint
(``torch.distributed.checkpoint.save``): the sharded model and optimizer
(DTensor state dicts), the step, the sampler's position and generator and
the RNG state, into ``step-NNNNNN.tmp``, renamed when complete
(``labkit.checkpoint``), with a checksum of every file. At start a run
loads the newest checkpoint in ``--ckpt-dir`` that verifies, if any, and
goes on from its step; a damaged one is named in rank 0's log, kept aside
as ``step-NNNNNN.corrupt`` and listed in ``damaged_checkpoints``.

``--kill-rank r --kill-step s``: in the first attempt only, rank ``r``
SIGKILLs itself in step ``s`` between backward and the optimizer step.
torchrun (``--max-restarts 1``) then stops the other ranks and starts
all of them again; the new attempt resumes from the last checkpoint.
Rank 0 appends one line per finished step to ``steps.jsonl`` in the run
folder (step, loss, attempt), so the test can see which steps were redone.
``--reference`` then trains the same run again from scratch, without a
kill, into ``<ckpt-dir>/../reference``: its losses are the uninterrupted
trajectory, and its one checkpoint, of the last step, is what
``labkit.runs.tools.reshard`` loads. Both runs also save the last step.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import time
from pathlib import Path

import torch
import torch.distributed as tdist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict,
                                                     get_state_dict,
                                                     set_state_dict)

from labkit import dist
from labkit.checkpoint import (_first_line, atomic_step_dir, check_meta,
                               latest_checkpoint, newest_good_checkpoint,
                               require_under_build)
from labkit.nn.model import (add_shape_arguments, batch, build,
                             check_shardable, config_from_args, local_batch)
from labkit.training.train import make_optimizer, mean_over_ranks
from labkit.training.wrap import wrap


class Sampler:
    """Shuffles ``size`` sequences each epoch; its position is its state."""

    def __init__(self, config, size: int, batch_size: int, seed: int):
        if size % batch_size:
            raise ValueError(f"dataset size {size} is not a multiple of the "
                             f"batch {batch_size}")
        x, y = batch(config, size, step=0, seed=seed)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch, self.offset = 0, 0
        self.order = torch.randperm(size, generator=self.generator)

    def next(self):
        if self.offset == len(self.order):
            self.epoch, self.offset = self.epoch + 1, 0
            self.order = torch.randperm(len(self.order),
                                        generator=self.generator)
        idx = self.order[self.offset:self.offset + self.batch_size]
        self.offset += self.batch_size
        return self.x[idx], self.y[idx]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset,
                "order": self.order.clone(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, sd: dict) -> None:
        self.epoch, self.offset = int(sd["epoch"]), int(sd["offset"])
        self.order = sd["order"].clone()
        self.generator.set_state(sd["generator"])


def app_state(model, opt, sampler, step: int) -> dict:
    """Everything a resume needs, as one DCP state dict."""
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd,
            "trainer": {"step": torch.tensor(step),
                        "sampler": sampler.state_dict(),
                        "rng": torch.get_rng_state()}}


def save(root: Path, model, opt, sampler, step: int, ctx, meta: dict,
         async_save: bool = False) -> dict:
    """One DCP checkpoint of ``step``; seconds blocked and seconds total."""
    state = app_state(model, opt, sampler, step)
    with atomic_step_dir(root, step, meta, ctx.rank == 0,
                         tdist.barrier) as tmp:
        t0 = time.perf_counter()
        if async_save:
            future = dcp.async_save(state, checkpoint_id=str(tmp))
            blocked = time.perf_counter() - t0
            future.result()
        else:
            dcp.save(state, checkpoint_id=str(tmp))
            blocked = time.perf_counter() - t0
        total = time.perf_counter() - t0
    return {"step": step, "blocked_s": blocked, "total_s": total}


def load(folder: Path, model, opt, sampler, meta: dict) -> int:
    """Load a checkpoint into the live model/optimizer/sampler; its step."""
    check_meta(folder, meta["model"])
    state = app_state(model, opt, sampler, 0)
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    sampler.load_state_dict(state["trainer"]["sampler"])
    torch.set_rng_state(state["trainer"]["rng"])
    return int(state["trainer"]["step"])


def loadable(folder: Path) -> str | None:
    """Why ``folder`` cannot be loaded, read by one process before the
    collective load (None: it can): DCP's metadata must unpickle and
    name the model, the optimizer and the trainer's state."""
    try:
        md = dcp.FileSystemReader(str(folder)).read_metadata()
    except Exception as e:  # noqa: BLE001 -- any unpickling error
        return f"its DCP metadata cannot be read ({_first_line(e)})"
    keys = {k.split(".", 1)[0] for k in md.state_dict_metadata}
    missing = {"model", "optim", "trainer"} - keys
    return f"it holds no {', '.join(sorted(missing))} state" if missing \
        else None


def adam_steps(opt) -> list[int]:
    """Adam's own step counter of every parameter (applied updates)."""
    return sorted({int(s["step"]) for s in opt.state.values()})


def probe(model, sampler, ctx, folder: Path) -> float:
    """The next batch's loss, without training, and the gathered weights
    in ``params-<world size>.pt``: what a resharded load must reproduce."""
    with torch.no_grad():
        x, y = local_batch(*sampler.next(), ctx.rank, ctx.world_size)
        loss = mean_over_ranks(model(x.to(ctx.device), y.to(ctx.device)))
    full = get_model_state_dict(model, options=StateDictOptions(
        full_state_dict=True, cpu_offload=True))
    if ctx.rank == 0:
        torch.save(full, Path(folder) / f"params-{ctx.world_size}.pt")
    return loss


def train(root: Path, config, ctx, a, kill: bool, log: Path | None,
          every: int) -> dict:
    root = require_under_build(root)
    meta = {"model": dict(vars(config)), "world_size": ctx.world_size}
    model = wrap(build(config, a.seed), "fsdp2_full", ctx)
    opt = make_optimizer(model)
    sampler = Sampler(config, a.dataset, a.batch, a.seed)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    start, resumed_from, bad = 0, None, []
    if ctx.rank == 0:   # sets damaged checkpoints aside, then all look
        _, bad = newest_good_checkpoint(root, loadable=loadable)
    tdist.barrier()
    found = latest_checkpoint(root)
    if found:
        start = load(found[1], model, opt, sampler, meta)
        resumed_from = start
    losses, saves = {}, []
    for step in range(start, a.steps):
        x, y = local_batch(*sampler.next(), ctx.rank, ctx.world_size)
        opt.zero_grad(set_to_none=True)
        loss = model(x.to(ctx.device), y.to(ctx.device))
        loss.backward()
        if kill and attempt == 0 and ctx.rank == a.kill_rank \
                and step == a.kill_step:
            os.kill(os.getpid(), signal.SIGKILL)   # mid-step: no goodbye
        opt.step()
        losses[step] = mean_over_ranks(loss)
        if log is not None and ctx.rank == 0:
            with open(log, "a") as f:
                f.write(json.dumps({"step": step, "loss": losses[step],
                                    "attempt": attempt}) + "\n")
        if (step + 1) % every == 0 or step + 1 == a.steps:
            saves.append(save(root, model, opt, sampler, step + 1, ctx, meta,
                              async_save=a.async_save))
    next_loss = probe(model, sampler, ctx, root)
    out = {"losses": losses, "resumed_from": resumed_from,
           "attempt": attempt, "saves": saves, "next_loss": next_loss,
           "damaged_checkpoints": bad,
           "adam_steps": adam_steps(opt)}
    del model, opt
    dist.release(ctx)
    return out


def init_attempt(timeout_s: float):
    """Join the process group under a store prefix unique to this attempt.

    torchrun's static rendezvous keeps one TCPStore across restarts; the
    keys the first attempt's ranks left there (gloo's addresses) would send
    the second attempt to dead peers. A prefix per attempt
    (``TORCHELASTIC_RESTART_COUNT``) keeps the attempts apart, as the c10d
    rendezvous backend does by itself.
    """
    from datetime import timedelta
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt and not tdist.is_initialized():
        store = tdist.TCPStore(os.environ["MASTER_ADDR"],
                               int(os.environ["MASTER_PORT"]),
                               is_master=False,
                               timeout=timedelta(seconds=timeout_s))
        tdist.init_process_group(
            os.environ.get("LABKIT_BACKEND", "gloo"),
            store=tdist.PrefixStore(f"attempt-{attempt}", store),
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=timedelta(seconds=timeout_s))
    return dist.init(timeout_s=timeout_s)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--every", type=int, default=2)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--reference", action="store_true")
    p.add_argument("--async-save", action="store_true")
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--dataset", type=int, default=32,
                   help="sequences per epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    add_shape_arguments(p)
    a = p.parse_args(argv)
    if a.steps < 1 or a.every < 1:
        p.error("--steps and --every must be >= 1")
    if a.kill_rank >= 0 and not 0 <= a.kill_step < a.steps:
        p.error("--kill-step must be a step of the run")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    config = config_from_args(a)
    ctx = init_attempt(a.timeout_s)
    check_shardable(config, ctx.world_size)
    if a.batch % ctx.world_size:
        raise ValueError(f"global batch {a.batch} does not divide by world "
                         f"size {ctx.world_size}")
    root = Path(a.ckpt_dir)
    run_dir = Path(os.environ.get("LABKIT_RUN_DIR", "."))
    run = train(root, config, ctx, a, kill=a.kill_rank >= 0,
                log=run_dir / "steps.jsonl", every=a.every)
    ref = None
    if a.reference:   # a fresh folder: the uninterrupted run starts at 0
        if ctx.rank == 0:
            shutil.rmtree(root.parent / "reference", ignore_errors=True)
        tdist.barrier()
        ref = train(root.parent / "reference", config, ctx, a, kill=False,
                    log=None, every=a.steps)  # its last step only
    dist.save(ctx, {"run": run, "reference": ref, "config": vars(a)})
    dist.close()


if __name__ == "__main__":
    main()
