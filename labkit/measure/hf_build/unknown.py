"""The record's fallback: ``params``, ``memory`` and ``flops --hf-config``
of a model_type the record does not read
(:class:`labkit.predict.model.hf_config.UnknownFamily`) answer from
transformers' own build, saying so: parameters counted on the meta device
(exact, seconds even at 1T), FLOPs by FlopCounterMode on fake tensors.
The other commands (plan, dryrun) need the record's layer-by-layer shapes
and keep the one line naming this command.

    python -m labkit params --hf-config starcoder2.json
    python -m labkit memory --hf-config starcoder2.json --gpus 8 --stage 3
"""
from __future__ import annotations

import json
import sys

from labkit.measure.hf_build import _build, _config, _split, measure_config


def meta_params(source) -> dict:
    """Parameters of transformers' build of ``source`` on the meta device:
    the language model's and the rest's (a vision tower, a projector)."""
    import torch
    cfg = _config(source)
    with torch.device("meta"):
        model, _ = _build(cfg, torch.bfloat16, "sdpa")
    lang, rest = _split(model)
    whole = None if cfg.get_text_config() is cfg else type(model).__name__
    return {"model_type": cfg.model_type, "params": lang,
            "other_params": rest, "total": lang + rest,
            "whole_model": whole, "sizes": _sizes(model)}


def _sizes(model) -> dict:
    """What the frameworks' terms read, from the built model's own
    tensors (:func:`labkit.predict.memory.frameworks.sizes`)."""
    from labkit.predict.memory.frameworks import sizes
    return sizes((name, p.numel()) for name, p in
                 model.named_parameters(remove_duplicate=True))


def _said(e) -> str:
    return (f"model_type {e.model_type!r}: the course's record does not "
            "know this family; measured on transformers' own build")


def unknown_family(name: str, args, e) -> int:
    """Command ``name``'s answer for the family of ``e``
    (:class:`labkit.predict.model.hf_config.UnknownFamily`); any other
    command keeps the record's one line."""
    if name == "params":
        got = meta_params(args.hf_config)
        got.pop("sizes")
        if args.json:
            print(json.dumps({**got, "record": None,
                              "measured_by": "transformers, meta device"},
                             indent=1))
            return 0
        print(f"{_said(e)} (meta device)")
        print(f"{'total':10s}{got['total']:>18,}  "
              f"({got['total'] / 1e9:.3f} B)")
        if got["other_params"]:
            print(f"{'language':10s}{got['params']:>18,}  "
                  f"(the rest of {got['whole_model']}: "
                  f"{got['other_params']:,})")
        return 0
    if name == "memory":
        got = meta_params(args.hf_config)
        print(f"{_said(e)}: {got['total']:,} parameters (meta device)",
              file=sys.stderr if args.json else sys.stdout)
        from labkit.predict import memory
        args.params, args.hf_config = float(got["total"]), None
        args.sizes = got["sizes"]
        return memory.main(args)
    if name == "flops":
        return _flops(args, e)
    raise e


def _flops(args, e) -> int:
    """Model FLOPs of an iteration: one sequence's step measured on fake
    tensors (FlopCounterMode, forward + backward), times the batch (no
    term of a decoder's step crosses sequences)."""
    from labkit.predict.model.flops import peak_tflops
    one = measure_config(args.hf_config, args.seq, 1)
    flops = one["flops"] * args.batch
    rows = {"params": one["params"], "tokens": args.seq * args.batch,
            "model_flops": flops, "measured_by": "FlopCounterMode, fake "
            "tensors", "model_type": one["model_type"]}
    if args.iteration_seconds:
        per_gpu = flops / args.iteration_seconds / args.gpus / 1e12
        rows["model_tflops_per_gpu"] = per_gpu
        if args.peak:
            rows["mfu"] = per_gpu / peak_tflops(args.peak)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{_said(e)} (fake tensors, {args.seq} tokens a sequence)")
    print(f"parameters               {one['params']:,}")
    print(f"tokens per iteration     {rows['tokens']:,}")
    print(f"model FLOPs / iteration  {flops:.4g}  (forward + backward, "
          "as counted)")
    if "model_tflops_per_gpu" in rows:
        print(f"model TFLOP/s per GPU    {rows['model_tflops_per_gpu']:.4g}")
    if "mfu" in rows:
        print(f"MFU (peak {peak_tflops(args.peak):g} TFLOP/s)"
              f"      {rows['mfu']:.1%}")
    return 0
