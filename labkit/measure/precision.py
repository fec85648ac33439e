"""Measure number formats: ``torch.finfo``, underflow, rounding error, and
FP8 scaled casts (twin of :mod:`labkit.predict.precision`).

    from labkit.measure import precision as M
    M.formats()["e4m3"]["max"]              # 448.0, from torch.finfo
    M.underflow(grads, torch.float16)       # share that becomes 0
    q = M.quantize(x, "rowwise", "e4m3")    # dequantized fp32 tensor
    M.rel_error(q, x.double())              # ||q - x|| / ||x||
    M.fp8_matmul(x, w, "blockwise")         # scaled e4m3 casts, fp32 sum

Scaling (how an FP8 recipe fits a tensor into 448 or 57,344): one fp32
scale per group, ``scale = max|x| / fp8_max`` over the group, ``x /
scale`` cast to FP8, multiplied back by the scale to read it.

- ``tensorwise``: one scale for the whole tensor (torchao's default
  "tensorwise" recipe, the per-tensor scaling of Micikevicius et al. 2022);
- ``rowwise``: one per row (torchao's "rowwise");
- ``tile``: one per 1 x 128 tile of a row, DeepSeek-V3's activations;
- ``block``: one per 128 x 128 block, DeepSeek-V3's weights (DeepSeek-AI
  2024, Sec. 3.3.2, Fig. 7a).

Nothing here runs an FP8 GEMM: on CPU, ``fp8_matmul`` dequantizes the
scaled casts and multiplies in fp32, which is what an FP8 tensor core
computes when it accumulates in fp32 (DeepSeek-V3 Sec. 3.3.2 promotes the
partial sums to fp32 every 128 elements for that reason). On an H100/H200
``torch._scaled_mm`` runs the real one (:func:`scaled_mm_error`).
"""
from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16,
          "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}
NAMES = {v: k for k, v in DTYPES.items()}
SCALINGS = ("tensorwise", "rowwise", "tile", "block")


def formats() -> dict:
    """Range and precision of each format, as torch reports them."""
    out = {}
    for name, dt in DTYPES.items():
        f = torch.finfo(dt)
        out[name] = {"bits": f.bits, "max": float(f.max),
                     "eps": float(f.eps),
                     "smallest_normal": float(f.smallest_normal),
                     "smallest_subnormal": _smallest_subnormal(dt)}
    return out


def _smallest_subnormal(dt) -> float:
    """The least positive value the format stores: halve from the smallest
    normal until the cast gives 0."""
    x = torch.tensor(float(torch.finfo(dt).smallest_normal),
                     dtype=torch.float64)
    while (x / 2).to(dt).double().item() > 0:
        x = x / 2
    return x.item()


def underflow(tensors, dtype, scale: float = 1.0) -> dict:
    """Of the nonzero elements of ``tensors`` (fp32), the share that
    becomes 0 (``zero``) and that falls below the smallest normal
    (``subnormal``: fewer mantissa bits) when ``scale * t`` is cast to
    ``dtype``; ``overflow``: the share that becomes inf."""
    nz = zero = sub = inf = 0
    tiny = torch.finfo(dtype).smallest_normal
    for t in tensors:
        t = t.detach().float().flatten()
        t = t[t != 0] * scale
        c = t.to(dtype)
        nz += t.numel()
        zero += int((c == 0).sum())
        sub += int(((c != 0) & (c.abs() < tiny)).sum())
        inf += int(c.isinf().sum())
    return {"nonzero": nz, "zero": zero / max(nz, 1),
            "subnormal": sub / max(nz, 1), "overflow": inf / max(nz, 1)}


def rel_error(x, ref) -> float:
    """``||x - ref|| / ||ref||`` in fp64 (Frobenius norms)."""
    ref = ref.double()
    return ((x.double() - ref).norm() / ref.norm()).item()


def _groups(x, scaling: str, block: int):
    """``x`` (2-D) reshaped so that each group is one row of the result,
    and the function that puts it back."""
    r, c = x.shape
    if scaling == "tensorwise":
        return x.reshape(1, -1), lambda g: g.reshape(r, c)
    if scaling == "rowwise":
        return x, lambda g: g
    if scaling == "tile":
        if c % block:
            raise ValueError(f"{c} columns do not split into 1x{block} tiles")
        return x.reshape(-1, block), lambda g: g.reshape(r, c)
    if scaling == "block":
        if r % block or c % block:
            raise ValueError(f"{r}x{c} does not split into {block}x{block}"
                             " blocks")
        g = x.reshape(r // block, block, c // block, block).transpose(1, 2)
        return g.reshape(-1, block * block), lambda y: y.reshape(
            r // block, c // block, block, block).transpose(1, 2).reshape(
            r, c)
    raise ValueError(f"unknown scaling {scaling!r}: {', '.join(SCALINGS)}")


def quantize(x, scaling: str = "tensorwise", fmt: str = "e4m3",
             block: int = 128, keep: bool = False):
    """``x`` through a scaled cast to ``fmt`` and back (fp32). With
    ``keep``, also ``(fp8 payload, fp32 scales)``."""
    dt = DTYPES[fmt]
    x2 = x.detach().float().reshape(-1, x.shape[-1])
    g, back = _groups(x2, scaling, block)
    amax = g.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
    scale = amax / torch.finfo(dt).max
    q = (g / scale).to(dt)
    out = back(q.float() * scale).reshape(x.shape)
    return (out, q, scale) if keep else out


def fp8_matmul(x, w, scaling: str = "tensorwise", block: int = 128):
    """``x @ w.T`` from e4m3 scaled casts of both, summed in fp32.

    ``tile`` scales ``x`` per 1 x ``block`` tile and ``w`` per ``block`` x
    ``block`` block (DeepSeek-V3); the other scalings apply to both."""
    sx = "tile" if scaling in ("tile", "block") else scaling
    sw = "block" if scaling in ("tile", "block") else scaling
    return quantize(x, sx, "e4m3", block) @ quantize(w, sw, "e4m3",
                                                     block).T


def scaled_mm_error(x, w) -> dict:
    """On a CUDA GPU with FP8 tensor cores (sm_89+): ``torch._scaled_mm``
    (e4m3, one scale per tensor, fp32 out) against fp64."""
    dt = torch.float8_e4m3fn
    fmax = torch.finfo(dt).max
    sx = (x.abs().max() / fmax).float()
    sw = (w.abs().max() / fmax).float()
    xq = (x / sx).to(dt)
    wq = (w / sw).to(dt)
    out = torch._scaled_mm(xq, wq.T, scale_a=sx, scale_b=sw,
                           out_dtype=torch.float32)
    ref = x.double() @ w.double().T
    return {"fp8_scaled_mm": rel_error(out, ref),
            "bf16": rel_error(x.bfloat16() @ w.bfloat16().T, ref)}
