"""Price one parallel layout: memory per GPU and time per step.

    python -m labkit plan --params 175e9 --gpus 1024 --batch 1536 --top 5
    python -m labkit plan --hf-config llama3.1-405b.json --seq 8192 \
        --gpus 16384 --gpu h100-80gb --batch 2048 --tp 8 --pp 16

The formulas of chapters 1-6 only (no torch), used by
:mod:`labkit.predict.choosing` (``labkit plan``):

- memory per GPU, heaviest pipeline stage (:mod:`labkit.predict.pipeline_parallel.partition`:
  every stage priced with its own layers, the embedding on the first, the
  output layer and its logits on the last, the micro-batches 1F1B keeps in
  flight there, all read from the model's architecture record by
  :mod:`labkit.predict.pipeline_parallel.stage_bytes`: GQA, SwiGLU, an untied vocabulary):
  model states from the ledger (:mod:`labkit.predict.memory`,
  ZeRO Fig. 1); activations from Korthikanti et al. 2022, Table 2, plus one
  layer's full activations while a layer is recomputed; buffers: the output
  layer's logits (Korthikanti Sec. 4.3, ``4 s b h / t (1 + V/h)``),
  ZeRO-3's two gathered layers, and ``reserve`` bytes (CUDA context, NCCL,
  fragmentation: an assumption of this course, ``--reserve-gb``); with
  ``--framework``, the framework's own terms and the runtime floor
  instead of the gathered layers and the reserve
  (:mod:`labkit.predict.choosing.framework_cost`);
- time per step: hardware FLOPs (Narayanan et al. 2021, Eq. 3, with the
  recomputation) at the fraction of the dense bf16 peak the roofline
  gives the layer's matmuls
  (:func:`labkit.predict.choosing.matmul_time.matmul_efficiency`:
  ``efficiency`` above the ridge point, less for thin ones), paced by the
  stage with the most layers that compute (a cross-attention layer, which
  a text-only step skips, holds its weights and computes nothing:
  :func:`labkit.predict.pipeline_parallel.stage_bytes.computing_layers`);
  Megatron's TP collectives on the critical
  path (:mod:`labkit.predict.tensor_parallel`, 4 per layer and
  micro-batch, 6 with full recomputation) and, when ``tp`` exceeds the
  K/V heads, the all-reduce of the replicated K/V heads' gradients
  (:func:`kv_grad_sync_time`); the 1F1B bubble ``(p - 1) / m``
  (Narayanan Sec. 2.2.1) and the stage-to-stage sends; the data-parallel
  collectives of the ZeRO stage (:mod:`labkit.predict.sharding`),
  overlapped with backward when there is no pipeline (DDP buckets, FSDP
  prefetch) and exposed after the flush when there is one (Megatron-LM
  2021 reduces after the last micro-batch); offload adds the PCIe copies of
  gradients down and weights up and a CPU Adam at ``cpu_adam`` parameters
  per second (an assumption);
- context parallelism (``cp``): every rank holds ``s/cp`` tokens of each
  sequence (activations, logits and TP messages divided by ``cp``), ring
  attention's K/V hops (:mod:`labkit.predict.context_parallel`) are
  overlapped with the layer's computation and only their excess counts,
  and gradients and optimizer states are reduced and sharded over data x
  context parallel ranks, as Megatron-LM does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit.predict import collectives as _coll
from labkit.predict.model import flops as _flops
from labkit.predict import memory as _memory
from labkit.predict.choosing import matmul_time as _mm
from labkit.predict.pipeline_parallel import partition as _part
from labkit.predict import sharding as _sharding
from labkit.predict.pipeline_parallel import stage_bytes as _sb
from labkit.predict.choosing.cluster import GB, Cluster
from labkit.predict.model.shapes import Model
from labkit.predict.tensor_parallel.gqa import kv_split as _kv_split


@dataclass
class Assumptions:
    """What the planner assumes; every field is a command-line option."""
    efficiency: float = 0.5    # matmul FLOP/s / dense peak
    link_efficiency: float = 0.8  # collective bytes/s / link peak
    reserve_gb: float = 2.0    # CUDA context, NCCL buffers, fragmentation
    cpu_adam: float = 2e9      # parameters per second per GPU (offload)
    precision: str = "mixed"
    optimizer: str = "adam"
    framework: str = "ledger"  # or deepspeed, fsdp2, fsdp1, megatron
    gpus_per_node: int = 8


@dataclass
class Layout:
    tp: int
    pp: int
    dp: int
    zero: int
    micro_batch: int
    microbatches: int
    recompute: str
    offload: str = "none"
    sequence_parallel: bool = False
    partition: tuple = ()      # layers per pipeline stage
    stage: int = 0             # the heaviest stage, whose memory is shown
    cp: int = 1                # context-parallel ranks (sequence split)
    memory: dict = field(default_factory=dict)   # bytes, per GPU
    host_memory_per_node: float = 0.0
    time: dict = field(default_factory=dict)     # seconds, per step
    step_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    hw_tflops_per_gpu: float = 0.0
    feasible: bool = True
    reason: str = ""
    ledger_total: float = 0.0  # the ledger's price (--framework: beside)
    framework_error: str = ""  # the framework does not run this layout

    @property
    def strategy(self) -> str:
        return ["ddp", "zero1", "zero2", "zero3"][self.zero]

    def name(self) -> str:
        sp = "+sp" if self.sequence_parallel else ""
        off = f" offload={self.offload}" if self.offload != "none" else ""
        parts = self.partition
        uneven = (f"[{_part.label(parts)}]"
                  if parts and len(set(parts)) > 1 else "")
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        return (f"tp{self.tp}{sp} pp{self.pp}{uneven}{cp} dp{self.dp} "
                f"{self.strategy} b{self.micro_batch}x{self.microbatches} "
                f"recompute={self.recompute}{off}")


def stage_params(m: Model, tp: int, parts, stage: int) -> float:
    """Parameters on one GPU of pipeline stage ``stage``, read from the
    model's record (:func:`labkit.predict.pipeline_parallel.stage_bytes.stage_params`).

    Its layers split as Megatron splits them (K/V heads replicated when
    ``tp`` exceeds them); the first stage adds the word embedding (``V h /
    t``, vocabulary-parallel) and learned positions (``s h``); the last adds
    the output layer (``V h / t``: untied, its own weight; tied,
    Megatron-LM's copy) and the final norm.
    """
    return _sb.stage_params(m.arch, tp, parts, stage)


def heaviest_params(m: Model, tp: int, parts) -> float:
    return max(stage_params(m, tp, parts, i) for i in range(len(parts)))


def stage_memory(m: Model, lay: Layout, a: Assumptions, stage: int) -> dict:
    """Bytes per GPU on pipeline stage ``stage``: states, activations,
    buffers (the keys sum to ``total``; ``cpu`` is what offload keeps)."""
    parts = lay.partition
    p = len(parts)
    rec = m.arch
    # the optimizer shards over data x context parallel (Megatron-LM)
    led = _memory.ledger(stage_params(m, lay.tp, parts, stage),
                         lay.dp * lay.cp, lay.strategy, a.precision,
                         a.optimizer, lay.offload)
    b, t, s = lay.micro_batch, lay.tp, m.seq // lay.cp
    per_layer = _sb.layer_activation_bytes(
        rec, s, b, tp=t, sequence_parallel=lay.sequence_parallel,
        recompute=lay.recompute)
    busy = _sb.computing_layers(rec, parts, stage)  # cross layers: none
    act = _part.in_flight(p, lay.microbatches, stage) * busy * per_layer
    if lay.recompute == "full" and busy:  # the layer being recomputed
        act += _sb.layer_activation_bytes(
            rec, s, b, tp=t, sequence_parallel=lay.sequence_parallel)
    if lay.cp > 1:  # ring attention: the K/V block in use and the next
        act += _sb.ring_buffer_bytes(rec, s, b, t)
    logits = 0.0
    if stage == p - 1:  # the output layer's logits, on the last stage
        logits = _sb.logits_bytes(rec, s, b, t)
    gathered = 0.0
    if lay.zero == 3:  # the layer in use and the one prefetched, 16-bit
        gathered = 2 * 2 * _sb.layer_params(rec, t)
    out = {"params": led.params_gpu, "grads": led.grads_gpu,
           "optimizer": led.optimizer_gpu, "activations": act,
           "logits": logits, "zero3_gather": gathered,
           "reserve": a.reserve_gb * GB}
    extra = {}
    if a.framework != "ledger":   # its own terms and the floor instead
        from labkit.predict.choosing.framework_cost import real_terms
        extra["ledger_total"] = sum(out.values())
        out["zero3_gather"] = out["reserve"] = 0.0
        real = real_terms(a.framework, rec, stage_params(m, t, parts, stage),
                          lay, a.precision, sum(out.values()),
                          a.gpus_per_node)
        out["framework"], out["floor"] = real["framework"], real["floor"]
        extra["framework_error"] = real["error"]
    out["total"] = sum(out.values())
    out["cpu"] = led.cpu_total
    return {**out, **extra}


def stage_report(m: Model, lay: Layout, a: Assumptions) -> list[dict]:
    """Every pipeline stage of ``lay``: its index, layers, parameter
    count on one GPU (``param_count``, :func:`stage_params`) and
    :func:`stage_memory`'s bytes (``params`` is their bytes) --
    what ``labkit plan --json`` lists under each layout's ``stages``."""
    return [{"stage": i, "layers": n,
             "param_count": stage_params(m, lay.tp, lay.partition, i),
             **stage_memory(m, lay, a, i)}
            for i, n in enumerate(lay.partition)]


def memory(m: Model, lay: Layout, a: Assumptions) -> tuple[int, dict]:
    """The heaviest stage and its :func:`stage_memory`."""
    per = [stage_memory(m, lay, a, i) for i in range(len(lay.partition))]
    i = max(range(len(per)), key=lambda k: per[k]["total"])
    return i, per[i]


def kv_grad_sync_time(m: Model, lay: Layout, cl: Cluster,
                      a: Assumptions) -> float:
    """Seconds per step summing the gradients of replicated K/V heads
    (``tp > kv_heads``; 0 otherwise). Each K/V head lives on ``tp /
    kv_heads`` ranks of a node (:func:`labkit.predict.tensor_parallel.gqa.
    kv_split`), so after the last micro-batch the copies' gradients are
    all-reduced among them: ``2 d (h + bias)`` 16-bit elements per layer
    of the slowest stage, once per step, exposed (nothing is left to
    overlap it with). neuronx-distributed sums the same copies
    (``kv_size_multiplier``, over ``get_kv_shared_group``, in
    ``src/neuronx_distributed/modules/qkv_linear_utils.py``), but per
    micro-batch on the K/V output gradients; lab 10 sums the weight
    gradients, as priced here (:func:`labkit.predict.mesh.arch.
    kv_grad_comm` counts its bytes)."""
    rec, t = m.arch, lay.tp
    if t == 1 or rec.kv_heads >= t:
        return 0.0
    reps = _kv_split(rec, t)["replicas"]
    elems = (max(lay.partition) * 2 * rec.head_dim
             * (rec.hidden + rec.qkv_bias))
    return _coll.collective_time("all_reduce", 2 * elems, reps, cl.intra,
                                 a.link_efficiency)


def step_time(m: Model, lay: Layout, cl: Cluster, a: Assumptions) -> dict:
    """Seconds per step, by part (``step`` is the total)."""
    g = cl.spec
    peak = _flops.peak_tflops(g.peak) * 1e12
    b, t, p, d, mb, c = (lay.micro_batch, lay.tp, lay.pp, lay.dp,
                         lay.microbatches, lay.cp)
    s = m.seq // c             # each context-parallel rank: s/c tokens
    busy = [_sb.computing_layers(m.arch, lay.partition, i)
            for i in range(len(lay.partition))]   # cross layers skipped
    most = max(busy)           # the slowest stage paces the pipeline
    per_mb = m.hardware_flops(b, lay.recompute)
    eff = _mm.matmul_efficiency(m, b * s, t, g.peak, a.efficiency)
    compute_mb = per_mb * most / sum(busy) / t / c / (peak * eff)
    # TP: 2 collectives forward, 2 backward per layer (+2 recomputed)
    tp_mb = 0.0
    if t > 1:
        size = b * s * m.hidden * 2
        calls = 6 if lay.recompute == "full" else 4
        sp = lay.sequence_parallel
        one = (2 * _coll.collective_time("all_gather", size, t, cl.intra,
                                         a.link_efficiency) / 2 if sp else
               _coll.collective_time("all_reduce", size, t, cl.intra,
                                     a.link_efficiency))
        tp_mb = calls * most * one
    # CP: ring attention's K/V hops (labkit.predict.context_parallel),
    # overlapped with the layer's computation; only the excess is exposed
    cp_mb = 0.0
    if c > 1:
        link = cl.intra if t * c <= cl.gpus_per_node else cl.inter
        kv = _sb.ring_buffer_bytes(m.arch, s, b, t) / 2  # K and V, bf16
        hop = _coll.collective_time("broadcast", kv, 2, link,
                                    a.link_efficiency)
        hops = 3 * c - 2 + (c - 1 if lay.recompute == "full" else 0)
        ring = hops * hop   # K/V fwd and bwd, dK/dV bwd, + recomputed fwd
        cp_mb = most * max(0.0, ring - compute_mb / most)
    kv_sync = kv_grad_sync_time(m, lay, cl, a)
    pipeline = (mb + p - 1) * (compute_mb + tp_mb + cp_mb)  # 1F1B
    bubble = (p - 1) * (compute_mb + tp_mb + cp_mb)
    p2p = 0.0
    if p > 1:
        link = cl.inter if t * p > cl.gpus_per_node else cl.intra
        msg = b * s * m.hidden * 2 / t  # scatter/gather (Sec. 4.1)
        p2p = 2 * (mb + p - 1) * _coll.collective_time(
            "broadcast", msg, 2, link, a.link_efficiency)
    psi = heaviest_params(m, t, lay.partition)
    dp_comm = 0.0
    if d * c > 1:  # gradients reduced over data x context parallel
        comms = _sharding.step_comm(psi, d * c, lay.strategy, param_bytes=2,
                                    gpus_per_node=d * c)
        link = cl.inter if cl.gpus > cl.gpus_per_node else cl.intra
        for x in comms:
            x.scope = "inter" if link == cl.inter else "intra"
        if lay.zero >= 2:  # per micro-batch (ZeRO-2/3, FSDP), not per step
            for x in comms:
                x.nbytes *= mb
        _sharding.comm_time(comms, cl.intra, cl.inter, a.link_efficiency)
        dp_comm = sum(x.seconds for x in comms)
    # overlapped with the pipeline when there is none, exposed otherwise
    exposed = (max(0.0, dp_comm - pipeline) if p == 1 else dp_comm)
    offload = 0.0
    if lay.offload != "none":
        psi = psi / (d if lay.zero >= 2 else 1)
        copy = _coll.collective_time("broadcast", 2 * 2 * psi, 2, cl.host,
                                     a.link_efficiency)
        offload = copy + psi / a.cpu_adam
    step = pipeline + p2p + exposed + offload + kv_sync
    return {"compute": mb * compute_mb, "tp_comm": mb * tp_mb,
            "kv_grad_sync": kv_sync,
            "cp_exposed": mb * cp_mb,
            "bubble": bubble, "p2p": p2p, "dp_comm": dp_comm,
            "dp_exposed": exposed, "offload": offload, "step": step}
