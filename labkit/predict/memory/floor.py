"""The runtime floor: what every GPU process holds before the ledger's
first byte, each term a named default with its source (pure Python).

    python -m labkit memory --params 70e9 --gpus 8 --stage 3 \
        --cuda-context-gb 0.6 --nccl-buffsize 4194304 --slack 0.05
    from labkit.predict.memory.floor import floor
    floor(gpus=8)["total"]

- ``cuda context``: the driver's context, the CUDA kernels of torch's
  libraries and the caching allocator's first segment, on the GPU before
  any tensor: about 0.5 GB with lazy module loading (CUDA 11.7+
  ``CUDA_MODULE_LOADING=LAZY``, torch's default; NVIDIA, "CUDA C++
  Programming Guide", Lazy Loading). Read yours: ``torch.cuda.init()``
  then ``nvidia-smi``; ``--cuda-context-gb`` sets it.
- ``nccl buffers``: each connection keeps ``NCCL_BUFFSIZE`` bytes (default
  4 MiB; NCCL documentation, Environment Variables) per channel for each
  direction; a ring connects a rank to its 2 neighbours, an all-to-all to
  every peer. ``--nccl-buffsize``, ``--nccl-channels`` set it.
- ``nccl all-to-all buffers`` (a mixture of experts' dispatch and
  combine, ``a2a_peers``: the ``ep - 1`` other ranks of the EP group):
  point-to-point connections, ``NCCL_BUFFSIZE`` per channel per
  direction, ``nccl_p2p_channels`` channels per peer (default 2: NCCL's
  ``NCCL_NCHANNELS_PER_NET_PEER``; NCCL documentation, Environment
  Variables). An upper end: NCCL may size point-to-point buffers from
  its smaller chunk sizes (``NCCL_P2P_NET_CHUNKSIZE``).
- ``cublas workspace``: 32 MiB per handle on Hopper (torch's
  ``getChosenWorkspaceSize``, ``CUBLAS_WORKSPACE_CONFIG``), one handle per
  stream that runs matmuls.
- ``allocator slack``: the caching allocator rounds blocks up and keeps
  freed segments reserved (``torch.cuda.memory_reserved`` above
  ``memory_allocated``); a fraction of the peak, an assumption to set from
  your own run's reserved / allocated (``--slack``).

The verdict adds the floor to the ledger and says the headroom that is
left, never a bare "fits" (:func:`headroom_sentence`).
"""
from __future__ import annotations

MIB = 2 ** 20
DEFAULTS = {"cuda_context_gb": 0.5, "nccl_buffsize": 4 * MIB,
            "nccl_channels": 16, "cublas_workspace": 32 * MIB,
            "cublas_handles": 2, "slack": 0.05, "nccl_p2p_channels": 2}
SOURCES = {
    "cuda context": "CUDA Programming Guide, Lazy Loading; measure with "
                    "nvidia-smi after torch.cuda.init()",
    "nccl buffers": "NCCL docs, Environment Variables: NCCL_BUFFSIZE "
                    "(4 MiB) per channel per direction per peer",
    "nccl all-to-all buffers": "NCCL docs, Environment Variables: "
                               "NCCL_BUFFSIZE per channel per direction, "
                               "NCCL_NCHANNELS_PER_NET_PEER (2) channels "
                               "per all-to-all peer",
    "cublas workspace": "torch getChosenWorkspaceSize: 32 MiB per handle "
                        "on sm90 (CUBLAS_WORKSPACE_CONFIG)",
    "allocator slack": "assumed fraction of the peak: reserved above "
                       "allocated in the caching allocator",
}


def _check(name: str, v, low: float, high: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) \
            or not low <= v <= high:
        raise ValueError(f"--{name.replace('_', '-')} must be a number in "
                         f"[{low:g}, {high:g}], got {v!r}")
    return float(v)


def floor(gpus: int, peers: int | None = None, allocated: float = 0.0,
          a2a_peers: int = 0, **over) -> dict:
    """Bytes per GPU of the runtime floor: ``{"terms": [(name, bytes,
    source)], "total": ..}``. ``peers``: connections per rank (default: a
    ring's 2, or 1 on one GPU, none for a single process); ``allocated``:
    the peak the slack is a fraction of; ``a2a_peers``: the all-to-all's
    other ranks (a mixture of experts: ``ep - 1``), a term of its own."""
    unknown = set(over) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown floor setting(s): {sorted(unknown)}")
    k = {**DEFAULTS, **{n: v for n, v in over.items() if v is not None}}
    ctx = _check("cuda_context_gb", k["cuda_context_gb"], 0, 64) * 1e9
    buf = _check("nccl_buffsize", k["nccl_buffsize"], 0, 2 ** 34)
    ch = _check("nccl_channels", k["nccl_channels"], 1, 256)
    slack = _check("slack", k["slack"], 0, 1)
    if peers is None:
        peers = 0 if gpus == 1 else min(2, gpus - 1)
    terms = [("cuda context", ctx),
             ("nccl buffers", 2 * buf * ch * peers),
             *([("nccl all-to-all buffers", 2 * buf * _check(
                 "nccl_p2p_channels", k["nccl_p2p_channels"], 1, 64)
                 * a2a_peers)] if a2a_peers else []),
             ("cublas workspace", k["cublas_workspace"]
              * k["cublas_handles"]),
             ("allocator slack", slack * allocated)]
    rows = [(name, float(b), SOURCES[name]) for name, b in terms]
    return {"terms": rows, "total": sum(b for _, b, _ in rows)}


def headroom_sentence(need: float, have: float, unit: float = 1e9,
                      what: str = "per GPU") -> str:
    """"fits with 12.4 GB headroom per GPU" or "does not fit: 3.1 GB
    over per GPU" (GB = 1e9 bytes)."""
    left = have - need
    if left >= 0:
        return f"fits with {left / unit:.2f} GB headroom {what}"
    return f"does not fit: {-left / unit:.2f} GB over {what}"
