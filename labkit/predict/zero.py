"""A small dataclass that writes DeepSpeed's JSON configuration.

    from labkit.predict.zero import ZeroConfig, variant
    cfg = variant("zero3_offload_opt", world_size=2)
    cfg.to_json()          # the dict given to deepspeed.initialize(config=...)

DeepSpeed is configured by one JSON document (``ds_config.json``); its
``zero_optimization`` section selects the ZeRO stage, the offload devices and
the knobs that trade memory for communication. The names of the fields below
are DeepSpeed's own, so that what a reader sees here is what they would type
into a real ``ds_config.json`` (reference:
https://www.deepspeed.ai/docs/config-json/, "ZeRO Optimizations").

Pure Python: no torch, no deepspeed import, so a notebook can build and show
the JSON before any process starts, and bad values fail there with a
``ValueError``.

Two settings differ from DeepSpeed's defaults on purpose:

- ``gradient_clipping`` is written out explicitly. DeepSpeed's own default
  is 1.0 (``deepspeed/runtime/constants.py``, ``GRADIENT_CLIPPING_DEFAULT``),
  which silently makes its losses differ from DDP / FSDP / a single-process
  run that do not clip. The course uses 0.0 (off) unless told otherwise.
- ``zero_force_ds_cpu_optimizer`` is ``false``: with offload, DeepSpeed
  otherwise refuses a plain ``torch.optim`` optimizer and wants its C++
  ``DeepSpeedCPUAdam``, which is compiled on first use (minutes on a laptop).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

STAGES = (0, 1, 2, 3)
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("torch", "deepspeed")


@dataclass
class ZeroConfig:
    """What one DeepSpeed run is configured with (defaults run on a CPU)."""

    stage: int = 0
    offload_optimizer: str = "none"   # none | cpu | nvme   (stages 1-3)
    offload_param: str = "none"       # none | cpu | nvme   (stage 3 only)
    nvme_path: str | None = None      # a folder on a fast local NVMe drive
    pin_memory: bool = False          # page-locked host buffers (GPU only)
    precision: str = "fp32"           # fp32 | bf16 | fp16 (fp16: loss scaling)
    optimizer: str = "torch"          # client torch.optim.Adam, or DeepSpeed's
    lr: float = 1e-3                  # labkit.training.train.LR
    micro_batch: int = 4              # per rank
    world_size: int = 2
    grad_accum: int = 1
    gradient_clipping: float | None = 0.0  # None: DeepSpeed's default, 1.0
    # -- communication and bucketing (stages 1-3) --
    overlap_comm: bool | None = None  # None: DeepSpeed's default (on at 3)
    contiguous_gradients: bool = True
    reduce_bucket_size: int = 500_000_000       # elements, not bytes
    allgather_bucket_size: int = 500_000_000    # elements (stages 1-2)
    use_multi_rank_bucket_allreduce: bool = True  # 1-2: all-reduce buckets
    # -- stage 3 only --
    stage3_max_live_parameters: int = 1_000_000_000
    stage3_prefetch_bucket_size: int = 50_000_000
    stage3_param_persistence_threshold: int = 100_000
    stage3_max_reuse_distance: int = 1_000_000_000
    extra: dict = field(default_factory=dict)   # merged last, for experts

    def __post_init__(self):
        self.validate()

    @property
    def train_batch_size(self) -> int:
        """DeepSpeed's global batch: micro batch x ranks x accumulation."""
        return self.micro_batch * self.world_size * self.grad_accum

    def validate(self) -> None:
        def need(cond, msg):
            if not cond:
                raise ValueError(msg)
        need(self.stage in STAGES, f"ZeRO stage must be one of {STAGES}, "
             f"got {self.stage!r}")
        for name in ("offload_optimizer", "offload_param"):
            v = getattr(self, name)
            need(v in OFFLOAD_DEVICES, f"{name} must be one of "
                 f"{OFFLOAD_DEVICES}, got {v!r}")
        need(self.offload_optimizer == "none" or self.stage >= 1,
             "offload_optimizer needs ZeRO stage 1, 2 or 3 (stage 0 has no "
             "partitioned optimizer to offload)")
        need(self.offload_param == "none" or self.stage == 3,
             "offload_param needs ZeRO stage 3 (only stage 3 partitions the "
             "parameters)")
        need("nvme" not in (self.offload_optimizer, self.offload_param)
             or bool(self.nvme_path), "NVMe offload needs nvme_path")
        need(self.precision in PRECISIONS, f"precision must be one of "
             f"{PRECISIONS}, got {self.precision!r}")
        need(self.optimizer in OPTIMIZERS, f"optimizer must be one of "
             f"{OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("micro_batch", "world_size", "grad_accum",
                     "reduce_bucket_size", "allgather_bucket_size"):
            v = getattr(self, name)
            need(isinstance(v, int) and v >= 1,
                 f"{name} must be an integer >= 1, got {v!r}")
        for name in ("stage3_max_live_parameters",
                     "stage3_prefetch_bucket_size",
                     "stage3_param_persistence_threshold",
                     "stage3_max_reuse_distance"):
            v = getattr(self, name)
            need(isinstance(v, int) and v >= 0,
                 f"{name} must be an integer >= 0, got {v!r}")
        need(self.gradient_clipping is None or self.gradient_clipping >= 0,
             "gradient_clipping must be >= 0 (0 turns clipping off) or None "
             "(DeepSpeed's default)")

    def to_json(self) -> dict:
        """The DeepSpeed configuration as a JSON-ready dict."""
        zero: dict = {"stage": self.stage}
        if self.stage >= 1:
            zero.update(contiguous_gradients=self.contiguous_gradients,
                        reduce_bucket_size=self.reduce_bucket_size)
            if self.overlap_comm is not None:
                zero["overlap_comm"] = self.overlap_comm
        if self.stage in (1, 2):
            zero.update(allgather_bucket_size=self.allgather_bucket_size,
                        use_multi_rank_bucket_allreduce=(
                            self.use_multi_rank_bucket_allreduce))
        if self.stage == 3:
            zero.update(
                stage3_max_live_parameters=self.stage3_max_live_parameters,
                stage3_prefetch_bucket_size=self.stage3_prefetch_bucket_size,
                stage3_param_persistence_threshold=(
                    self.stage3_param_persistence_threshold),
                stage3_max_reuse_distance=self.stage3_max_reuse_distance)
        for name in ("offload_optimizer", "offload_param"):
            device = getattr(self, name)
            if device != "none":
                zero[name] = {"device": device, "pin_memory": self.pin_memory}
                if device == "nvme":
                    zero[name]["nvme_path"] = self.nvme_path
        cfg: dict = {
            "train_batch_size": self.train_batch_size,
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum,
            "zero_optimization": zero,
            "zero_force_ds_cpu_optimizer": False,
            "steps_per_print": 1_000_000,   # keep the logs quiet
            "wall_clock_breakdown": False,
        }
        if self.gradient_clipping is not None:
            cfg["gradient_clipping"] = self.gradient_clipping
        if self.precision == "bf16":
            cfg["bf16"] = {"enabled": True}
        elif self.precision == "fp16":   # dynamic loss scaling
            cfg["fp16"] = {"enabled": True, "loss_scale": 0,
                           "initial_scale_power": 16}
        if self.optimizer == "deepspeed":
            # DeepSpeed builds its own Adam: FusedAdam on GPU, or the C++
            # DeepSpeedCPUAdam under offload (both compiled on first use).
            cfg["optimizer"] = {"type": "Adam", "params": {"lr": self.lr}}
            cfg["zero_force_ds_cpu_optimizer"] = True
        return _merge(cfg, self.extra)

    def asdict(self) -> dict:
        return asdict(self)


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = (_merge(out[k], v) if isinstance(v, dict)
                  and isinstance(out.get(k), dict) else v)
    return out


