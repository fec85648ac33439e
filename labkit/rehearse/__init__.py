"""The GPU profiles' whole run, rehearsed on a CPU (issue 28).

    python scripts/run_labs.py --profile gpu8 --rehearse [--node h100x8]
    python -m labkit.rehearse --profile gpu1 --node t4 --json

Files: ``node.py`` (the described node), ``world.py`` (one fake rank
whose GPU is ``meta``), ``nccl.py`` (CUDA's and NCCL's rules),
``labs.py`` (what each lab rehearses), ``run.py`` (the report and the
command). What it is not: no value is measured (losses, differences,
timings are "not rehearsed"), the notebooks' cells are not executed
(their launches are), and the dry run's cases keep the CPU as their
device (:mod:`labkit.dryrun`), so the device rule is checked where the
run module takes its device from ``dist.init()`` on ``meta`` (lab 11).
"""
