"""Grading untrusted notebooks (scripts/grade.py drives it).

- ``jail.py``: the sandbox each submission runs in (bubblewrap namespaces,
  cgroup limits, rlimits), chosen at run time.
- ``runner.py``: inside the student's jail, runs the notebook and exports
  its answers as plain data; later calls its functions on request.
- ``evaluate.py``: inside a second jail that never ran student code, runs
  the master's own setup and the tests on that plain data.
- ``plain.py``: the plain-data format both sides speak.
"""
