"""Grading untrusted notebooks (scripts/grade.py drives it).

- ``submissions.py``: the handed-in folder (links refused, student ids,
  which lab, ``--lab``).
- ``session.py``: one submission: its jails, their pipes, the reruns.
- ``jail.py``: the sandbox (bubblewrap namespaces, seccomp, tmpfs, rlimits);
  ``limits.py``: one cgroup per submission; ``seccomp.py``: no ptrace.
- ``runner.py``: inside the student's jail, runs the notebook and exports
  its answers as plain data; later calls its functions on request.
- ``evaluate.py``: inside a second jail that never runs student code, runs
  the master's own setup and the tests on that plain data;
  ``channel.py``: its result lines, authenticated; ``reasons.py``: why
  a case failed, in the grader's own words.
- ``rerun.py``: a build-it rerun of the student's source, in its own jail;
  ``ranks.py``: its ranks, forked from one process that imported torch;
  ``rank_ns.py``, ``rank_box.py``: each rank's walls (namespaces and
  seccomp, Landlock), so the hub is its only channel; ``hub.py``,
  ``hub_count.py``: the collectives it performs and counts;
  ``memory.py``, ``rank_cgroup.py``: each rank's memory as the hub reads
  it (``/proc``, its folder, its memory cgroup where there is one).
- ``plain.py``: the plain-data format both sides speak; ``pipe.py``:
  reading a jail's pipe; ``report.py``: grades.csv, the gradebook,
  feedback files, the summary (safe to open).
"""
