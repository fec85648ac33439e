"""A strict stand-in for CUDA's and NCCL's rules, checked on fake ranks.

    rules = NcclRules(rank=0, device=torch.device("meta"))
    with rules:                       # every c10d operator is seen
        ...                           # the rank's code
    rules.violations                  # ["rank 0: all_reduce: ..."]
    problems = deadlocks(logs)        # logs: {rank: rules.p2p}, all ranks

Checked per rank, as each collective is issued (the c10d operators, as
:class:`labkit.measure.collectives.CollectiveCounter` sees them):

- every tensor of a collective is on the rank's device (``meta`` stands
  for the rank's GPU in a rehearsal; a CPU tensor in an nccl collective
  is an error NCCL raises: "Tensors must be CUDA and dense");

- an object collective (``all_gather_object``) carries its pickled
  bytes on the device NCCL would: the rank's GPU (on the node,
  ``torch.cuda.current_device()``), the CPU in a gloo group only
  (:func:`object_collectives`; the fake world's group serves both
  devices, and torch would pick the CPU for it);

and across the ranks of one launch, from each rank's point-to-point log:

- pairing: the sends from ``a`` to ``b`` are, in order, the receives ``b``
  posts from ``a`` (tag and bytes); anything else hangs or corrupts;
- grouping: NCCL runs the point-to-point calls between two ranks on one
  communicator and stream, in the order issued. A send that is not in a
  group (``batch_isend_irecv``) waits for the peer's receive; when both
  ranks of a pair have a send at the head of that stream, neither
  receive is ever reached: a deadlock (PyTorch's ``batch_isend_irecv``
  documentation; NCCL's "Point-to-point communication" guide: group
  calls "to avoid deadlocks"). A group is one item that progresses all
  its sends and receives together.
"""
from __future__ import annotations

import contextlib
import itertools

import torch
import torch.distributed as tdist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_P2P = {"send": "send", "recv_": "recv"}
# a rank's error for an object a peer sent (hook.FAKE_LIMITS: not rehearsed)
PEER_OBJECTS = "the objects a peer pickled are values no fake rank has"


def _group_name(boxed) -> str | None:
    """The name of the process group a c10d operator was given (boxed)."""
    try:
        return tdist.ProcessGroup.unbox(boxed).group_name
    except Exception:  # noqa: BLE001 - another script object: no group
        return None


class NcclRules(TorchDispatchMode):
    """Check each collective of one rank; log its point-to-point calls."""

    def __init__(self, rank: int, device: torch.device):
        super().__init__()
        self.rank, self.device = rank, device
        self.violations: list[str] = []
        self.p2p: list[dict] = []
        self.group = None          # the batch_isend_irecv call, if in one
        self.cpu_groups: set = set()   # names of groups made as gloo
        self.not_rehearsed = 0     # the peers' objects of object collectives
        self._groups = itertools.count()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if getattr(func, "namespace", None) == "c10d":
            self._check(func._schema.name.split("::", 1)[-1], args)
        return func(*args, **(kwargs or {}))

    def _check(self, name, args):
        flat = tree_flatten(list(args))[0]
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        gloo = any(_group_name(g) in self.cpu_groups for g in flat
                   if isinstance(g, torch.ScriptObject))
        # barrier's one-element tensor is torch's, made on the machine's
        # accelerator (torch._C._get_accelerator(): the CPU here, the GPU
        # on the node), never the rank's code's
        own = name == "barrier"
        for t in tensors if not (gloo or own) else ():   # gloo: CPU lawful
            if t.device.type != self.device.type:
                where = ("a CPU tensor" if t.device.type == "cpu"
                         else f"a tensor on {t.device}")
                self.violations.append(
                    f"rank {self.rank}: {name}: {where} "
                    f"{tuple(t.shape)} in an nccl collective (tensors must "
                    f"be on the rank's GPU)")
        if name in _P2P:
            peer, tag = args[2], args[3]
            self.p2p.append({"op": _P2P[name], "peer": int(peer),
                             "tag": int(tag), "group": self.group,
                             "bytes": sum(t.numel() * t.element_size()
                                          for t in tensors)})

    @contextlib.contextmanager
    def grouped(self):
        """Calls inside are one NCCL group (batch_isend_irecv)."""
        saved, self.group = self.group, next(self._groups)
        try:
            yield
        finally:
            self.group = saved


@contextlib.contextmanager
def watch_groups(rules: NcclRules):
    """``batch_isend_irecv`` marks its calls as one group while active."""
    import torch.distributed.distributed_c10d as c10d
    original = c10d.batch_isend_irecv

    def batch_isend_irecv(p2p_op_list):
        with rules.grouped():
            return original(p2p_op_list)
    saved = [(c10d, c10d.batch_isend_irecv), (tdist, tdist.batch_isend_irecv)]
    for mod, _ in saved:
        mod.batch_isend_irecv = batch_isend_irecv
    try:
        yield
    finally:
        for mod, fn in saved:
            mod.batch_isend_irecv = fn


