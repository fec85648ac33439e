"""A tiny distributed job for testing the launcher: all-reduce, then exit.

    torchrun --nproc-per-node 2 -m labkit.runs.tools.selftest --mode ok

``--mode crash`` makes rank ``--bad-rank`` raise; ``--mode hang`` makes it
sleep forever (so the launcher's timeout has something to kill). The other
ranks wait in a barrier, as real ranks would.
"""
import argparse
import os
import time

import torch
import torch.distributed as tdist

from labkit import dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ok", "crash", "hang"], default="ok")
    p.add_argument("--bad-rank", type=int, default=1)
    a = p.parse_args()
    ctx = dist.init()
    t = torch.tensor([ctx.rank + 1.0], device=ctx.device)
    tdist.all_reduce(t)
    if ctx.rank == a.bad_rank and a.mode == "crash":
        print(f"rank {ctx.rank} about to fail on purpose", flush=True)
        raise RuntimeError("selftest: deliberate crash on rank "
                           f"{ctx.rank}")
    if ctx.rank == a.bad_rank and a.mode == "hang":
        print(f"rank {ctx.rank} hanging on purpose", flush=True)
        while True:
            time.sleep(1)
    if a.mode == "ok":
        # the first PATH entry: the launcher puts the venv's bin there
        first = os.environ["PATH"].split(os.pathsep)[0]
        dist.save(ctx, {"sum": t.item(), "pid": os.getpid(),
                        "path_first": first, "cuda_visible":
                        os.environ.get("CUDA_VISIBLE_DEVICES")})
        dist.close()
    else:
        tdist.barrier()  # the healthy ranks wait, like in a real hang


if __name__ == "__main__":
    main()
