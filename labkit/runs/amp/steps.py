"""Training steps through a loss scaler, shared by lab 14's single-process
run (:mod:`labkit.runs.precision`) and its FSDP run
(:mod:`labkit.runs.amp.dist`).
"""
from __future__ import annotations

import torch


def scaled_steps(model, opt, scaler, data, steps, autocast=False):
    """``steps`` fp16 steps through a loss scaler (``GradScaler`` or FSDP's
    ``ShardedGradScaler``): each step's scale, loss and whether the scaler
    skipped it (the scale dropped: an inf or NaN gradient)."""
    out = []
    for s in range(steps):
        x, y = data(s)
        with torch.autocast("cpu", torch.float16, enabled=autocast):
            loss = model(x, y)
        before = scaler.get_scale()
        scaler.scale(loss.float()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        out.append({"step": s, "scale": before, "loss": loss.item(),
                    "skipped": scaler.get_scale() < before})
    return out