# The runs the lab compares, by name. Each is ZeroConfig's defaults plus
# these fields; the name says what changes.
VARIANTS: dict[str, dict] = {
    "zero0": {"stage": 0},
    "zero1": {"stage": 1},
    "zero2": {"stage": 2},
    "zero3": {"stage": 3},
    # ZeRO-2 reducing each gradient slice to its owner (dist.reduce)
    # instead of DeepSpeed's default all-reduce of whole buckets
    "zero2_reduce": {"stage": 2, "use_multi_rank_bucket_allreduce": False},
    # gradient_clipping left out of the JSON: DeepSpeed then clips at 1.0
    "zero2_default_clip": {"stage": 2, "gradient_clipping": None},
    # ZeRO-Offload (Ren et al. 2021): fp32 master, gradients and Adam on CPU
    "zero2_offload_opt": {"stage": 2, "offload_optimizer": "cpu"},
    "zero3_offload_opt": {"stage": 3, "offload_optimizer": "cpu"},
    # ZeRO-3 with the parameter partitions on CPU too (ZeRO-Infinity, CPU)
    "zero3_offload_params": {"stage": 3, "offload_optimizer": "cpu",
                             "offload_param": "cpu"},
    # ZeRO-3's knobs one by one: no persistent small parameters, then no
    # reuse-distance keep, then no prefetch; only with all three does the
    # tiny model show the textbook 3 Phi (chapter "DeepSpeed ZeRO")
    "zero3_persist0": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "zero3_persist0_reuse0": {"stage": 3,
                              "stage3_param_persistence_threshold": 0,
                              "stage3_max_reuse_distance": 0},
    "zero3_no_persist": {"stage": 3,
                         "stage3_param_persistence_threshold": 0,
                         "stage3_max_reuse_distance": 0,
                         "stage3_prefetch_bucket_size": 0},
    # ZeRO-Infinity on NVMe: GPU nodes only (needs a fast local drive and
    # DeepSpeed's compiled async-io op and CPU Adam)
    "zero3_nvme": {"stage": 3, "offload_optimizer": "nvme",
                   "offload_param": "nvme", "optimizer": "deepspeed"},
}


