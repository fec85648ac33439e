"""The GPU profiles' whole run, rehearsed on a CPU (issue 28).

    python scripts/run_labs.py --profile gpu8 --rehearse [--node h100x8]
    python -m labkit.rehearse --profile gpu1 --node t4 --json

Files: ``node.py`` (the described node), ``world.py`` (one fake rank
whose GPU is ``meta``), ``process.py`` (what the rank's own process would
give it: its groups, globals, library state), ``autocast.py`` (CUDA's autocast on ``meta``),
``fsdp.py`` (FSDP1's moves onto ``meta``), ``nccl.py`` (CUDA's and
NCCL's rules), ``isolate.py`` (each rank in a forked child: a crash of
torch under fake tensors is one rank's line), ``kernel.py`` (the device a
notebook's own measurement uses: the fake GPU), ``labs.py`` (what each lab
rehearses without its notebook), ``hook.py`` (a notebook's ``launch()``
under rehearsal), ``notebooks.py`` (a notebook executed through
papermill, every cell, the ``gpu``-tagged ones too), ``run.py`` (the
report and the command).

Coverage and cost: ``--cells LAB`` (or ``all``) executes that lab's
notebook with the profile's parameters; every ``launch()`` of its cells
runs at the real world size, each rank on fake tensors with ``meta`` as
its GPU through ``dist.init()`` -- so the device rule bites in every run
module a cell launches -- and the rank's peak against the node's memory.
A fake rank at real size costs seconds per training step on 2 cores, so
``make test`` executes lab 11's notebook (``run.CELLS_IN_TESTS``) and
rehearses the other labs by their dry-run cases (``labs.py``), where the
device is the CPU; ``make rehearse-all`` executes every notebook for gpu8
and gpu1 (minutes per lab). What is never rehearsed: values (losses, differences,
timings, a collective's answer checked with ``bool()``, routing
counts: "not rehearsed"), DeepSpeed's and Colossal-AI's engines (another
interpreter for the latter), CUDA-only calls of a cell
(``torch.cuda.*``), compiled kernels.

The package sits above the launcher, the dry run and the preflight and
imports them; its shared names live low (``env.py``, ``limits.py``) so
that no module here imports back up to ``hook.py``.
"""
