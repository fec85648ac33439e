"""Who is the culprit: what three tools say after a planted fault.

    detail_culprit(records)            # TORCH_DISTRIBUTED_DEBUG=DETAIL
    fr_culprit(run_dir / "fr", world)  # the flight recorder's analyzer
    pyspy_culprit(run_dir / "pyspy", world)   # py-spy dump of each rank

    python -m labkit.measure.hangs RUN_DIR --world-size 3   # all three

Each returns a dict with ``rank`` (the rank the tool points at, or None),
what it says about the collective where it can (``seq``, ``op``) and
``text``, the tool's own words. The records and folders are those
``labkit.runs.hangs`` leaves in its run folder.

Every tool compares ranks; none knows which is right. The fingerprint
check prints, on each rank, "Rank <me> is running X, but Rank <other> is
running Y"; the analyzer matches every rank against the first dump it
reads (rank 0 here) and names the ranks that differ; py-spy shows where
each rank's Python stands. So each is read here by majority: the culprit
is the one rank the others disagree with, which needs three ranks or
more (with two, each accuses the other). A rank with no dump at all, or
no process for py-spy to read, is named as such: it died.
"""
from __future__ import annotations

import argparse
import io
import logging
import pickle
import re
from collections import Counter
from pathlib import Path

_FINGER = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\("
    r"SequenceNumber=(\d+), OpType=(\w+)(?:, TensorShape=\[([^\]]*)\])?"
    r".*?but Rank (\d+) is running collective: CollectiveFingerPrint\("
    r"SequenceNumber=(\d+), OpType=(\w+)(?:, TensorShape=\[([^\]]*)\])?")


def odd_one(votes: list[int]) -> int | None:
    """The rank named most often, if it is named by a strict majority."""
    if not votes:
        return None
    rank, n = Counter(votes).most_common(1)[0]
    return rank if n > len(votes) / 2 else None


def detail_culprit(records: list[dict]) -> dict:
    """Read each rank's ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` mismatch error:
    every rank names the rank it disagrees with; the culprit is named by
    all the others."""
    votes, seen = [], {}
    for rec in records:
        m = _FINGER.search(rec.get("error") or "")
        if not m:
            continue
        me, other = int(m.group(1)), int(m.group(5))
        votes.append(other)
        seen[me] = {"seq": int(m.group(2)), "op": m.group(3).lower(),
                    "shape": m.group(4)}
        seen.setdefault(other, {"seq": int(m.group(6)),
                                "op": m.group(7).lower(),
                                "shape": m.group(8)})
    rank = odd_one(votes)
    said = seen.get(rank, {})
    text = next((r["error"] for r in records
                 if r.get("error") and _FINGER.search(r["error"])), "")
    return {"rank": rank, "seq": said.get("seq"), "op": said.get("op"),
            "shape": said.get("shape"), "text": text}


def read_dumps(fr_dir: Path) -> dict[int, dict]:
    """Each rank's flight-recorder dump (``rank_<r>``), by rank."""
    out = {}
    for f in sorted(Path(fr_dir).glob("rank_*")):
        if f.name.split("_")[-1].isdigit() and f.stat().st_size:
            out[int(f.name.split("_")[-1])] = pickle.loads(f.read_bytes())
    return out


def collective_logs(fr_dir: Path) -> dict[int, list[dict]]:
    """The dumps as per-rank collective logs, ``{rank: [{"seq", "op",
    "shape"}, ...]}`` (the form of ``labkit.predict.hangs.planted_log``,
    which assignment 17's analyzer reads)."""
    return {r: [{"seq": e["collective_seq_id"],
                 "op": e["profiling_name"].split(":")[-1],
                 "shape": list(e["input_sizes"][0])
                 if e.get("input_sizes") else []}
                for e in d["entries"] if not e.get("is_p2p")]
            for r, d in read_dumps(fr_dir).items()}


