# appended to: fsdp_no_free.py
"""Hostile: fsdp_no_free.py's FSDP (a gathered unit is never freed after
its forward), and the harness's probe rewritten to forget what it saw, so
its samples say a few kilobytes alive at every unit.

The probe weighs storages in the rank's process, which this code owns;
under grading the peak is the hub's count of the rank's memory at each
of the harness's points (buildit/fsdp_peak.py): 0 on "peak"."""
import importlib

# (past the grader's check for the course's package in the source)
fsdp_units = importlib.import_module("lab" + "kit.buildit.fsdp_units")
_sample = fsdp_units.Probe.sample


def _forgetful(self, where):
    self.seen = []                   # nothing tracked: nothing alive
    _sample(self, where)             # (the harness's point still goes)
    self.samples[-1][1] = 4096       # the lie: a plausible few kB


fsdp_units.Probe.sample = _forgetful
