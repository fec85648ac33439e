"""DeepSpeed bf16 with fp32 master weights, for :mod:`labkit.runs.precision`.

    torchrun --nproc-per-node 4 -m labkit.runs.precision \
        --parts deepspeed

ZeRO-3 (every parameter partitioned, none kept whole: the
``zero3_no_persist`` variant of :mod:`labkit.predict.zero`) with
``"bf16": {"enabled": true}`` and a torch AdamW: one step, then the bytes
each rank holds by category (:func:`labkit.measure.zero.state.state_bytes`:
bf16 weight partitions, gradients, the fp32 master partition and Adam's
moments) and the dtypes DeepSpeed reports for its weights and gradient
accumulation. DeepSpeed runs on CPU as lab 4 runs it (its shared-memory op
switched off, :func:`labkit.runs.zero.skip_shm_op`).
"""
from __future__ import annotations

import torch

from labkit.nn.model import build_arch


def deepspeed_bf16(a, args, ctx, data) -> dict:
    import deepspeed

    from labkit.measure.zero.state import state_bytes
    from labkit.runs.zero import skip_shm_op
    from labkit.predict.zero import variant
    skip_shm_op()   # never used in training; spares its JIT build
    cfg = variant("zero3_no_persist", world_size=ctx.world_size,
                  micro_batch=args.micro_batch, precision="bf16", lr=1e-3)
    model = build_arch(a, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt,
                                      config=cfg.to_json())
    x, y = data(0)
    loss = engine(x, y)
    engine.backward(loss)
    engine.step()
    held = state_bytes(engine)
    kinds = {k: sum(held[k].values()) for k in ("params", "grads",
                                                "optimizer")}
    dtypes = engine.get_data_types()
    return {"held": kinds, "master": held["master"],
            "param_dtype": str(dtypes[0]), "grad_accum_dtype":
            str(dtypes[1]), "loss": loss.item(),
            "optimizer_class": type(engine.optimizer).__name__}
