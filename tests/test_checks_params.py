"""labkit.checks.params: every lab parameter declared once, in its table,
and checked before any process starts. The property: each declared
parameter of every lab, fed NaN, infinity, a string, 0, -1 and a huge
value one at a time (the lab's other values its notebook's defaults), is
refused by ``labkit.lab.check`` in one line -- 0 only where the table
allows it -- and no process is started (subprocess.Popen is forbidden
here); the runner refuses a profile's bad value the same way."""
import importlib.util
import math
import subprocess
from pathlib import Path

import pytest

from labkit.checks import params as P
from labkit.lab import check
from test_checks import LABS, _colossalai_env, defaults

ROOT = Path(__file__).resolve().parent.parent
BAD = [math.nan, math.inf, -math.inf, "abc", 0, -1, 1e300, 10 ** 30]
FREE_TEXT = {"results_dir", "nvme_path"}   # any folder name is a name


@pytest.fixture(autouse=True)
def no_process(monkeypatch):
    def refuse(*a, **k):
        pytest.fail(f"a parameter check started a process: {a}")
    monkeypatch.setattr(subprocess, "Popen", refuse)


def declared(lab: str) -> list[str]:
    return [n for n in defaults(lab) if not n.startswith("__")]


@pytest.mark.parametrize("lab", sorted(LABS))
def test_every_parameter_of_every_lab_is_declared(lab):
    missing = [n for n in declared(lab) if n not in P.RULES]
    assert not missing, f"labs/{LABS[lab].name}: no rule for {missing} " \
        "in labkit/checks/params.py"


def _allowed(name, value) -> bool:
    """Does the table itself allow ``value`` for ``name``? (0 for a count
    of warm-up steps; a string for a folder)."""
    if value == 0 and not isinstance(value, str) or (
            isinstance(value, str) and name in FREE_TEXT):
        try:
            P.RULES[name](name, value)
            return True
        except ValueError:
            return False
    return False


CASES = [(lab, name, bad) for lab in sorted(LABS) for name in declared(lab)
         for bad in BAD if name != "profile" or bad != "abc"]


@pytest.mark.parametrize("lab,name,bad", CASES,
                         ids=[f"{c[0]}-{c[1]}={c[2]!r}" for c in CASES])
def test_every_bad_value_is_refused_in_one_line(lab, name, bad, request):
    _colossalai_env(lab, request)
    ns = dict(defaults(lab), **{name: bad})
    if _allowed(name, bad):
        return
    with pytest.raises(ValueError) as e:
        check(lab, ns)
    text = str(e.value)
    assert text and "\n" not in text, text


@pytest.mark.parametrize("lab,name,value,said", [
    ("experts", "lr", "abc", "lr='abc'"),
    ("collectives", "max_bytes", 10 ** 12, "max_bytes"),
    ("collectives", "max_bytes", "1e12", "max_bytes"),
    ("precision", "init_scale", "nan", "init_scale='nan'"),
    ("precision", "init_scale", math.nan, "init_scale=nan")])
def test_the_issues_three_examples(lab, name, value, said, request):
    with pytest.raises(ValueError, match=said):
        check(lab, dict(defaults(lab), **{name: value}))


def test_the_cpu_profile_narrows_the_message_sizes():
    ok = dict(defaults("collectives"), max_bytes=2 ** 28)
    check("collectives", ok)
    with pytest.raises(ValueError, match="on the cpu profile"):
        check("collectives", dict(ok, max_bytes=2 ** 29))


def test_the_runner_refuses_a_profiles_bad_value_before_any_process(
        monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(
        "run_labs", ROOT / "scripts" / "run_labs.py")
    run_labs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_labs)
    real = run_labs.preflight.load_profile

    def hostile(name):
        prof = real(name)
        prof["experts"] = dict(prof["experts"], lr="abc")
        return prof
    monkeypatch.setattr(run_labs.preflight, "load_profile", hostile)
    monkeypatch.setattr(run_labs, "run_lab", lambda *a, **k: pytest.fail(
        "a lab was started"))
    rc = run_labs.main(["--profile", "cpu", "--only", "experts",
                        "--skip-preflight"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "lr='abc'" in err, err
    for name in ("cpu", "gpu1", "gpu8"):     # the real profiles pass
        assert run_labs.check_profile(name, real(name),
                                      list(run_labs.discover())) == ""
