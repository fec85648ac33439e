"""GPU presets: dense 16-bit peaks, CUDA device names, node links (pure
Python). Re-exported by :mod:`labkit.predict.model.flops`, where MFU uses them.

    from labkit.predict.gpus import PEAKS, gpu_preset
    gpu_preset("NVIDIA H100 80GB HBM3")   # -> "h100-sxm"
"""
from __future__ import annotations

# Dense (no 2:4 sparsity) 16-bit tensor-core peaks, TFLOP/s per GPU.
PEAKS = {
    "a100": (312.0, "NVIDIA A100 datasheet: BF16/FP16 tensor core 312 "
             "TFLOPS dense (624 with sparsity), SXM and PCIe"),
    "h100": (989.4, "NVIDIA H100 SXM: BF16 tensor core 1,979 TFLOPS with "
             "sparsity, 989.4 dense (H100 architecture whitepaper)"),
    "h100-pcie": (756.0, "NVIDIA H100 PCIe datasheet: BF16 1,513 TFLOPS "
                  "with sparsity, 756 dense"),
    "h200": (989.4, "NVIDIA H200 SXM datasheet: BF16 1,979 TFLOPS with "
             "sparsity, 989.4 dense (same GH100 compute as H100 SXM)"),
}
PEAKS["h100-sxm"] = PEAKS["h100"]
PEAKS.update({
    "l4": (121.0, "NVIDIA L4 datasheet: BF16 tensor core 242 TFLOPS with "
           "sparsity, 121 dense"),
    "t4": (65.0, "NVIDIA T4 datasheet: FP16 mixed-precision tensor core 65 "
           "TFLOPS; Turing has no bf16 tensor cores (bf16 runs far slower)"),
})
# CUDA device names (torch.cuda.get_device_name) -> preset, most specific
# first: "NVIDIA H100 PCIe" must not match the SXM entry.
GPU_NAMES = (("h100 pcie", "h100-pcie"), ("h100 nvl", None), ("h200 nvl", None),
             ("h100", "h100-sxm"), ("h200", "h200"), ("a100", "a100"),
             ("l4", "l4"), ("t4", "t4"))
# The GPU-to-GPU link of a node of each preset (labkit.predict.collectives);
# PCIe cards talk over PCIe unless an NVLink bridge joins a pair.
GPU_LINKS = {"h100-sxm": "nvlink4", "h200": "nvlink4", "a100": "nvlink3",
             "h100-pcie": "pcie5", "l4": "pcie4", "t4": "pcie3"}


def gpu_preset(device_name: str) -> str | None:
    """The preset of a CUDA device name, or None for a GPU not in PEAKS.

    ``gpu_preset("NVIDIA H100 80GB HBM3") == "h100-sxm"``,
    ``gpu_preset("NVIDIA H100 PCIe") == "h100-pcie"``; an unknown GPU gets
    None, never a guess.
    """
    name = " ".join(device_name.lower().replace("-", " ").split())
    words = set(name.split())
    for key, preset in GPU_NAMES:  # NVL cards: other peaks, not listed
        if (key in words if " " not in key else key in name):
            return preset
    return None