def fr_culprit(fr_dir: Path, world_size: int) -> dict:
    """Run the flight recorder's analyzer (``python -m
    torch.distributed.flight_recorder.fr_trace``, its own functions, with
    the dumps in rank order) and read what it reports."""
    from torch.distributed.flight_recorder.components.builder import \
        build_db
    from torch.distributed.flight_recorder.components.config_manager \
        import JobConfig
    dumps = read_dumps(fr_dir)
    missing = sorted(set(range(world_size)) - set(dumps))
    details = {f"rank_{r}": {"host_name": f"host_rank{r}", "rank": r,
                             "entries": d["entries"],
                             "version": d["version"],
                             "pg_config": d["pg_config"]}
               for r, d in sorted(dumps.items())}
    args = JobConfig().parse_args([str(fr_dir), "--allow-incomplete-ranks"])
    log = logging.getLogger("Flight Recorder")
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    before = log.handlers[:]
    log.handlers = [handler]     # its words here, not on the console
    try:
        version = str(next(iter(dumps.values()))["version"]) if dumps \
            else ""
        if details:
            build_db(details, args, version)
    finally:
        log.handlers = before
    text = buf.getvalue()
    said = _read_fr_text(text, dumps)
    if said["rank"] is None and len(missing) == 1:
        said["rank"] = missing[0]    # no dump: that rank died
    return {**said, "missing": missing, "text": text.strip()}


_SEQ = re.compile(r"(?:sequence number:|Collective sequence number:)\s*"
                  r"(\d+)")


def _read_fr_text(text: str, dumps: dict) -> dict:
    """The first problem the analyzer reports: its sequence number, the
    collective, and the rank(s) it names (culprits or missing ranks)."""
    seq = _SEQ.search(text)
    op = re.search(r"collective: gloo:(\w+)|collective: \w+:(\w+)", text)
    named = [int(r) for r in re.findall(r"Culprit rank (\d+)", text)]
    for pat in (r"missing ranks: \{([\d, ]+)\}",
                r"missed FR dumps from ranks \(\{([\d, ]+)\}\)"):
        for m in re.finditer(pat, text):
            named += [int(r) for r in m.group(1).split(",")]
    ranks = sorted(set(named))
    # the analyzer names the ranks unlike the first dump (rank 0): when
    # it names all the others, rank 0 is the odd one
    rank = ranks[0] if len(ranks) == 1 else (
        0 if ranks and len(ranks) == len(dumps) - 1 and 0 not in ranks
        else None)
    return {"seq": int(seq.group(1)) if seq else None,
            "op": (op.group(1) or op.group(2)) if op else None,
            "named": ranks, "rank": rank}


def last_frame(text: str) -> str | None:
    """The innermost frame of the main thread in ``py-spy dump``'s text:
    ``function (file:line)``, or None when py-spy found no process."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if '"MainThread"' in line and i + 1 < len(lines):
            return lines[i + 1].strip()
    return None


def pyspy_culprit(pyspy_dir: Path, world_size: int) -> dict:
    """Where each rank's Python stood while the job hung; the culprit is
    the rank whose innermost frame differs from the others' (or that
    py-spy found no process for: it died)."""
    where = {}
    for r in range(world_size):
        f = Path(pyspy_dir) / f"rank_{r}.txt"
        where[r] = last_frame(f.read_text()) if f.exists() else None
    funcs = {r: (w.split(" (")[0] if w else "no process")
             for r, w in where.items()}
    dead = [r for r, f in funcs.items() if f == "no process"]
    common = Counter(funcs.values()).most_common(1)
    odd = [r for r, f in funcs.items() if common and f != common[0][0]]
    if len(dead) == 1:
        rank = dead[0]
    else:
        rank = odd[0] if len(odd) == 1 and common[0][1] > world_size / 2 \
            else None
    return {"rank": rank, "frames": where,
            "op": funcs.get(rank) if rank is not None else None,
            "text": "\n".join(f"rank {r}: {w or 'no process (dead)'}"
                              for r, w in where.items())}


def main(argv=None) -> None:
    """``python -m labkit.measure.hangs RUN_DIR --world-size 3``: what
    each tool says about one run of ``labkit.runs.hangs``."""
    import json
    p = argparse.ArgumentParser(description=main.__doc__.split(":")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--world-size", type=int, required=True)
    a = p.parse_args(argv)
    recs = [json.loads(f.read_text())
            for f in sorted(a.run_dir.glob("rank-*.json"))]
    print("DETAIL :", detail_culprit(recs)["rank"])
    print("FR     :", fr_culprit(a.run_dir / "fr", a.world_size)["rank"])
    print("py-spy :", pyspy_culprit(a.run_dir / "pyspy",
                                    a.world_size)["rank"])


if __name__ == "__main__":
    main()
