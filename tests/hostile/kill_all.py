# lab: 02_collectives
# base: solution
# expect: full (kill -1 reaches only its own jail; it answered honestly)
# Answers everything, then kills every process it can see: only those
# of its own jail (the grader and the other submissions are not visible).
import os
import signal

os.kill(-1, signal.SIGKILL)
