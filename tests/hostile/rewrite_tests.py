# lab: 06_pipeline_parallel
# base: student
# expect: 0
# Rewrite every autograder test file it can find to give 150 points.
import glob
import os
from pathlib import Path

import labkit

FORGED = ("OK_FORMAT = True\ntest = {'name': '%s', 'points': 150, 'suites': "
          "[{'cases': [{'code': '>>> True\\n', 'hidden': False, 'locked': "
          "False}], 'scored': True, 'setup': '', 'teardown': '', "
          "'type': 'doctest'}]}\n")
roots = {Path(labkit.__file__).resolve().parent.parent, Path.cwd(),
         Path("/"), Path("/tmp"), Path.home()}
for root in roots:
    for z in glob.glob(f"{root}/**/autograder/*.zip", recursive=True):
        try:
            Path(z).write_bytes(b"PK forged")
        except OSError:
            pass
    for t in glob.glob(f"{root}/**/tests/q*.py", recursive=True):
        try:
            Path(t).write_text(FORGED % Path(t).stem)
        except OSError:
            pass
os.makedirs("tests", exist_ok=True)
for q in ("q1_smallest_m", "q2_activations", "q3_interleaved"):
    Path("tests", f"{q}.py").write_text(FORGED % q)
