"""``torch.autocast("meta")``: CUDA's autocast, stood in for on fake ranks.

    with patched_autocast():                  # in a rehearsed rank
        with torch.autocast("meta", dtype=torch.bfloat16):   # ctx.device
            y = model(x)        # matmuls in bf16, softmax/norms in fp32

A rehearsed rank's GPU is the ``meta`` device, which has no autocast
("unsupported autocast device_type 'meta'"). The stand-in is a
``TorchFunctionMode``: it runs above autograd, as autocast does, so the
casts are recorded and what backward saves is the cast copy -- the bytes
a CUDA run holds. Its op lists are CUDA's main ones (PyTorch's "Autocast
Op Reference", CUDA ops that autocast to float16/bfloat16, and to
float32); ops outside both run in their inputs' dtype, as on CUDA.
Another device type is handed to the real ``torch.autocast``.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

LOWER = {F.linear, torch.matmul, torch.mm, torch.bmm, torch.addmm,
         torch.baddbmm, torch.addbmm, torch.einsum, torch.conv1d,
         torch.conv2d, torch.conv3d, F.conv1d, F.conv2d, F.conv3d,
         F.scaled_dot_product_attention, torch.Tensor.matmul,
         torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.bmm}
FP32 = {F.softmax, F.log_softmax, torch.softmax, torch.log_softmax,
        torch.Tensor.softmax, torch.Tensor.log_softmax, F.layer_norm,
        F.group_norm, F.cross_entropy, F.nll_loss, F.mse_loss,
        F.binary_cross_entropy_with_logits, torch.exp, torch.log,
        torch.rsqrt, torch.pow, torch.cumsum, torch.norm}
_RMS = getattr(F, "rms_norm", None)
if _RMS is not None:
    FP32.add(_RMS)


def _cast(x, want, only):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and \
            x.dtype in only and x.dtype != want:
        return x.to(want)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, want, only) for v in x)
    return x


class MetaAutocast(TorchFunctionMode):
    def __init__(self, dtype=torch.bfloat16):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in LOWER:
            want, only = self.dtype, (torch.float32, torch.float64)
        elif func in FP32:
            want, only = torch.float32, (torch.float16, torch.bfloat16)
        else:
            return func(*args, **kwargs)
        args = _cast(args, want, only)
        kwargs = {k: _cast(v, want, only) for k, v in kwargs.items()}
        return func(*args, **kwargs)


class _Autocast:
    """``torch.autocast``'s signature; ``meta`` gets :class:`MetaAutocast`."""
    real = torch.autocast

    def __init__(self, device_type, dtype=None, enabled=True,
                 cache_enabled=None):
        if device_type != "meta":
            self.inner = self.real(device_type, dtype=dtype,
                                   enabled=enabled,
                                   cache_enabled=cache_enabled)
        elif enabled:
            self.inner = MetaAutocast(dtype or torch.bfloat16)
        else:
            self.inner = contextlib.nullcontext()

    def __enter__(self):
        return self.inner.__enter__()

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def run(*a, **k):
            with self:
                return fn(*a, **k)
        return run


@contextlib.contextmanager
def patched_autocast():
    """``torch.autocast`` and ``torch.amp.autocast`` take ``"meta"``."""
    import torch.amp
    saved = [(torch, torch.autocast), (torch.amp, torch.amp.autocast)]
    for mod, _ in saved:
        mod.autocast = _Autocast
    try:
        yield
    finally:
        for mod, fn in saved:
            mod.autocast = fn
