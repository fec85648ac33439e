"""Issue 28 ("likely", confirmed): lab 9's Gemini JIT-builds CUDA kernels.

Read from the installed Colossal-AI (``.venv-colossalai``), not run: on
CUDA, ``HybridAdam`` (the only optimizer ``GeminiOptimizer`` accepts,
``labkit/runs/colossalai.py``) loads ``FusedOptimizerLoader``; 0.5.0's
wheel has no prebuilt op in ``colossalai._C``, so the loader builds it
with ``torch.utils.cpp_extension.load``, which needs ``CUDA_HOME`` and an
nvcc of torch's CUDA major. The rehearsal's reason for lab 9 says so."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = sorted((ROOT / ".venv-colossalai" / "lib").glob(
    "python3*/site-packages/colossalai"))
pytestmark = pytest.mark.skipif(not SITE, reason=".venv-colossalai missing")


def test_gemini_adam_jit_builds_a_cuda_kernel():
    cai = SITE[0]
    hybrid = (cai / "nn/optimizer/hybrid_adam.py").read_text()
    assert "if torch.cuda.is_available():" in hybrid
    assert "FusedOptimizerLoader().load()" in hybrid
    prebuilt = [p.name for p in (cai / "_C").iterdir()
                if p.suffix in (".so", ".pyd")]
    assert prebuilt == []          # nothing prebuilt: the JIT path runs
    ext = (cai / "kernel/extensions/cpp_extension.py").read_text()
    assert "op_kernel = self.build_jit()" in ext
    cuda = (cai / "kernel/extensions/cuda_extension.py").read_text()
    assert "CUDA_HOME is not found" in cuda
    assert "check_system_pytorch_cuda_match(CUDA_HOME)" in cuda


def test_the_rehearsal_names_it_for_lab_9():
    from labkit.dryrun.cases import REASONS
    import labkit.dryrun.labs  # noqa: F401 - registers the reasons
    why = REASONS["colossalai"]
    assert "JIT-builds" in why and "nvcc" in why and "CUDA_HOME" in why
