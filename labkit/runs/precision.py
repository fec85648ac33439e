"""Precision, measured on the tiny Llama-style model, in one launch.

    torchrun --nproc-per-node 4 -m labkit.runs.precision \
        --hidden 256 --ffn 768 --micro-batch 4 --ks 1,4,16,32

One process's work (rank 0 computes it, the others wait), from
one real fp32 step of ``arch.preset("llama-tiny")`` widened to
``--hidden`` / ``--ffn``:

- ``formats``: ``torch.finfo`` of fp32, bf16, fp16, e4m3, e5m2;
- ``autocast``: what a bf16 autocast forward keeps for backward
  (:func:`labkit.measure.activations.measure`: the bf16 weight casts);
- ``underflow``: of that step's weight gradients and of the gradients
  flowing into every linear (``grad_output``), the share an fp16 or bf16
  cast turns into 0, unscaled and scaled by 2^16; and the same share
  measured in a real fp16 autocast backward;
- ``grad_scaler``: ``torch.amp.GradScaler("cpu")`` over fp16 autocast
  steps: scale per step, steps skipped (inf/NaN found);
- ``accumulation``: gradients of ``k`` micro-batches summed in bf16, fp16
  and fp32 against their fp64 sum;
- ``fp8``: quantization error of the step's activations (linear inputs),
  weights and gradients, four scalings, e4m3 forward / e5m2 backward; an
  emulated FP8 matmul vs bf16 vs fp32 against fp64.

What needs the ranks (:mod:`labkit.runs.amp.dist`): FSDP2 with
``MixedPrecisionPolicy``, ``ShardedGradScaler``, all-reduce in bf16 vs
fp32 over 2 and 4 ranks, and an FP8 all-gather of the FSDP shards; with
``--parts ...,deepspeed``, DeepSpeed ZeRO-3 in bf16 with fp32 master
weights (:mod:`labkit.runs.amp.deepspeed`).
"""
from __future__ import annotations

import argparse
import time
import types

import torch
import torch.nn as nn

from labkit import arch, dist
from labkit.measure import activations as MA
from labkit.measure import precision as M
from labkit.nn.model import batch, build_arch
from labkit.runs.amp.steps import scaled_steps  # noqa: F401

SCALES = (1.0, 2.0 ** 16)


def record(a: arch.Arch):
    """A model and the shapes its batches use."""
    return build_arch(a, seed=0), types.SimpleNamespace(
        vocab=a.vocab, seq=a.max_seq)


