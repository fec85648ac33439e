"""Cost of one collective: ring traffic, the alpha-beta model, algbw/busbw.

    from labkit.predict import collectives as C
    C.ring_bytes_sent("all_reduce", 1e9, 8)        # 1.75e9 bytes per rank
    C.collective_time("all_reduce", 1e9, 8, "nvlink4")
    C.busbw("all_reduce", nbytes=1e9, seconds=5e-3, ranks=8)

Sizes follow one convention throughout the course (the same as
``labkit.measure.collectives`` counts and as nccl-tests reports): ``nbytes``
is the *logical payload* S of the collective --

* all-reduce: the size of the tensor reduced;
* all-gather: the size of the gathered output (N x each rank's input);
* reduce-scatter: the size of the input (N x each rank's output shard);
* broadcast / reduce: the size of the tensor; all-to-all: one rank's input.

The ring algorithms (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce
algorithms for clusters of workstations", JPDC 69(2); Thakur, Rabenseifner &
Gropp 2005, "Optimization of collective communication operations in MPICH",
IJHPCA 19(1), Sec. 4) cut S into N chunks and pass them around a ring:

* reduce-scatter: N-1 steps, each rank sends (N-1)/N S;
* all-gather:     N-1 steps, each rank sends (N-1)/N S;
* all-reduce = reduce-scatter + all-gather: 2(N-1) steps, 2(N-1)/N S,
  which is the lower bound on the bytes a rank must send (Patarasuk & Yuan).

The alpha-beta (latency-bandwidth, Hockney) model prices a ring collective
as ``steps * alpha + sent / beta``, with alpha the latency of one step and
beta the bandwidth of the slowest link on the ring (Thakur et al. 2005,
Sec. 2; we leave out the reduction cost gamma, which the GPU hides).

nccl-tests (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md) reports
``algbw = S / t`` and ``busbw = algbw * factor`` with factor 2(N-1)/N for
all-reduce, (N-1)/N for all-gather, reduce-scatter and all-to-all, and 1
for broadcast and reduce: busbw is the rate at which the busiest link moved
bytes, comparable with the link's peak whatever N is.
"""
from __future__ import annotations

from dataclasses import dataclass

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
       "all_to_all")


@dataclass(frozen=True)
class Link:
    """One direction of a rank's link: bytes/s, and latency per ring step.

    ``bandwidth`` is the nominal peak per GPU and direction (vendor figures,
    cited in ``source``); real collectives reach less (``efficiency``).
    ``latency`` is an order-of-magnitude alpha per ring step, an assumption
    of this course, not a vendor figure: fit your own with the collectives
    lab (:func:`fit_alpha_beta`).
    """
    name: str
    bandwidth: float   # bytes / s, one direction
    latency: float     # seconds per ring step
    scope: str         # "intra" (inside a node) or "inter" (between nodes)
    source: str


GBps = 1e9
LINKS = {l.name: l for l in (
    Link("nvlink2", 150 * GBps, 2e-6, "intra",
         "V100 SXM2: 6 NVLink2 links, 300 GB/s both directions"),
    Link("nvlink3", 300 * GBps, 2e-6, "intra",
         "A100 SXM: 12 NVLink3 links, 600 GB/s both directions"),
    Link("nvlink4", 450 * GBps, 2e-6, "intra",
         "H100 SXM: 18 NVLink4 links, 900 GB/s both directions"),
    Link("nvlink5", 900 * GBps, 2e-6, "intra",
         "B200: 18 NVLink5 links, 1.8 TB/s both directions"),
    Link("pcie3", 16 * GBps, 5e-6, "intra", "PCIe 3.0 x16, ~15.8 GB/s"),
    Link("pcie4", 32 * GBps, 5e-6, "intra", "PCIe 4.0 x16, ~31.5 GB/s"),
    Link("pcie5", 64 * GBps, 5e-6, "intra", "PCIe 5.0 x16, ~63 GB/s"),
    Link("ib-hdr", 25 * GBps, 5e-6, "inter",
         "InfiniBand HDR, 200 Gb/s per NIC (one NIC per GPU)"),
    Link("ib-ndr", 50 * GBps, 5e-6, "inter",
         "InfiniBand NDR, 400 Gb/s per NIC (one NIC per GPU)"),
    Link("ib-xdr", 100 * GBps, 5e-6, "inter",
         "InfiniBand XDR, 800 Gb/s per NIC (one NIC per GPU)"),
    Link("eth-25g", 3.125 * GBps, 30e-6, "inter", "25 Gb/s Ethernet, TCP"),
    Link("eth-100g", 12.5 * GBps, 15e-6, "inter",
         "100 Gb/s Ethernet (RoCE or TCP)"),
    Link("eth-400g", 50 * GBps, 8e-6, "inter", "400 Gb/s Ethernet (RoCE)"),
)}


def get_link(link: "str | Link") -> Link:
    if isinstance(link, Link):
        return link
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}: choose from "
                         f"{', '.join(LINKS)}")
    return LINKS[link]


