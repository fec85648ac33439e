"""One GPU, one training step, as fast as the tiny GPT's code goes: MFU.

    python scripts/benchmark_gpu.py                       # ~1B GPT, seq 2048
    python scripts/benchmark_gpu.py --compile --batch 8 --out mfu.json
    python scripts/benchmark_gpu.py --device cpu --layers 2 --hidden 64 \
        --heads 4 --vocab 256 --seq 32 --batch 4 --steps 3   # smoke test

A benchmark, not a test (``make test`` never runs it on a GPU). It trains
``labkit.model``'s GPT the way the labs' GPU path does -- bf16 autocast
with fp32 weights and Adam state, ``scaled_dot_product_attention`` (flash
or memory-efficient kernels on CUDA), fused Adam (``labkit.train.
make_optimizer``), optionally ``torch.compile`` -- times ``--steps`` steps
after ``--warmup`` with CUDA events (``labkit.device.Timer``), and reports
tokens/s, model FLOPs per step (``labkit.predict.flops.model_flops``),
achieved TFLOP/s and MFU against the GPU's dense bf16 peak
(``labkit.predict.flops.PEAKS``; an unknown GPU gets no MFU, not a guess).

The model is causal: flash attention computes about half of ``Q K^T`` and
of the scores times ``V``, so the headline ``model_flops_per_step`` counts
that core at half (:func:`causal_flops`: ``6 B s^2 l h`` less than
Narayanan et al.'s Eq. 3, which counts it whole); ``mfu_full_attention``
keeps the papers' convention beside it. The peak memory is that of the
timed steps (the allocator's peak is reset after the warm-up).

The goal of issue 10: >= 50 % MFU for a ~1B-parameter model (defaults:
16 layers, h = 2048, 16 heads, V = 50304, s = 2048: 1.0B parameters) on one
H100/H200-class GPU. Memory at the defaults: 16 bytes x 1.0B of model
states plus ~1.2 GB of activations per layer at batch 8 (Korthikanti et
al. 2022, without the attention matrix that flash attention never stores):
about 35 GB, so batch 8 fits an 80 GB GPU; lower ``--batch`` on smaller
ones. Nothing here was run on a GPU when it was written: no result is
claimed until a run prints one.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv=None):
    from labkit.model import add_shape_arguments
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_arguments(p, layers=16, hidden=2048, heads=16, vocab=50304,
                        seq=2048)
    p.add_argument("--batch", type=int, default=8, help="micro-batch")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (inductor)")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--no-bf16", action="store_true",
                   help="fp32 compute (no autocast)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--out", type=Path, help="write the record as JSON")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps >= 1 and --warmup >= 0")
    return a


def causal_flops(batch: int, seq: int, layers: int, hidden: int,
                 vocab: int) -> float:
    """Model FLOPs of a causal step: ``model_flops`` (Narayanan et al.
    2021, Eq. 3) less half its attention core, ``12 B s^2 l h / 2``."""
    from labkit.predict.flops import model_flops
    return (model_flops(batch, seq, layers, hidden, vocab)
            - 6.0 * batch * seq * seq * layers * hidden)


def main(argv=None) -> int:
    a = parse_args(argv)
    import torch

    from labkit import device as D
    from labkit.model import batch, build, config_from_args, count_params
    from labkit.train import make_optimizer, maybe_compile, train_step

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
    model = build(config).to(dev)
    params = count_params(model)
    opt = make_optimizer(model)
    model = maybe_compile(model, a.compile, a.compile_backend)
    amp = (contextlib.nullcontext() if a.no_bf16 else
           torch.autocast(dev.type, dtype=torch.bfloat16))
    x, y = batch(config, a.batch, step=0, device=dev)
    for _ in range(a.warmup):
        train_step(model, opt, x, y, amp)
    D.reset_peak(dev)              # the timed steps' peak, not the warm-up's
    times = []
    for _ in range(a.steps):
        timer = D.Timer(dev).start()
        loss = train_step(model, opt, x, y, amp)
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
    rec = {"device": name, "params": params, "config": vars(config),
           "batch": a.batch, "compile": a.compile, "bf16": not a.no_bf16,
           "optimizer": type(opt).__name__ + (
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
    if a.out:
        a.out.write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