def variant(name: str, **overrides) -> ZeroConfig:
    """The named configuration, with any field overridden."""
    if name not in VARIANTS:
        raise ValueError(f"unknown DeepSpeed variant {name!r}; known: "
                         f"{', '.join(VARIANTS)}")
    return replace(ZeroConfig(), **{**VARIANTS[name], **overrides})


def ledger_strategy(cfg: ZeroConfig) -> tuple[str, str]:
    """The (strategy, offload) names of labkit.predict.memory.ledger."""
    strategy = f"zero{cfg.stage}"
    if cfg.offload_param != "none":
        return strategy, "params"
    if cfg.offload_optimizer != "none":
        return strategy, "optimizer"
    return strategy, "none"


def pcie_bytes_per_step(params: float, world_size: int,
                        offload_optimizer: bool, offload_param: bool,
                        half_bytes: int = 2) -> dict:
    """Bytes one GPU moves over its PCIe link per step under offload.

    Mixed precision, each GPU owning 1/N of the states (ZeRO partitioning):

    - optimizer offload (ZeRO-Offload, Ren et al. 2021, Sec. 3: on one GPU
      the fewest bytes any offload strategy can move is 4M per step for M
      parameters -- 2M of fp16 gradients down, 2M of fp16 weights up; Sec.
      4.2: with N GPUs each moves only its partition): 16-bit gradients of
      the partition GPU -> CPU, updated 16-bit weights CPU -> GPU.
    - parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021, Sec. 6.1,
      bandwidth-centric partitioning: each GPU brings its own partition
      over its own link, then an all-gather assembles the layer): the
      weight partition CPU -> GPU before the forward all-gather and again
      before the backward one, the gradient partition GPU -> CPU; the
      optimizer updates the weights where they live, on the CPU.

    Returns ``{"to_gpu": bytes, "to_cpu": bytes, "total": bytes}``.
    """
    if not params > 0:
        raise ValueError(f"params must be positive, got {params!r}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got "
                         f"{world_size!r}")
    part = half_bytes * params / world_size
    if offload_param:
        to_gpu, to_cpu = 2 * part, part
    elif offload_optimizer:
        to_gpu, to_cpu = part, part
    else:
        to_gpu = to_cpu = 0.0
    return {"to_gpu": to_gpu, "to_cpu": to_cpu, "total": to_gpu + to_cpu}
