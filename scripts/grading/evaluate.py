"""Inside the grader's own jail: the tests, on the student's plain data.

    python -m grading.evaluate JOB.json      (started by scripts/grade.py)

No student code has run in this process. It runs the master's own setup
cells (parameters, imports, the context the tests read) while the student's
notebook runs, then reads the answers (one JSON line) and adds each of
the student's answers that the setup did not define: plain data decoded
here, or a proxy for a student function (each call goes through the grader
to the student's jail, arguments and result as plain data). A student can
therefore not rebind a name the tests read, patch the test runner or hand
over an object whose ``==`` is always true. Then each test case of each
question runs; a case's points count when it passes; a question never
scores above its points. The result is one JSON line:
``{"questions": {name: {"points": p, "max": m, "reasons": [...]}}}``.

No student code runs in this jail, not even a build-it part's: a hidden
test's rerun of the student's source (``buildit.verified``) is asked of
the grader (``{"rerun": lab, "source": ...}``), which runs it in a jail of
its own and hands back the ranks' plain data; the checks, and the
references they compare with, run here. Every line this process writes is
authenticated: ``HMAC-SHA256(secret, json) json``, with the secret that
``grade.py`` writes as the first line of stdin, read before anything else
(``channel.py``). The process is PID 1 of its jail and not dumpable: no
other process could read the secret or write to its pipe anyway.

A failing case is reported by its own assertion message, or as "hidden
check N of q failed"; the code of a test is never quoted.
"""
from __future__ import annotations

import builtins
import json
import os
import sys

from grading.channel import Signer
from grading.plain import NotPlain, decode, encode
from grading.reasons import (StudentError, error_kind,  # noqa: F401
                             kind_of, one_line, reason)

CALL_LIMIT = 200_000  # characters of one call's arguments


class Unreadable(Exception):
    pass


def cases(test: dict) -> list[dict]:
    """The test's cases with their points (otter's rule: cases without
    points share what the explicit ones leave)."""
    cs = [c for s in test["suites"] for c in s["cases"]]
    fixed = sum(c["points"] for c in cs if c.get("points") is not None)
    free = [c for c in cs if c.get("points") is None]
    share = (test["points"] - fixed) / len(free) if free else 0.0
    return [dict(c, points=c["points"] if c.get("points") is not None
                 else share) for c in cs]


def source(doctest: str) -> str:
    """The Python of an OK-format doctest (``>>>``/``...`` lines)."""
    lines = []
    for ln in doctest.splitlines():
        if ln.startswith((">>> ", "... ")):
            lines.append(ln[4:])
        elif ln in (">>>", "..."):
            lines.append("")
    return "\n".join(lines) + "\n"


def names_read(tests: list[dict]) -> set[str]:
    """Every global name the tests' code reads (tampering is judged on
    these only: a helper no test reads is the student's business)."""
    out: set[str] = set()

    def walk(code):
        out.update(code.co_names)
        for c in code.co_consts:
            if hasattr(c, "co_names"):
                walk(c)
    for test in tests:
        for case in cases(test):
            try:
                walk(compile(source(case["code"]), "<test>", "exec"))
            except SyntaxError:
                pass
    return out


def shield() -> None:
    """No other process of this jail may open our pipes or memory through
    /proc (the build-it parts run the student's source on ranks started
    from here): not dumpable, and the jail holds no CAP_SYS_PTRACE."""
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def sweep() -> None:
    """Kill what a test's runs left behind (a daemon forked by student code
    on a rank) before the next test: every process of the jail but us and
    PID 1."""
    import signal
    me = os.getpid()
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) not in (1, me):
            try:
                os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass


