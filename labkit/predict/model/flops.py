"""FLOPs of a GPT iteration, achieved TFLOP/s and MFU (pure Python).

    python -m labkit flops --layers 96 --hidden 12288 --heads 96 \
        --seq 2048 --vocab 51200 --batch 1536
    python -m labkit flops --hf-config config.json --seq 8192 --batch 512
    python -m labkit flops --layers 128 --hidden 25600 --heads 160 \
        --seq 2048 --vocab 51200 --batch 3072 --gpus 3072 \
        --tflops-per-gpu 163 --recompute full --peak a100

Counting (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", Sec. 5.1 and appendix): only
matrix multiplications count, 2 FLOPs per multiply-add. One layer's forward
pass on a batch of B sequences of s tokens is ``24 B s h^2 + 4 B s^2 h``
(QKV, attention scores, attention over values, output projection, MLP);
backward costs twice the forward; the output layer ``2 B s h V`` forward.

- *model FLOPs*, what the maths needs once (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models",
  Sec. 6): forward + backward = 3 passes,
  ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``;
- *hardware FLOPs*, what the GPU runs: with full activation recomputation
  one more forward pass, ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``
  (Narayanan et al. 2021, Eq. 3); with selective recomputation only the
  attention core (``4 B s^2 h`` per layer) runs again.

Model FLOPs Utilization (MFU, Chowdhery et al. 2022, "PaLM", Appendix B):
achieved model FLOP/s over the peak, with model FLOPs per token
``6 N + 12 L H Q T`` (N parameters in matrix multiplications, L layers,
H heads, Q head size, T sequence length); with ``N = 12 l h^2 + V h`` this
is exactly the 72-term above divided by ``B s``. Hardware FLOPs
Utilization (HFU) counts the recomputation too; the per-GPU TFLOP/s of
Narayanan et al. 2021 are hardware FLOPs with full recomputation.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from labkit.predict.memory import gpt_params

from labkit.predict.gpus import (GPU_LINKS, GPU_NAMES, PEAKS,  # noqa: F401
                                 gpu_preset)
# PaLM's per-token count and the FLOPs of any architecture record (GQA,
# SwiGLU, experts) live in flops_arch; this module is the GPT's closed forms
from labkit.predict.model.flops_arch import (  # noqa: F401
    RECOMPUTE, _positive, arch_flops, palm_flops_per_token)



def peak_tflops(preset: str) -> float:
    """Dense bf16 peak of a GPU preset (see ``PEAKS``), TFLOP/s."""
    if preset not in PEAKS:
        raise ValueError(f"unknown GPU preset {preset!r}: choose from "
                         f"{', '.join(sorted(PEAKS))}")
    return PEAKS[preset][0]


def megatron_params(layers: int, hidden: int, vocab: int, seq: int) -> int:
    """Narayanan et al. 2021, Eq. 2: ``12lh^2 (1 + 13/(12h) + (V+s)/(12lh))``.

    The GPT of the paper ties the output layer to the input embedding and
    has no final LayerNorm: :func:`labkit.predict.memory.gpt_params` with
    ``tied=True, final_norm=False`` (heads do not change the count).
    """
    return gpt_params(layers, hidden, 1, vocab, seq, tied=True,
                      final_norm=False)


def matmul_params(layers: int, hidden: int, vocab: int,
                  mlp_ratio: int = 4) -> int:
    """Weights that take part in matrix multiplications: N of PaLM's 6N.

    ``(4 + 2r) l h^2`` in the layers plus the ``V h`` output layer; the
    embedding lookups, biases and LayerNorms do no matrix multiply.
    """
    _positive(layers=layers, hidden=hidden, vocab=vocab, mlp_ratio=mlp_ratio)
    return (4 + 2 * mlp_ratio) * layers * hidden ** 2 + vocab * hidden


def model_flops(batch: int, seq: int, layers: int, hidden: int,
                vocab: int) -> float:
    """Model FLOPs of one iteration (forward + backward, no recompute).

    ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``: Narayanan et al. 2021, Eq. 3
    without its recomputed forward pass; the "model FLOPs" of Korthikanti
    et al. 2022, Sec. 6.
    """
    _positive(batch=batch, seq=seq, layers=layers, hidden=hidden,
              vocab=vocab)
    B, s, l, h, V = batch, seq, layers, hidden, vocab
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def hardware_flops(batch: int, seq: int, layers: int, hidden: int,
                   vocab: int, recompute: str = "full") -> float:
    """FLOPs the GPUs execute in one iteration, recomputation included.

    ``full``: every layer's forward runs twice, ``96 B s l h^2 (1 + s/(6h) +
    V/(16 l h))`` (Narayanan et al. 2021, Eq. 3). ``selective``: only the
    attention core (``Q K^T`` and softmax times ``V``, ``4 B s^2 h`` per
    layer) runs again (Korthikanti et al. 2022, Sec. 5). ``none``: equal to
    :func:`model_flops`.
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}: choose from "
                         f"{', '.join(RECOMPUTE)}")
    base = model_flops(batch, seq, layers, hidden, vocab)
    B, s, l, h, V = batch, seq, layers, hidden, vocab
    if recompute == "full":
        return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    if recompute == "selective":
        return base + 4.0 * B * s * s * h * l
    return base


