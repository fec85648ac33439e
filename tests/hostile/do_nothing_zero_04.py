# lab: 04_zero
# base: student
# expect: 0
# issue 30 (2): a do-nothing optimizer on the grader's rerun whose rank
# replaces the report (labkit.dist.save, reached without writing "labkit")
# with perfect collective bytes and the right parameters, computed on the
# rank from the course's own single-process reference: a forged report.
SRC = r'''
import importlib
pkg = "lab" + "kit"
d = importlib.import_module(pkg + ".dist")
z = importlib.import_module(pkg + ".buildit.zero")
sh = importlib.import_module(pkg + ".buildit.sharding")
real = d.save
def save(ctx, record):
    cfg = {**z.CONFIG, **z.HIDDEN}
    phi = 4 * sum(sh.numels(cfg["sizes"]))
    want = z.reference(cfg, ctx.world_size)
    fake = {"numels": sh.numels(cfg["sizes"]),
            "params": [[float(x) for x in t.flatten().tolist()]
                       for t in want], "param_diff": 0.0,
            "bytes_per_step": [{"reduce_scatter": phi, "all_gather": phi}]
            * cfg["steps"]}
    return real(ctx, {"results": {"student": fake}})
d.save = save

class ShardedAdam:
    def __init__(self, params, lr):
        pass
    def step(self):
        pass
'''
build_result = {"lab": "zero", "source": SRC, "error": None,
                "ranks": [{}, {}], "config": {}}
