"""One GPU, one training step, as fast as the course's GPT goes: MFU.

    python scripts/benchmark_gpu.py                   # wide: 8 x 4096, batch 8
    python scripts/benchmark_gpu.py --compile --out mfu.json
    python scripts/benchmark_gpu.py --config 1b       # 16 x 2048
    python scripts/benchmark_gpu.py --device cpu --layers 2 --hidden 64 \
        --heads 4 --vocab 256 --seq 32 --batch 4 --steps 3   # smoke test

A benchmark, not a test (``make test`` never runs it on a GPU). It trains
``labkit.nn.model``'s GPT in bf16 the way large runs do: bf16 parameters,
gradients and activations, an fp32 master copy of the weights that fused
Adam updates (not autocast over fp32 weights, which re-casts every weight
each step), the loss on the bf16 logits (no fp32 copy of the
``B x s x V`` logits), ``scaled_dot_product_attention`` -- the backend it
ran is recorded (``sdpa_backend``, from the profiled aten op) --, and
optionally ``torch.compile``. It times ``--steps`` steps after
``--warmup`` with CUDA events (``labkit.device.Timer``) and reports
tokens/s, model FLOPs per step (``labkit.predict.model.flops.model_flops``),
achieved TFLOP/s and MFU against the GPU's dense bf16 peak
(``labkit.predict.model.flops.PEAKS``; an unknown GPU gets no MFU, not a guess)
and, beside it, the bf16 matmul ceiling measured on this GPU (``8192^3``
GEMMs) and the fraction of it achieved ("fraction of achievable").

The model is causal: flash attention computes about half of ``Q K^T`` and
of the scores times ``V``, so the headline ``model_flops_per_step`` counts
that core at half (:func:`causal_flops`: ``6 B s^2 l h`` less than
Narayanan et al.'s Eq. 3, which counts it whole); ``mfu_full_attention``
keeps the papers' convention beside it. The peak memory is that of the
timed steps (the allocator's peak is reset after the warm-up).

Sizes that can reach 50 % MFU on one H100/H200 (issues 10 and 28): GEMMs
wide enough to run near the tensor cores' rate, ``--config wide`` (8
layers, h = 4096, 32 heads, V = 50304, s = 2048: 1.8B parameters) at
batch >= 8. Memory at batch 8: 20 bytes per parameter (bf16 weights and
gradients, fp32 master, fp32 master gradient, Adam's two moments): 36 GB,
plus ~2.3 GB of activations per layer (Korthikanti et al. 2022's 34 s b h
bytes, without the attention matrix flash attention never stores) and the
bf16 logits: about 57 GB on an 80 GB GPU. Nothing here was run on a GPU
when it was written: no result is claimed until a run prints one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


CONFIGS = {"wide": {"layers": 8, "hidden": 4096, "heads": 32,
                    "vocab": 50304, "seq": 2048},
           "1b": {"layers": 16, "hidden": 2048, "heads": 16,
                  "vocab": 50304, "seq": 2048}}
SDPA_OPS = {"_scaled_dot_product_flash_attention": "flash",
            "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
            "_scaled_dot_product_efficient_attention": "memory-efficient",
            "_scaled_dot_product_cudnn_attention": "cuDNN",
            "_scaled_dot_product_attention_math": "math"}


def parse_args(argv=None):
    from labkit.nn.model import add_shape_arguments
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", choices=sorted(CONFIGS), default="wide")
    config, _ = pre.parse_known_args(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                parents=[pre])
    add_shape_arguments(p, **CONFIGS[config.config])
    p.add_argument("--batch", type=int, default=8, help="micro-batch")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (inductor)")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--no-bf16", action="store_true",
                   help="fp32 weights and compute (no master copy)")
    p.add_argument("--matmul-size", type=int, default=None,
                   help="n of the n x n x n bf16 GEMM of the ceiling "
                        "(default 8192 on CUDA, 256 on CPU)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--out", type=Path, help="write the record as JSON")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps >= 1 and --warmup >= 0")
    return a


class MasterAdam:
    """bf16 parameters, an fp32 master copy updated by Adam (fused on
    CUDA), the bf16 gradients cast into fp32 master gradients before the
    step and the master cast back into the bf16 weights after it."""

    def __init__(self, model, lr: float):
        import torch
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master = [p.detach().float().clone() for p in self.params]
        for m in self.master:
            m.grad = torch.zeros_like(m)
        cuda = all(p.device.type == "cuda" for p in self.params)
        self.opt = torch.optim.Adam(self.master, lr=lr, fused=cuda or None)
        self.defaults = self.opt.defaults

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch
        with torch.no_grad():
            torch._foreach_copy_([m.grad for m in self.master],
                                 [p.grad for p in self.params])
            self.opt.step()
            torch._foreach_copy_(self.params, self.master)


def bf16_loss(model, x, y):
    """Cross-entropy on the model's bf16 logits: no fp32 copy of them
    (``labkit.nn.model.GPT`` casts them to fp32 in its own loss)."""
    import torch.nn.functional as F
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def train_step(model, opt, x, y, loss_fn):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model, x, y)
    loss.backward()
    opt.step()
    return loss.detach()


def sdpa_backend(step) -> str:
    """The SDPA kernel one ``step()`` dispatches (its aten op's name)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    seen = {e.key.removeprefix("aten::") for e in prof.key_averages()}
    found = [v for k, v in SDPA_OPS.items() if k in seen]
    return ", ".join(found) if found else "none seen"


def matmul_ceiling(dev, n: int, iters: int) -> float:
    """TFLOP/s of an ``n x n x n`` bf16 GEMM on ``dev``: what this GPU
    achieves on the matmuls MFU counts (the median of ``iters``)."""
    import torch

    from labkit import device as D
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(iters):
        t = D.Timer(dev).start()
        a @ b
        times.append(t.stop())
    return 2.0 * n ** 3 / statistics.median(times) / 1e12


def causal_flops(batch: int, seq: int, layers: int, hidden: int,
                 vocab: int) -> float:
    """Model FLOPs of a causal step: ``model_flops`` (Narayanan et al.
    2021, Eq. 3) less half its attention core, ``12 B s^2 l h / 2``."""
    from labkit.predict.model.flops import model_flops
    return (model_flops(batch, seq, layers, hidden, vocab)
            - 6.0 * batch * seq * seq * layers * hidden)


def main(argv=None) -> int:
    a = parse_args(argv)
    import torch

    from labkit import device as D
    from labkit.nn.model import batch, build, config_from_args, count_params
    from labkit.training.train import LR, make_optimizer, maybe_compile

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: this benchmark measures one "
                         "(--device cpu runs a smoke test, no MFU)")
    dev = torch.device(a.device, 0) if a.device == "cuda" else \
        torch.device("cpu")
    config = config_from_args(a)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True   # fp32 leftovers
        from labkit.predict.memory import layers_that_fit
        if layers_that_fit(D.total_memory(dev), a.layers, a.hidden, a.heads,
                           a.vocab, a.seq, a.batch) < a.layers:
            print(f"warning: {a.layers} layers at batch {a.batch} may not "
                  f"fit {D.total_memory(dev) / 1e9:.0f} GB (ledger + "
                  "Korthikanti activations); lower --batch if it fails")
    with dev:                      # initialized on the GPU: no 7 GB on
        model = build(config)      # the host, no minutes of CPU init
    params = count_params(model)
    if a.no_bf16:
        opt, loss_fn = make_optimizer(model), lambda m, x, y: m(x, y)
    else:
        model = model.to(torch.bfloat16)
        opt, loss_fn = MasterAdam(model, LR), bf16_loss
    n = a.matmul_size or (8192 if dev.type == "cuda" else 256)
    ceiling = matmul_ceiling(dev, n, 20 if dev.type == "cuda" else 3)
    model = maybe_compile(model, a.compile, a.compile_backend)
    x, y = batch(config, a.batch, step=0, device=dev)
    for _ in range(max(a.warmup - 1, 0)):
        train_step(model, opt, x, y, loss_fn)
    backend = sdpa_backend(lambda: train_step(model, opt, x, y, loss_fn))
    D.reset_peak(dev)              # the timed steps' peak, not the warm-up's
    times = []
    for _ in range(a.steps):
        timer = D.Timer(dev).start()
        loss = train_step(model, opt, x, y, loss_fn)
        times.append(timer.stop())
    step_s = statistics.median(times)
    name = D.name(dev)
    m = D.mfu(config, a.batch, step_s, name)
    full = {"model_flops_full_attention": m["model_flops_per_step"],
            "mfu_full_attention": m["mfu"]}
    flops = causal_flops(a.batch, a.seq, a.layers, a.hidden, a.vocab)
    m["model_flops_per_step"] = flops
    m["achieved_tflops_per_gpu"] = flops / step_s / 1e12
    if m["mfu"] is not None:
        m["mfu"] = m["achieved_tflops_per_gpu"] / m["peak_tflops"]
    m.update(full)
    m["matmul_tflops"] = ceiling
    m["matmul_size"] = n
    m["fraction_of_achievable"] = m["achieved_tflops_per_gpu"] / ceiling
    rec = {"device": name, "params": params, "config": vars(config),
           "batch": a.batch, "compile": a.compile, "bf16": not a.no_bf16,
           "weights": "fp32" if a.no_bf16 else
           "bf16, fp32 master copy (Adam on the master)",
           "loss_logits_dtype": "fp32" if a.no_bf16 else "bf16",
           "sdpa_backend": backend,
           "optimizer": type(getattr(opt, "opt", opt)).__name__ + (
               " (fused)" if opt.defaults.get("fused") else ""),
           "step_s_median": step_s, "step_s": times,
           "loss": float(loss), **m}
    if dev.type == "cuda":
        rec["peak_bytes"] = D.peak_bytes(dev)["bytes"]
    print(f"{name}: {params / 1e9:.2f}B parameters, batch {a.batch} x seq "
          f"{a.seq}, compile {a.compile}")
    print(f"step {step_s * 1e3:.1f} ms (median of {a.steps}); "
          f"{m['tokens_per_s']:,.0f} tokens/s; "
          f"{m['model_flops_per_step'] / 1e12:.1f} TFLOP per step; "
          f"{m['achieved_tflops_per_gpu']:.1f} TFLOP/s achieved")
    print(f"MFU {m['mfu']:.1%} of {m['peak_tflops']} TFLOP/s ({m['preset']})"
          if m["mfu"] is not None else f"MFU: {m['note']}")
    print(f"bf16 matmul ceiling measured here ({n}^3): {ceiling:.1f} "
          f"TFLOP/s; fraction of achievable "
          f"{m['fraction_of_achievable']:.1%}; SDPA backend: {backend}")
    if a.out:
        a.out.write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
