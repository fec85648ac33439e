"""The prices of a lab's parts on each kind of machine.

The CPU profile's are measured, never typed: ``scripts/bench_labtime.py``
writes them, with the labs' measured seconds, to ``cpu.json`` beside this
file (:func:`measured`). A GPU node's are named defaults below, each a
``(low, high)`` range with where it comes from; the plan adds them up
at both ends and prints the range.
"""
from __future__ import annotations

import json
from pathlib import Path

TABLE = Path(__file__).with_name("cpu.json")


def measured(path: Path | None = None) -> dict:
    """The benchmark's table: ``constants`` (seconds, FLOP/s, bytes/s),
    ``labs`` (seconds per lab), ``cores``, ``load_average``, ``finished``.
    Read when a CPU plan is asked for (the browser's calculators never
    load it)."""
    p = Path(path or TABLE)
    if not p.exists():
        raise ValueError(f"{p} is missing: run python "
                         "scripts/bench_labtime.py to measure the CPU "
                         "profile's constants")
    return json.loads(p.read_text())


def launch_s(const: dict, ranks: int) -> float:
    """A launch that does nothing, on ``ranks`` gloo ranks: the measured
    2- and 4-rank launches, straight between and beyond them (each rank
    past the cores' count waits for a core to import torch)."""
    two, four = const["launch_s"]["2"], const["launch_s"]["4"]
    return max(two, two + (four - two) * (ranks - 2) / 2)


def first_use_s(const: dict, la) -> float:
    """What a launch's ranks meet the first time, beyond a bare launch
    (``launch_s``) and the runs' own prices (``run_s``, measured on a warm
    process), per rank: ``first_run_s`` in a launch that trains (the lazy
    imports of FSDP, Dynamo and the optimizer's first step), ``stack_s``
    in one that only uses the tensor stack (functional collectives), and
    ``deepspeed_first_s`` more when it builds a DeepSpeed engine. A
    compiling launch's is in ``compile_s``, measured whole."""
    if la.compile:
        return 0.0
    out = const.get("first_run_s", 0.0) if la.trains else \
        const.get("stack_s", 0.0) if la.stack else 0.0
    return out + (const.get("deepspeed_first_s", 0.0) if la.deepspeed
                  else 0.0)


# -- a GPU node: (low, high) seconds unless said otherwise ---------------
GPU = "h100"               # the chip the gpu profiles are written for
GPU_FP32_FLOPS = 67e12
"""The H100 SXM's dense FP32 rate (data sheet: 67 TFLOPS, no tensor
cores): lab 18's fp32 Linear blocks, torch keeping TF32 off for
matmuls by default."""
CUDA_INIT_S = (1.0, 5.0)
"""Per rank: the CUDA context and the first kernel's module load; an
assumption (lazy loading, CUDA >= 11.7, keeps it to seconds)."""
NCCL_INIT_S = (2.0, 10.0)
"""Per launch: NCCL's bootstrap, topology search and the first
collective's channels on 8 GPUs; an assumption."""
FIRST_USE_S = (1.0, 4.0)
"""Per launch that trains or uses the tensor stack: the lazy imports its
ranks meet first (FSDP, Dynamo, the optimizer's first step, DeepSpeed's
engine), in parallel on a node's cores; the CPU profile's measured
``first_run_s`` and ``deepspeed_first_s`` (cpu.json, about 1.7 and 1.1 s
on the course's 2-core machine) bound it, a faster host core takes
less; an assumption around them."""
COMPILE_S = (30.0, 120.0)
"""Per compiling launch: Dynamo's tracing, Inductor's codegen and
Triton's kernel compiles on an empty cache; an assumption."""
OP_COMPILE_S = (38.0, 55.0)
"""Per DeepSpeed op JIT-built (``async_io``, ``cpu_adam``): measured once
on this course's 2-core CPU machine (38-55 s per op)."""
HOST_INIT_VALUES_S = (2e8, 5e7)
"""Values per second one rank initialises on the host (``normal_`` of
fp32 weights, one core): an assumption, the order of a streaming
kernel's rate on one core; every rank builds its model before sharding."""
MATMUL_EFFICIENCY = (0.6, 0.3)
"""Fraction of the dense bf16 peak a lab's matmuls and attention reach:
an assumption around the 44-52 % of peak Narayanan et al. 2021 (Table 1)
report for GPT training on A100s."""
DISK_BYTES_S = (2e9, 0.5e9)
"""A node's local disk writing a checkpoint, bytes/s: an assumption
(NVMe SSDs write 2-7 GB/s; a network volume far less)."""
SETUP_S = (8 * 60.0, 25 * 60.0)
"""The node's set-up, ``scripts/node_setup.sh``: system packages, two
virtual environments (``.venv`` with torch's CUDA wheels, some 3-4 GB
of downloads, and ``.venv-colossalai``, ``make colossalai``), at 50-200
MB/s with pip's resolving and unpacking; an assumption."""
KERNEL_S = (5.0, 15.0)
"""Per lab: a Jupyter kernel and the lab's imports (torch with CUDA);
an assumption, the CPU profile's measured ``kernel_s`` is its floor."""
LAUNCH_S = (5.0, 15.0)
"""Per launch, before CUDA: torchrun, its guard, 8 ranks importing torch
and labkit on a 16-core-or-more host; an assumption."""
