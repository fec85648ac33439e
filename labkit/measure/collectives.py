"""Count the collectives a rank issues, at the c10d operation level.

    from labkit.measure.collectives import CollectiveCounter
    with CollectiveCounter() as counter:   # collectives THIS rank issues
        loss = train_step()
    counter.records      # [{op, dtype, numel, bytes, group_size, ...}, ...]
    counter.summary()    # {op: {"calls": int, "bytes": int}}
    counter.total_bytes("all_gather")

How it sees every collective
----------------------------
Since PyTorch 2.1 every ``ProcessGroup`` method -- whether called from
Python (``dist.all_reduce``, FSDP's ``all_gather_into_tensor``) or from C++
(DDP's ``Reducer`` calls ``ProcessGroup::allreduce`` inside the autograd
engine) -- goes through the dispatcher as an operator of the ``c10d``
namespace (``c10d::allreduce_``, ``c10d::_allgather_base_``,
``c10d::_reduce_scatter_base_``, ...). The functional collectives of DTensor
and tensor parallelism are operators too (``_c10d_functional::all_reduce``,
...). A :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every
operator the dispatcher runs in its thread, and the autograd engine carries
the mode into its worker threads (``at::ThreadLocalState``), so the counter
sees DDP's bucket all-reduces as well as FSDP1's ``_allgather_base_`` /
``_reduce_scatter_base_``, FSDP2's ``all_gather_into_tensor`` /
``reduce_scatter_tensor`` and DeepSpeed's ``torch.distributed`` calls. It is
the same mechanism as PyTorch's own ``CommDebugMode``. Because it counts the
operation and not the wire, gloo and nccl give the same records (gloo runs a
reduce-scatter as an all-reduce followed by a local copy; the counter still
records one ``reduce_scatter`` of the input's size).

A collective issued from inside another counted one (a functional collective
calling its c10d twin) is not counted twice: while the mode handles an
operator it is switched off.

What ``bytes`` means
--------------------
``bytes`` is the *logical payload* of one call, the same definition as
``labkit.predict.collectives`` and ``labkit.predict.sharding`` use:

===============  ==========================================================
op               bytes
===============  ==========================================================
all_reduce       size of the tensor(s) reduced (input = output)
all_gather       size of the gathered *output* (group_size x input)
reduce_scatter   size of the *input* (group_size x output shard)
broadcast        size of the tensor(s) broadcast
reduce           size of the tensor(s) reduced
all_to_all       size of the input (= output)
gather/scatter   size of the full (gathered / scattered) buffer
send / recv      size of the tensor(s) sent / received
barrier          0
===============  ==========================================================

This is not what crosses the wire: a ring all-reduce sends
2(N-1)/N x bytes per rank, a ring all-gather or reduce-scatter (N-1)/N x
bytes (see ``labkit.predict.collectives.ring_bytes_sent``).

The counter costs a Python call per operator while it is on: count one
step, and time steps with the counter off.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operator name (without overload) -> course name. The c10d_ ops are the
# ProcessGroup methods; the _c10d_functional ones are functional collectives.
_C10D = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather",
    "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "broadcast_": "broadcast",
    "reduce_": "reduce",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "gather_": "gather",
    "scatter_": "scatter",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
    "barrier": "barrier",
    "monitored_barrier_": "barrier",
}
_FUNCOL = {
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_out": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all_single": "all_to_all",
    "broadcast": "broadcast",
    "broadcast_": "broadcast",
    "isend": "send",
    "irecv": "recv",
}
_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")

OPS = tuple(sorted(set(_C10D.values()) | set(_FUNCOL.values())))


def _tensors(x) -> list:
    """Flatten a tensor, a list of tensors or a list of lists of tensors."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    return []


def _group(obj):
    """(size, name, global ranks) of a process group argument, if known."""
    import torch.distributed as dist
    pg = None
    if isinstance(obj, str):  # functional collectives pass a group name
        try:
            from torch.distributed.distributed_c10d import (
                _resolve_process_group)
            pg = _resolve_process_group(obj)
        except Exception:  # noqa: BLE001 - unknown name: leave it unknown
            return None, obj, None
    elif isinstance(obj, torch.ScriptObject):
        try:
            pg = dist.ProcessGroup.unbox(obj)
        except Exception:  # noqa: BLE001
            return None, None, None
    elif isinstance(obj, dist.ProcessGroup):
        pg = obj
    if pg is None:
        return None, None, None
    try:
        ranks = dist.get_process_group_ranks(pg)
    except Exception:  # noqa: BLE001 - a group this rank did not register
        ranks = None
    return pg.size(), getattr(pg, "group_name", None), ranks


