"""The parts of scripts/gpu_check.py (the prepared one-GPU check).

    python scripts/gpu_check.py --dry --deadline 300 --archive /tmp/x.tgz

plan.py (the steps, their estimates and timeouts), runner.py (a step in
its own process group, the whole check under one deadline), archive.py
(summary.json and one flat archive <= 16 MB, rewritten after every step),
wheels.py (the wheels a bare GPU machine lacks, installed once), inside.py
(the steps that run in this package's own process: versions, zero,
checkpoint). Nothing here imports labkit at module level: the check runs
on a machine's own Python before anything is installed.
"""
