"""Tensor parallelism of one transformer block, checked against the original.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --variants scratch,dtensor,wrong_split

Every rank builds the same block of the course's GPT (``labkit.model.Block``:
LayerNorm, causal self-attention, LayerNorm, GELU MLP, residuals) from one
seed, runs it unsharded as the reference, and then runs a tensor-parallel
version of it over all ranks, Megatron-style (Shoeybi et al. 2019, Sec. 3):

- ``scratch``: column- and row-parallel linear layers written here with
  ``torch.distributed.all_reduce`` and the two operators ``f`` (identity
  forward, all-reduce backward) and ``g`` (all-reduce forward, identity
  backward); the fused QKV weight is split by heads.
- ``dtensor``: the same split with PyTorch's ``parallelize_module``,
  ``ColwiseParallel`` on separate Q, K, V projections and the MLP's first
  layer, ``RowwiseParallel`` on the two output projections.
- ``wrong_split``: ``ColwiseParallel`` on the *fused* QKV layer, as one
  would naively write it. The fused weight ``[3h, h]`` is cut into
  contiguous row blocks, so rank 0 gets all of Q and part of K instead of
  the Q, K and V of its own heads. Every shape still fits: no error, wrong
  numbers. The check below catches it.
- ``no_comm``: the scratch split with its collectives switched off (wrong
  numbers), to time the computation alone.
- ``megatron`` (optional, needs ``megatron-core``): the same split with
  megatron-core's ``ColumnParallelLinear`` / ``RowParallelLinear``, which
  run on CPU with gloo when built with ``use_cpu_initialization=True``.

For each variant the record holds the largest differences to the reference
(output, input gradient, every parameter gradient reassembled from the
shards, the parameters after one SGD step, and the output after it), the
collectives of one forward and one backward pass counted by
:class:`labkit.measure.collectives.CollectiveCounter`, and the median time
of a forward + backward pass.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.distributed as tdist
import torch.nn as nn
import torch.nn.functional as F

from labkit import device as D
from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.model import GPTConfig, build

VARIANTS = ("scratch", "dtensor", "wrong_split", "no_comm", "megatron")
SCRATCH_LAYOUT = ("scratch", "no_comm", "megatron")  # same shards
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
STEP = 0.1  # SGD update / parameters (RMS) of the after-step check


# --------------------------------------------------------------------------
# From scratch: the f and g operators and the two parallel linear layers
# --------------------------------------------------------------------------

class _F(torch.autograd.Function):
    """``f``: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.comm:
            grad = grad.contiguous().clone()
            tdist.all_reduce(grad)
        return grad, None


class _G(torch.autograd.Function):
    """``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, comm):
        x = x.contiguous().clone()
        if comm:
            tdist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ColumnParallelLinear(nn.Module):
    """``y_r = x W_r^T + b_r``: this rank's slice of the output features."""

    def __init__(self, weight, bias):
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """``y = sum_r x_r W_r^T + b``: partial sums, reduced by ``g``."""

    def __init__(self, weight, bias, comm=True):
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())  # added once, after the sum
        self.comm = comm

    def forward(self, x):
        return _G.apply(F.linear(x, self.weight), self.comm) + self.bias


