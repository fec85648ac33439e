"""labkit.checks: each lab's parameter check, called as the lab calls it
(``labkit.lab.check(name, namespace)``) with the notebook's own defaults
and with bad values. Every bad value raises its one clear ValueError
before any process starts (subprocess.Popen is forbidden here)."""
import json
import subprocess
from pathlib import Path

import pytest

from labkit import checks
from labkit.lab import check

ROOT = Path(__file__).resolve().parent.parent
# every lab; its check lives in labkit.checks (README, "Adding a lab")
LABS = {p.stem.partition("_")[2]: p
        for p in sorted((ROOT / "labs").glob("[0-9]*_*.ipynb"))}


def defaults(lab: str) -> dict:
    """The values of the lab's ``parameters`` cell."""
    nb = json.loads(LABS[lab].read_text())
    cell = next(c for c in nb["cells"]
                if "parameters" in c["metadata"].get("tags", []))
    ns: dict = {}
    exec("".join(cell["source"]), ns)
    return ns


@pytest.fixture(autouse=True)
def no_process(monkeypatch):
    def refuse(*a, **k):
        pytest.fail(f"a parameter check started a process: {a}")
    monkeypatch.setattr(subprocess, "Popen", refuse)


def _colossalai_env(lab, request):
    if lab == "colossalai":     # needs .venv-colossalai (conftest.py)
        request.getfixturevalue("needs_colossalai")


@pytest.mark.parametrize("lab", sorted(LABS))
def test_the_notebook_defaults_pass(lab, request):
    _colossalai_env(lab, request)
    check(lab, defaults(lab))


@pytest.mark.parametrize("lab", sorted(LABS))
def test_every_lab_has_a_check_and_calls_it(lab):
    assert callable(getattr(checks, lab, None)), \
        f"labs/{LABS[lab].name}: no function {lab} in labkit/checks.py"
    nb = json.loads(LABS[lab].read_text())
    calls = [c for c in nb["cells"] if c["cell_type"] == "code"
             and f'check("{lab}", globals())' in "".join(c["source"])]
    assert len(calls) == 1, lab
    assert "hide-input" in calls[0]["metadata"].get("tags", []), lab


BAD = [
    ("memory", {"profile": "tpu64"}, "unknown profile 'tpu64'"),
    ("memory", {"world_sizes": [3]}, "does not divide by world size 3"),
    ("memory", {"strategies": ["zero9"]}, "zero9"),
    ("memory", {"steps": 0}, "steps must be >= 1"),
    ("collectives", {"world_sizes": [1]}, "world sizes must be integers"),
    ("collectives", {"factor": 1}, "factor must be >= 2"),
    ("collectives", {"link": "smoke"}, "unknown link 'smoke'"),
    ("sharding", {"steps": 2}, "steps must be >= 3"),
    ("sharding", {"bucket_caps_mb": [0]}, "bucket caps must be > 0 MiB"),
    ("sharding", {"global_batch": 7}, "does not divide by world size"),
    ("zero", {"variants": ["zero9"]}, "unknown DeepSpeed variant 'zero9'"),
    ("zero", {"variants": ["zero3_nvme"]}, "its own GPU cell"),
    ("zero", {"steps": 1}, "steps must be >= 2"),
    ("tensor_parallel", {"tp_sizes": [3]}, "must divide the 4 heads"),
    ("tensor_parallel", {"dtype": "fp8"}, "unknown dtype 'fp8'"),
    ("pipeline_parallel", {"layers": 6}, "do not split"),
    ("pipeline_parallel", {"chunks": 1}, "needs chunks >= 2"),
    ("pipeline_parallel", {"schedules": ["zb"]}, "schedules must be among"),
    ("profiling", {"sweep_workers": [1, 2]}, "needs num_workers = 0"),
    ("profiling", {"active": 1}, "active >= 2"),
    ("profiling", {"delay_ms": 0}, "delay_ms must be > 0"),
    ("checkpoint", {"kill_rank": 9}, "kill_rank must be a rank of 4"),
    ("checkpoint", {"kill_step": 1}, "kill_step must come after"),
    ("checkpoint", {"hang_timeout_s": 0}, "hang_timeout_s must be positive"),
    ("colossalai", {"plugins": ["nope"]}, "unknown plugin 'nope'"),
    ("colossalai", {"compare": ["gemini"]}, "GeminiPlugin needs CUDA"),
    ("colossalai", {"plugins": ["gemini"]}, "GeminiPlugin goes in"),
    ("mesh", {"profile": "tpu64"}, "unknown profile 'tpu64'"),
    ("mesh", {"world_size": 1}, "world_size must be an integer >= 2"),
    ("mesh", {"layouts": ["2x3"]}, "2 x 3 != 4 ranks"),
    ("mesh", {"layouts": ["2by2"]}, "a layout is DPxTP"),
    ("mesh", {"global_batch": 7}, "global_batch must divide by dp"),
    ("context_parallel", {"world_sizes": [1]},
     "world_sizes must be integers >= 2"),
    ("context_parallel", {"seq": 60}, "seq 60 must divide by 2 x 4"),
    ("context_parallel", {"heads": 6}, "heads 6 must divide by 4"),
    ("context_parallel", {"batch": 0}, "batch and head_dim must be positive"),
    ("fit", {"global_batch": 15}, "global batch 15 does not divide by 2"),
    ("fit", {"budget_bytes": 0}, "budget_bytes must be positive"),
    ("fit", {"steps": 1}, "steps must be >= 2"),
]


@pytest.mark.parametrize("lab,bad,message", BAD,
                         ids=[f"{b[0]}-{next(iter(b[1]))}" for b in BAD])
def test_bad_parameters_raise_one_clear_error(lab, bad, message, request):
    _colossalai_env(lab, request)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        check(lab, {**defaults(lab), **bad})


def test_an_unknown_lab_or_a_missing_parameter_is_named():
    with pytest.raises(ValueError, match="no parameter check for lab"):
        check("nope", {})
    params = defaults("collectives")
    del params["factor"]
    with pytest.raises(ValueError, match="parameters missing: factor"):
        check("collectives", params)
