"""Plan a parallel layout: a model and a cluster in, ranked layouts out.

    python -m labkit plan --params 70e9 --gpus 8 --gpu a100-80gb --batch 64
    python -m labkit plan --layers 96 --hidden 12288 --heads 96 --seq 2048 \
        --vocab 51200 --batch 1536 --gpus 1024 --gpu a100-80gb --top 5
    python -m labkit plan --params 175e9 --gpus 256 --gpu h100-80gb \
        --batch 1536 --all --json

Chapter 10 ("Choosing a framework") in one function, :func:`plan`. It
enumerates every layout TP x PP x DP (TP inside a node), ZeRO stage of the
data-parallel group (0 = DDP, 3 = FSDP FULL_SHARD), micro-batch, number of
micro-batches, activation recomputation and offload, and prices each with
the formulas of chapters 1-6 only (no torch):

- memory per GPU, heaviest pipeline stage (the first: it holds the
  embedding and the most micro-batches in flight): model states from the
  ledger (:mod:`labkit.predict.memory`, ZeRO Fig. 1) on that stage's
  ``1/t`` share of the parameters; activations from Korthikanti et al.
  2022, Table 2, times the micro-batches 1F1B keeps in flight
  (:func:`labkit.predict.pipeline_parallel.first_stage_activations`), plus
  one layer's full activations while a layer is recomputed; buffers: the
  output layer's logits (Korthikanti Sec. 4.3, ``4 s b h / t (1 + V/h)``),
  ZeRO-3's two gathered layers, and ``reserve`` bytes (CUDA context, NCCL,
  fragmentation: an assumption of this course, ``--reserve-gb``);
- time per step: hardware FLOPs (Narayanan et al. 2021, Eq. 3, with the
  recomputation) at ``efficiency`` x the dense bf16 peak; Megatron's TP
  collectives on the critical path (:mod:`labkit.predict.tensor_parallel`,
  4 per layer and micro-batch, 6 with full recomputation); the 1F1B
  bubble ``(p - 1) / m`` (Narayanan Sec. 2.2.1) and the stage-to-stage
  sends; the data-parallel collectives of the ZeRO stage
  (:mod:`labkit.predict.sharding`), overlapped with backward when there is
  no pipeline (DDP buckets, FSDP prefetch) and exposed after the flush when
  there is one (Megatron-LM 2021 reduces after the last micro-batch);
  offload adds the PCIe copies of gradients down and weights up and a CPU
  Adam at ``cpu_adam`` parameters per second (an assumption);
- tokens/s, MFU (model FLOPs, PaLM Appendix B) and achieved hardware
  TFLOP/s per GPU (what Narayanan et al. 2021 report).

Layouts are ranked by predicted step time; ``--all`` lists the infeasible
ones with the reason. Bad input: one line, exit 2; nothing fits: what is
short, exit 1.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field

from labkit.predict import collectives as _coll
from labkit.predict import flops as _flops
from labkit.predict import memory as _memory
from labkit.predict import pipeline_parallel as _pp
from labkit.predict import sharding as _sharding
from labkit.predict import tensor_parallel as _tp

GB = _memory.GB


@dataclass(frozen=True)
class GPU:
    name: str
    peak: str          # key of labkit.predict.flops.PEAKS
    memory: float      # bytes, nominal (GB = 1e9; 80 GB A100 = 80e9)
    inter: str         # default link between nodes, one NIC per GPU
    host: str          # GPU <-> host link, for offload
    host_memory: float  # bytes of CPU memory per node (reference system)
    source: str

    @property
    def intra(self) -> str:
        """Default link inside a node: the one ``flops.GPU_LINKS`` gives
        the GPU's preset (NVLink 3 for A100, NVLink 4 for H100/H200)."""
        return _flops.GPU_LINKS[self.peak]


