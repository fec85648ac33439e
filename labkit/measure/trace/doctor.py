"""From a breakdown to advice: which cause costs how much, and why we think so.

    from labkit.measure import profiling
    from labkit.measure.trace import doctor
    report = profiling.analyze("traces/slow")
    for line in doctor.triage(report):
        print(line)
    for finding in doctor.diagnose(report):
        print(finding)              # cause, ms per step, evidence, advice

    python -m labkit profile traces/slow --doctor     # the same, in a shell

The triage order: first the share of the device's time (is it busy? with
what?), then the phases of the step (data, forward, backward, optimizer),
and only then the single kernel, op or collective that dominates. Looking
at a kernel before knowing that the device idles half the step is the
classic way to optimise the wrong thing.

Each rule reads the breakdown of :mod:`labkit.measure.profiling` and, when
its cause costs at least ``min_share`` of the step, returns a
:class:`Finding` with the time it costs per step (mean over the profiled
steps and ranks) and the numbers it used. The costs are upper bounds of
what the fix can save: fixing one cause can expose another (a rank that no
longer waits for data now waits for its peer at the all-reduce).

Two small what-if models sit beside the rules, so a lab can predict what a
fix should buy before measuring it: :func:`data_wait` (a DataLoader queue)
and :func:`ddp_buckets` (DDP's gradient buckets), in
:mod:`labkit.measure.trace.what_if` and re-exported here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit.measure.trace.what_if import (  # noqa: F401 (re-exported)
    data_wait, ddp_buckets)

CAUSES = ("data", "communication", "sync", "launch")


@dataclass
class Finding:
    cause: str             # one of CAUSES
    cost_ms: float         # per step, mean over steps and ranks
    share_pct: float       # of the mean step
    evidence: str
    advice: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"[{self.cause}] {self.cost_ms:.2f} ms per step "
                 f"({self.share_pct:.0f}% of the step)",
                 f"  evidence: {self.evidence}"]
        lines += [f"  - {a}" for a in self.advice]
        return "\n".join(lines)


def _mean(report: dict, key: str) -> float:
    rows = [s[key] for r in report["ranks"] for s in r["steps"]]
    return sum(rows) / len(rows) if rows else 0.0


def _per_rank(report: dict, key: str) -> dict[int, float]:
    return {r["rank"]: sum(s[key] for s in r["steps"]) / len(r["steps"])
            for r in report["ranks"] if r["steps"]}


def _fmt_ranks(values: dict[int, float], scale: float = 1e-3,
               unit: str = "ms") -> str:
    """Each rank's value, or the extremes when there are many ranks."""
    if len(values) <= 4:
        return ", ".join(f"rank {r}: {v * scale:.2f} {unit}"
                         for r, v in sorted(values.items()))
    lo = min(values, key=values.get)
    hi = max(values, key=values.get)
    return (f"{len(values)} ranks, from {values[lo] * scale:.2f} {unit} "
            f"(rank {lo}) to {values[hi] * scale:.2f} {unit} (rank {hi})")


