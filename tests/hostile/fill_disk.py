# lab: 02_collectives
# base: student
# expect: 0
# issue 30 (6): write until the disk is full in every writable place
# (each file under the per-file limit).
import os
import tempfile

for top in (".", tempfile.gettempdir(), os.path.expanduser("~"),
            "/grading/course/_build"):
    for i in range(64):
        try:
            with open(os.path.join(top, f"fill-{i}"), "wb") as f:
                for _ in range(64):
                    f.write(b"\0" * (8 << 20))
        except OSError:
            break