GPUS = {g.name: g for g in (
    GPU("a100-40gb", "a100", 40 * GB, "ib-hdr", "pcie4",
        1024 * GB, "NVIDIA A100 datasheet: 40 GB HBM2, 312 TFLOPS bf16; "
        "DGX A100 (320 GB): 1 TB system memory, 8x HDR 200 Gb/s"),
    GPU("a100-80gb", "a100", 80 * GB, "ib-hdr", "pcie4",
        2048 * GB, "NVIDIA A100 datasheet: 80 GB HBM2e, 312 TFLOPS bf16; "
        "DGX A100 (640 GB): 2 TB system memory, 8x HDR 200 Gb/s"),
    GPU("h100-80gb", "h100-sxm", 80 * GB, "ib-ndr", "pcie5",
        2048 * GB, "NVIDIA H100 SXM datasheet: 80 GB HBM3, 989.4 TFLOPS "
        "bf16 dense; DGX H100: 2 TB system memory, 8x NDR 400 Gb/s"),
    GPU("h200", "h200", 141 * GB, "ib-ndr", "pcie5",
        2048 * GB, "NVIDIA H200 SXM datasheet: 141 GB HBM3e, 989.4 TFLOPS "
        "bf16 dense; DGX H200: 2 TB system memory, 8x NDR 400 Gb/s"),
)}
RECOMPUTE = _flops.RECOMPUTE
OFFLOADS = ("none", "optimizer", "params")


@dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    @property
    def params(self) -> int:  # Megatron's GPT, Narayanan et al. Eq. 2
        return _flops.megatron_params(self.layers, self.hidden, self.vocab,
                                      self.seq)


# Standard shapes for --params: GPT-3 (Brown et al. 2020, Table 2.1) and
# Llama 2 (Touvron et al. 2023, Table 1; MHA + 4h MLP: the count differs
# from the SwiGLU/GQA original by a few per cent).
SHAPES = {
    1.3e9: Model(24, 2048, 16, 2048, 51200),
    2.7e9: Model(32, 2560, 32, 2048, 51200),
    6.7e9: Model(32, 4096, 32, 2048, 51200),
    13e9: Model(40, 5120, 40, 4096, 32000),
    30e9: Model(60, 6656, 52, 2048, 32000),
    70e9: Model(80, 8192, 64, 4096, 32000),
    175e9: Model(96, 12288, 96, 2048, 51200),
}


def standard_model(params: float) -> Model:
    """The standard shape closest to ``params`` (within 15 per cent)."""
    if not params > 0:
        raise ValueError(f"--params must be positive, got {params!r}")
    best = min(SHAPES, key=lambda p: abs(math.log(p / params)))
    if abs(best / params - 1) > 0.15:
        raise ValueError(
            f"no standard shape near {params:.3g} parameters (known: "
            f"{', '.join(f'{p:.3g}' for p in SHAPES)}); give --layers "
            "--hidden --heads --seq --vocab")
    return SHAPES[best]


@dataclass
class Cluster:
    gpus: int
    gpus_per_node: int = 8
    gpu: str = "a100-80gb"
    intra: str | None = None
    inter: str | None = None
    host: str | None = None
    host_memory_gb: float | None = None

    def __post_init__(self):
        if self.gpu not in GPUS:
            raise ValueError(f"unknown GPU preset {self.gpu!r}: choose from "
                             f"{', '.join(GPUS)}")
        for name in ("gpus", "gpus_per_node"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"{self.gpus} GPUs are not whole nodes of "
                             f"{self.gpus_per_node}")
        g = GPUS[self.gpu]
        self.intra = _coll.get_link(self.intra or g.intra).name
        self.inter = _coll.get_link(self.inter or g.inter).name
        self.host = _coll.get_link(self.host or g.host).name
        if self.host_memory_gb is None:
            self.host_memory_gb = g.host_memory / GB
        if not self.host_memory_gb > 0:
            raise ValueError("host memory must be positive")

    @property
    def spec(self) -> GPU:
        return GPUS[self.gpu]


