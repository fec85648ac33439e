# lab: 06_pipeline_parallel
# base: solution
# expect: 0 (its answers never leave the jail it killed)
# Answers everything, then kills every process it can see (the grader's
# included, were it visible): its own grading ends, nobody else's.
import os
import signal

os.kill(-1, signal.SIGKILL)
