"""The node a rehearsal runs against: GPUs and their memory, described.

    from labkit.rehearse.node import describe
    node = describe()                  # 8 x H100 80GB HBM3 (recorded)
    node = describe("t4")              # labkit/rehearse/nodes/t4.txt
    node = describe("/path/to/nvidia-smi.txt")

A description is what ``nvidia-smi`` printed on the node (the recorded
files in ``nodes/``: ``h100x8`` an 8 x H100 SXM node, driver 535; ``h200``
one H200, driver 580; ``t4`` one 16 GB T4, driver 470): the GPU names
(:func:`labkit.node.parse_nvidia_smi`) and each GPU's total memory (the
``used / total MiB`` column).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

NODES = Path(__file__).resolve().parent / "nodes"
DEFAULT = "h100x8"
_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
# GPUs with FP8 tensor cores, by name: Ada (sm_89: L4, L40, L40S, RTX 40xx,
# RTX 6000 Ada), Hopper (sm_90: H100, H200, H800, H20, GH200), Blackwell
# (sm_100/120: B100, B200, GB200, B300, RTX 50xx); NVIDIA's CUDA GPU list
_FP8 = re.compile(r"\b(H100|H200|H800|H20|GH200|L4|L40S?|B100|B200|GB200|"
                  r"B300|RTX (40|50)\d0\w*|RTX 6000 Ada)\b")


@dataclass
class Node:
    name: str
    gpus: int
    gpu: str
    memory: int          # bytes per GPU
    driver: str | None
    source: str = ""     # the description's file

    @property
    def fp8(self) -> bool:
        """FP8 tensor cores (sm_89 and later: Ada, Hopper, Blackwell),
        from the GPU's name (nvidia-smi does not print the capability)."""
        return bool(_FP8.search(self.gpu))

    def __str__(self) -> str:
        return (f"{self.gpus} x {self.gpu} ({self.memory / 1e9:.1f} GB, "
                f"driver {self.driver})")


def rehearsed() -> Node | None:
    """The node a rehearsal describes (``LABKIT_REHEARSE`` names it), or
    None outside one: what the course's GPU checks read instead of CUDA."""
    import os
    name = os.environ.get("LABKIT_REHEARSE")
    return describe(name) if name else None


def known() -> list[str]:
    return sorted(p.stem for p in NODES.glob("*.txt"))


def describe(name: str | None = None) -> Node:
    """The node ``name`` (a recorded description, or a file); one clear
    ValueError when it names nothing or describes no GPU."""
    from labkit.node import parse_nvidia_smi
    name = name or DEFAULT
    f = Path(name)
    if not f.is_file():
        f = NODES / f"{name}.txt"
    if not f.is_file():
        raise ValueError(f"--node {name!r}: no such recorded nvidia-smi "
                         f"description; known: {', '.join(known())}, or a "
                         "file path")
    text = f.read_text()
    found = parse_nvidia_smi(text)
    mem = [int(total) for _, total in _MEM.findall(text)]
    if not found.gpus or len(mem) != len(found.gpus):
        raise ValueError(f"--node {name!r}: {f} lists no GPU with its "
                         "memory (an nvidia-smi table is expected)")
    return Node(f.stem, len(found.gpus), found.gpus[0], min(mem) << 20,
                found.driver, str(f))
