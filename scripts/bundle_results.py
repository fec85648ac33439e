"""Pack one profile's lab results into one archive, to take off a node.

    python scripts/bundle_results.py --profile gpu8
    # -> _build/bundles/labs-gpu8-<date>-<commit>.tar.gz; then, anywhere:
    make book PROFILE=gpu8 LABS_FROM=labs-gpu8-....tar.gz

The archive holds ``<profile>/<lab>/`` for every lab run under
``_build/labs/<profile>``: its last complete run (``labkit.labruns``; the
executed notebook, ``results.json``, ``run.json``, ``parameters.json``),
never a failed, interrupted or unfinished one: one line per lab says
which run went in and which newer one was left out. Then
``<profile>/manifest.json``: which labs, their status, the run folder of
each, the SHA-256 of every file, the provenance of the run and the node's
checkout path (the book build removes it from the pages and checks the
sums, so a damaged copy is one clear line).
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit import labruns  # noqa: E402
from labkit.provenance import git_commit  # noqa: E402

KEEP = ("results.json", "run.json", "parameters.json")


def lab_folders(folder: Path, say=print) -> dict[str, tuple[Path, str]]:
    """The last complete run of each lab and a line saying which (said)."""
    for run in labruns.label_interrupted(folder):
        say(f"an earlier run was interrupted: labelled {run.name}")
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
    runs = {n: json.loads((d / "run.json").read_text())
            for n, (d, _) in labs.items()}
    manifest = {"profile": profile, "root": str(ROOT),
                "created": dt.datetime.now(dt.timezone.utc).isoformat(
                    timespec="seconds"),
                "labs": {n: r["status"] for n, r in runs.items()},
                "runs": {n: note for n, (_, note) in labs.items()},
                "provenance": next(iter(runs.values())).get("provenance"),
                "files": {}}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for name, (d, _) in labs.items():
            for f in sorted(d.iterdir()):
                if f.name in KEEP or (f.suffix == ".ipynb"
                                      and not f.name.startswith("input-")):
                    arcname = f"{profile}/{name}/{f.name}"
                    manifest["files"][arcname] = hashlib.sha256(
                        f.read_bytes()).hexdigest()
                    tar.add(f, arcname=arcname)
        m = out.with_suffix(".manifest.json")
        m.write_text(json.dumps(manifest, indent=1))
        tar.add(m, arcname=f"{profile}/manifest.json")
        m.unlink()
    return out


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
    out = bundle(folder, a.profile,
                 a.out or ROOT / "_build" / "bundles" / name)
    print(f"bundle: {out} ({out.stat().st_size / 1e6:.1f} MB); build the "
          f"book with: make book PROFILE={a.profile} LABS_FROM={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
