"""Pack one profile's lab results into one archive, to take off a node.

    python scripts/bundle_results.py --profile gpu8
    # -> _build/bundles/labs-gpu8-<date>-<commit>.tar.gz; then, anywhere:
    make book PROFILE=gpu8 LABS_FROM=labs-gpu8-....tar.gz

The archive holds ``<profile>/<lab>/`` for every lab run under
``_build/labs/<profile>``: its last complete run (``labkit.results.labruns``; the
executed notebook, ``results.json``, ``run.json``, ``parameters.json``),
never a failed, interrupted or unfinished one: one line per lab says
which run went in and which newer one was left out. Then
``<profile>/manifest.json``: which labs, their status, the run folder of
each, the SHA-256 of every file, the provenance of the run and the node's
checkout path (the book build removes it from the pages and checks the
sums, so a damaged copy is one clear line).

Each run is verified before it goes in (``labkit.results.resultsfile``):
``results.json`` must hold the documented records, and every file must
still match the SHA-256 the runner stored in ``run.json`` when the lab
completed; those stored sums, not sums of whatever is on disk now, go into
the manifest. A damaged or missing file refuses the bundle in one line.
The archive is written to a temporary name and renamed when complete, so
a full disk (said as "disk full at PATH") never leaves a truncated archive
under the final name.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit import disk
from labkit.results import labruns, resultsfile  # noqa: E402
from labkit.results.provenance import git_commit  # noqa: E402

KEEP = ("results.json", "run.json", "parameters.json")


def lab_folders(folder: Path, say=print) -> dict[str, tuple[Path, str]]:
    """The last complete run of each lab and a line saying which (said)."""
    for run in labruns.label_interrupted(folder):
        say(labruns.said(run))
    names = sorted({labruns.lab_of(d) for d in folder.iterdir()
                    if d.is_dir()})
    chosen = {}
    for name in names:
        run, note = labruns.last_complete(folder, name)
        say(note + ("" if run else ": left out of the bundle"))
        if run:
            chosen[name] = run, note
    return chosen


def bundle(folder: Path, profile: str, out: Path, say=print) -> Path:
    labs = lab_folders(folder, say)
    if not labs:
        raise SystemExit(f"no complete lab results in {folder}: run "
                         f"scripts/run_labs.py --profile {profile} first")
    sums = {}
    for n, (d, _) in labs.items():
        try:
            sums[n] = resultsfile.verify(d) or {}
        except resultsfile.ResultsError as e:
            raise SystemExit(f"bundle refused: {e}") from None
    runs = {n: json.loads((d / "run.json").read_text())
            for n, (d, _) in labs.items()}
    manifest = {"profile": profile, "root": str(ROOT),
                "created": dt.datetime.now(dt.timezone.utc).isoformat(
                    timespec="seconds"),
                "labs": {n: r["status"] for n, r in runs.items()},
                "runs": {n: note for n, (_, note) in labs.items()},
                "provenance": next(iter(runs.values())).get("provenance"),
                "files": {}}
    with disk.said(out.parent):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.partial")
        try:
            _write(tmp, labs, sums, manifest, profile)
            os.replace(tmp, out)    # complete: now under its name
        finally:
            tmp.unlink(missing_ok=True)
    return out


def _write(tmp: Path, labs, sums, manifest, profile) -> None:
    import io
    with tarfile.open(tmp, "w:gz") as tar:
        for name, (d, _) in labs.items():
            for f in sorted(d.iterdir()):
                if f.name in KEEP or (f.suffix == ".ipynb"
                                      and not f.name.startswith("input-")):
                    arcname = f"{profile}/{name}/{f.name}"
                    manifest["files"][arcname] = sums[name].get(
                        f.name) or hashlib.sha256(
                        f.read_bytes()).hexdigest()
                    tar.add(f, arcname=arcname)
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(f"{profile}/manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.fileobj.flush()
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="gpu8")
    ap.add_argument("--from", dest="src", type=Path,
                    default=ROOT / "_build" / "labs",
                    help="the runner's results folder (default _build/labs)")
    ap.add_argument("--out", type=Path, help="archive to write (.tar.gz)")
    a = ap.parse_args(argv)
    folder = a.src / a.profile
    if not folder.is_dir():
        raise SystemExit(f"no results for profile {a.profile!r} in {a.src}")
    name = (f"labs-{a.profile}-{dt.date.today():%Y%m%d}-"
            f"{(git_commit() or 'nogit').replace('+', '-')}.tar.gz")
    try:
        out = bundle(folder, a.profile,
                     a.out or ROOT / "_build" / "bundles" / name)
    except disk.DiskError as e:
        raise SystemExit(f"bundle refused: {e}") from None
    print(f"bundle: {out} ({out.stat().st_size / 1e6:.1f} MB); build the "
          f"book with: make book PROFILE={a.profile} LABS_FROM={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
