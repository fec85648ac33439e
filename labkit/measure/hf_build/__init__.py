"""Any decoder the installed transformers builds from a ``config.json``,
measured at its real size on fake tensors: parameters, the FLOPs of one
training step and the bytes its forward keeps for backward.

    python -m labkit build --hf-config config.json --seq 4096 --batch 1
    python -m labkit build --hf-config config.json --seq 4096 --json
    from labkit.measure.hf_build import measure_config
    measure_config("config.json", seq=4096, batch=1)

The course's record (:mod:`labkit.predict.model.hf_config`) reads the families it
knows into closed forms; this is the check that needs no closed form. The
model is built by transformers itself under ``FakeTensorMode`` (shapes and
dtypes, no data: a 235 B-parameter MoE costs seconds and no memory), then:

- parameters: every distinct tensor once (tied weights once);
- FLOPs: one forward and backward under ``FlopCounterMode`` with eager
  attention (the full ``s x s`` scores, PaLM's convention, Chowdhery et
  al. 2022, App. B) and the experts' ``_grouped_mm``, which torch's table
  does not count, counted as ``2 M K N`` (:func:`_grouped_mm_flops`);
- activations: the storages the forward leaves alive for backward, with
  SDPA attention as training runs it (:func:`labkit.measure.activations
  .measure`, parameters aside), in bf16 weights and activations.

A multimodal config (a nested ``text_config``) is measured on its language
model; the whole model's parameters are counted on the meta device and the
rest (the vision tower, the projector) is named apart. A family the record
does not know is measured all the same, and the answer says so.
"""
from __future__ import annotations

import argparse
import contextlib
import json

GB = 1e9


def _config(source):
    import transformers
    transformers.logging.set_verbosity_error()
    from labkit.predict.model.hf_config import _load
    d = dict(_load(source))
    kind = d.get("model_type")
    if not isinstance(kind, str):
        raise ValueError(f"--hf-config {source}: no 'model_type'")
    try:
        return transformers.AutoConfig.for_model(**d)
    except (ValueError, KeyError) as e:
        raise ValueError(f"--hf-config {source}: the installed transformers "
                         f"{transformers.__version__} cannot read "
                         f"model_type {kind!r} ({e})") from None


def _grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kw) -> int:
    """``torch._grouped_mm``: every row of the packed operand meets one
    group's matrix, ``2 M K N`` in all (2-D x 3-D: the MoE forward; 2-D x
    2-D: the weights' gradient, contracting over the packed rows)."""
    if len(a_shape) == 2 and len(b_shape) == 3:
        return 2 * a_shape[0] * a_shape[1] * b_shape[2]
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    if len(a_shape) == 3 and len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    e, m, k = a_shape
    return 2 * e * m * k * b_shape[-1]


VISION = ("vision", "visual", "multi_modal_projector", "image")


def _auto(cfg):
    """The model class that builds ``cfg`` whole: a language model, or an
    image-text model whose text-only forward is its language model's (a
    config with a text part that no image-text class takes -- an audio or
    a speculative-decoding model -- is built as a language model)."""
    import transformers
    image = transformers.AutoModelForImageTextToText
    if cfg.get_text_config() is cfg or type(cfg) not in image._model_mapping:
        return transformers.AutoModelForCausalLM
    return image


@contextlib.contextmanager
def _no_initialisation():
    """Build without drawing initial values: a fake tensor has none, and
    an initialiser that reads one back fails on it (SigLIP's
    ``lecun_normal_`` -> ``trunc_normal_``, Gemma 3's vision tower:
    ``DataDependentOutputException``). Only ``initialize_weights`` is
    skipped; ``init_weights`` still ties the tied weights."""
    from transformers import PreTrainedModel
    keep = PreTrainedModel.initialize_weights
    PreTrainedModel.initialize_weights = lambda self: None
    try:
        yield
    finally:
        PreTrainedModel.initialize_weights = keep