def diagnose(report: dict, min_share: float = 0.05) -> list[Finding]:
    """The causes that cost at least ``min_share`` of the step, worst
    first."""
    if not report["ranks"] or not any(r["steps"] for r in report["ranks"]):
        raise ValueError("the report has no profiled steps")
    gpu = any(r["device"] == "gpu" for r in report["ranks"])
    step = _mean(report, "step_us")
    found = []

    def add(cause, cost_us, evidence, advice, seen=False):
        # ``seen``: the evidence is unambiguous (a .item() in the loop),
        # so report it even when it is cheap here
        if step and (seen or cost_us >= min_share * step):
            found.append(Finding(cause, cost_us / 1e3, 100 * cost_us / step,
                                 evidence, advice))

    # -- data wait ------------------------------------------------------
    data = _mean(report, "data_us")
    loaders = {r["loader"] for r in report["ranks"]} - {None}
    advice = []
    if "single-process" in loaders:
        advice.append("num_workers > 0: the DataLoader runs in the "
                      "training process (num_workers=0), so every batch "
                      "is loaded while the device waits")
    advice += [
        "num_workers: w workers deliver w batches per load time; enough "
        "when load_time / w <= the rest of the step (doctor.data_wait)",
        "prefetch_factor (default 2) is a buffer of w * prefetch_factor "
        "batches: it absorbs jitter, it does not raise the mean rate",
        "persistent_workers=True: workers survive the epoch instead of "
        "restarting (and re-forking) every epoch"]
    if gpu:
        advice.append("pin_memory=True with .to(device, non_blocking=True):"
                      " the copy to the GPU overlaps compute")
    advice.append("data format: decode once, store pre-tokenized shards "
                  "(memory-mapped arrays) instead of per-sample work")
    add("data", data,
        f"DataLoader __next__ not hidden by device work: "
        f"{_fmt_ranks(_per_rank(report, 'data_us'))} per step "
        f"(iterator: {', '.join(sorted(loaders)) or 'none seen'})", advice)

    # -- exposed communication (gradient sync) ---------------------------
    outside = _mean(report, "exposed_comm_outside_backward_us")
    has_backward = any("backward" in s["phases_us"]
                       for r in report["ranks"] for s in r["steps"])
    comm = _mean(report, "communication_us") - (outside if has_backward
                                                else 0.0)
    n_coll = _mean(report, "collectives")
    med = _mean(report, "collective_median_us")
    total = _mean(report, "comm_total_us")
    ovl = 100 * _mean(report, "overlap_us") / total if total else 0.0
    advice = []
    if n_coll >= 8 and med < 2000:
        advice.append(f"{n_coll:.0f} collectives per step, median "
                      f"{med:.0f} us each: latency-bound; raise DDP "
                      "bucket_cap_mb (default 25) for fewer, larger "
                      "all-reduces (doctor.ddp_buckets)")
    advice += [
        "overlap: DDP launches a bucket as soon as its gradients are "
        "ready; buckets too large start late, too small pay latency",
        "gradient_as_bucket_view=True: gradients live in the buckets, "
        "one copy less per step",
        "FSDP: forward_prefetch / backward_prefetch, and "
        "reshard_after_forward=False where memory allows",
        "gradient accumulation (DDP): wrap k-1 of k micro-batches in "
        "model.no_sync() to all-reduce once per k; FSDP/ZeRO-3 still "
        "all-gathers the parameters every micro-batch",
        "communication time includes waiting for the slowest rank: "
        "compare ranks before blaming the network"]
    add("communication", comm,
        "exposed communication "
        f"{_fmt_ranks(_per_rank(report, 'communication_us'))} per step; "
        f"{n_coll:.1f} collectives per step, median {med:.0f} us; "
        f"{ovl:.0f}% of communication overlapped compute",
        advice)

    # -- sync points -------------------------------------------------------
    items = _mean(report, "items")
    sync = _mean(report, "sync_us")
    idle = _mean(report, "idle_us")
    if gpu:
        cost = _mean(report, "idle_after_sync_us")
        evidence = (f"{items:.1f} aten::item per step outside the "
                    f"optimizer; host blocked {sync / 1e3:.2f} ms per step "
                    "in CUDA synchronize calls; then the GPU idled "
                    f"{cost / 1e3:.2f} ms per step until the host "
                    "launched new work")
    else:
        cost = outside if items >= 1 or outside > 0 else 0.0
        evidence = (f"{items:.1f} aten::item per step; "
                    f"{outside / 1e3:.2f} ms per step of exposed "
                    "communication outside backward (a blocking "
                    "collective in the loop)")
    add("sync", cost, evidence, seen=items >= 1 and cost >= 0.01 * step,
        advice=[
        ".item(), .cpu(), print(tensor) in the loop wait for every "
        "queued kernel (GPU) and, after an all-reduce, for every rank",
        "keep metrics on the device (a running sum) and read them every "
        "N steps; log every N steps, not every step"])

    # -- many small ops: launch- or Python-bound ---------------------------
    n_k = _mean(report, "kernels")
    k_med = _mean(report, "kernel_median_us")
    if gpu:
        cost = _mean(report, "idle_launch_us")
        evidence = (f"{n_k:.0f} kernels per step, median {k_med:.1f} us; "
                    f"the GPU idled {cost / 1e3:.2f} ms per step waiting "
                    "for the host to launch the next kernel (no sync "
                    f"before it; all GPU idle: {idle / 1e3:.2f} ms)")
    else:
        cost = idle if k_med < 50 and n_k >= 100 else 0.0
        evidence = (f"{n_k:.0f} top-level ops per step, median "
                    f"{k_med:.1f} us; the CPU ran no op and moved no data "
                    f"for {idle / 1e3:.2f} ms per step (Python between "
                    "ops)")
    if cost:
        add("launch", cost, evidence, [
                "fuse small ops: torch.compile, fused optimizers "
                "(fused=True / foreach=True)",
                "CUDA graphs (torch.compile mode='reduce-overhead') "
                "replay a step with one launch",
                "a larger batch per rank: the same number of launches "
                "does more work"])
    found.sort(key=lambda f: -f.cost_ms)
    return found


def triage(report: dict, top: int = 3) -> list[str]:
    """The three questions, in order, answered from the report."""
    step = _mean(report, "step_us")
    if not step:
        raise ValueError("the report has no profiled steps")
    kinds = ("compute", "communication", "data", "other", "idle")
    device = "GPU" if any(r["device"] == "gpu" for r in report["ranks"]) \
        else "CPU"
    share = ", ".join(f"{k} {100 * _mean(report, k + '_us') / step:.0f}%"
                      for k in kinds)
    out = [f"1. {device} time per step ({step / 1e3:.2f} ms, mean of "
           f"{len(report['ranks'])} ranks): {share}"]
    phases: dict[str, float] = {}
    n = 0
    for r in report["ranks"]:
        for s in r["steps"]:
            n += 1
            for k, v in s["phases_us"].items():
                phases[k] = phases.get(k, 0.0) + v
    if phases:
        out.append("2. phases (CPU time of the labelled ranges): " + ", ".join(
            f"{k} {v / n / 1e3:.2f} ms" for k, v in sorted(
                phases.items(), key=lambda kv: -kv[1])))
    else:
        out.append("2. phases: none labelled (wrap data / forward / "
                   "backward / optimizer in record_function)")
    rows: dict[tuple, list] = {}
    for r in report["ranks"]:
        for t in r["top"]:
            a = rows.setdefault((t["kind"], t["name"]), [0, 0.0])
            a[0] += t["count"]
            a[1] += t["total_us"]
    parts = []
    for kind in ("compute", "communication"):
        best = sorted(((k, v) for k, v in rows.items() if k[0] == kind),
                      key=lambda kv: -kv[1][1])[:top]
        if best:
            parts.append(f"{kind}: " + "; ".join(
                f"{name[:50]} {us / n / 1e3:.2f} ms in {c / n:.1f} calls"
                for (_, name), (c, us) in best))
    out.append("3. top, per step and rank (durations summed): "
               + " | ".join(parts))
    return out
