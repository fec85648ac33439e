"""Bytes of a checkpoint on disk, per rank, with every overhead named.

    from labkit.measure.checkpoint import dcp_bytes, torch_save_bytes
    m = dcp_bytes("_build/checkpoints/resume/reference/step-000008")
    m["state"][r]     # model + optimizer tensor bytes rank r wrote
    m["files"][r]     # the size of its file __r_0.distcp

A DCP checkpoint (``torch.distributed.checkpoint``, FileSystemWriter) is
one ``__<rank>_0.distcp`` file per rank plus a ``.metadata`` file that the
coordinator (rank 0) writes last: the global shapes, each rank's chunks
and where in which file each chunk lies. Every item in a ``.distcp`` file
is written with ``torch.save``, so each chunk carries a small zip/pickle
frame. The accounting closes exactly, per rank:

    file bytes = state (model and optimizer tensors, what the ledger
                 predicts) + framing (torch.save per item) + small items
                 (Adam's step counters, the trainer's step, sampler, RNG)

and the folder adds ``.metadata`` and the course's ``labkit-meta.json``.
DCP stores an item that every rank holds identically (a replicated
tensor, a Python object) once, on a rank of its choosing, which is why the
small items are not all on rank 0.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

STATE_PREFIXES = ("model.", "optim.", "module.", "optimizer.")


def _is_state(fqn: str, shape) -> bool:
    return fqn.startswith(STATE_PREFIXES) and len(shape) > 0


def dcp_bytes(folder: str | Path) -> dict:
    """Per-rank file, state, framing and small-item bytes of a DCP folder."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    folder = Path(folder)
    md = FileSystemReader(str(folder)).read_metadata()
    files, state, framing, small = {}, {}, {}, {}
    for f in folder.glob("__*_*.distcp"):
        r = int(re.match(r"__(\d+)_", f.name).group(1))
        files[r] = files.get(r, 0) + f.stat().st_size
        state.setdefault(r, 0)
        framing.setdefault(r, 0)
        small.setdefault(r, 0)
    for index, info in md.storage_data.items():
        r = int(re.match(r"__(\d+)_", info.relative_path).group(1))
        item = md.state_dict_metadata[index.fqn]
        if isinstance(item, TensorStorageMetadata):
            chunk = next(c for c in item.chunks if c.offsets == index.offset)
            payload = (chunk.sizes.numel()
                       * torch.empty((), dtype=item.properties.dtype)
                       .element_size())
            if _is_state(index.fqn, item.size):
                state[r] += payload
                framing[r] += info.length - payload
                continue
        small[r] += info.length
    others = {f.name: f.stat().st_size for f in folder.iterdir()
              if not f.name.endswith(".distcp")}
    return {"files": files, "state": state, "framing": framing,
            "small": small, "other_files": others,
            "total": sum(files.values()) + sum(others.values())}


def torch_save_bytes(path: str | Path) -> dict:
    """File, state and the rest (pickle, zip, small items) of a torch.save."""
    path = Path(path)
    obj = torch.load(path, map_location="cpu", weights_only=False)
    state = 0

    def walk(x, fqn: str):
        nonlocal state
        if isinstance(x, torch.Tensor):
            if _is_state(fqn, x.shape):
                state += x.numel() * x.element_size()
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{fqn}{k}.")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{fqn}{i}.")

    walk(obj, "")
    size = path.stat().st_size
    return {"file": size, "state": state, "overhead": size - state}


def folder_bytes(folder: str | Path, pattern: str = "*") -> dict:
    """Size of every file in a folder matching ``pattern``, by name."""
    return {f.name: f.stat().st_size
            for f in sorted(Path(folder).glob(pattern)) if f.is_file()}


def deepspeed_bytes(folder: str | Path) -> dict:
    """Per-rank bytes of a DeepSpeed checkpoint tag folder.

    Rank r writes ``zero_pp_rank_<r>_mp_rank_00_model_states.pt`` (the
    module, under ZeRO-3 only empty placeholders, plus shapes and the
    config) and ``..._optim_states.pt`` (its partition of the fp32 master
    weights and Adam's moments). ``state``: bytes of tensors with at least
    one dimension; ``overhead``: the rest of both files.
    """
    files, state = {}, {}
    for f in Path(folder).glob("zero_pp_rank_*_mp_rank_*_*.pt"):
        r = int(re.match(r"zero_pp_rank_(\d+)_", f.name).group(1))
        files[r] = files.get(r, 0) + f.stat().st_size
        state[r] = state.get(r, 0) + _tensor_bytes(
            torch.load(f, map_location="cpu", weights_only=False))
    return {"files": files, "state": state,
            "overhead": {r: files[r] - state[r] for r in files}}


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size() if x.dim() > 0 else 0
    if isinstance(x, dict):
        return sum(_tensor_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(v) for v in x)
    return 0