def training_days(tokens: float, params: float, gpus: int,
                  tflops_per_gpu: float, recompute: bool = True) -> float:
    """End-to-end training time, Narayanan et al. 2021, Eq. 4.

    ``8 T P / (n X)`` seconds with activation recomputation (``6 T P / (n
    X)`` without): T tokens, P parameters, n GPUs, X achieved FLOP/s per
    GPU. Returned in days.
    """
    if tokens <= 0 or params <= 0 or gpus < 1 or tflops_per_gpu <= 0:
        raise ValueError("tokens, params, gpus and tflops must be positive")
    k = 8 if recompute else 6
    return k * tokens * params / (gpus * tflops_per_gpu * 1e12) / 86400


@dataclass
class FlopsReport:
    """Everything :func:`report` computes, in FLOPs, seconds and TFLOP/s."""
    params: int                    # labkit's untied GPT, or Eq. 2 if tied
    matmul_params: int
    tokens: int                    # per iteration, B * s
    model_flops: float             # per iteration
    hardware_flops: float          # per iteration, with ``recompute``
    palm_flops: float              # (6N + 12LHQT) * tokens, = model_flops
    recompute: str
    gpus: int = 1
    peak_tflops: float | None = None
    iteration_seconds: float | None = None
    model_tflops_per_gpu: float | None = None
    hardware_tflops_per_gpu: float | None = None
    aggregate_pflops: float | None = None    # hardware, all GPUs
    tokens_per_second: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    # sliding-window layers: the model FLOPs a kernel that skips the
    # masked keys computes (flops_arch.arch_flops)
    windowed_model_flops: float | None = None


