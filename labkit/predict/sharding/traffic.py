"""The collectives of one data-parallel step and their volume (pure Python).

    from labkit.predict.sharding.traffic import step_comm, units_of_phi
    units_of_phi(step_comm(7e9, 8, "zero3"), 7e9)    # 3.0

Per rank and step, with Phi the bytes of one full copy of the parameters
(or gradients), every data-parallel strategy is built from three collectives
(sizes are logical payloads, see ``labkit.predict.collectives``):

=================  ===============================  ==========  =========
strategy           collectives per step             sent / rank  ZeRO
=================  ===============================  ==========  =========
ddp, no_shard      all-reduce grads (Phi)           2 Phi        0
zero1, zero2       reduce-scatter grads (Phi),      2 Phi        1, 2
                   all-gather params (Phi)
shard_grad_op      all-gather fwd (Phi),            2 Phi        "2"
                   reduce-scatter grads (Phi)
zero3, full_shard  all-gather fwd (Phi), all-gather  3 Phi       3
                   bwd (Phi), reduce-scatter (Phi)
hybrid_shard       full_shard inside a shard group   3 Phi in,
                   of F ranks + all-reduce of the    2 Phi/F
                   grad shard (Phi/F) across the     across
                   N/F replicas
=================  ===============================  ==========  =========

"sent / rank" is the ZeRO paper's communication volume (Rajbhandari et al.
2020, "ZeRO", Sec. 7.1: an all-reduce costs 2 Psi, one reduce-scatter plus
one all-gather; Sec. 7.2.1: ZeRO-1/2 also 2 Psi; Sec. 7.2.2: ZeRO-3 3 Psi,
1.5x). It counts a ring's (N-1)/N as 1; :func:`step_comm` keeps the exact
factor. HYBRID_SHARD (Zhao et al. 2023, "PyTorch FSDP: Experiences on
Scaling Fully Sharded Data Parallel", Sec. 3.2.2) keeps the parameter
all-gathers and the gradient reduce-scatter inside a group of F ranks --
usually one node -- and sends across nodes only the all-reduce of each
rank's gradient shard: per GPU 2(R-1)/R * Phi/F bytes between nodes for R
replicas, i.e. 2 M (W-1) / (G W) for W hosts of G GPUs and M bytes of
gradients, against 2 M (N-1)/N for DDP's all-reduce over all N = W G GPUs.

What a counter sees (``labkit.measure.collectives``) is the *logical*
payload: DDP's all-reduce counts Phi, FULL_SHARD's all-gathers 2 Phi and its
reduce-scatter Phi. ``units_of_phi`` turns logical bytes into the ZeRO
volume (all-reduce x 2, the others x 1), so 2 for DDP and 3 for ZeRO-3.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from labkit.predict.collectives import ring_bytes_sent
from labkit.predict.sharding.names import PHI_UNITS, _positive, canonical


@dataclass
class Comm:
    """One kind of collective in a step, as one rank sees it."""
    op: str            # all_reduce | all_gather | reduce_scatter
    phase: str         # forward | backward | step (after the optimizer)
    what: str          # params | grads
    group_size: int
    scope: str         # intra (inside a node) | inter (spans nodes)
    nbytes: float      # logical payload, summed over the step's calls
    numel: float = 0.0  # the same in elements
    sent: float = 0.0  # bytes this rank sends on a ring
    seconds: float = 0.0


def step_comm(params: float, gpus: int, strategy: str,
              param_bytes: float = 2, grad_bytes: float | None = None,
              gpus_per_node: int = 8, shard_group: int | None = None
              ) -> list[Comm]:
    """The collectives of one step per rank, logical bytes and ring bytes.

    ``param_bytes``: bytes per element all-gathered (2 for bf16 weights);
    ``grad_bytes``: bytes per element reduced (defaults to param_bytes; 4
    when gradients are reduced in fp32, as DDP under autocast and FSDP's
    ``reduce_dtype=float32`` do). ``shard_group`` (hybrid only): ranks per
    shard group, by default one node (``min(gpus, gpus_per_node)``).
    """
    s = canonical(strategy)
    _positive(params=params, param_bytes=param_bytes)
    for name, v in (("gpus", gpus), ("gpus_per_node", gpus_per_node)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise ValueError(f"{gpus} GPUs are not whole nodes of "
                         f"{gpus_per_node}")
    grad_bytes = param_bytes if grad_bytes is None else grad_bytes
    _positive(grad_bytes=grad_bytes)
    phi_p, phi_g = params * param_bytes, params * grad_bytes
    n = gpus
    world_scope = "intra" if n <= gpus_per_node else "inter"
    if s.startswith("hybrid"):
        f = shard_group or min(gpus, gpus_per_node)
        if not isinstance(f, int) or f < 1 or n % f:
            raise ValueError(f"hybrid_shard: {n} GPUs are not a whole "
                             f"number of shard groups of {f!r}")
        r = n // f
        in_scope = "intra" if f <= gpus_per_node else "inter"
        cross = "intra" if n <= gpus_per_node else "inter"
        out = [Comm("all_gather", "forward", "params", f, in_scope, phi_p)]
        if s == "hybrid_shard":
            out.append(Comm("all_gather", "backward", "params", f, in_scope,
                            phi_p))
        out.append(Comm("reduce_scatter", "backward", "grads", f, in_scope,
                        phi_g))
        if r > 1:
            out.append(Comm("all_reduce", "backward", "grads", r, cross,
                            phi_g / f))
    elif shard_group not in (None, n):
        raise ValueError("shard_group applies to hybrid_shard only")
    elif s in ("ddp", "no_shard"):
        out = [Comm("all_reduce", "backward", "grads", n, world_scope, phi_g)]
    elif s in ("zero1", "zero2"):
        out = [Comm("reduce_scatter", "backward", "grads", n, world_scope,
                    phi_g),
               Comm("all_gather", "step", "params", n, world_scope, phi_p)]
    elif s == "shard_grad_op":
        out = [Comm("all_gather", "forward", "params", n, world_scope, phi_p),
               Comm("reduce_scatter", "backward", "grads", n, world_scope,
                    phi_g)]
    else:  # zero3, full_shard
        out = [Comm("all_gather", "forward", "params", n, world_scope, phi_p),
               Comm("all_gather", "backward", "params", n, world_scope,
                    phi_p),
               Comm("reduce_scatter", "backward", "grads", n, world_scope,
                    phi_g)]
    for c in out:
        c.sent = ring_bytes_sent(c.op, c.nbytes, c.group_size)
        c.numel = c.nbytes / (param_bytes if c.what == "params"
                              else grad_bytes)
    return out


def units_of_phi(comms, params: float) -> float:
    """ZeRO volume in units of Phi: sum(PHI_UNITS[op] * elements) / params.

    Counted in elements, as the ZeRO paper counts Psi, so that fp32
    gradients reduced beside bf16 weights still give 2 for DDP and 3 for
    ZeRO-3. Works on :class:`Comm` lists and on counter records (dicts with
    ``op`` and ``numel``) alike.
    """
    total = 0.0
    for c in comms:
        op, numel = ((c["op"], c["numel"]) if isinstance(c, dict)
                     else (c.op, c.numel))
        total += PHI_UNITS.get(op, 0) * numel
    return total / params


def volume(params: float, gpus: int, strategy: str, **kw) -> dict:
    """Totals of :func:`step_comm`: logical and sent bytes, by op and scope."""
    comms = step_comm(params, gpus, strategy, **kw)
    by_op: dict = {}
    for c in comms:
        d = by_op.setdefault(c.op, {"bytes": 0.0, "sent": 0.0})
        d["bytes"] += c.nbytes
        d["sent"] += c.sent
    return {
        "strategy": canonical(strategy), "params": params, "gpus": gpus,
        "by_op": by_op,
        "logical_bytes": sum(c.nbytes for c in comms),
        "sent_bytes": sum(c.sent for c in comms),
        "intra_node_sent_bytes": sum(c.sent for c in comms
                                     if c.scope == "intra"),
        "inter_node_sent_bytes": sum(c.sent for c in comms
                                     if c.scope == "inter"),
        "units_of_phi": units_of_phi(comms, params),
        "collectives": [asdict(c) for c in comms],
    }
