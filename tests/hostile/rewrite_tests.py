# lab: 02_collectives
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
targets = glob.glob(str(Path(labkit.__file__).resolve().parent.parent
                        / "_build" / "assignments" / "autograder" / "*.zip"))
for top, dirs, files in os.walk("/"):  # everything this process can see
    dirs[:] = [d for d in dirs if f"{top}/{d}" not in ("//proc", "//sys",
                                                      "//dev", "//usr")]
    targets += [f"{top}/{f}" for f in files if f.endswith(".zip")
                or (f.startswith("q") and f.endswith(".py"))]
for t in targets:
    try:
        if t.endswith(".zip"):
            Path(t).write_bytes(b"PK forged")
        else:
            Path(t).write_text(FORGED % Path(t).stem)
    except OSError:
        pass
os.makedirs("tests", exist_ok=True)
for q in ("q1_ring_bytes", "q2_crossover", "q3_busbw"):
    Path("tests", f"{q}.py").write_text(FORGED % q)