def report(layers: int, hidden: int, heads: int, seq: int, vocab: int,
           batch: int, gpus: int = 1, tflops_per_gpu: float | None = None,
           iteration_seconds: float | None = None, peak: str | None = None,
           recompute: str = "none", tied: bool = False,
           arch=None) -> FlopsReport:
    """Parameters, FLOPs per iteration and, given a throughput, MFU.

    Give at most one of ``tflops_per_gpu`` (hardware TFLOP/s per GPU, as
    counted with ``recompute``, the way Narayanan et al. 2021 report them)
    and ``iteration_seconds``; ``peak`` names a GPU preset for MFU/HFU.
    ``arch``: an architecture record (:mod:`labkit.arch`) instead of the
    GPT shape (its fields replace layers, hidden, heads and vocab).
    """
    if arch is not None:
        layers, hidden, heads, vocab = (arch.layers, arch.hidden,
                                        arch.heads, arch.vocab)
    _positive(layers=layers, hidden=hidden, heads=heads, seq=seq,
              vocab=vocab, batch=batch, gpus=gpus)
    if arch is None and hidden % heads:
        raise ValueError(f"hidden ({hidden}) is not divisible by heads "
                         f"({heads})")
    if tflops_per_gpu is not None and iteration_seconds is not None:
        raise ValueError("give --tflops-per-gpu or --iteration-seconds, "
                         "not both")
    for name, v in (("tflops_per_gpu", tflops_per_gpu),
                    ("iteration_seconds", iteration_seconds)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be positive, got {v!r}")
    if arch is not None:
        f = arch_flops(arch, batch, seq, recompute)
        n, mm, tokens = f["params"], f["matmul_params"], f["tokens"]
        mf, hf, palm = f["model_flops"], f["hardware_flops"], f["palm_flops"]
    else:
        n = (megatron_params(layers, hidden, vocab, seq) if tied else
             gpt_params(layers, hidden, heads, vocab, seq))
        mm = matmul_params(layers, hidden, vocab)
        tokens = batch * seq
        mf = model_flops(batch, seq, layers, hidden, vocab)
        hf = hardware_flops(batch, seq, layers, hidden, vocab, recompute)
        palm = palm_flops_per_token(mm, layers, heads, hidden // heads,
                                    seq) * tokens
    r = FlopsReport(n, mm, tokens, mf, hf, palm, recompute, gpus)
    if arch is not None:
        r.windowed_model_flops = f.get("windowed_model_flops")
    if peak is not None:
        r.peak_tflops = peak_tflops(peak)
    if tflops_per_gpu is not None:
        iteration_seconds = hf / (gpus * tflops_per_gpu * 1e12)
    if iteration_seconds is not None:
        t = iteration_seconds
        r.iteration_seconds = t
        r.model_tflops_per_gpu = mf / (gpus * t) / 1e12
        r.hardware_tflops_per_gpu = hf / (gpus * t) / 1e12
        r.aggregate_pflops = hf / t / 1e15
        r.tokens_per_second = tokens / t
        if r.peak_tflops:
            r.mfu = r.model_tflops_per_gpu / r.peak_tflops
            r.hfu = r.hardware_tflops_per_gpu / r.peak_tflops
    return r


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def add_arguments(p) -> None:
    from labkit.predict.model import arch
    arch.add_arguments(p)   # --hf-config / --preset instead of the shape
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--vocab", type=int)
    p.add_argument("--batch", type=int, required=True,
                   help="global batch size in sequences per iteration")
    p.add_argument("--gpus", type=int, default=1)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tflops-per-gpu", type=float,
                   help="achieved hardware TFLOP/s per GPU (counted with "
                        "--recompute, as Megatron-LM reports it)")
    g.add_argument("--iteration-seconds", type=float,
                   help="measured seconds per iteration")
    p.add_argument("--peak", choices=sorted(PEAKS),
                   help="GPU preset for MFU (dense bf16 peak)")
    p.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation, for hardware FLOPs")
    p.add_argument("--tied", action="store_true",
                   help="tied output layer, no final LayerNorm: Narayanan "
                        "et al. 2021 Eq. 2 (default: labkit's untied GPT)")
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    from labkit.predict.model import arch
    a = arch.from_args(args)
    shape = ("layers", "hidden", "heads", "vocab")
    if a is None and any(getattr(args, k) is None for k in shape):
        raise ValueError("give --hf-config PATH or --preset NAME, or all of "
                         "--layers --hidden --heads --vocab")
    if a is not None and args.tied:
        raise ValueError("--tied goes with the GPT shape flags; a config "
                         "says tie_word_embeddings itself")
    r = report(args.layers, args.hidden, args.heads, args.seq, args.vocab,
               args.batch, args.gpus, args.tflops_per_gpu,
               args.iteration_seconds, args.peak, args.recompute, args.tied,
               arch=a)
    if args.json:
        print(json.dumps(asdict(r), indent=1))
        return 0
    # the GPT's closed form names only the GPT; a config is counted layer
    # by layer (GQA, SwiGLU, active experts: flops_arch.arch_flops)
    how = ("72Bslh^2(1+s/6h+V/12lh)" if a is None else
           f"counted from {a.name}'s record: flops_arch")
    rows = [("parameters", f"{r.params:,} ({r.params / 1e9:.2f} B)"),
            ("tokens per iteration", f"{r.tokens:,}"),
            ("model FLOPs / iteration", f"{r.model_flops:.4g}  ({how})"),
            ("  = (6N + 12LHQT) x tokens", f"{r.palm_flops:.4g}  (PaLM)"),
            (f"hardware FLOPs ({r.recompute})", f"{r.hardware_flops:.4g}")]
    if r.windowed_model_flops is not None:
        rows.append(("  local layers' window only",
                     f"{r.windowed_model_flops:.4g}  (a kernel that "
                     "skips masked keys)"))
    if r.iteration_seconds is not None:
        rows += [("seconds / iteration", f"{r.iteration_seconds:.4g}"),
                 ("tokens / second", f"{r.tokens_per_second:,.0f}"),
                 ("model TFLOP/s per GPU", f"{r.model_tflops_per_gpu:.4g}"),
                 ("hardware TFLOP/s per GPU",
                  f"{r.hardware_tflops_per_gpu:.4g}"),
                 (f"aggregate PFLOP/s ({r.gpus} GPUs)",
                  f"{r.aggregate_pflops:.4g}")]
        if r.mfu is not None:
            rows += [(f"MFU (peak {r.peak_tflops:g} TFLOP/s)",
                      f"{r.mfu:.1%}"), ("HFU", f"{r.hfu:.1%}")]
        elif args.peak is None:
            rows.append(("MFU", "give --peak a100|h100|h200"))
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}s}  {v}")
    return 0
