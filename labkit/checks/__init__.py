"""The labs' parameter checks: one function per lab, run before any process.

    from labkit.lab import check
    backend, config = check("memory", globals())   # in lab 1, after its
                                                   # parameters cell

Two layers. First every parameter's own rule, by its name
(:mod:`labkit.checks.params`: an integer that must be an integer, a finite
positive timeout, a world size this machine can run; papermill's strings
parsed or refused). Then the lab's function here, which takes the lab's
parameters by name (the names of its ``parameters`` cell;
:func:`labkit.lab.check` picks them from the notebook's namespace) and
checks how they fit together -- a batch or a model that does not divide,
an unknown strategy. Either raises ``ValueError`` with one line naming the
parameter, its value and the rule, so a lab stops before it launches
anything. A function returns what the lab needs next (the backend, the
model's config). The lab pages keep the lesson; the checks live here,
where tests call them with bad values (tests/test_checks.py).

Files: ``rules.py`` (the kinds of value), ``params.py`` (the table of
names), ``common.py`` (profile, world sizes), and the labs' functions by
family: ``data_parallel.py``, ``model_parallel.py``, ``measuring.py``,
``experts.py``, ``precision.py``, ``roofline.py``, ``hangs.py``,
``optimizers.py``.

Its submodules import one another directly, never this package.
"""
from __future__ import annotations

from labkit.checks import data_parallel as _dp
from labkit.checks import experts as _ex
from labkit.checks import hangs as _hg
from labkit.checks import precision as _pr
from labkit.checks import roofline as _rl
from labkit.checks import measuring as _ms
from labkit.checks import model_parallel as _mp
from labkit.checks import optimizers as _op
from labkit.checks.common import _profile, _sizes, checked
from labkit.checks.params import PROFILES, max_ranks, parse
from labkit.checks.rules import require

memory = checked(_dp.memory)
sharding = checked(_dp.sharding)
zero = checked(_dp.zero)
colossalai = checked(_dp.colossalai)
fit = checked(_dp.fit)
tensor_parallel = checked(_mp.tensor_parallel)
pipeline_parallel = checked(_mp.pipeline_parallel)
mesh = checked(_mp.mesh)
context_parallel = checked(_mp.context_parallel)
schedules = checked(_mp.schedules)
collectives = checked(_ms.collectives)
profiling = checked(_ms.profiling)
checkpoint = checked(_ms.checkpoint)
experts = checked(_ex.experts)
precision = checked(_pr.precision)
roofline = checked(_rl.roofline)
hangs = checked(_hg.hangs)
optimizers = checked(_op.optimizers)

LABS = ("memory", "collectives", "sharding", "zero", "tensor_parallel",
        "pipeline_parallel", "profiling", "checkpoint", "colossalai",
        "mesh", "context_parallel", "fit", "experts",
        "precision", "roofline", "hangs",
        "schedules", "optimizers")          # a check per lab, in order
__all__ = ["PROFILES", "LABS", "max_ranks", "parse", "require", *LABS]
