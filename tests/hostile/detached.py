# lab: 06_pipeline_parallel
# base: student
# expect: 0
# A process that leaves its process group and outlives grading, then
# rewrites every grades.csv it can find.
import subprocess
from pathlib import Path

import labkit

root = Path(labkit.__file__).resolve().parent.parent
script = (f"sleep 4; for f in {root}/_build/grades/grades.csv /tmp/*/grades.csv "
          "$(find / -name grades.csv 2>/dev/null); do "
          "echo forged,06_pipeline_parallel,all,99,6 > $f; done")
subprocess.Popen(["setsid", "sh", "-c", "exec -a hostile-detached-marker "
                  f"sh -c '{script}'"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
