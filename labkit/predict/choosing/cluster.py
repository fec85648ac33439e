"""The machines a layout runs on: GPU presets and a cluster of nodes.

    python -m labkit plan --params 70e9 --gpus 16 --gpu h100-80gb --batch 64

Used by :mod:`labkit.predict.choosing` (``labkit plan``). A preset is a
datasheet: memory, dense bf16 peak (a key of
:data:`labkit.predict.model.flops.PEAKS`), the links inside and between nodes
and to the host (keys of :data:`labkit.predict.collectives.LINKS`), each
with its source.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.predict import collectives as _coll
from labkit.predict.model import flops as _flops
from labkit.predict import memory as _memory

GB = _memory.GB


@dataclass(frozen=True)
class GPU:
    name: str
    peak: str          # key of labkit.predict.model.flops.PEAKS
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
