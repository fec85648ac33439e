"""labkit.buildit.kept: the bytes an optimizer keeps, measured by walking
what is reachable from it (ZeRO's shard against full Adam, one process)."""
import torch

from labkit.buildit.kept import kept_bytes


def test_full_adam_keeps_n_times_the_shards_state():
    model = torch.nn.Linear(64, 32)          # 2080 parameters
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    full = torch.optim.Adam(params)
    shard = torch.nn.Parameter(torch.zeros(n // 2))
    zero = torch.optim.Adam([shard])
    for p in params:
        p.grad = torch.ones_like(p)
    shard.grad = torch.ones_like(shard)
    full.step()
    zero.step()
    skip = params + [p.grad for p in params]
    scalars = 4 * len(params)                 # Adam's step counts
    assert kept_bytes([full], skip) == 8 * n + scalars
    assert kept_bytes([zero], skip) == 3 * 4 * (n // 2) + 4  # master+m+v


def test_a_view_counts_its_storage_and_grads_are_not_state():
    class Opt:
        pass
    big = torch.zeros(1000)
    o = Opt()
    o.shard = big[:10]                        # keeps the whole buffer
    o.master = torch.nn.Parameter(torch.zeros(10))
    o.master.grad = torch.zeros(10)           # ZeRO-2's gradient shard
    o.nested = {"a": [(torch.zeros(5),)]}
    assert kept_bytes([o]) == 4 * (1000 + 10 + 5)


def test_class_attributes_of_the_students_module_count():
    ns = {"__name__": "cell"}
    exec("import torch\nclass A:\n    cache = torch.zeros(7)\n", ns)
    assert kept_bytes([ns["A"]], home="cell") == 28
    assert kept_bytes([ns["A"]], home="other") == 0
