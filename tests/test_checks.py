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
# every lab; its check lives in labkit.checks
# (docs/contributing.md, "Adding a lab")
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
        f"labs/{LABS[lab].name}: no function {lab} in labkit.checks"
    nb = json.loads(LABS[lab].read_text())
    calls = [c for c in nb["cells"] if c["cell_type"] == "code"
             and f'check("{lab}", globals())' in "".join(c["source"])]
    assert len(calls) == 1, lab
    assert "hide-input" in calls[0]["metadata"].get("tags", []), lab


BAD = [
    ("memory", {"profile": "tpu64"}, "unknown profile 'tpu64'"),
    ("memory", {"world_sizes": [3]}, "does not divide by world size 3"),
    ("memory", {"strategies": ["zero9"]}, "zero9"),
    ("memory", {"steps": 0}, "steps=0: must be an integer"),
    ("collectives", {"world_sizes": [1]}, "world sizes must be integers"),
    ("collectives", {"factor": 1}, "factor=1: must be an integer"),
    ("collectives", {"link": "smoke"}, "unknown link 'smoke'"),
    ("sharding", {"steps": 2}, "steps must be >= 3"),
    ("sharding", {"bucket_caps_mb": [0]}, "bucket_caps_mb.0.=0: must be a finite number > 0"),
    ("sharding", {"global_batch": 7}, "does not divide by world size"),
    ("sharding", {"model": {"layers": 2, "hidden": 64, "heads": 4,
                            "vocab": 256, "seq": 32, "arch": "mamba"}},
     r"model\['arch'\]='mamba': unknown architecture, choose from gpt"),
    ("checkpoint", {"model": {"layers": 2, "hidden": 64, "heads": 4,
                              "vocab": 250, "seq": 32, "arch": "llama"}},
     "vocab=250 do not divide by world size 4"),
    ("zero", {"variants": ["zero9"]}, "unknown DeepSpeed variant 'zero9'"),
    ("zero", {"variants": ["zero3_nvme"]}, "its own GPU cell"),
    ("zero", {"steps": 1}, "steps must be >= 2"),
    ("tensor_parallel", {"tp_sizes": [3]}, "must divide the 4 heads"),
    ("tensor_parallel", {"dtype": "fp8"}, "unknown dtype 'fp8'"),
    ("tensor_parallel", {"archs": ["llama"]}, "archs must hold 'gpt'"),
    ("pipeline_parallel", {"arch": "mamba"}, "unknown architecture"),
    ("tensor_parallel", {"archs": ["gpt", "mamba"]},
     "unknown architecture"),
    ("tensor_parallel", {"kv_heads": 3}, "Llama-style block: kv_heads"),
    ("tensor_parallel", {"hidden": 96, "heads": 12, "kv_heads": 6},
     "tp=4 does not divide the 6 KV heads"),
    ("pipeline_parallel", {"layers": 6}, "do not split"),
    ("pipeline_parallel", {"chunks": 1}, "needs chunks >= 2"),
    ("pipeline_parallel", {"schedules": ["zb"]}, "schedules must be among"),
    ("profiling", {"sweep_workers": [1, 2]}, "needs num_workers = 0"),
    ("profiling", {"active": 1}, "active >= 2"),
    ("profiling", {"delay_ms": 0}, "delay_ms=0: must be a finite number > 0"),
    ("checkpoint", {"kill_rank": 9}, "kill_rank must be a rank of 4"),
    ("checkpoint", {"kill_step": 1}, "kill_step must come after"),
    ("checkpoint", {"hang_timeout_s": 0}, "hang_timeout_s=0: must be a finite number > 0"),
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
    ("context_parallel", {"batch": 0}, "batch=0: must be an integer"),
    ("context_parallel", {"kv_heads": 3}, "kv_heads 3 must divide heads 4"),
    ("fit", {"global_batch": 15}, "global batch 15 does not divide by 2"),
    ("fit", {"budget_bytes": 0}, "budget_bytes=0: must be a finite number > 0"),
    ("fit", {"steps": 1}, "steps must be >= 2"),
    ("fit", {"compile_backend": "cudagraphs"},
     "unknown compile_backend 'cudagraphs'"),
    ("fit", {"compile_steps": 1}, "compile_steps must be >= 2"),
    ("fit", {"compile_steps": 0}, "compile_steps=0: must be an integer"),
    ("fit", {"compile_preset": "llama-huge"}, "unknown preset 'llama-huge'"),
    ("memory", {"model": {"layers": 2, "hidden": 64, "heads": 4,
                          "vocab": 256, "seq": 32, "arch": "llama"},
                "profile": "gpu8"},
     "activation ledger is exact on CPU only, and fit_to_gpu prices the "
     "GPT block; use 'gpt'"),
    ("roofline", {"dtypes": ["fp8"]}, "unknown dtype 'fp8'"),
    ("roofline", {"chips": ["tpu"]}, "unknown chip 'tpu'"),
    ("roofline", {"step_dtype": "bf16"}, "must be 'fp32' on the CPU"),
    ("roofline", {"batch": 6}, "equals a width"),
    ("roofline", {"threads": 0}, "threads=0: must be an integer"),
    ("mesh", {"model": {"layers": 2, "hidden": 96, "heads": 6,
                        "vocab": 256, "seq": 32, "arch": "llama"},
              "layouts": ["2x2"]},
     "2x2: tp=2 does not divide the 3 KV heads"),
]


