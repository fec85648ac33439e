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

What a launched rank sees of that node (:func:`visible`, :func:`pretend`):

    LABKIT_REHEARSE_GPUS=1   # in a launched rank's env (labkit.launch.rank)

A rank started with this sees what a rank on a node with that many GPUs
would see: ``torch.cuda.is_available()`` true, ``device_count()`` N and
the accelerator ``cuda`` -- unless its ``CUDA_VISIBLE_DEVICES`` is empty,
when it sees none, as on the node. ``torch.cuda.set_device(i)`` answers
for ``i >= N`` with CUDA's own error ("invalid device ordinal"). So a
launch whose ranks claim GPUs they do not have -- FSDP2's default mesh
and DeepSpeed's accelerator call ``set_device(LOCAL_RANK)`` when a GPU is
visible: ranks 1-3 of lab 14's four gloo ranks on one GPU (issue 47) --
fails here as it would there. Only what is visible is rehearsed: a rank
that goes on to compute on the pretended GPU fails (this torch has no
CUDA), which is a failure too.
"""
from __future__ import annotations

import os
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


# -- what a launched rank sees ----------------------------------------------

ENV = "LABKIT_REHEARSE_GPUS"


def visible(n: int, env=None) -> int:
    """GPUs a process sees on a node of ``n``: none when
    ``CUDA_VISIBLE_DEVICES`` is set and empty (the runtime's rule)."""
    env = os.environ if env is None else env
    return 0 if env.get("CUDA_VISIBLE_DEVICES") == "" else n


def pretend(n: int) -> int:
    """Make this process's torch show ``visible(n)`` GPUs (none: torch
    is left as it is). Returns that count."""
    import torch
    count = visible(n)
    if count == 0:
        return 0

    def set_device(device):
        i = device if isinstance(device, int) else \
            torch.device(device).index or 0
        if i >= count:
            raise RuntimeError(f"CUDA error: invalid device ordinal "
                               f"(device {i}; {count} visible, rehearsed)")
        raise RuntimeError(f"set_device({i}): this rank claimed a GPU "
                           "(rehearsed: no CUDA here)")
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: count
    torch.cuda.set_device = set_device
    torch._C._get_accelerator = lambda: torch.device("cuda")
    return count