def _build(cfg, dtype, attn: str):
    """The model, and the attention it runs: SDPA where transformers has
    it for the family, else eager (Gemma 2's soft-capping, gpt-oss's
    sinks)."""
    cfg = cfg.__class__.from_dict(cfg.to_dict())
    for impl in dict.fromkeys((attn, "eager")):
        cfg._attn_implementation = impl   # MoE experts: grouped_mm, bf16
        try:
            with _no_initialisation():
                return _auto(cfg).from_config(cfg, dtype=dtype), impl
        except ValueError as e:
            if "attention implementation" not in str(e):
                raise
    raise AssertionError("unreachable")


def _split(model) -> tuple[int, int]:
    """``(language model's parameters, the rest's)``: the rest is what a
    multimodal model keeps under a vision or projector module."""
    lang, rest = {}, {}
    for name, p in model.named_parameters(remove_duplicate=True):
        part = rest if any(v in name for v in VISION) else lang
        part[id(p)] = p.numel()
    return sum(lang.values()), sum(rest.values())


def measure_config(source, seq: int, batch: int = 1) -> dict:
    """Parameters, FLOPs of one training step (forward + backward) and
    activation bytes of the decoder ``source`` describes, at real size."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    from labkit.measure.activations import measure
    cfg = _config(source)
    text = cfg.get_text_config()
    mapping = {torch.ops.aten._grouped_mm: _grouped_mm_flops}
    with FakeTensorMode(allow_non_fake_inputs=True):
        model, _ = _build(cfg, torch.bfloat16, "eager")
        params, rest = _split(model)
        x = torch.randint(0, text.vocab_size, (batch, seq))
        with FlopCounterMode(display=False, custom_mapping=mapping) as fc:
            model(input_ids=x, labels=x).loss.backward()
        flops = fc.get_total_flops()
        del model
        model, attn = _build(cfg, torch.bfloat16, "sdpa")

        class _Step(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x, y):
                return self.m(input_ids=x, labels=y).loss

        got = measure(_Step(model), x, x.clone(), settle_s=0.0)
    whole = None if text is cfg else type(model).__name__
    return {"model_type": cfg.model_type, "language_model": text.model_type,
            "params": params, "other_params": rest, "whole_model": whole,
            "tokens": batch * seq, "flops": float(flops),
            "flops_per_token": flops / (batch * seq),
            "activation_bytes": got["total"], "attention": attn,
            "dtype": "bf16"}


def record_answer(source, seq: int, batch: int) -> dict | None:
    """The record's closed forms for the same config, or None where the
    record does not know the family."""
    from labkit.predict.model import hf_config
    from labkit.predict.model.flops_arch import arch_flops
    from labkit.predict.model.params import total
    try:
        a = hf_config.read(source)
    except ValueError:
        return None
    f = arch_flops(a, batch=batch, seq=seq)
    return {"params": total(a), "flops": f["model_flops"]}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hf-config", required=True,
                   help="a model's Hugging Face config.json (a file)")
    p.add_argument("--seq", type=int, required=True,
                   help="tokens per sequence of the step")
    p.add_argument("--batch", type=int, default=1, help="sequences")
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    got = measure_config(args.hf_config, args.seq, args.batch)
    rec = record_answer(args.hf_config, args.seq, args.batch)
    got["record"] = rec
    if rec:
        got["ratio"] = {k: got[k] / rec[k] for k in ("params", "flops")}
    if args.json:
        print(json.dumps(got, indent=1))
        return 0
    print(f"{got['model_type']}: built by transformers on fake tensors, "
          f"{args.batch} x {args.seq} tokens, bf16")
    if got["whole_model"]:
        print(f"  measured: the language model ({got['language_model']}); "
              f"the rest of {got['whole_model']}: "
              f"{got['other_params']:,} parameters")
    print(f"{'':16s}{'measured':>26s}{'record':>26s}{'ratio':>8s}")
    for k in ("params", "flops"):
        r = rec[k] if rec else None
        print(f"{k:16s}{got[k]:26,.0f}"
              + (f"{r:26,.0f}{got[k] / r:8.4f}" if r else f"{'-':>26s}"))
    print(f"{'activations (GB)':16s}{got['activation_bytes'] / GB:26.2f}")
    if rec is None:
        print("the course's record does not know this family: the "
              "measured numbers are the answer")
    return 0