def _record(ns: str, name: str, args, kwargs) -> list[dict]:
    """The records of one collective operator call (usually one)."""
    kwargs = kwargs or {}
    if ns == "c10d":
        op = _C10D.get(name)
        if op is None:
            return []
        pg_arg = next((a for a in args if isinstance(a, torch.ScriptObject)),
                      None)
        size, gname, ranks = _group(pg_arg)
        if op == "barrier":
            payload = []
        elif op == "all_gather" or op == "gather":
            payload = _tensors(args[0])            # outputs
        elif op in ("reduce_scatter", "all_to_all"):
            payload = _tensors(args[1])            # inputs
        elif op == "scatter":
            payload = _tensors(args[1])            # the full input lists
        else:                                      # in place: the tensors
            payload = _tensors(args[0])
        scale = 1
        if op == "gather" and not payload:         # non-root: no outputs
            payload, scale = _tensors(args[1]), size or 1
        if op == "scatter" and not payload:        # non-root: no inputs
            payload, scale = _tensors(args[0]), size or 1
    else:
        if name == "batch_p2p_ops":
            ops, peers, _tags, tensors, gname = args[:5]
            size, gname, ranks = _group(gname)
            return [_make(("send" if o.startswith("isend") else "recv"),
                          [t], 1, size, gname, ranks, f"{ns}::{name}")
                    for o, t in zip(ops, tensors)]
        op = _FUNCOL.get(name)
        if op is None:
            return []
        gname_arg = kwargs.get("group_name", args[-1] if args else None)
        if not isinstance(gname_arg, str):
            gname_arg = next((a for a in args if isinstance(a, str)
                              and a not in ("sum", "avg", "max", "min",
                                            "product", "premul_sum")), None)
        size, gname, ranks = _group(gname_arg)
        payload = _tensors(args[0])                # inputs
        scale = 1
        if op == "all_gather":                     # output = size x input
            scale = size or next((a for a in args if isinstance(a, int)
                                  and not isinstance(a, bool)), 1)
    return [_make(op, payload, scale, size, gname, ranks, f"{ns}::{name}")]


def _make(op, payload, scale, size, gname, ranks, c10d_name) -> dict:
    numel = sum(t.numel() for t in payload) * scale
    nbytes = sum(t.numel() * t.element_size() for t in payload) * scale
    dtypes = {str(t.dtype).replace("torch.", "") for t in payload}
    return {"op": op, "dtype": dtypes.pop() if len(dtypes) == 1 else (
                "mixed" if dtypes else None),
            "numel": int(numel), "bytes": int(nbytes),
            "group_size": size, "group": gname, "ranks": ranks,
            "tensors": len(payload), "c10d_op": c10d_name}


class CollectiveCounter(TorchDispatchMode):
    """Record every collective this rank issues while the block runs.

    Each record is a dict: ``op`` (``all_reduce``, ``all_gather``,
    ``reduce_scatter``, ``broadcast``, ``all_to_all``, ``send``, ``recv``,
    ``barrier``, ...), ``dtype``, ``numel``, ``bytes`` (the logical payload,
    see the module docstring), ``group_size``, plus ``group`` (the process
    group's name), ``ranks`` (its global ranks), ``tensors`` (how many
    tensors one call carried, > 1 for coalesced calls) and ``c10d_op`` (the
    operator the dispatcher ran, e.g. ``c10d::allreduce_``).
    """

    def __init__(self):
        super().__init__()
        self.records: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = getattr(func, "namespace", None)
        if ns in _NAMESPACES:
            name = func._schema.name.split("::", 1)[-1]
            self.records.extend(_record(ns, name, args, kwargs))
        return func(*args, **(kwargs or {}))

    def clear(self) -> None:
        self.records.clear()

    def summary(self) -> dict:
        """``{op: {"calls": int, "bytes": int}}`` over all records."""
        out: dict = defaultdict(lambda: {"calls": 0, "bytes": 0})
        for r in self.records:
            out[r["op"]]["calls"] += 1
            out[r["op"]]["bytes"] += r["bytes"]
        return dict(out)

    def total_bytes(self, op: str | None = None) -> int:
        """Bytes of all calls, or of the calls of one ``op``."""
        if op is not None and op not in OPS:
            raise ValueError(f"unknown collective {op!r}: choose from "
                             f"{', '.join(OPS)}")
        return sum(r["bytes"] for r in self.records
                   if op is None or r["op"] == op)

    def calls(self, op: str | None = None) -> int:
        return sum(1 for r in self.records if op is None or r["op"] == op)

    def by_group(self) -> dict:
        """``{(op, group_size, ranks): {"calls", "bytes"}}``: which group
        carried what (hybrid sharding: inside a node vs across nodes)."""
        out: dict = defaultdict(Counter)
        for r in self.records:
            key = (r["op"], r["group_size"], tuple(r["ranks"] or ()))
            out[key]["calls"] += 1
            out[key]["bytes"] += r["bytes"]
        return {k: dict(v) for k, v in out.items()}

    def by_node(self, node_of: list[int]) -> dict:
        """``{"inside": bytes, "across": bytes}``: calls whose group's ranks
        all run on one node, and calls whose group spans nodes. ``node_of``
        is the node each global rank actually ran on (torchrun's
        ``GROUP_RANK``, gathered from every rank)."""
        return split_by_node(self.records, node_of)


def added(*summaries) -> dict:
    """Several :meth:`CollectiveCounter.summary` results added op by op
    (a forward's and a backward's): ``{op: {"calls", "bytes"}}``."""
    out: dict = defaultdict(lambda: {"calls": 0, "bytes": 0})
    for s in summaries:
        for op, v in s.items():
            out[op]["calls"] += v["calls"]
            out[op]["bytes"] += v["bytes"]
    return dict(out)


def split_by_node(records, node_of: list[int]) -> dict:
    """Counted bytes inside one node vs across nodes (see ``by_node``)."""
    out = {"inside": 0, "across": 0}
    for r in records:
        if r["ranks"] is None:
            raise ValueError(f"{r['c10d_op']}: the group's ranks are unknown")
        nodes = {node_of[rank] for rank in r["ranks"]}
        out["across" if len(nodes) > 1 else "inside"] += r["bytes"]
    return out
