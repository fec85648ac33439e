"""What each lab of a profile needs of one GPU's memory, lab by lab.

    from labkit.preflight.memory import lab_needs, check_memory
    for need in lab_needs(load_profile("gpu8"), 80e9):
        print(need.lab, need.bytes, need.what, need.expect_oom)
    check_memory(profile, "NVIDIA H100 80GB HBM3", 80e9, gpus=8)

Per lab, the most bytes one rank holds in the runs the lab starts:

- data-parallel labs (1, 3, 4, 7, 8, 9): the model states of the most
  demanding strategy the lab runs, at the world size it runs it
  (:func:`labkit.predict.memory.ledger`; ZeRO paper Sec. 3.1 and 5);
  lab 1 with ``fit_to_gpu`` trains as many layers as the GPU holds
  (:func:`labkit.predict.memory.layers_that_fit`), so it needs the fitted
  model, and fails only when not one layer fits;
- lab 10 (mesh): the TP-then-FSDP shard, weights, gradients and Adam
  (:func:`labkit.predict.mesh.rank_param_bytes`);
- lab 12 (fit): every run it starts (:func:`labkit.predict.fit_runs.runs`:
  the planner's choice, each accumulation run, the gpu cell's DDP), states
  + activations + transient, judged with the runtime floor and a margin
  (:func:`labkit.predict.memory.job.on_gpu`, one ``gpu headroom`` line
  each) -- the same list and the same function the rehearsal judges its
  dry-run peaks with. Its DDP is the *expected* OOM (the ``gpu`` cell
  tries it and catches CUDA's out-of-memory): listed, never a reason to
  stop.

Labs without a model in their section (collectives, tensor, pipeline and
context parallelism: a block or buffers, a few GB at most) are not
listed. Activations are left out except in lab 12's plan: the margin
(0.9 of the GPU) is for them, the CUDA context and NCCL's buffers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from labkit.preflight.check import Check, gb

SHARE = 0.9   # a need above 90 % of the GPU fails the check


@dataclass
class Need:
    lab: str
    bytes: float
    what: str
    expect_oom: bool = False
    judged: dict | None = None   # labkit.predict.memory.job.on_gpu's


def _ledger_strategy(name: str) -> tuple[str, str] | None:
    """(ledger strategy, offload) of a strategy / variant / plugin name."""
    from labkit.training.wrap import ZERO_EQUIVALENT
    offload = ("params" if "offload_params" in name else
               "optimizer" if "offload" in name else "none")
    m = re.match(r"(?:low_level_)?zero_?(\d)", name)
    if m:
        return f"zero{m.group(1)}", offload
    named = {"torch_ddp": "ddp", "torch_fsdp": "full_shard",
             "gemini": "zero3", **ZERO_EQUIVALENT}
    return (named[name], offload) if name in named else None


def _strategies(lab: str, p: dict) -> list[str]:
    if lab == "profiling":
        return ["ddp"]
    if lab == "checkpoint":
        return ["fsdp2_full"]
    return [*p.get("strategies", []), *p.get("variants", []),
            *p.get("fsdp", []), *p.get("plugins", [])]


def fitted_layers(p: dict, gpu_bytes: float) -> int:
    """Lab 1's ``fit_to_gpu``: the layers of ``p["model"]`` that ledger
    and activations fit in ``gpu_bytes`` (0: not one), as the lab's check
    trains them (:mod:`labkit.checks.data_parallel`)."""
    from labkit.predict.memory import layers_that_fit
    m = p["model"]
    worlds = p.get("world_sizes") or [p.get("world_size", 1)]
    return min(m["layers"], layers_that_fit(
        gpu_bytes, m["layers"], m["hidden"], m["heads"], m["vocab"],
        m["seq"], p["global_batch"] // min(worlds)))


def _dp_need(lab: str, p: dict, gpu_bytes: float) -> Need | None:
    from labkit.predict.memory import ledger
    from labkit.predict.model.params import lab_params
    m = dict(p["model"])
    note = ""
    worlds = p.get("world_sizes") or [p.get("world_size", 1)]
    if p.get("fit_to_gpu"):
        fit = fitted_layers(p, gpu_bytes)
        if fit == 0:
            return Need(lab, float("inf"), "fit_to_gpu: not one layer fits")
        note = f", fit_to_gpu: {fit} of {m['layers']} layers"
        m["layers"] = fit
    psi = lab_params(m)
    precision = "mixed" if p.get("bf16") else "fp32"
    best = None
    for s in _strategies(lab, p):
        known = _ledger_strategy(s)
        if known is None:
            continue
        strategy, offload = known
        for n in worlds:
            kw = ({"shard_group": p["shard_group"]}
                  if strategy == "hybrid_shard" and p.get("shard_group")
                  else {})
            need = ledger(psi, n, strategy, precision, offload=offload,
                          **kw).gpu_total
            if best is None or need > best.bytes:
                best = Need(lab, need, f"{s} model states at {n} ranks"
                            f"{note}")
    return best


def _mesh_need(p: dict) -> Need:
    from labkit.predict.mesh import rank_param_bytes
    m, worst = p["model"], None
    for text in p["layouts"]:
        dp, tp = (int(x) for x in text.split("+")[0].split("x"))
        need = 4 * rank_param_bytes(m["vocab"], m["seq"], m["layers"],
                                    m["hidden"], dp, tp)
        if worst is None or need > worst.bytes:
            worst = Need("mesh", need, f"layout {text}: weights, grads, "
                         "Adam")
    return worst


def _fit_needs(p: dict, gpu_bytes: float) -> list[Need]:
    """Lab 12's runs (:func:`labkit.predict.fit_runs.runs`, the list the
    rehearsal dry-runs), each judged by
    :func:`labkit.predict.memory.job.on_gpu`: its bytes plus the runtime
    floor, with a margin left free."""
    from labkit.predict.fit_runs import runs
    from labkit.predict.memory.job import on_gpu
    out = []
    for r in runs(p):
        judged = on_gpu(r.allocated["total"], p["world_size"], gpu_bytes)
        what = (f"{r.variant} (the gpu cell's OOM)" if r.expect_oom
                else r.variant)
        out.append(Need("fit", judged["need"], what, r.expect_oom, judged))
    return out


def lab_needs(profile: dict, gpu_bytes: float,
              gpus: int | None = None) -> list[Need]:
    """Every lab's need (see the module doc), in profile order; with
    ``gpus``, only the labs that run on that many (the runner skips the
    others)."""
    from labkit.preflight.check import lab_ranks
    out = []
    for lab, p in profile.items():
        p = p or {}
        if gpus is not None and lab_ranks(p) > gpus:
            continue
        if lab == "fit" and "budget_bytes" in p:
            out += _fit_needs(p, gpu_bytes)
        elif lab == "mesh" and "layouts" in p:
            out.append(_mesh_need(p))
        elif isinstance(p.get("model"), dict):
            need = _dp_need(lab, p, gpu_bytes)
            if need:
                out.append(need)
    return out


def _headroom(n: Need, gpu_bytes: float) -> Check:
    """A run judged with the runtime floor: its headroom and the margin."""
    j = n.judged
    return Check("gpu headroom", "ok" if j["fits"] else "fail",
                 f"lab {n.lab}: {n.what}: {gb(j['allocated'])} + floor "
                 f"{gb(j['floor'])} = {gb(j['need'])} of {gb(gpu_bytes)}",
                 f">= {gb(j['margin'])} free (margin); "
                 f"{j['sentence']}",
                 "" if j["fits"] else "a GPU with more memory, or a "
                 "smaller micro-batch for this run")


def check_memory(profile: dict, gpu: str, gpu_bytes: float,
                 gpus: int | None = None) -> list[Check]:
    """The ``gpu memory`` line (the largest need that must fit) and one
    ``expected OOM`` line per run a lab expects to run out of memory."""
    needs = lab_needs(profile, gpu_bytes, gpus)
    must = [n for n in needs if not n.expect_oom]
    over = [n for n in must if (not n.judged["fits"] if n.judged
                                else n.bytes >= SHARE * gpu_bytes)]
    top = max(must, key=lambda n: n.bytes, default=None)
    shown = over[0] if over else top
    out = [Check("gpu memory", "fail" if over else "ok",
                 f"{gb(gpu_bytes)} ({gpu})",
                 (f"{gb(shown.bytes)} for lab {shown.lab}: {shown.what}"
                  if shown else "no lab with a model")
                 + (f" (< {SHARE:.0%}, + activations)" if not (
                     shown and shown.judged) else " (with its activations "
                     "and the runtime floor; see gpu headroom)"),
                 "a GPU with more memory, or lower the profile's sizes for "
                 + ", ".join(sorted({n.lab for n in over})) if over else "")]
    out += [_headroom(n, gpu_bytes) for n in needs
            if n.judged and not n.expect_oom]
    for n in needs:
        if n.expect_oom:
            ooms = (not n.judged["fits"] if n.judged
                    else n.bytes > gpu_bytes)
            out.append(Check(
                "expected OOM", "ok" if ooms else "warn",
                f"lab {n.lab}: {n.what}: {gb(n.bytes)} vs {gb(gpu_bytes)}",
                "more than the GPU (the lab shows the OOM)",
                "" if ooms else "this GPU holds it: the lab's OOM cell "
                "will report no OOM"))
    return out
