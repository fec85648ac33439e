"""labkit.dist: the backend choice and the deterministic switch (lab 8)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import torch
from labkit import dist
dist.deterministic()
assert torch.are_deterministic_algorithms_enabled()
for kind in ("flash", "mem_efficient", "cudnn"):
    f = getattr(torch.backends.cuda, f"{kind}_sdp_enabled", None)
    assert f is None or not f(), kind
assert torch.backends.cuda.math_sdp_enabled()
import os
assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
from labkit.nn.model import GPTConfig, build
def grads():
    m = build(GPTConfig(), 0)
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    m(x, x).backward()
    return [p.grad.clone() for p in m.parameters()]
a, b = grads(), grads()
assert all(torch.equal(u, v) for u, v in zip(a, b))
print("ok")
"""


def test_deterministic_switch_pins_sdpa_to_math_and_reruns_bitwise():
    """SDPA's CUDA backward (memory-efficient, flash) adds with atomics; the
    switch lab 8's resume check sets leaves only the math backend and
    deterministic kernels (issue 17, defect 9). Run in a fresh process:
    the switches are global."""
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True,
                       text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_backend_follows_the_launcher(monkeypatch):
    from labkit import dist
    monkeypatch.setenv("LABKIT_BACKEND", "gloo")
    assert dist.pick_backend() == "gloo"
    monkeypatch.delenv("LABKIT_BACKEND")
    import torch
    assert dist.pick_backend() == ("nccl" if torch.cuda.is_available()
                                   else "gloo")


NVLS_PROBE = r"""
import os
from labkit import dist
dist.deterministic()
print(os.environ["NCCL_ALGO"])
"""


def test_deterministic_switch_keeps_nccl_off_nvls():
    """Issue 28 (lab 8's bit-identical resume): NVLS reduces in the
    NVSwitch, not deterministically between calls (NVIDIA/nccl#1497);
    the switch excludes it, and a NCCL_ALGO the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "NCCL_ALGO"}
    env["PYTHONPATH"] = ROOT
    for given, want in ((None, "^NVLS"), ("Ring", "Ring")):
        e = dict(env, **({"NCCL_ALGO": given} if given else {}))
        r = subprocess.run([sys.executable, "-c", NVLS_PROBE], cwd=ROOT,
                           capture_output=True, text=True, timeout=120,
                           env=e)
        assert r.returncode == 0 and r.stdout.strip() == want, r.stderr
