# lab: 02_collectives
# base: student
# expect: 0
# Append to the course package and the environment, so that the next
# students' blank notebooks score full marks.
import site
import sys
from pathlib import Path

import labkit

# the key's answers as built-ins: a blank answer (`...`) is not exported, so
# the tests would find these
POISON = ("\nimport builtins; builtins.__dict__.update(allreduce_sent=1.75e9,"
          " allgather_sent=8.75e8, crossover=2 ** 21, t_2=1 / 360,"
          " t_8=1.75 / 360, allreduce_time=lambda n: 7e-5 + 3.5e-11 * n)\n")
targets = [Path(labkit.__file__)] + [Path(p, "sitecustomize.py") for p in
                                     site.getsitepackages() + sys.path if p]
for t in targets:
    try:
        with open(t, "a") as f:
            f.write(POISON)
    except OSError:
        pass
