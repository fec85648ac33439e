"""scripts/grading/: plain data by value, otter's lines out of the first
cell, the names tests read, the authenticated channel, safe CSV cells."""
import collections
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import channel, report  # noqa: E402
from grading.evaluate import names_read  # noqa: E402
from grading.plain import NotPlain, decode, encode, suspicious  # noqa: E402
from grading.runner import without_otter  # noqa: E402


def test_honest_subclasses_travel_by_value():
    torch = pytest.importorskip("torch")
    P = collections.namedtuple("P", "x y")
    for v, want in ((P(1, 2), (1, 2)), (torch.Size([2, 3]), (2, 3)),
                    (collections.Counter("aab"), {"a": 2, "b": 1}),
                    (collections.OrderedDict(a=1), {"a": 1})):
        got = decode(encode(v))
        assert got == want and type(got) is type(want)
    assert type(decode(encode(os.statvfs(".")))) is tuple


def test_a_subclass_that_redefines_equality_is_not_plain():
    class Yes(float):
        def __eq__(self, other):
            return True
    assert suspicious(Yes(1)) and not suspicious(1.0)
    with pytest.raises(NotPlain):
        encode(Yes(1))


def test_first_cell_keeps_the_students_lines():
    src = ("import glob, json, otter\nimport numpy as np\n"
           "_mine = [p for p in glob.glob('*.ipynb')]\n"
           "if len(_mine) != 1:\n    raise RuntimeError('x')\n"
           "grader = otter.Notebook(_mine[0])\nk = np.pi\n")
    out = without_otter(src)
    assert "import glob, json\n" in out and "import numpy as np" in out
    assert "otter" not in out and "_mine" not in out and "k = np.pi" in out


def test_tampering_judged_on_names_tests_read():
    tests = [{"name": "q", "points": 1, "suites": [{"cases": [
        {"code": ">>> assert abs(answer - C.f(x)) < 1\n", "points": 1}]}]}]
    read = names_read(tests)
    assert {"answer", "C", "x", "abs"} <= read and "helper" not in read


def test_channel_authenticates():
    secret = channel.new_secret()
    lines = []

    class Pipe:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass
    channel.Signer(Pipe(), f'{{"secret": "{secret}"}}').send({"a": 1})
    assert channel.verify(secret, lines[0].strip().encode()) == {"a": 1}
    forged = b'0' * 64 + b' {"a": 2}'
    assert channel.verify(secret, forged) is None
    assert channel.verify(channel.new_secret(), lines[0].strip().encode()) \
        is None


@pytest.mark.parametrize("text", ["=1+1", "+cmd", "-2", "@SUM(A1)", "\tx",
                                  "\rx"])
def test_csv_cells_never_formulas(text):
    c = report.cell(text)
    assert c.startswith("'") and "\t" not in c and "\r" not in c


def test_control_characters_shown_not_obeyed():
    assert report.clean("a\x1b[2Jb\u202ec") == "a\\x1b[2Jb\\x202ec"
    assert report.cell("ok") == "ok" and report.cell(3.0) == 3.0


def test_answers_compared_by_value():
    """issue 30 (9): a list where the key returns tuples (and back),
    numpy numbers where it returns Python ones, are equal answers."""
    np = pytest.importorskip("numpy")
    got = decode(encode([[0, 3], [3, 3]]), by_value=True)
    assert got == [(0, 3), (3, 3)] and [(0, 3), (3, 3)] == got
    assert got != [(0, 3), (3, 4)] and not got == [(0, 3)]
    t = decode(encode((1, 2)), by_value=True)
    assert t == [1, 2] and isinstance(t, tuple) and {t: 1}[(1, 2)] == 1
    assert decode(encode([np.int64(3), np.float32(0.5)]), by_value=True) \
        == (3, 0.5)
    assert decode(encode(got)) == [[0, 3], [3, 3]]   # plain again


def test_hidden_reasons_say_the_kind_never_the_inputs():
    """issue 30 (8, 9): a failing hidden check without a message says what
    the student's value is, in kind; an error a student function raised on
    a hidden case never repeats its message (it may hold the inputs)."""
    from grading.evaluate import StudentError, reason
    r = reason(AssertionError(), "hidden", 2, "q2", {},
               {"chunks": [[0, 3], [3, 3]]})
    assert r == "hidden check 2 of q2 failed (your `chunks` is a list of " \
        "2 lists)"
    r = reason(StudentError("`split` ValueError: bad size 123457 for 7",
                            "`split` raised ValueError"),
               "hidden", 1, "q2", {})
    assert "123457" not in r and r.startswith("`split` raised ValueError")
    r = reason(KeyError("secret_case_key"), "hidden", 3, "q2", {})
    assert "secret_case_key" not in r and "KeyError" in r


def test_torch_dtypes_devices_and_fp8_tensors_cross_by_name():
    """issue 49 (6): lab 14's hidden test passes ``torch.float8_e4m3fn`` to
    the student's function: dtypes and devices travel by name and come
    back as torch's own; an FP8 tensor as its bits; nothing else by
    that tag."""
    torch = pytest.importorskip("torch")
    for v in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16,
              torch.device("cpu"), torch.device("cuda:1")):
        assert decode(encode(v)) == v and type(decode(encode(v))) is type(v)
    x = torch.randn(3, 5).to(torch.float8_e4m3fn)
    y = decode(encode(x))
    assert y.dtype == torch.float8_e4m3fn and torch.equal(
        y.view(torch.uint8), x.view(torch.uint8))
    for bad in (["dtype", "Tensor"], ["dtype", "os.system"],
                ["device", "cpu; rm"], ["module", "os"], "float32"):
        with pytest.raises(NotPlain):
            decode({"__torch__": bad})