BAD += [   # lab 17
    ("hangs", {"world_size": 2}, "world_size must be >= 3"),
    ("hangs", {"culprit": 0}, "culprit must be a rank in 1..2"),
    ("hangs", {"at": 4}, "at must be a step of the run"),
    ("hangs", {"faults": ["oom"]}, "unknown fault 'oom'"),
    ("hangs", {"hang_timeout_s": 0},
     "hang_timeout_s=0: must be a finite number > 0"),
    ("hangs", {"timeout_s": 20}, "must leave the planted hang time"),
]

BAD += [   # lab 18
    ("schedules", {"schedules": ["zb-h2"]}, "unknown schedule 'zb-h2'"),
    ("schedules", {"layers": 6}, "6 layers do not split into the V's"),
    ("schedules", {"pp_microbatches": 3},
     "pp_microbatches=3: zbv needs micro-batches >= 2 x stages"),
    ("schedules", {"pp_microbatches": 1, "schedules": ["1f1b"]},
     "need at least one micro-batch per stage"),
]

BAD += [   # lab 19
    ("optimizers", {"optimizers": ["lion"]}, "unknown optimizer 'lion'"),
    ("optimizers", {"muon_modes": ["ring"]}, "unknown Muon mode 'ring'"),
    ("optimizers", {"world_size": 1}, "world_size must be an integer >= 2"),
    ("optimizers", {"steps": 1}, "steps must be >= 2"),
    ("optimizers", {"batch": 7}, "global batch 7 does not divide by"),
    ("optimizers", {"hidden": 63, "heads": 3}, "do not divide by world"),
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


# one bad value at a time, for every lab and every parameter it has: each
# is refused with one ValueError naming the parameter (never a TypeError,
# never accepted); 100000 ranks are more than any test machine's 8 x cores
WRONG = {
    "timeout_s": [0, -1, float("nan"), float("inf"), "abc", None, 1e9],
    "hang_timeout_s": [0, -1, float("nan"), float("inf")],
    "compile_timeout_s": [0, -1, float("nan"), float("inf")],
    "compile_steps": [0, 2.5, "abc", None],
    "steps": [0, -1, 2.5, float("inf"), float("nan"), 10 ** 12, "abc",
              True, None],
    "global_batch": [0, -8, 2.5, 10 ** 12, "abc", float("nan")],
    "world_size": [0, -1, 2.5, 512 * 10 ** 6, 100000, "abc"],
    "world_sizes": [[100000], [2.5], "abc", [], [-1]],
    "tp_sizes": [[100000], [0]], "stages": [[100000], [2.0]],
    "batch": [0, -1, 1.5], "micro_batch": [0, 1e12],
    "model": [{"layers": -1}, {"hidden": 2.5}, "abc", None,
              {"layers": 10 ** 12}],
    "delay_ms": [float("nan"), -1, float("inf")],
    "budget_bytes": [float("nan"), float("inf"), -1],
    "bucket_caps_mb": [[float("nan")], [float("inf")], []],
    "bf16": ["maybe", 2],
}
CASES = [(lab, name, v) for lab in sorted(LABS) for name, vs in WRONG.items()
         if name in defaults(lab) for v in vs]


@pytest.mark.parametrize("lab,name,value", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]!r}"[:60] for c in CASES])
def test_every_bad_value_is_refused_in_one_line(lab, name, value, request):
    _colossalai_env(lab, request)
    with pytest.raises(ValueError) as e:
        check(lab, {**defaults(lab), name: value})
    line = str(e.value)
    assert "\n" not in line and (name in line or "lab " in line), line


@pytest.mark.parametrize("lab", ["memory", "checkpoint", "fit"])
def test_a_direct_call_is_checked_too(lab):
    params = defaults(lab)
    fn = getattr(checks, lab)
    import inspect
    args = {n: params[n] for n in inspect.signature(fn).parameters
            if n in params}
    with pytest.raises(ValueError, match="global_batch=0: must be"):
        fn(**{**args, "global_batch": 0})


def test_papermill_strings_are_parsed_into_the_namespace_or_refused():
    ns = {**defaults("memory"), "steps": "3", "timeout_s": "300",
          "bf16": "False", "world_sizes": "[2, 4]"}
    check("memory", ns)
    assert (ns["steps"], ns["timeout_s"], ns["bf16"], ns["world_sizes"]) \
        == (3, 300, False, [2, 4])
    with pytest.raises(ValueError, match="steps='abc': must be an integer"):
        check("memory", {**defaults("memory"), "steps": "abc"})


def test_the_rank_bound_follows_the_cores_and_its_override(monkeypatch):
    import os
    from labkit.checks import max_ranks
    monkeypatch.delenv("LABKIT_MAX_RANKS", raising=False)
    assert max_ranks() == 8 * os.cpu_count()
    monkeypatch.setenv("LABKIT_MAX_RANKS", "100000")
    assert max_ranks() == 100000
    monkeypatch.setenv("LABKIT_MAX_RANKS", "many")
    with pytest.raises(ValueError, match="LABKIT_MAX_RANKS='many'"):
        max_ranks()


def test_only_a_labs_check_can_be_named():
    for name in ("parse", "require", "max_ranks", "_profile"):
        with pytest.raises(ValueError, match="no parameter check for lab"):
            check(name, {})
    assert set(checks.LABS) == set(LABS)


def test_a_module_named_like_a_key_is_not_a_parameter():
    """Lab 14 imports ``labkit.arch`` as ``arch``: ``arch`` is a key of
    ``model``, never a parameter of its own, so the module is not read as
    one (it was refused as an unknown architecture)."""
    import labkit.arch as arch
    from labkit.checks import params as P
    assert P.parse({"arch": arch}) == {}
