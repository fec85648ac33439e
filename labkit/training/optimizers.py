"""Optimizers over FSDP2's sharded parameters (chapter 19).

    from labkit.training.optimizers import make, ShardedMuon
    opts = make("muon", model)            # Muon + AdamW, as Jordan's recipe
    opts = make("adamw8bit", model)       # bitsandbytes, on the shards
    opt = ShardedMuon(matrices, mode="dealt")   # Muon's whole-matrix step

``fully_shard`` turns every parameter into a ``DTensor`` split along
dim 0. ``torch.optim.AdamW`` and ``torch.optim.Muon`` take DTensors as
they are. ``torch.optim.Adafactor`` (torch 2.13) does not: its variance
norm is a partial DTensor that an in-place ``pow_`` cannot keep; and
bitsandbytes' 8-bit kernels are custom operators DTensor has no rule for.
:class:`ShardLocal` gives both what ZeRO gives an optimizer: the rank's
own rows as plain tensors (the same storage), their gradients beside them.
Adafactor's factors are then those of the shard (its column factor sums
the rank's rows only, a per-shard approximation of Shazeer & Stern's).

:class:`ShardedMuon` is ``torch.optim.Muon`` with the matrix put back
together explicitly (``labkit.predict.optimizers`` counts both ways):
``gather`` all-gathers every update (Liu et al. 2025, Sec. 2.3), ``dealt``
gathers matrix ``i`` to rank ``i mod N``, which alone orthogonalises it
and scatters the rows back. Its momentum stays on the shard, as the
elementwise work does; only Newton-Schulz needs the whole matrix.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz

from labkit.predict.optimizers import OPTIMIZERS, owner

LR = {"adamw": 3e-3, "adafactor": 1e-2, "adamw8bit": 3e-3, "muon": 2e-2}


def local(t: torch.Tensor) -> torch.Tensor:
    """The rank's rows of ``t`` (a DTensor) or ``t`` itself, same storage."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


class ShardLocal:
    """``opt_cls`` over the rank's shards of ``params``: its state is the
    shard's; ``step`` hands it the shard's gradient first."""

    def __init__(self, opt_cls, params, **kw):
        self.params = list(params)
        self.shards = [local(p.detach()) for p in self.params]
        self.opt = opt_cls(self.shards, **kw)
        self.state = self.opt.state

    @torch.no_grad()
    def step(self):
        for p, s in zip(self.params, self.shards):
            s.grad = None if p.grad is None else local(p.grad)
        self.opt.step()

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None


class ShardedMuon(torch.optim.Muon):
    """``torch.optim.Muon`` whose Newton-Schulz sees whole matrices although
    each rank holds rows (``mode``: ``gather`` or ``dealt``)."""

    def __init__(self, params, mode: str = "gather", **kw):
        if mode not in ("gather", "dealt"):
            raise ValueError(f"mode must be 'gather' or 'dealt', got "
                             f"{mode!r}")
        super().__init__(params, **kw)
        self.mode = mode

    @torch.no_grad()
    def step(self, closure=None):
        rank, w = (dist.get_rank(), dist.get_world_size()) \
            if dist.is_initialized() else (0, 1)
        i = 0
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                grad, rows = local(p.grad), local(p)
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(grad)
                buf = state["momentum_buffer"]
                buf.lerp_(grad, 1 - g["momentum"])
                upd = grad.lerp(buf, g["momentum"]) if g["nesterov"] \
                    else buf
                ns = (lambda x: _zeropower_via_newtonschulz(
                    x, g["ns_coefficients"], g["ns_steps"], g["eps"]))
                upd = whole(upd.contiguous(), ns, self.mode, owner(i, w),
                            rank, w)
                lr = _adjust_lr(g["lr"], g["adjust_lr_fn"], p.shape)
                rows.mul_(1 - g["lr"] * g["weight_decay"])
                rows.add_(upd.to(rows.dtype), alpha=-lr)
                i += 1


def whole(rows: torch.Tensor, ns, mode: str, root: int, rank: int,
          w: int) -> torch.Tensor:
    """``ns`` of the whole matrix whose ``rows`` this rank holds; this
    rank's rows of the result."""
    if w == 1:
        return ns(rows)
    if mode == "gather":
        full = rows.new_empty((w * rows.shape[0], *rows.shape[1:]))
        dist.all_gather_into_tensor(full, rows)
        return ns(full).float().chunk(w)[rank].contiguous()
    parts = [torch.empty_like(rows) for _ in range(w)] \
        if rank == root else None
    dist.gather(rows, parts, dst=root)
    out = torch.empty_like(rows)
    chunks = None
    if rank == root:
        chunks = [c.contiguous() for c in
                  ns(torch.cat(parts)).float().chunk(w)]
    dist.scatter(out, chunks, src=root)
    return out


def split(model: torch.nn.Module) -> tuple[list, list]:
    """Muon's hidden matrices, and the rest (embeddings, the output layer,
    every vector) that AdamW takes (Jordan et al. 2024)."""
    mats, rest = [], []
    for name, p in model.named_parameters():
        hidden = name.startswith("blocks.") and p.ndim == 2
        (mats if hidden else rest).append(p)
    return mats, rest


def make(name: str, model: torch.nn.Module, mode: str | None = None,
         lr: float | None = None) -> list:
    """The optimizers that train ``model`` under ``name``
    (:data:`labkit.predict.optimizers.OPTIMIZERS`): one, or Muon and
    AdamW; ``mode`` picks :class:`ShardedMuon` over ``torch.optim.Muon``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}")
    lr = lr or LR[name]
    params = list(model.parameters())
    if name == "adamw":
        return [torch.optim.AdamW(params, lr=lr, weight_decay=0.0)]
    if name == "adafactor":
        return [ShardLocal(torch.optim.Adafactor, params, lr=lr,
                           weight_decay=0.0)]
    if name == "adamw8bit":
        import bitsandbytes as bnb
        return [ShardLocal(bnb.optim.AdamW8bit, params, lr=lr,
                           weight_decay=0.0)]
    mats, rest = split(model)
    muon = ShardedMuon(mats, mode=mode, lr=lr, weight_decay=0.0) if mode \
        else torch.optim.Muon(mats, lr=lr, weight_decay=0.0)
    return [muon, torch.optim.AdamW(rest, lr=LR["adamw"], weight_decay=0.0)]
