# lab: 02_collectives
# base: student
# expect: 0
# A process that leaves its process group and session (double fork) to
# outlive grading, then rewrites every grades.csv it can find.
import subprocess
import sys

import labkit

CODE = f"""# hostile-detached-marker
import glob, os, time
if os.fork():
    os._exit(0)
os.setsid()
time.sleep(4)
root = {str(labkit.__file__)!r}.rsplit("/labkit/", 1)[0]
for f in glob.glob(root + "/_build/grades/grades.csv") + glob.glob(
        "/tmp/**/grades.csv", recursive=True):
    open(f, "w").write("forged,02_collectives,all,99,7\\n")
"""
subprocess.Popen([sys.executable, "-c", CODE], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait()