@contextlib.contextmanager
def object_collectives(rules: NcclRules):
    """``all_gather_object`` as on an nccl group, while active.

    The device of its tensors is NCCL's (see the module doc), so the
    device rule checks them. Its two all-gathers (the sizes, then the
    bytes) are issued as torch issues them, at this rank's size: the
    peers' sizes and objects are values no fake rank has (torch reads the
    largest size from the gathered sizes). Each peer's slot gets this
    rank's own object, round-tripped through pickle as torch's is -- the
    ranks of one node's SPMD launch (lab 3 gathers each rank's node and
    host: one node, one host) -- and counts as a value not rehearsed."""
    import pickle
    import torch.distributed.distributed_c10d as c10d
    device_of, gather = c10d._get_object_coll_device, c10d.all_gather_object

    def object_device(group=None):
        g = group or c10d._get_default_group()
        return "cpu" if g.group_name in rules.cpu_groups \
            else rules.device.type

    def all_gather_object(object_list, obj, group=None):
        if c10d._rank_not_in_group(group):
            return gather(object_list, obj, group)   # warns, as torch
        device = object_device(group)
        data, size = c10d._object_to_tensor(obj, device, group)
        n, me = c10d.get_world_size(group), c10d.get_rank(group)
        sizes = torch.zeros(n, dtype=torch.long, device=device)
        tdist.all_gather([sizes[i].unsqueeze(0) for i in range(n)], size,
                         group=group)
        out = torch.empty(data.numel() * n, dtype=torch.uint8,
                          device=device)
        tdist.all_gather(list(out.chunk(n)), data, group=group)
        for i in range(n):
            object_list[i] = obj if i == me else pickle.loads(
                pickle.dumps(obj))
        rules.not_rehearsed += n - 1
    def recv_object_list(object_list, *args, **kwargs):
        # the size of a peer's pickle is read with .item() (NaN here) and
        # then the pickle itself: nothing to stand in with (lab 6's
        # pipeline stages exchange their shapes this way at the first step)
        raise RuntimeError(f"recv_object_list: {PEER_OBJECTS}")
    saved = [(c10d, "_get_object_coll_device", device_of),
             (c10d, "all_gather_object", gather),
             (tdist, "all_gather_object", tdist.all_gather_object),
             (c10d, "recv_object_list", c10d.recv_object_list),
             (tdist, "recv_object_list", tdist.recv_object_list)]
    c10d._get_object_coll_device = object_device
    c10d.all_gather_object = tdist.all_gather_object = all_gather_object
    c10d.recv_object_list = tdist.recv_object_list = recv_object_list
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def _items(log: list[dict], peer: int) -> list:
    """The stream between this rank and ``peer``: single calls and groups."""
    out, last = [], object()
    for e in log:
        if e["peer"] != peer:
            continue
        if e["group"] is not None and e["group"] == last:
            out[-1].append(e)
        else:
            out.append([e])
        last = e["group"] if e["group"] is not None else object()
    return out


def deadlocks(logs: dict[int, list[dict]], what: str = "") -> list[str]:
    """Pairing and grouping problems of one launch (see the module doc)."""
    out = []
    for a, b in itertools.combinations(sorted(logs), 2):
        for src, dst in ((a, b), (b, a)):
            sent = [(e["tag"], e["bytes"]) for e in logs[src]
                    if e["op"] == "send" and e["peer"] == dst]
            got = [(e["tag"], e["bytes"]) for e in logs[dst]
                   if e["op"] == "recv" and e["peer"] == src]
            if sent != got:
                out.append(f"{what}ranks {src}->{dst}: {len(sent)} sends, "
                           f"{len(got)} matching receives posted (send/recv "
                           "unpaired: a hang)")
        qa, qb = _items(logs[a], b), _items(logs[b], a)
        while qa and qb:
            ha, hb = qa[0], qb[0]
            single = len(ha) == 1 and len(hb) == 1 and \
                ha[0]["group"] is None and hb[0]["group"] is None
            if single and ha[0]["op"] == hb[0]["op"]:
                out.append(
                    f"{what}ranks {a} and {b}: both {ha[0]['op']} first "
                    f"({ha[0]['bytes']:,} bytes, tag {ha[0]['tag']}) as "
                    "separate ungrouped calls on their one NCCL "
                    "communicator: deadlock (group them with "
                    "batch_isend_irecv)")
                break
            qa.pop(0)
            qb.pop(0)
    return out
