"""Chapter 18's run: the schedules past 1F1B on real ranks.

    torchrun --nproc-per-node 2 -m labkit.runs.schedules \
        --schedules 1f1b,zb-h1,zbv,dualpipev --microbatches 4

``stages`` builds the lab's model (``--layers`` blocks of ``Linear`` and
``Tanh``), cuts it into the stages a schedule places on this rank and
records what each of them does (the order, the times, the bytes
autograd saves); ``run`` is the entry point that drives torch's
schedules and writes ``rank-<r>.json``. Imports ``labkit.dist`` and
torch; imported by nothing but the launcher (``python -m``).
"""
from labkit.runs.schedules.run import main  # noqa: F401 (the entry point)
