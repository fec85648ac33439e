"""One switch on the device: the few CUDA-only calls, each with a CPU twin.

    python -m labkit.device          # what this machine offers

Every runs module takes the same branches on CPU and on GPU and calls these
functions where CUDA differs, so that the CPU tests cover all but the lines
below marked ``# CUDA only``:

- :func:`peak_bytes` -- the CUDA allocator's ``max_memory_allocated`` on a
  GPU; on CPU, the byte ledger the caller counted (labelled as such);
- :class:`Timer` -- CUDA events on a GPU (GPU time between two points of
  the stream), ``time.perf_counter`` on CPU;
- :func:`peak_of` -- that peak from any run record (the runs modules'
  ``peak`` or Colossal-AI's ``max_memory_allocated``);
- :func:`name`, :func:`total_memory`, :func:`sync`, :func:`reset_peak`;
- :func:`mfu` -- tokens/s, model FLOPs per step (``labkit.predict.model.flops``),
  achieved TFLOP/s and MFU against the GPU's dense bf16 peak (None, said
  so, for a CPU or a GPU without a preset).
"""
from __future__ import annotations

import platform
import time

import torch

from labkit.predict.model import flops as FL


def is_cuda(device) -> bool:
    return getattr(device, "type", str(device).split(":")[0]) == "cuda"


def name(device) -> str:
    """The CUDA device name, or ``cpu``."""
    if is_cuda(device):
        return torch.cuda.get_device_name(device)  # CUDA only
    return "cpu"


def total_memory(device) -> int | None:
    """Bytes of the GPU's memory, None on CPU (no fixed budget)."""
    if is_cuda(device):
        return torch.cuda.get_device_properties(device).total_memory  # CUDA
    return None


def sync(device) -> None:
    """Wait for the GPU (a no-op on CPU) so wall-clock timings are honest."""
    if is_cuda(device):
        torch.cuda.synchronize(device)  # CUDA only


def reset_peak(device) -> None:
    """Start a new peak-memory window (a no-op on CPU)."""
    if is_cuda(device):
        torch.cuda.synchronize(device)  # CUDA only
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device, ledger_bytes: int | None = None) -> dict:
    """Peak memory of the window: ``{"bytes": ..., "source": ...}``.

    GPU: the caching allocator's ``max_memory_allocated`` (every tensor,
    activations and temporaries included), and beside it what an OOM is
    decided by: ``reserved`` (``max_memory_reserved``: the allocator's
    segments, fragmentation included) and ``free``/``total`` of the device
    (``mem_get_info``: NCCL's buffers, the CUDA context and other
    processes included). CPU: no allocator statistics exist, so the twin
    is the ledger the caller counted (``ledger_bytes``), and ``source``
    says so: a CPU figure never passes for a GPU one.
    """
    if is_cuda(device):
        free, total = torch.cuda.mem_get_info(device)  # CUDA
        return {"bytes": torch.cuda.max_memory_allocated(device),
                "source": "cuda_max_memory_allocated",
                "reserved": torch.cuda.max_memory_reserved(device),
                "free": free, "total": total}
    return {"bytes": ledger_bytes, "source": "ledger (cpu: no allocator)"}


def peak_of(run: dict) -> int:
    """The peak bytes of one run record, whichever module wrote it.

    ``labkit.runs.zero`` / ``memory`` store :func:`peak_bytes`'s dict under
    ``peak``; ``labkit.runs.colossalai`` (its own venv) stores the bare
    number under ``max_memory_allocated``. Raises KeyError naming both.
    """
    if isinstance(run.get("peak"), dict):
        return run["peak"]["bytes"]
    if "max_memory_allocated" in run:
        return run["max_memory_allocated"]
    raise KeyError("no peak in this run record (neither 'peak' nor "
                   f"'max_memory_allocated'); keys: {sorted(run)}")


class Timer:
    """Seconds between :meth:`start` and :meth:`stop`, on the device's clock.

    GPU: two CUDA events recorded on the current stream (the GPU time of
    the work between them, without the host's launch overhead); CPU:
    ``time.perf_counter``.
    """

    def __init__(self, device):
        self.cuda = is_cuda(device)
        self._t0 = None
        if self.cuda:  # CUDA only
            self._ev = (torch.cuda.Event(enable_timing=True),
                        torch.cuda.Event(enable_timing=True))

    def start(self) -> "Timer":
        if self.cuda:
            self._ev[0].record()  # CUDA only
        else:
            self._t0 = time.perf_counter()
        return self

    def stop(self) -> float:
        if self.cuda:  # CUDA only
            self._ev[1].record()
            self._ev[1].synchronize()
            return self._ev[0].elapsed_time(self._ev[1]) / 1e3
        return time.perf_counter() - self._t0


def mfu(config, batch: int, step_s: float, device_name: str,
        gpus: int = 1) -> dict:
    """Throughput of one training step of the GPT (or its Llama-style
    twin, ``config.arch``), and its MFU.

    Model FLOPs per step: ``labkit.predict.model.flops.model_flops`` (Korthikanti
    et al. 2022, Sec. 6); MFU: achieved model FLOP/s per GPU over the GPU's
    dense bf16 peak (PaLM, Appendix B). ``mfu`` and ``peak_tflops`` are None,
    with ``note`` saying why, on CPU or on a GPU without a preset.
    """
    preset = FL.gpu_preset(device_name) if device_name != "cpu" else None
    arch = None
    if getattr(config, "arch", "gpt") != "gpt":   # GQA, SwiGLU: its record
        from labkit.nn.model import arch_of
        arch = arch_of(config)
    r = FL.report(config.layers, config.hidden, config.heads, config.seq,
                  config.vocab, batch, gpus=gpus, iteration_seconds=step_s,
                  peak=preset, arch=arch)
    note = ("" if preset else "cpu: no GPU peak, no MFU"
            if device_name == "cpu" else
            f"no peak known for {device_name!r}: no MFU (no guess)")
    return {"tokens_per_s": r.tokens_per_second,
            "model_flops_per_step": r.model_flops,
            "achieved_tflops_per_gpu": r.model_tflops_per_gpu,
            "peak_tflops": r.peak_tflops, "mfu": r.mfu, "preset": preset,
            "device": device_name, "note": note}


def describe() -> str:
    if torch.cuda.is_available():
        d = torch.device("cuda", 0)
        n = name(d)
        return (f"{torch.cuda.device_count()} CUDA GPU(s): {n}, "
                f"{total_memory(d) / 2**30:.0f} GiB, preset "
                f"{FL.gpu_preset(n) or 'none (no MFU)'}")
    return f"no CUDA GPU: cpu ({platform.machine()})"


if __name__ == "__main__":
    print(describe())
