"""labkit.device: the CPU twins, MFU, and the untested GPU surface, listed.

The allow-lists below are every lab cell still tagged ``gpu`` and every line
of ``labkit/runs`` that branches on CUDA. They must equal what is there:
a new one fails this test until it is listed here (so the untested GPU
surface never grows silently), and one removed must be removed here too.
"""
import json
import re
from pathlib import Path

import pytest
import torch

from labkit import device as D
from labkit.nn.model import GPTConfig
from labkit.predict.model import flops as FL

ROOT = Path(__file__).resolve().parent.parent

# (lab, first line of the cell): CUDA-only (DeepSpeed's NVMe offload, aio)
GPU_CELLS = {
    ("04_zero", "from labkit.launch import LaunchError"),
    # Colossal-AI's Gemini needs CUDA (its chunk manager and HybridAdam)
    ("09_colossalai", 'cai = launch("labkit.runs.colossalai", world_size, {'),
    # DDP of a 7B model on 80 GB GPUs: the real CUDA out-of-memory error
    ("12_fit", "# CUDA only: DDP really tried, its OOM caught"),
    # where the all-to-all runs: nvidia-smi's topology (NVLink in a node)
    ("13_experts", "# CUDA only: where the all-to-all runs (NVLink inside a node)"),
    # FP8 tensor cores (sm_89+): torch._scaled_mm; the CPU emulates it
    ("14_precision",
     "# CUDA only: a real FP8 GEMM (torch._scaled_mm, sm_89+); with"),
    # FP8 training for real: torchao's float8 linears need CUDA sm_89+
    ("14_precision", "# CUDA only: FP8 training with torchao (pip install torchao), vs bf16"),
}
# (module, stripped line): CUDA-only switches left in labkit/runs
CUDA_LINES = {
    ("profiling", '"persistent_workers": True, "pin_memory": ctx.is_cuda}'),
    ("profiling", "warmup=a.warmup, active=a.active, cuda=ctx.is_cuda) as prof:"),
    ("sharding", '"device": (torch.cuda.get_device_name(ctx.device)'),
    ("sharding", 'if ctx.is_cuda else "cpu")})'),
    ("colossalai",   # LowLevelZero's overlap needs a CUDA side stream
     "booster = Booster(plugin=make_plugin(name, a.bf16, ctx.is_cuda))"),
    ("tools.reshard", "if not ctx.is_cuda:"),   # DeepSpeed's shm op (CPU)
    ("zero", "shm_skipped = skip_shm_op() if not ctx.is_cuda else False"),
    # CPU: live tensor bytes (PeakBytes); GPU: the allocator and snapshot
    ("fit", "tracker = (PeakBytes(model, opt) if not ctx.is_cuda"),
    ("fit", "if not ctx.is_cuda:"),
    # DDP's device_ids: the rank's GPU under nccl, none on the CPU
    ("blocks.zero_redundancy",
     "model = DDP(model, device_ids=[ctx.local_rank] if ctx.is_cuda else None)"),
}
CUDA = re.compile(r"is_cuda|torch\.cuda\.(?!matmul)|\.type == .cuda.")


def test_gpu_tagged_cells_are_the_allow_list():
    found = set()
    for nb in sorted((ROOT / "labs").glob("[0-9]*_*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if "gpu" in cell.get("metadata", {}).get("tags", []):
                found.add((nb.stem, "".join(cell["source"]).splitlines()[0]))
    assert found == GPU_CELLS


def test_cuda_branches_in_runs_are_the_allow_list():
    found = set()
    runs = ROOT / "labkit" / "runs"
    for f in sorted(runs.rglob("*.py")):
        name = ".".join(f.relative_to(runs).with_suffix("").parts)
        if name == "cai.patches":  # CPU stand-ins for CUDA calls,
            continue               # each cited in that module
        for line in f.read_text().splitlines():
            if CUDA.search(line):
                found.add((name, line.strip()))
    assert found == CUDA_LINES


def test_cpu_twins():
    cpu = torch.device("cpu")
    assert not D.is_cuda(cpu) and D.is_cuda("cuda:0")
    assert D.name(cpu) == "cpu" and D.total_memory(cpu) is None
    D.reset_peak(cpu)
    D.sync(cpu)
    peak = D.peak_bytes(cpu, 1234)
    assert peak["bytes"] == 1234 and peak["source"].startswith("ledger")
    t = D.Timer(cpu).start()
    assert t.stop() >= 0


def test_mfu_on_cpu_and_unknown_gpu_says_why():
    c = GPTConfig()
    m = D.mfu(c, 8, 0.5, "cpu")
    assert m["mfu"] is None and "cpu" in m["note"]
    assert m["tokens_per_s"] == 8 * c.seq / 0.5
    assert m["model_flops_per_step"] == FL.model_flops(
        8, c.seq, c.layers, c.hidden, c.vocab)
    assert D.mfu(c, 8, 0.5, "NVIDIA GeForce RTX 4090")["mfu"] is None


def test_mfu_against_the_preset_peak():
    c = GPTConfig(layers=24, hidden=2048, heads=16, vocab=50304, seq=2048)
    flops = FL.model_flops(4, c.seq, c.layers, c.hidden, c.vocab)
    step = flops / (0.5 * 989.4e12)     # half of an H100 SXM's peak
    m = D.mfu(c, 4, step, "NVIDIA H100 80GB HBM3")
    assert m["preset"] == "h100-sxm"
    assert m["mfu"] == pytest.approx(0.5)
    assert m["achieved_tflops_per_gpu"] == pytest.approx(494.7)


def test_gpu_peak_records_reserved_and_free(monkeypatch):
    """What OOMs is reserved + NCCL + the context, not only what was
    allocated: the GPU record carries all three (issue 28)."""
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 10)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: 12)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (30, 80))
    peak = D.peak_bytes("cuda:0")
    assert peak == {"bytes": 10, "source": "cuda_max_memory_allocated",
                    "reserved": 12, "free": 30, "total": 80}