def captured_step(model, x, y):
    """One fp32 forward and backward; every linear's input, weight and
    ``grad_output``."""
    acts, grads, hooks = {}, {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            hooks.append(m.register_forward_pre_hook(
                lambda mod, inp, n=name: acts.__setitem__(
                    n, inp[0].detach().reshape(-1, inp[0].shape[-1]))))
            hooks.append(m.register_full_backward_hook(
                lambda mod, gi, go, n=name: grads.__setitem__(
                    n, go[0].detach().reshape(-1, go[0].shape[-1]))))
    model.zero_grad()
    loss = model(x, y)
    loss.backward()
    for h in hooks:
        h.remove()
    weights = {n: m.weight.detach() for n, m in model.named_modules()
               if isinstance(m, nn.Linear)}
    return loss.item(), acts, weights, grads


def fp16_backward_zeros(model, x, y, fp32_grads, scale):
    """A real fp16 autocast backward, the loss scaled by ``scale``: the
    share of ``grad_output`` elements, nonzero in fp32, that are 0 here."""
    got, hooks = {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            hooks.append(m.register_full_backward_hook(
                lambda mod, gi, go, n=name: got.__setitem__(n, go[0])))
    model.zero_grad()
    with torch.autocast("cpu", torch.float16):
        loss = model(x, y)
    (loss.float() * scale).backward()
    for h in hooks:
        h.remove()
    model.zero_grad()
    nz = zero = 0
    for n, ref in fp32_grads.items():
        g = got[n].reshape(ref.shape)
        mask = ref != 0
        nz += int(mask.sum())
        zero += int(((g == 0) & mask).sum())
    return zero / max(nz, 1)


def grad_scaler_run(a, data, steps, init_scale, growth_interval):
    """fp16 autocast training with ``torch.amp.GradScaler`` on CPU."""
    model, _ = record(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale,
                                  growth_interval=growth_interval)
    return scaled_steps(model, opt, scaler, data, steps, autocast=True)




def accumulation(model, data, ks):
    """Gradients of ``max(ks)`` micro-batches (fp32), summed in each
    format; relative error to their fp64 sum after ``k`` of them."""
    vecs = []
    for s in range(max(ks)):
        model.zero_grad()
        model(*data(100 + s)).backward()
        vecs.append(torch.cat([p.grad.flatten() for p in
                               model.parameters()]).clone())
    model.zero_grad()
    out = []
    for fmt in ("bf16", "fp16", "fp32"):
        dt = M.DTYPES[fmt]
        acc = torch.zeros_like(vecs[0], dtype=dt)
        ref = torch.zeros_like(vecs[0], dtype=torch.float64)
        for i, v in enumerate(vecs, 1):
            acc += v.to(dt)
            ref += v.double()
            if i in ks:
                out.append({"format": fmt, "k": i,
                            "rel_error": M.rel_error(acc, ref)})
    return out


KINDS = {"activations": "e4m3", "weights": "e4m3", "gradients": "e5m2"}


def fp8_errors(tensors: dict, block: int) -> list:
    """Quantization error of each kind x scaling x format, over all the
    linears together: ``sqrt(sum ||q - t||^2 / sum ||t||^2)``."""
    out = []
    for kind, ts in tensors.items():
        for fmt in ("e4m3", "e5m2"):
            for scaling in M.SCALINGS:
                num = den = 0.0
                try:
                    for t in ts.values():
                        d = t.double()
                        q = M.quantize(t, scaling, fmt, block).double()
                        num += (q - d).norm().item() ** 2
                        den += d.norm().item() ** 2
                except ValueError as e:
                    out.append({"kind": kind, "format": fmt,
                                "scaling": scaling, "rel_error": None,
                                "why": str(e)})
                    continue
                out.append({"kind": kind, "format": fmt, "scaling": scaling,
                            "recipe": KINDS[kind] == fmt,
                            "rel_error": (num / den) ** 0.5})
    return out


def matmuls(x, w, block):
    """``x @ w.T`` in fp32, bf16 and emulated FP8, each against fp64."""
    ref = x.double() @ w.double().T
    out = {"fp32": M.rel_error(x @ w.T, ref),
           "bf16": M.rel_error(x.bfloat16() @ w.bfloat16().T, ref)}
    for scaling in ("tensorwise", "rowwise", "block"):
        out[f"fp8_{scaling}"] = M.rel_error(
            M.fp8_matmul(x, w, scaling, block), ref)
    return out


def local_part(a, args):
    model, shape = record(a)

    def data(step):
        return batch(shape, args.micro_batch, step)
    x, y = data(0)
    out = {"formats": M.formats()}
    got = MA.measure(model, x, y, autocast=torch.autocast(
        "cpu", torch.bfloat16))
    casts = [t for t in got["tensors"] if t[2] == "weight_cast"]
    out["autocast"] = {"weight_cast_bytes": got["weight_cast"],
                       "weight_casts": len(casts),
                       "dtypes": sorted({t[0] for t in casts}),
                       "activation_bytes": got["activation"]}
    del got
    loss, acts, weights, grads = captured_step(model, x, y)
    wgrads = [p.grad for p in model.parameters()]
    out["loss"] = loss
    out["underflow"] = [
        {"tensors": which, "format": fmt, "scale": s,
         **M.underflow(ts, M.DTYPES[fmt], s)}
        for which, ts in (("weight_grads", wgrads),
                          ("activation_grads", list(grads.values())))
        for fmt in ("fp16", "bf16") for s in SCALES]
    out["fp16_backward_zero"] = [
        {"scale": s, "zero": fp16_backward_zeros(model, x, y, grads, s)}
        for s in SCALES]
    out["grad_scaler"] = grad_scaler_run(
        a, data, args.scaler_steps, args.init_scale, args.growth_interval)
    out["accumulation"] = accumulation(model, data, args.ks)
    out["fp8"] = fp8_errors({"activations": acts, "weights": weights,
                             "gradients": grads}, args.block)
    down = next(n for n in acts if n.endswith("mlp.down"))
    out["matmul"] = {"layer": down, "shape": [list(acts[down].shape),
                                              list(weights[down].shape)],
                     **matmuls(acts[down], weights[down], args.block)}
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="llama-tiny")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--ks", default="1,4,16,32")
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--scaler-steps", type=int, default=7)
    ap.add_argument("--init-scale", type=float, default=2.0 ** 22)
    ap.add_argument("--growth-interval", type=int, default=2)
    ap.add_argument("--parts", default="local,dist")
    a = ap.parse_args(argv)
    a.ks = sorted(int(k) for k in a.ks.split(","))
    if a.ks[0] < 1:
        raise SystemExit(f"k must be >= 1, got {a.ks[0]}")
    return a


def widened(a: argparse.Namespace) -> arch.Arch:
    """The preset widened to ``--hidden`` / ``--ffn``."""
    base = arch.preset(a.preset)
    return base.with_(hidden=a.hidden, ffn=a.ffn,
                      head_dim=a.hidden // base.heads)


def main(argv=None):
    from labkit.runs.amp import dist as D
    a = parse_args(argv)
    rec = widened(a)
    ctx = dist.init()
    out = {"config": vars(a), "arch": rec.as_dict()}
    t0 = time.perf_counter()
    if "local" in a.parts and ctx.rank == 0:  # one process's work: once
        out.update(local_part(rec, a))
    t1 = time.perf_counter()
    if "dist" in a.parts:
        out.update(D.dist_part(rec, a, ctx))
    t2 = time.perf_counter()
    if "deepspeed" in a.parts:
        from labkit.runs.amp.deepspeed import deepspeed_bf16
        out["deepspeed_bf16"] = deepspeed_bf16(
            rec, a, ctx, lambda s: D._data(rec, a, ctx, s))
    out["seconds"] = {"local": t1 - t0, "dist": t2 - t1,
                      "deepspeed": time.perf_counter() - t2}
    dist.save(ctx, out)
    dist.close()


if __name__ == "__main__":
    main()
