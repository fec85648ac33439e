"""What each framework allocates beside the ZeRO ledger, term by term, each
with the source that allocates it (pure Python).

    python -m labkit memory --hf-config config.json --gpus 8 --stage 2 \
        --framework deepspeed
    from labkit.predict.memory.frameworks import terms
    terms("fsdp2", ledger_strategy="zero3", params=8.03e9, gpus=8,
          largest_layer=525e6, largest_unit=218e6)

The ledger (:mod:`labkit.predict.memory.states`) is the ideal job: 2 + 2
+ 12 bytes per parameter, partitioned as ZeRO's stage says (Rajbhandari et
al. 2020, Sec. 3.1). A real framework holds more, and says so in its own
code; each :class:`Term` names that code:

- ``deepspeed``, ZeRO-1/2 (``deepspeed/runtime/zero/stage_1_and_2.py``):
  the gradient partition the optimizer steps with is fp32 (4 bytes per
  parameter over N, on top of the ledger's 16-bit gradients: DeepSpeed's
  own estimator writes 2 + 18/N), and backward copies gradients into a
  contiguous reduce bucket of ``reduce_bucket_size`` elements (two with
  ``overlap_comm``, which defaults to on for ZeRO-3 only).
- ``deepspeed``, ZeRO-3 (``stage3.py``): the same fp32 partition (18/N),
  the largest layer gathered with its gradient (4 bytes x its parameters,
  DeepSpeed's estimator), and parameters under
  ``stage3_param_persistence_threshold`` elements never partitioned.
  ``stage3_max_live_parameters`` and ``stage3_prefetch_bucket_size`` bound
  what is gathered at once; they are shown as bounds, not added.
- ``fsdp2`` / ``fsdp1``: the unit being computed and the one prefetched
  are unsharded (bf16 under mixed precision), and the unit's gradient is
  cast to ``reduce_dtype`` (fp32) for the reduce-scatter
  (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``,
  ``foreach_reduce``).
- ``megatron``: gradients accumulate in an fp32 ``main_grad`` (4 bytes,
  not 2), whole on every data-parallel rank even with the distributed
  optimizer (Megatron-Core's distributed-optimizer guide: 18 bytes per
  parameter, 6 + 12/d distributed).

DeepSpeed's CPU figures (offload) follow its estimator exactly
(:func:`deepspeed_terms`); ``tests/test_predict_frameworks.py`` calls the
installed DeepSpeed's ``estimate_zero2/3_model_states_mem_needs``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FRAMEWORKS = ("ledger", "deepspeed", "fsdp2", "fsdp1", "megatron")

DS = "deepspeed/runtime/zero/"
# DeepSpeed 0.19.8's defaults (``DeepSpeedZeroConfig``; the tests hold them
# to the installed package), in elements.
DEEPSPEED_DEFAULTS = {"reduce_bucket_size": 500_000_000,
                      "allgather_bucket_size": 500_000_000,
                      "stage3_max_live_parameters": 1_000_000_000,
                      "stage3_prefetch_bucket_size": 50_000_000,
                      "stage3_param_persistence_threshold": 100_000}


@dataclass(frozen=True)
class Term:
    """Bytes one rank holds beyond the ledger (``cpu``: its share of the
    host), what allocates them, and whether they add to the peak."""
    name: str
    gpu: float
    cpu: float
    source: str
    bound: bool = False   # an upper bound shown for reference, not added

    def as_dict(self) -> dict:
        return {"name": self.name, "gpu": self.gpu, "cpu": self.cpu,
                "source": self.source, "bound": self.bound}


def deepspeed_terms(stage: int, psi: float, largest: float,
                    gpus_per_node: int, nodes: int = 1,
                    offload_optimizer: bool = False,
                    offload_param: bool = False, zero_init: bool = True,
                    buffer_factor: float = 1.5) -> dict:
    """DeepSpeed's estimate written as the ledger plus named terms.

    Returns ``{"gpu": {...}, "cpu": {...}}``, each ``{"ledger": ..,
    <term>: ..}`` summing to DeepSpeed's number for the whole GPU and the
    whole node's host (``estimate_zero2_model_states_mem_needs`` in
    ``stage_1_and_2.py``, ``estimate_zero3_...`` in ``stage3.py``):
    ``fp32_grads`` (its 18 bytes per parameter count the gradient
    partition in fp32), ``largest_layer`` (ZeRO-3: 4 bytes x the largest
    layer), ``fp32_model_per_process`` (every process of a node builds the
    fp32 model on the host unless ``zero.Init`` does it partitioned),
    ``not_divided_by_nodes`` (ZeRO-2 offload's CPU figure) and ``buffer``
    (CPU figures x ``buffer_factor``).
    """
    from labkit.predict.memory.states import ledger
    g, k = gpus_per_node, nodes
    n = g * k
    psi, big, f = float(psi), float(largest), buffer_factor
    offload = ("params" if offload_param else
               "optimizer" if offload_optimizer else "none")
    led = ledger(psi, n, f"zero{stage}", offload=offload)
    gpu = {"ledger": led.gpu_total}
    cpu = {"ledger": led.cpu_total * g}
    if stage in (1, 2) and not offload_optimizer:
        gpu["fp32_grads"] = 4 * psi / n          # 2 + 18/N vs 2 + 14/N
    if stage == 3:
        gpu["largest_layer"] = 4 * big
        if not offload_optimizer:
            gpu["fp32_grads"] = 2 * psi / n      # 18/N vs 16/N
    if not offload_optimizer:   # nothing offloaded: the host builds it
        built = big if (stage == 3 and zero_init) else psi
        cpu["fp32_model_per_process"] = 4 * built * g
    else:
        if stage in (1, 2):     # psi * max(4 N, 16): N = all GPUs
            states, model = 16 * psi, 4 * n * psi
        else:                   # psi * max(4 g, 16/k or 18/k)
            states = (18 if offload_param else 16) * psi / k
            model = 0 if zero_init else 4 * g * psi
        if model > states:
            cpu["fp32_model_per_process"] = model - cpu["ledger"]
        else:
            per_node = states if stage == 3 else 16 * psi / k
            cpu["fp32_grads"] = per_node - cpu["ledger"]
            if stage in (1, 2) and k > 1:
                cpu["not_divided_by_nodes"] = states - per_node
    cpu["buffer"] = (f - 1) * sum(cpu.values())
    return {"gpu": gpu, "cpu": cpu}


def _deepspeed(stage: int, psi: float, gpus: int, gpus_per_node: int,
               largest_layer: float, persistent: float, offload: str,
               knobs: dict) -> list[Term]:
    nodes = max(1, -(-gpus // gpus_per_node))
    d = deepspeed_terms(stage, psi, largest_layer, min(gpus, gpus_per_node),
                        nodes, offload in ("optimizer", "params"),
                        offload == "params")
    per_rank = min(gpus, gpus_per_node)
    est = DS + ("stage3.py" if stage == 3 else "stage_1_and_2.py")
    out = [Term(name.replace("_", " "), d["gpu"].get(name, 0.0),
                d["cpu"].get(name, 0.0) / per_rank,
                f"{est}: estimate_zero{max(stage, 2)}_model_states_mem_needs")
           for name in ("fp32_grads", "largest_layer",
                        "fp32_model_per_process", "not_divided_by_nodes",
                        "buffer")
           if d["gpu"].get(name) or d["cpu"].get(name)]
    k = {**DEEPSPEED_DEFAULTS, **knobs}
    # ZeRO-1/2 double the bucket under overlap_comm (off by default below
    # ZeRO-3, DeepSpeedZeroConfig.overlap_comm_valid); ZeRO-3 keeps one.
    two = stage < 3 and k.get("overlap_comm", False)
    out.append(Term("reduce bucket" + (" x2 (overlap_comm)" if two else ""),
                    (2 if two else 1) * k["reduce_bucket_size"] * 2, 0.0,
                    f"{DS}stage_1_and_2.py: setup_buckets" if stage < 3
                    else f"{DS}stage3.py: ipg bucket buffer"))
    if stage == 3 and persistent:
        out.append(Term("persistent params", 2 * persistent
                        * (1 - 1 / gpus), 0.0,
                        f"{DS}stage3.py: stage3_param_persistence_threshold"))
    if stage == 3:
        out.append(Term("max live params", 2 * k[
            "stage3_max_live_parameters"], 0.0,
            f"{DS}config.py: stage3_max_live_parameters", True))
    return out


FSDP_SRC = {"fsdp2": "torch/distributed/fsdp/_fully_shard/"
                     "_fsdp_collectives.py: foreach_all_gather, "
                     "foreach_reduce",
            "fsdp1": "torch/distributed/fsdp/_flat_param.py: "
                     "FlatParamHandle.unshard"}


def _fsdp(framework: str, strategy: str, unit: float, mixed: bool):
    src = FSDP_SRC[framework]
    p = 2 if mixed else 4
    out = []
    if strategy in ("zero3", "full_shard", "hybrid_shard"):
        out.append(Term("unsharded unit", p * unit, 0.0, src))
    if strategy != "no_shard" and strategy not in ("ddp", "zero0"):
        out.append(Term("prefetched unit", p * unit, 0.0, src))
        out.append(Term("unit gradient, fp32 reduce_dtype", 4 * unit, 0.0,
                        src))
    return out


def terms(framework: str, *, ledger_strategy: str, params: float,
          gpus: int, largest_layer: float = 0.0, largest_unit: float = 0.0,
          persistent: float = 0.0, gpus_per_node: int = 8,
          offload: str = "none", precision: str = "mixed",
          knobs: dict | None = None) -> list[Term]:
    """The terms ``framework`` adds to ``ledger(params, gpus,
    ledger_strategy, ...)`` on one rank.

    ``largest_layer``: parameters held directly by the largest module
    (DeepSpeed's "largest layer"); ``largest_unit``: parameters of the
    largest FSDP unit (a decoder layer, or the embedding); ``persistent``:
    parameters in tensors below ZeRO-3's persistence threshold.
    """
    from labkit.predict.memory.states import ZERO_STAGE
    if framework not in FRAMEWORKS:
        raise ValueError(f"--framework must be one of "
                         f"{', '.join(FRAMEWORKS)}, got {framework!r}")
    stage = ZERO_STAGE[ledger_strategy]
    mixed = precision == "mixed"
    if framework == "ledger":
        return []
    if framework == "deepspeed":
        if not mixed:
            raise ValueError("--framework deepspeed prices mixed precision "
                             "(its estimator's 2 + 18/N bytes)")
        if stage == 0:
            return []
        return _deepspeed(stage, params, gpus, gpus_per_node, largest_layer,
                          persistent, offload, knobs or {})
    if framework == "megatron":
        if stage > 1 or offload != "none":
            raise ValueError("--framework megatron: data parallelism is "
                             "DDP (--stage 0) or the distributed optimizer "
                             "(--stage 1), without offload")
        return [Term("main_grad in fp32, not 16-bit",
                     2 * params if mixed else 0.0, 0.0,
                     "megatron/core/distributed/param_and_grad_buffer.py; "
                     "docs: distributed optimizer, 18 B/param "
                     "(6 + 12/d distributed)")]
    return _fsdp(framework, ledger_strategy, largest_unit, mixed)


# -- sizes the terms read: from a record, or from a built model's tensors --

def sizes(named, stored=None, threshold: int = DEEPSPEED_DEFAULTS[
        "stage3_param_persistence_threshold"]) -> dict:
    """``largest_layer`` (the most parameters a module holds itself: a
    MoE layer's experts are one module), ``largest_unit`` (a decoder layer
    ``...layers.N``, or a top-level module: the embedding, the head) and
    ``persistent`` (tensors of at most ``threshold`` elements, which
    DeepSpeed's ZeRO-3 keeps whole) of the tensors ``named``: ``(name,
    elements)`` pairs, the record's (``layers.3.mlp.up_proj.weight``) or a
    built model's (``model.layers.3.mlp.up_proj.weight``). ``stored`` maps
    a name to the tensor it is stored in (the record's experts are fused
    in transformers 5: :func:`_stored`)."""
    modules: dict = {}
    units: dict = {}
    kept: dict = {}
    for name, n in named:
        module = name.rsplit(".", 1)[0]
        parts = module.split(".")
        if "experts" in parts:   # layers.3.mlp.experts.17.up_proj
            module = ".".join(parts[:parts.index("experts") + 1])
        modules[module] = modules.get(module, 0) + n
        layer = re.match(r"(.*?\blayers\.\d+)\.", name)
        unit = layer.group(1) if layer else module
        units[unit] = units.get(unit, 0) + n
        key = stored(name) if stored else name
        kept[key] = kept.get(key, 0) + n
    return {"largest_layer": max(modules.values()),
            "largest_unit": max(units.values()),
            "persistent": sum(n for n in kept.values() if n <= threshold)}


def _stored(name: str) -> str:
    """The tensor a record's tensor is part of in transformers 5: a MoE
    layer's experts are fused, every expert's gate and up projections
    into one ``gate_up_proj`` (``[E, 2F, H]``) and the down projections
    into one ``down_proj``, and so are their biases (gpt-oss:
    ``gate_up_proj_bias`` ``[E, 2F]``; modeling_gpt_oss.py,
    ``GptOssExperts``). ``layers.3.mlp.experts.17.up_proj.bias`` is part
    of ``layers.3.mlp.experts.gate_up_proj.bias``."""
    parts = name.split(".")
    if "experts" not in parts or len(parts) < parts.index("experts") + 4:
        return name
    i = parts.index("experts")
    proj = parts[i + 2]
    proj = "gate_up_proj" if proj in ("gate_proj", "up_proj") else proj
    return ".".join(parts[:i + 1] + [proj] + parts[i + 3:])


def record_sizes(a, threshold: int = DEEPSPEED_DEFAULTS[
        "stage3_param_persistence_threshold"]) -> dict:
    """:func:`sizes` of the record ``a``'s tensors."""
    from labkit.predict.model.params import numel, tensors
    return sizes(((name, numel(shape)) for name, shape, _ in tensors(a)),
                 _stored, threshold)
