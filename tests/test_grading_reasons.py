"""scripts/grading/reasons.py and the runner's error words: a hidden
case's reason never carries what the student's error carries (its class
name, args, ``__str__``, ``__repr__``, notes), only a built-in
exception's name the grader checks; a runner that cannot write a value
marks it unreadable instead of dying, and one that dies names it."""
import json
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import proxy, runner, session  # noqa: E402
from grading.reasons import StudentError, error_kind, reason  # noqa: E402

SECRET = "case_input_8191"


def hostile_error():
    """An error whose every part holds the hidden case's input."""
    cls = type(f"Bad_{SECRET}", (ValueError,), {
        "__str__": lambda self: SECRET, "__repr__": lambda self: SECRET})
    e = cls(SECRET)
    e.add_note(SECRET)
    return e


def test_the_runner_names_a_student_error_by_its_builtin_kind():
    e = hostile_error()
    assert runner.kind(e) == "ValueError"
    text = runner.message(e)
    assert text.startswith("ValueError: ")

    class Loud(Exception):
        def __str__(self):
            raise SystemExit(SECRET)
    assert runner.message(Loud()) == \
        "Exception: (its message could not be read)"


@pytest.mark.parametrize("said", [
    f"ValueError: {SECRET}", f"Bad_{SECRET}: x", f"{SECRET}", ""])
def test_a_hidden_reason_is_the_graders_words_only(said):
    """Whatever the runner (the student's process) answers, a hidden
    case's reason is ``f`` raised <a built-in name> on a hidden case."""
    kind = error_kind(said)
    assert kind in ("ValueError", "an error")
    e = StudentError(f"`f` {said}", f"`f` raised {kind}")
    r = reason(e, "hidden", 1, "q2", {})
    assert SECRET not in r and r == f"`f` raised {kind} on a hidden case"
    assert SECRET not in reason(hostile_error(), "hidden", 1, "q2", {})
    # a public case's message is the student's own, and says it
    assert SECRET in reason(e, "public", 1, "q2", {}) or not said


def test_a_value_too_large_to_write_is_unreadable_not_a_crash():
    sys.set_int_max_str_digits(4300)
    ns = {"huge": 10 ** 5000, "fine": [1, 2], "deep": 1}
    said = []
    got = runner.export(ns, said.append)
    assert said == ["huge", "fine", "deep"]
    assert "unreadable" in got["huge"] and got["fine"] == {
        "value": {"__list__": [1, 2]}}
    json.dumps(got)


def test_a_runner_that_dies_names_the_value():
    assert session._said(b'{"reading": "weights"}\n') == "weights"
    assert session._said(b'{"values": {}}\n') is None
    assert session._said(b'{"reading": ' + b"[" * 5000) is None


def test_the_hub_refuses_a_deep_frame_in_one_line():
    a, b = socket.socketpair()
    for header in ("[" * 100_000 + "]" * 100_000,
                   json.dumps({"op": [[[[[1]]]]]})):
        raw = header.encode()
        a.sendall(len(raw).to_bytes(4, "big") + bytes(4) + raw)
        with pytest.raises(ValueError, match="nested deeper"):
            proxy.recv_frame(b)
    proxy.send_frame(a, {"op": "all_reduce", "numel": [3], "splits": []})
    assert proxy.recv_frame(b)[0]["numel"] == [3]
