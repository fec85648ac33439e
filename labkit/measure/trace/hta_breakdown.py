"""The GPU breakdown, HTA's way: compute, non-compute, idle and overlap.

    from labkit.measure.trace import hta_breakdown as H
    H.temporal([(ts, end, H.kernel_type(name)), ...])

HolisticTraceAnalysis (HTA, Meta, MIT) is the reference for splitting a GPU
timeline; this module re-implements its rules, not its pandas machinery, so
``python -m labkit profile`` needs neither HTA nor pandas. Each rule names
the HTA 0.5.0 function it mirrors (``hta/analyzers/breakdown_analysis.py``,
``hta/analyzers/communication_analysis.py``, ``hta/utils/utils.py``). Which
kernels enter (HTA's reading rules: time-stamp rounding, the left-out last
step, the launch of each kernel) is in :mod:`labkit.measure.trace.kineto`.

The rules, for one rank's kernels (every event with a CUDA stream):

* **kernel classes** (``get_kernel_type``): ``^nccl.*Kernel`` is
  communication; ``^Memcpy``, ``^Memset``, ``^dma`` are memory; a name that
  matches none of ``^nccl.*Kernel``, ``.*Memcpy``, ``^Memset``, ``.*Sync``
  is computation; the rest (``cudaStreamSynchronize``-like "Sync" events,
  copies whose name does not start with ``Memcpy``) is "other".
* **merging** (``merge_kernel_intervals``): sort by start; a kernel starts a
  new group when it starts *after* the latest end of all kernels before it
  (touching kernels join); a group runs from its first start to its latest
  end. Its length ``end - start`` is summed *as is*: after HTA's rounding a
  sub-microsecond kernel can end before it starts and then counts -1 us.
* **span** (``_get_idle_time_for_kernels``): from the first group's start
  to the last group's end (the last group by start), over kernels on *all*
  streams together; **idle** = span - merged busy time.
* **compute** (``get_temporal_breakdown``): the merged length of the
  computation kernels; **non-compute** = span - compute - idle, i.e. the
  communication, memory and other kernels not under compute.
* **overlap** (``get_comm_comp_overlap``): sweep the merged communication
  and computation groups (+1/-1 and +2/-2 at their starts and ends); the
  time the running sum is 3 over the merged communication length.
* **percentages**: ``round(100 * part / whole, 2)``, as HTA prints them.
"""
from __future__ import annotations

import re

COMMUNICATION, MEMORY, COMPUTATION, OTHER = (
    "COMMUNICATION", "MEMORY", "COMPUTATION", "OTHER")  # HTA's KernelType
# hta/utils/utils.py: NCCL_KERNEL_RE, MEMORY_KERNEL_RE, NCCL_COMPUTE_KERNEL_RE
NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

_TYPE_CACHE: dict[str, str] = {}


def kernel_type(name: str) -> str:
    """HTA's ``get_kernel_type``: the first class whose pattern matches."""
    kind = _TYPE_CACHE.get(name)
    if kind is None:
        if NCCL_KERNEL.match(name):
            kind = COMMUNICATION
        elif MEMORY_KERNEL.match(name):
            kind = MEMORY
        elif not NOT_COMPUTE.match(name):
            kind = COMPUTATION
        else:
            kind = OTHER
        _TYPE_CACHE[name] = kind
    return kind


def merge(intervals) -> list[tuple[float, float]]:
    """HTA's ``merge_kernel_intervals``: groups of overlapping kernels.

    Unlike :func:`labkit.measure.trace.intervals.union` it keeps a group whose end
    is before its start (a rounded sub-microsecond kernel), as HTA does.
    """
    out: list[tuple[float, float]] = []
    latest = float("-inf")          # cummax of the ends of earlier kernels
    gs = ge = None
    for s, e in sorted(intervals, key=_start):
        if s > latest or gs is None:
            if gs is not None:
                out.append((gs, ge))
            gs, ge = s, e
        elif e > ge:
            ge = e
        if e > latest:
            latest = e
    if gs is not None:
        out.append((gs, ge))
    return out


def _start(iv):
    return iv[0]


def busy(groups) -> float:
    """Summed length of merged groups, signed (HTA: ``end.sum() - ts.sum()``)."""
    return sum(e - s for s, e in groups)


def overlap(comm, comp) -> float:
    """HTA's ``get_comm_comp_overlap`` sweep: time both run, in us.

    ``comm`` and ``comp`` are merged groups. Ties keep HTA's concatenation
    order (communication starts, its ends, then computation's); only
    zero-length stretches depend on it.
    """
    status = ([(s, 1) for s, _ in comm] + [(e, -1) for _, e in comm]
              + [(s, 2) for s, _ in comp] + [(e, -2) for _, e in comp])
    status.sort(key=lambda x: x[0])
    out, running = 0.0, 0
    for i, (t, d) in enumerate(status[:-1]):
        running += d
        if running == 3:
            out += status[i + 1][0] - t
    return out


def temporal(kernels) -> dict:
    """HTA's temporal breakdown and overlap of ``(start, end, type)`` kernels.

    Returns microseconds: ``start``, ``span`` (first start to last end),
    ``idle``, ``compute``, ``non_compute``, ``comm`` (merged
    communication), ``overlap`` (communication under computation), and
    the merged ``groups`` (all kernels, compute, communication).
    """
    groups = merge((s, e) for s, e, _ in kernels)
    if not groups:
        raise ValueError("no GPU kernels to split")
    span = groups[-1][1] - groups[0][0]
    idle = span - busy(groups)
    comp = merge((s, e) for s, e, k in kernels if k == COMPUTATION)
    comm = merge((s, e) for s, e, k in kernels if k == COMMUNICATION)
    compute = busy(comp)
    return {"start": groups[0][0], "span": span, "idle": idle,
            "compute": compute, "non_compute": span - compute - idle,
            "comm": busy(comm), "overlap": overlap(comm, comp),
            "groups": {"all": groups, "compute": comp, "communication": comm}}


def pctg(part: float, whole: float) -> float | None:
    """``round(100 * part / whole, 2)`` as HTA rounds its ``*_pctg`` columns
    (None where HTA would divide by zero)."""
    return round(100 * part / whole, 2) if whole else None