class LocalAttention(nn.Module):
    """Causal self-attention over the heads whose Q, K, V this rank holds.

    ``qkv`` (fused, output ``[q | k | v]``) or separate ``q``, ``k``, ``v``
    projections; the number of local heads is read from the local width,
    as tensor-parallel code must (torchtitan does the same).
    """

    def __init__(self, head_dim, proj, qkv=None, q=None, k=None, v=None,
                 f=None):
        super().__init__()
        self.head_dim = head_dim
        self.qkv, self.q, self.k, self.v, self.proj = qkv, q, k, v, proj
        self.f = f  # the f operator before the column-parallel layer

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        if self.f is not None:
            x = self.f(x)
        if self.qkv is not None:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        heads = q.shape[-1] // self.head_dim
        q, k, v = (t.reshape(b, s, heads, self.head_dim).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class LocalMLP(nn.Module):
    def __init__(self, fc, proj, f=None):
        super().__init__()
        self.fc, self.proj, self.f = fc, proj, f

    def forward(self, x):
        if self.f is not None:
            x = self.f(x)
        return self.proj(F.gelu(self.fc(x)))


class TPBlock(nn.Module):
    """The pre-LayerNorm block; LayerNorms replicated, the rest split."""

    def __init__(self, ln1, attn, ln2, mlp):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = ln1, attn, ln2, mlp

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _FOp(nn.Module):
    def __init__(self, comm):
        super().__init__()
        self.comm = comm

    def forward(self, x):
        return _F.apply(x, self.comm)


def qkv_rows(hidden: int, heads: int, rank: int, tp: int) -> torch.Tensor:
    """Rows of the fused ``[3h, h]`` QKV weight that belong to this rank.

    The weight is ``[q; k; v]``, each ``[heads x head_dim, h]``: rank ``r``
    owns heads ``r a/t .. (r+1) a/t - 1`` of each of q, k and v. Viewed as
    ``[3, a, d, h]`` the split is along axis 1 (heads), not axis 0.
    """
    d = hidden // heads
    per = heads // tp
    heads_rows = torch.arange(rank * per * d, (rank + 1) * per * d)
    return torch.cat([heads_rows + i * hidden for i in range(3)])


def scratch_block(ref, heads: int, rank: int, tp: int, comm=True) -> TPBlock:
    """Shard ``ref`` (a ``labkit.model.Block``) by hand for this rank."""
    h = ref.ln1.normalized_shape[0]
    a, m = ref.attn, ref.mlp
    rows = qkv_rows(h, heads, rank, tp)
    cols = slice(rank * h // tp, (rank + 1) * h // tp)
    width = m.fc.out_features
    fcs = slice(rank * width // tp, (rank + 1) * width // tp)
    with torch.no_grad():
        qkv = ColumnParallelLinear(a.qkv.weight[rows], a.qkv.bias[rows])
        proj = RowParallelLinear(a.proj.weight[:, cols], a.proj.bias, comm)
        fc = ColumnParallelLinear(m.fc.weight[fcs], m.fc.bias[fcs])
        out = RowParallelLinear(m.proj.weight[:, fcs], m.proj.bias, comm)
    attn = LocalAttention(h // heads, proj, qkv=qkv, f=_FOp(comm))
    mlp = LocalMLP(fc, out, f=_FOp(comm))
    return TPBlock(copy.deepcopy(ref.ln1), attn, copy.deepcopy(ref.ln2), mlp)


def scratch_full_grads(block: TPBlock, heads: int, tp: int) -> dict:
    """Reassemble the full gradients, named as in the reference block."""
    def gather(t, dim):
        parts = [torch.empty_like(t) for _ in range(tp)]
        tdist.all_gather(parts, t.contiguous())
        return parts if dim is None else torch.cat(parts, dim)

    a, m = block.attn, block.mlp
    h = block.ln1.normalized_shape[0]
    per_rank = [p.view(3, h // tp, *p.shape[1:])
                for p in gather(a.qkv.weight.grad, None)]
    qkv_w = torch.cat([torch.cat([p[i] for p in per_rank]) for i in range(3)])
    per_rank = [p.view(3, h // tp) for p in gather(a.qkv.bias.grad, None)]
    qkv_b = torch.cat([torch.cat([p[i] for p in per_rank]) for i in range(3)])
    out = {"attn.qkv.weight": qkv_w, "attn.qkv.bias": qkv_b,
           "attn.proj.weight": gather(a.proj.weight.grad, 1),
           "attn.proj.bias": a.proj.bias.grad,
           "mlp.fc.weight": gather(m.fc.weight.grad, 0),
           "mlp.fc.bias": gather(m.fc.bias.grad, 0),
           "mlp.proj.weight": gather(m.proj.weight.grad, 1),
           "mlp.proj.bias": m.proj.bias.grad}
    for name in ("ln1", "ln2"):
        for p in ("weight", "bias"):
            out[f"{name}.{p}"] = getattr(getattr(block, name), p).grad
    return out


# --------------------------------------------------------------------------
# With megatron-core (optional)
# --------------------------------------------------------------------------

def megatron_available() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:
        return False


class _MegatronLinear(nn.Module):
    """megatron-core returns ``(output, bias)``; keep the output only."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    @property
    def weight(self):
        return self.inner.weight

    @property
    def bias(self):
        return self.inner.bias

    def forward(self, x):
        return self.inner(x)[0]


def megatron_block(ref, heads: int, rank: int, tp: int) -> TPBlock:
    """The scratch split with megatron-core's parallel linear layers.

    Column-parallel layers run ``f`` inside (the backward all-reduce of the
    input gradient), row-parallel ones ``g`` (``input_is_parallel=True``).
    The shards are the scratch variant's, copied in after construction.
    """
    from megatron.core import parallel_state
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.tensor_parallel import (ColumnParallelLinear,
                                               RowParallelLinear)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp)
    dtype = ref.ln1.weight.dtype
    cfg = ModelParallelConfig(tensor_model_parallel_size=tp,
                              use_cpu_initialization=True,
                              params_dtype=dtype)
    h = ref.ln1.normalized_shape[0]
    width = ref.mlp.fc.out_features
    shards = scratch_block(ref, heads, rank, tp)

    def column(n_in, n_out, src):
        lin = ColumnParallelLinear(n_in, n_out, config=cfg,
                                   init_method=nn.init.zeros_, bias=True,
                                   gather_output=False)
        return _load(lin, src)

    def row(n_in, n_out, src):
        lin = RowParallelLinear(n_in, n_out, config=cfg,
                                init_method=nn.init.zeros_, bias=True,
                                input_is_parallel=True, skip_bias_add=False)
        return _load(lin, src)

    def _load(lin, src):
        lin = lin.to(device=ref.ln1.weight.device)
        with torch.no_grad():
            lin.weight.copy_(src.weight)
            lin.bias.copy_(src.bias)
        return _MegatronLinear(lin)

    a, m = shards.attn, shards.mlp
    attn = LocalAttention(h // heads, row(h, h, a.proj),
                          qkv=column(h, 3 * h, a.qkv))
    mlp = LocalMLP(column(h, width, m.fc), row(width, h, m.proj))
    return TPBlock(shards.ln1, attn, shards.ln2, mlp)


# --------------------------------------------------------------------------
# With DTensor: parallelize_module
# --------------------------------------------------------------------------

def dtensor_block(ref, heads: int, mesh, fused_qkv: bool) -> TPBlock:
    """Split ``ref`` with ``parallelize_module`` (Colwise / Rowwise)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   PrepareModuleInput,
                                                   RowwiseParallel,
                                                   parallelize_module)
    h = ref.ln1.normalized_shape[0]
    a = ref.attn
    if fused_qkv:
        attn = LocalAttention(h // heads, copy.deepcopy(a.proj),
                              qkv=copy.deepcopy(a.qkv))
    else:
        lin = []
        for i in range(3):  # the block's device and dtype (bf16 too)
            q = nn.Linear(h, h, device=a.qkv.weight.device,
                          dtype=a.qkv.weight.dtype)
            with torch.no_grad():
                q.weight.copy_(a.qkv.weight[i * h:(i + 1) * h])
                q.bias.copy_(a.qkv.bias[i * h:(i + 1) * h])
            lin.append(q)
        attn = LocalAttention(h // heads, copy.deepcopy(a.proj),
                              q=lin[0], k=lin[1], v=lin[2])
    block = TPBlock(copy.deepcopy(ref.ln1), attn, copy.deepcopy(ref.ln2),
                    LocalMLP(copy.deepcopy(ref.mlp.fc),
                             copy.deepcopy(ref.mlp.proj)))
    # The attention input becomes one replicated DTensor, so the gradients
    # of Q, K and V are summed before a single all-reduce (the f operator).
    plan = {"attn": PrepareModuleInput(input_layouts=(Replicate(),),
                                       desired_input_layouts=(Replicate(),),
                                       use_local_output=False),
            "attn.proj": RowwiseParallel(),
            "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}
    if fused_qkv:
        plan["attn.qkv"] = ColwiseParallel()
    else:
        plan.update({f"attn.{n}": ColwiseParallel() for n in "qkv"})
    return parallelize_module(block, mesh, plan)


def dtensor_full_grads(block: TPBlock) -> dict:
    def full(t):
        return t.full_tensor() if hasattr(t, "full_tensor") else t

    g = {n: full(p.grad) for n, p in block.named_parameters()}
    if "attn.qkv.weight" not in g:
        for p in ("weight", "bias"):
            g[f"attn.qkv.{p}"] = torch.cat(
                [g.pop(f"attn.{n}.{p}") for n in "qkv"])
    return g


def full_params(block: TPBlock, variant: str, heads: int, tp: int) -> dict:
    """The parameters, reassembled like the gradients are."""
    for p in block.parameters():  # the gradient helpers read .grad
        p.grad = p.detach().clone()
    return (scratch_full_grads(block, heads, tp)
            if variant in SCRATCH_LAYOUT else dtensor_full_grads(block))


# --------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------

def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def step_lr(params: dict, grads: dict, step: float) -> float:
    """The SGD learning rate whose update is ``step`` x the parameters (RMS).

    ``lr = step * ||theta|| / ||g||``: the update ``lr g`` has the norm
    ``step ||theta||`` whatever the size of the loss, so the output after
    the step moves by a fraction of order ``step`` (big enough to show an
    update applied wrongly on a shard) while the weights stay of the same
    size (a fixed lr on the summed loss grows them with h, s and b, and the
    rounding of the step with them). The same on every rank: computed from
    the reference block, which every rank holds.
    """
    def norm(ts):
        return torch.cat([t.detach().float().flatten() for t in ts]).norm()

    names = list(grads)
    return (step * norm(params[n] for n in names)
            / norm(grads[n] for n in names)).item()


def run_variant(variant, ref_state, ref_out, ref_grads, ref_xgrad,
                ref_after, ref_out2, cfg, x, w, x2, lr, ctx, mesh,
                timing_steps) -> dict:
    from labkit.model import Block
    tp, rank = ctx.world_size, ctx.rank
    ref = Block(cfg).to(device=x.device, dtype=x.dtype)
    ref.load_state_dict(ref_state)
    if variant in ("scratch", "no_comm"):
        block = scratch_block(ref, cfg.heads, rank, tp,
                              comm=variant == "scratch")
    elif variant == "megatron":
        block = megatron_block(ref, cfg.heads, rank, tp)
    else:
        block = dtensor_block(ref, cfg.heads, mesh,
                              fused_qkv=variant == "wrong_split")
    xin = x.clone().requires_grad_(True)
    with CollectiveCounter() as fwd:
        out = block(xin)
        loss = (out * w).sum()
    with CollectiveCounter() as bwd:
        loss.backward()
    grads = (scratch_full_grads(block, cfg.heads, tp)
             if variant in SCRATCH_LAYOUT else dtensor_full_grads(block))
    grad_diff = {n: max_diff(g, ref_grads[n]) for n, g in grads.items()}
    opt = torch.optim.SGD(block.parameters(), lr=lr)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        out2 = block(x2)
    after = full_params(block, variant, cfg.heads, tp)
    param_diff = {n: max_diff(p, ref_after[n]) for n, p in after.items()}
    times = []
    for _ in range(timing_steps):
        xi = x.clone().requires_grad_(True)
        D.sync(ctx.device)
        tdist.barrier()
        t0 = time.perf_counter()
        (block(xi) * w).sum().backward()
        D.sync(ctx.device)
        times.append(time.perf_counter() - t0)
        block.zero_grad(set_to_none=True)
    scale = ref_out.float().abs().max().item()
    return {
        "variant": variant,
        "out_diff": max_diff(out, ref_out),
        "out_scale": scale,
        "xgrad_diff": max_diff(xin.grad, ref_xgrad),
        "grad_diff": grad_diff,
        "grad_scale": max(g.float().abs().max().item()
                          for g in ref_grads.values()),
        "param_diff_after_step": param_diff,
        "out_diff_after_step": max_diff(out2, ref_out2),
        "out2_scale": ref_out2.float().abs().max().item(),
        "comm_forward": fwd.summary(),
        "comm_backward": bwd.summary(),
        "local_params": sum(p.to_local().numel() if hasattr(p, "to_local")
                            else p.numel() for p in block.parameters()),
        "seconds_fwd_bwd": times,
        "seconds_fwd_bwd_median": statistics.median(times) if times else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="scratch,dtensor,wrong_split")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4, help="micro-batch")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--step", type=float, default=STEP,
                    help="SGD update / parameters, in RMS (see step_lr)")
    ap.add_argument("--timing-steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    variants = a.variants.split(",")
    bad = set(variants) - set(VARIANTS)
    if bad:
        raise SystemExit(f"unknown variants {sorted(bad)}: {VARIANTS}")
    if "megatron" in variants and not megatron_available():
        raise SystemExit("variant megatron needs megatron-core installed")
    ctx = dist.init()
    tp = ctx.world_size
    if a.heads % tp or a.hidden % a.heads:
        raise SystemExit(f"heads {a.heads} must divide by tp {tp} and "
                         f"hidden {a.hidden} by heads")
    # exact fp32 matmuls for the check (flags only: harmless on CPU)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = DTYPES[a.dtype]
    cfg = GPTConfig(vocab=8, seq=a.seq, layers=1, hidden=a.hidden,
                    heads=a.heads)
    # The reference: block 0 of the course's GPT, biases and LayerNorms
    # perturbed so that a bias added twice (or not at all) would show.
    ref = build(cfg, seed=a.seed).blocks[0]
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    ref = ref.to(device=ctx.device, dtype=dtype)
    x = torch.randn(a.batch, a.seq, a.hidden, generator=g).to(ctx.device,
                                                              dtype)
    w = torch.randn(a.batch, a.seq, a.hidden, generator=g).to(ctx.device,
                                                              dtype)
    x2 = torch.randn(a.batch, a.seq, a.hidden, generator=g).to(ctx.device,
                                                               dtype)
    ref_state = copy.deepcopy(ref.state_dict())
    xr = x.clone().requires_grad_(True)
    ref_out = ref(xr)
    (ref_out * w).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
    lr = step_lr(ref_state, ref_grads, a.step)
    with torch.no_grad():
        ref_out2_before = ref(x2)
    torch.optim.SGD(ref.parameters(), lr=lr).step()
    ref_after = {n: p.detach().clone() for n, p in ref.named_parameters()}
    with torch.no_grad():
        ref_out2 = ref(x2)
    step_effect = (max_diff(ref_out2, ref_out2_before)
                   / ref_out2.float().abs().max().item())
    mesh = None
    if any(v in ("dtensor", "wrong_split") for v in variants):
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(ctx.device.type, (tp,))
    results = [run_variant(v, ref_state, ref_out.detach(), ref_grads,
                           xr.grad, ref_after, ref_out2, cfg, x, w, x2, lr,
                           ctx, mesh, a.timing_steps) for v in variants]
    dist.save(ctx, {"config": vars(a), "tp": tp, "lr": lr,
                    "device_name": D.name(ctx.device),
                    "step_effect": step_effect,
                    "dtype_bytes": torch.tensor([], dtype=dtype)
                    .element_size(),
                    "ref_params": sum(p.numel() for p in ref.parameters()),
                    "results": results})
    dist.close()


if __name__ == "__main__":
    main()