def main(job_path: str) -> None:
    shield()
    jailed = os.environ.get("GRADING_JAILED") == "1"
    replies = sys.stdin
    proto = Signer(os.fdopen(os.dup(1), "w"), replies.readline())
    log = os.open("evaluate.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)

    def rerun(lab, source):
        """A build-it rerun, in a jail of its own (asked of the grader)."""
        proto.send({"rerun": lab, "source": source})
        line = replies.readline()
        try:
            reply = json.loads(line)
            if type(reply) is dict and type(reply.get("value")) is dict:
                return reply["value"]
            why = str(reply.get("error", "no result"))[:200]
        except (ValueError, AttributeError):
            why = "no result"
        return {"error": f"the rerun of your code failed: {why}"}

    from labkit import buildit
    buildit.RERUN = rerun

    def call(name, args, kwargs):
        req = {"call": name, "args": encode(list(args)),
               "kwargs": encode(dict(kwargs))}
        if len(json.dumps(req)) > CALL_LIMIT:
            raise StudentError(f"`{name}` was called with too much data",
                               f"`{name}` was called with too much data")
        proto.send(req)
        line = replies.readline()
        if not line:
            why = (f"`{name}` did not answer (the notebook's process "
                   "ended or hung)")
            raise StudentError(why, why)
        reply = json.loads(line)
        if type(reply) is not dict:
            why = f"`{name}` gave a malformed answer"
            raise StudentError(why, why)
        if "error" in reply:
            raise StudentError(f"`{name}` {str(reply['error'])[:160]}",
                               f"`{name}` raised "
                               f"{error_kind(reply['error'])}")
        try:
            return decode(reply["value"], by_value=True)
        except (NotPlain, KeyError, ValueError, TypeError,
                RecursionError) as e:
            raise StudentError(f"`{name}` returned {e}",
                               f"`{name}` returned a value the grader "
                               "cannot read") from None

    def proxy(name):
        def f(*args, **kwargs):
            return call(name, args, kwargs)
        f.__name__ = f.__qualname__ = name
        return f

    job = json.load(open(job_path))
    ns: dict = {"__name__": "__main__"}
    try:
        for i, src in enumerate(job["setup"]):
            exec(compile(src, f"<setup {i}>", "exec"), ns)
    except BaseException as e:  # noqa: BLE001
        proto.send({"setup_error": f"{type(e).__name__}: {e}"[:200]})
        return
    # names the setup or Python defines: a student's `abs` or `C` is not
    # the one the tests call
    own = set(ns) | set(dir(builtins))
    # the student's answers come only now: the setup ran meanwhile
    line = replies.readline()
    values = json.loads(line)["values"] if line else {}
    unreadable, tampering = {}, []
    read = names_read(job["tests"])
    for name, item in values.items():
        if name in own or type(item) is not dict:
            continue
        if item.get("tampering") and name in read:
            tampering.append(f"`{name}` subclasses a plain type to "
                             "redefine its behaviour")
        if "value" in item:
            try:
                ns[name] = decode(item["value"], by_value=True)
            except (NotPlain, ValueError, TypeError, KeyError,
                    AttributeError, ImportError, RecursionError) as e:
                unreadable[name] = f"{e}"[:80]
        elif item.get("function"):
            ns[name] = proxy(name)
        else:
            unreadable[name] = str(item.get("unreadable"))[:80]
    results = {}
    for test in job["tests"]:
        q, got, reasons = test["name"], 0.0, []
        for k, case in enumerate(cases(test), 1):
            if jailed:
                sweep()
            kind = "hidden" if case.get("hidden") else "public"
            try:
                exec(compile(source(case["code"]), f"<{q} {kind} check {k}>",
                             "exec"), ns)
                got += case["points"]
                continue
            except BaseException as e:  # noqa: BLE001
                reads = names_read([{"suites": [{"cases": [case]}],
                                     "points": 1}])
                # the student's own answers only, never a test's locals
                mine = {n: ns[n] for n in reads
                        if n in ns and n in values and n not in own}
                msg = reason(e, kind, k, q, unreadable, mine)
            reasons.append(msg[:200])
        most = float(test["points"])
        results[q] = {"points": min(max(got, 0.0), most), "max": most,
                      "reasons": list(dict.fromkeys(reasons))}
    proto.send({"questions": results, "tampering": tampering})


if __name__ == "__main__":
    main(sys.argv[1])