def _check(op: str, nbytes: float, ranks: int) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}: choose from "
                         f"{', '.join(OPS)}")
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"ranks must be an integer >= 1, got {ranks!r}")
    if not nbytes >= 0:
        raise ValueError(f"bytes must be >= 0, got {nbytes!r}")


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw as nccl-tests defines it (doc/PERFORMANCE.md)."""
    _check(op, 0, ranks)
    n = ranks
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0  # broadcast, reduce


def ring_steps(op: str, ranks: int) -> int:
    """Sequential send/receive steps of the ring algorithm (alpha terms)."""
    _check(op, 0, ranks)
    if ranks == 1:
        return 0
    if op == "all_reduce":
        return 2 * (ranks - 1)
    return ranks - 1  # all-gather, reduce-scatter, pipelined bcast/reduce


def ring_bytes_sent(op: str, nbytes: float, ranks: int) -> float:
    """Bytes each rank sends for one collective of logical size ``nbytes``.

    all-reduce 2(N-1)/N S, all-gather and reduce-scatter (N-1)/N S
    (Patarasuk & Yuan 2009; Thakur et al. 2005, Sec. 4); a pipelined
    broadcast or reduce sends about S per rank. Equal to bus_factor * S.
    """
    _check(op, nbytes, ranks)
    if ranks == 1:
        return 0.0
    return bus_factor(op, ranks) * nbytes


def collective_time(op: str, nbytes: float, ranks: int,
                    link: "str | Link" = "nvlink4",
                    efficiency: float = 1.0) -> float:
    """alpha-beta time of one ring collective, seconds.

    t = steps * alpha + ring_bytes_sent / (efficiency * bandwidth)
    (Thakur et al. 2005, Sec. 2 and 4).
    """
    _check(op, nbytes, ranks)
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    lk = get_link(link)
    if ranks == 1:
        return 0.0
    return (ring_steps(op, ranks) * lk.latency
            + ring_bytes_sent(op, nbytes, ranks) / (efficiency
                                                    * lk.bandwidth))


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth S / t in bytes/s (nccl-tests)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds


def busbw(op: str, nbytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth algbw * bus_factor in bytes/s (nccl-tests)."""
    return algbw(nbytes, seconds) * bus_factor(op, ranks)


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted alpha-beta model: t = steps * alpha + sent / beta."""
    op: str
    ranks: int
    alpha: float        # seconds per ring step
    beta: float         # bytes / s (= the busbw of very large messages)
    intercept: float    # seconds, steps * alpha
    rmse_rel: float     # root-mean-square relative error of the fit

    def time(self, nbytes: float) -> float:
        return self.intercept + ring_bytes_sent(
            self.op, nbytes, self.ranks) / self.beta


def fit_alpha_beta(op: str, ranks: int, sizes, seconds) -> AlphaBeta:
    """Least-squares fit of t = a + b * S over measured (S, t) pairs.

    Weighted by 1/t^2 (relative error), so that small messages, which set
    alpha, count as much as large ones, which set beta; unweighted if noise
    makes the weighted slope non-positive. Returns
    alpha = a / ring_steps and beta = bus_factor / b (the link bandwidth
    the busbw tends to); a negative intercept is clipped to 0.
    """
    sizes, seconds = [float(s) for s in sizes], [float(t) for t in seconds]
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("need at least two (size, time) pairs")
    if min(seconds) <= 0:
        raise ValueError("times must be positive")
    if ranks < 2:
        raise ValueError("a fit needs at least 2 ranks")
    # Relative weights first; if noise at small sizes (CPU timers, a busy
    # machine) tips the slope to <= 0, fall back to plain least squares,
    # which the large messages -- the ones that set beta -- dominate.
    for w in ([1 / t ** 2 for t in seconds], [1.0] * len(seconds)):
        sw = sum(w)
        mx = sum(wi * x for wi, x in zip(w, sizes)) / sw
        my = sum(wi * y for wi, y in zip(w, seconds)) / sw
        sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, sizes))
        if sxx == 0:
            raise ValueError("need at least two different sizes")
        b = sum(wi * (x - mx) * (y - my)
                for wi, x, y in zip(w, sizes, seconds)) / sxx
        if b > 0:
            break
    else:
        raise ValueError("time does not grow with size: no bandwidth to fit")
    a = max(my - b * mx, 0.0)
    steps = ring_steps(op, ranks)
    resid = [((a + b * x) - y) / y for x, y in zip(sizes, seconds)]
    rmse = (sum(r * r for r in resid) / len(resid)) ** 0.5
    return AlphaBeta(op, ranks, a / steps, bus_factor(op, ranks) / b, a,
                     rmse)


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 2,
                  ranks: int = 1, elem_bytes: int = 4) -> list[int]:
    """nccl-tests style sizes -b MIN -e MAX -f FACTOR, each a multiple of
    ``ranks * elem_bytes`` so that every rank's chunk holds whole elements."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 1 <= min_bytes <= max_bytes and factor >= 2")
    unit = ranks * elem_bytes
    out, s = [], min_bytes
    while s <= max_bytes:
        size = max(unit, (s // unit) * unit)
        if not out or size != out[-1]:
            out.append(size)
        s *= factor
    return out