@dataclass
class Assumptions:
    """What the planner assumes; every field is a command-line option."""
    efficiency: float = 0.5    # matmul FLOP/s / dense peak
    link_efficiency: float = 0.8  # collective bytes/s / link peak
    reserve_gb: float = 2.0    # CUDA context, NCCL buffers, fragmentation
    cpu_adam: float = 2e9      # parameters per second per GPU (offload)
    precision: str = "mixed"
    optimizer: str = "adam"


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
    memory: dict = field(default_factory=dict)   # bytes, per GPU
    host_memory_per_node: float = 0.0
    time: dict = field(default_factory=dict)     # seconds, per step
    step_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    hw_tflops_per_gpu: float = 0.0
    feasible: bool = True
    reason: str = ""

    @property
    def strategy(self) -> str:
        return ["ddp", "zero1", "zero2", "zero3"][self.zero]

    def name(self) -> str:
        sp = "+sp" if self.sequence_parallel else ""
        off = f" offload={self.offload}" if self.offload != "none" else ""
        return (f"tp{self.tp}{sp} pp{self.pp} dp{self.dp} "
                f"{self.strategy} b{self.micro_batch}x{self.microbatches} "
                f"recompute={self.recompute}{off}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _stage_params(m: Model, tp: int, pp: int) -> float:
    """Parameters on one GPU of the heaviest stage (the first).

    ``L/p`` layers split as Megatron splits them
    (:func:`labkit.predict.tensor_parallel.layer_params`) plus the word
    embedding (``V h / t``, vocabulary-parallel) and learned positions
    (``s h``); the tied output layer lives on this GPU too when ``p = 1``
    and as a copy on the last stage otherwise (Megatron-LM), so the first
    stage is the heaviest either way.
    """
    layer = _tp.layer_params(m.hidden, tp)["total"]
    return m.layers // pp * layer + m.vocab * m.hidden / tp + m.seq * m.hidden


def _memory_of(m: Model, lay: Layout, c: Cluster, a: Assumptions) -> dict:
    psi = _stage_params(m, lay.tp, lay.pp)
    led = _memory.ledger(psi, lay.dp, lay.strategy, a.precision, a.optimizer,
                         lay.offload)
    b, t, p = lay.micro_batch, lay.tp, lay.pp
    per_layer = _memory.activation_bytes_per_layer(
        m.seq, b, m.hidden, m.heads, tp=t,
        sequence_parallel=lay.sequence_parallel, recompute=lay.recompute)
    in_flight = _pp.first_stage_activations("1f1b", p, lay.microbatches)
    act = in_flight * m.layers // p * per_layer
    if lay.recompute == "full":  # the layer being recomputed, in full
        act += _memory.activation_bytes_per_layer(
            m.seq, b, m.hidden, m.heads, tp=t,
            sequence_parallel=lay.sequence_parallel)
    logits = 4.0 * m.seq * b * m.hidden / t * (1 + m.vocab / m.hidden)
    gathered = 0.0
    if lay.zero == 3:  # the layer in use and the one prefetched, 16-bit
        gathered = 2 * 2 * _tp.layer_params(m.hidden, t)["total"]
    out = {"params": led.params_gpu, "grads": led.grads_gpu,
           "optimizer": led.optimizer_gpu, "activations": act,
           "logits": logits, "zero3_gather": gathered,
           "reserve": a.reserve_gb * GB}
    out["total"] = sum(out.values())
    out["cpu"] = led.cpu_total
    return out


def _time_of(m: Model, lay: Layout, c: Cluster, a: Assumptions) -> dict:
    g = c.spec
    peak = _flops.peak_tflops(g.peak) * 1e12
    b, t, p, d, mb = (lay.micro_batch, lay.tp, lay.pp, lay.dp,
                      lay.microbatches)
    per_mb = _flops.hardware_flops(b, m.seq, m.layers, m.hidden, m.vocab,
                                   lay.recompute)
    compute_mb = per_mb / (t * p) / (peak * a.efficiency)
    # TP: 2 collectives forward, 2 backward per layer (+2 recomputed)
    tp_mb = 0.0
    if t > 1:
        size = b * m.seq * m.hidden * 2
        calls = 6 if lay.recompute == "full" else 4
        sp = lay.sequence_parallel
        one = (2 * _coll.collective_time("all_gather", size, t, c.intra,
                                         a.link_efficiency) / 2 if sp else
               _coll.collective_time("all_reduce", size, t, c.intra,
                                     a.link_efficiency))
        tp_mb = calls * m.layers / p * one
    pipeline = (mb + p - 1) * (compute_mb + tp_mb)  # 1F1B
    bubble = (p - 1) * (compute_mb + tp_mb)
    p2p = 0.0
    if p > 1:
        link = c.inter if t * p > c.gpus_per_node else c.intra
        msg = b * m.seq * m.hidden * 2 / t  # scatter/gather (Sec. 4.1)
        p2p = 2 * (mb + p - 1) * _coll.collective_time(
            "broadcast", msg, 2, link, a.link_efficiency)
    dp_comm = 0.0
    if d > 1:
        comms = _sharding.step_comm(_stage_params(m, t, p), d,
                                    lay.strategy, param_bytes=2,
                                    gpus_per_node=d)
        link = c.inter if c.gpus > c.gpus_per_node else c.intra
        for x in comms:
            x.scope = "inter" if link == c.inter else "intra"
        if lay.zero >= 2:  # per micro-batch (ZeRO-2/3, FSDP), not per step
            for x in comms:
                x.nbytes *= mb
        _sharding.comm_time(comms, c.intra, c.inter, a.link_efficiency)
        dp_comm = sum(x.seconds for x in comms)
    # overlapped with the pipeline when there is none, exposed otherwise
    exposed = (max(0.0, dp_comm - pipeline) if p == 1 else dp_comm)
    offload = 0.0
    if lay.offload != "none":
        psi = _stage_params(m, t, p) / (d if lay.zero >= 2 else 1)
        copy = _coll.collective_time("broadcast", 2 * 2 * psi, 2, c.host,
                                     a.link_efficiency)
        offload = copy + psi / a.cpu_adam
    step = pipeline + p2p + exposed + offload
    return {"compute": mb * compute_mb, "tp_comm": mb * tp_mb,
            "bubble": bubble, "p2p": p2p, "dp_comm": dp_comm,
            "dp_exposed": exposed, "offload": offload, "step": step}


def _layouts(m: Model, batch: int, c: Cluster, recompute, offload, zero,
             sequence_parallel, tp=None, pp=None, micro_batch=None):
    for t in _divisors(min(c.gpus_per_node, c.gpus)):
        if m.heads % t or m.hidden % t or (tp and t != tp):
            continue
        for p in _divisors(m.layers):
            if c.gpus % (t * p) or (pp and p != pp):
                continue
            d = c.gpus // (t * p)
            if batch % d:
                continue
            for b in _divisors(batch // d):
                if micro_batch and b != micro_batch:
                    continue
                for z in zero:
                    if p > 1 and z >= 2:  # Megatron/DeepSpeed: ZeRO-1 w/ PP
                        continue
                    if d == 1 and z > 0:
                        continue
                    for r in recompute:
                        for off in offload:
                            if off != "none" and z == 0:
                                continue
                            if off == "params" and z != 3:
                                continue
                            for sp in sequence_parallel:
                                if sp and t == 1:
                                    continue
                                yield Layout(t, p, d, z, b,
                                             batch // (d * b), r, off, sp)


def check(m: Model, batch: int, c: Cluster, tp=None, pp=None,
          micro_batch=None) -> None:
    """One clear ValueError for a request no layout can satisfy by shape."""
    for name in ("layers", "hidden", "heads", "seq", "vocab"):
        v = getattr(m, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if m.hidden % m.heads:
        raise ValueError(f"hidden ({m.hidden}) is not divisible by heads "
                         f"({m.heads})")
    if tp is not None:
        if tp < 1 or m.heads % tp:
            raise ValueError(f"heads ({m.heads}) are not divisible by "
                             f"tp={tp}")
        if tp > c.gpus_per_node:
            raise ValueError(f"tp={tp} spans nodes of {c.gpus_per_node} GPUs")
    if pp is not None and (pp < 1 or m.layers % pp):
        raise ValueError(f"layers ({m.layers}) are not divisible by pp={pp}")
    if tp and pp and c.gpus % (tp * pp):
        raise ValueError(f"{c.gpus} GPUs are not divisible by tp x pp = "
                         f"{tp * pp}")
    if tp and pp:
        d = c.gpus // (tp * pp)
        if batch % (d * (micro_batch or 1)):
            raise ValueError(f"batch {batch} is not divisible by dp x "
                             f"micro-batch = {d} x {micro_batch or 1}")
    elif micro_batch is not None and (micro_batch < 1 or batch % micro_batch):
        raise ValueError(f"batch {batch} is not divisible by micro-batch "
                         f"{micro_batch}")


def plan(m: Model, batch: int, c: Cluster, a: Assumptions | None = None,
         recompute=RECOMPUTE, offload=("none",), zero=(0, 1, 2, 3),
         sequence_parallel=(False, True), tp=None, pp=None,
         micro_batch=None) -> list[Layout]:
    """Every layout, priced; feasible ones first, ranked by step time."""
    a = a or Assumptions()
    check(m, batch, c, tp, pp, micro_batch)
    out = []
    model_flops = _flops.model_flops(batch, m.seq, m.layers, m.hidden,
                                     m.vocab)
    peak = _flops.peak_tflops(c.spec.peak) * 1e12
    node_gpus = min(c.gpus, c.gpus_per_node)
    for lay in _layouts(m, batch, c, recompute, offload, zero,
                        sequence_parallel, tp, pp, micro_batch):
        lay.memory = _memory_of(m, lay, c, a)
        lay.host_memory_per_node = lay.memory["cpu"] * node_gpus
        lay.time = _time_of(m, lay, c, a)
        lay.step_s = lay.time["step"]
        lay.tokens_per_s = batch * m.seq / lay.step_s
        lay.mfu = model_flops / (lay.step_s * c.gpus * peak)
        hw = _flops.hardware_flops(batch, m.seq, m.layers, m.hidden,
                                   m.vocab, lay.recompute)
        lay.hw_tflops_per_gpu = hw / (lay.step_s * c.gpus) / 1e12
        short = lay.memory["total"] - c.spec.memory
        if short > 0:
            lay.feasible = False
            lay.reason = (f"needs {lay.memory['total'] / GB:.1f} GB per GPU,"
                          f" {short / GB:.1f} GB more than the "
                          f"{c.spec.memory / GB:.0f} GB of a {c.gpu}")
        elif lay.host_memory_per_node > c.host_memory_gb * GB:
            lay.feasible = False
            lay.reason = (f"offload needs {lay.host_memory_per_node / GB:.0f}"
                          f" GB of host memory per node, more than "
                          f"{c.host_memory_gb:.0f} GB")
        out.append(lay)
    if not out:
        raise ValueError("no layout divides this model, batch and cluster")
    out.sort(key=lambda x: (not x.feasible, x.step_s if x.feasible
                            else x.memory["total"]))
    return out


def shortfall(layouts: list[Layout]) -> str:
    """What is short when nothing fits: the closest layout and its gap."""
    best = min(layouts, key=lambda x: x.memory["total"])
    return f"no layout fits; the closest, {best.name()}, {best.reason}"


# -- command line -------------------------------------------------------------

def add_arguments(p) -> None:
    g = p.add_argument_group("model (a shape, or --params for a standard one)")
    for k in ("layers", "hidden", "heads", "seq", "vocab"):
        g.add_argument(f"--{k}", type=int)
    g.add_argument("--params", type=float,
                   help="e.g. 70e9: the standard shape of that size")
    p.add_argument("--batch", type=int, required=True,
                   help="global batch in sequences per step")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu", default="a100-80gb",
                   help=f"GPU preset: {', '.join(GPUS)}")
    links = ", ".join(_coll.LINKS)
    p.add_argument("--intra-link", help=f"inside a node ({links})")
    p.add_argument("--inter-link", help="between nodes")
    p.add_argument("--host-link", help="GPU to host memory (offload)")
    p.add_argument("--host-mem-gb", type=float,
                   help="CPU memory per node (default: the preset's DGX)")
    p.add_argument("--precision", choices=_memory.PRECISIONS,
                   default="mixed")
    p.add_argument("--optimizer", choices=_memory.OPTIMIZERS, default="adam")
    p.add_argument("--recompute", choices=RECOMPUTE + ("any",),
                   default="any")
    p.add_argument("--allow-offload", action="store_true",
                   help="also consider optimizer and parameter offload")
    p.add_argument("--tp", type=int)
    p.add_argument("--pp", type=int)
    p.add_argument("--micro-batch", type=int)
    p.add_argument("--efficiency", type=float, default=0.5,
                   help="matmul FLOP/s as a share of the dense peak")
    p.add_argument("--link-efficiency", type=float, default=0.8)
    p.add_argument("--reserve-gb", type=float, default=2.0)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--all", action="store_true",
                   help="also list the infeasible layouts and why")
    p.add_argument("--json", action="store_true")


def model_from_args(args) -> Model:
    shape = [getattr(args, k) for k in ("layers", "hidden", "heads", "seq",
                                        "vocab")]
    if args.params is not None:
        if any(v is not None for v in shape):
            raise ValueError("give --params or the shape, not both")
        return standard_model(args.params)
    if any(v is None for v in shape):
        raise ValueError("give --layers --hidden --heads --seq --vocab, "
                         "or --params")
    return Model(*shape)


def main(args) -> int:
    m = model_from_args(args)
    c = Cluster(args.gpus, args.gpus_per_node, args.gpu, args.intra_link,
                args.inter_link, args.host_link, args.host_mem_gb)
    for name in ("efficiency", "link_efficiency"):
        if not 0 < getattr(args, name) <= 1:
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 1]")
    if args.reserve_gb < 0 or args.top < 1:
        raise ValueError("--reserve-gb must be >= 0 and --top >= 1")
    a = Assumptions(args.efficiency, args.link_efficiency, args.reserve_gb,
                    precision=args.precision, optimizer=args.optimizer)
    rec = RECOMPUTE if args.recompute == "any" else (args.recompute,)
    off = OFFLOADS if args.allow_offload else ("none",)
    lays = plan(m, args.batch, c, a, rec, off, tp=args.tp, pp=args.pp,
                micro_batch=args.micro_batch)
    ok = [x for x in lays if x.feasible]
    shown = ok[:args.top] + ([x for x in lays if not x.feasible]
                             if args.all else [])
    if args.json:
        print(json.dumps({"model": asdict(m), "params": m.params,
                          "cluster": asdict(c), "assumptions": asdict(a),
                          "feasible": len(ok), "layouts": [
                              {**asdict(x), "name": x.name()}
                              for x in shown]}, indent=1))
    else:
        print(f"{m.params / 1e9:.1f} B parameters, batch {args.batch} x "
              f"{m.seq} tokens, {c.gpus} x {c.gpu} ({c.intra} / {c.inter}),"
              f" {len(ok)} of {len(lays)} layouts fit")
        print(f"{'layout':60s} {'GB/GPU':>7s} {'step s':>8s} {'tok/s':>10s}"
              f" {'MFU':>6s} {'TFLOP/s':>8s}")
        for x in shown:
            line = (f"{x.name():60s} {x.memory['total'] / GB:7.1f} "
                    f"{x.step_s:8.3g} {x.tokens_per_s:10.4g} {x.mfu:6.1%} "
                    f"{x.hw_tflops_per_gpu:8.1f}")
            if x.offload != "none":
                line += f"  host {x.host_memory_per_node / GB:.0f} GB/node"
            print(line + ("" if x.feasible else f"  NO: {x.reason}"))
        print(f"assumed: matmuls at {a.efficiency:.0%} of "
              f"{_flops.peak_tflops(c.spec.peak):g} TFLOP/s, links at "
              f"{a.link_efficiency:.0%} of peak, {a.reserve_gb:g} GB "
              "reserved per GPU, 1F1B; DP overlapped without PP, exposed "
              "with PP")
    if not ok:
        print(shortfall(lays), file=sys.stderr)
        return 1
    return 0
