"""labkit.lazy_grammar: nbformat imports without building the IRI grammar,
and an IRI check gives the real module's answers (fresh interpreters)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = """
import json, sys
{first}
import nbformat
from jsonschema import Draft7Validator, FormatChecker
before = type(sys.modules.get("rfc3987_syntax")).__name__
v = Draft7Validator({{"type": "string", "format": "iri"}},
                    format_checker=FormatChecker())
answers = [v.is_valid(x) for x in
           ("http://example.com/\\u00e4?q=1#f", "no iri: ::", "x y", "")]
import rfc3987_syntax
print(json.dumps({{"before": before, "answers": answers,
                  "after": type(sys.modules["rfc3987_syntax"]).__name__,
                  "attr": rfc3987_syntax.is_valid_syntax_iri("http://a/b")}}))
"""


def run(first: str) -> dict:
    r = subprocess.run([sys.executable, "-c", CHECK.format(first=first)],
                       capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_deferred_until_an_iri_is_checked_then_the_same_answers():
    pytest.importorskip("rfc3987_syntax")
    lazy = run("import labkit.lazy_grammar")
    plain = run("")
    assert lazy["before"] == "_Deferred" and plain["before"] == "module"
    assert lazy["after"] == "module"      # the real one, once asked
    assert lazy["answers"] == plain["answers"]
    assert plain["answers"][:2] == [True, False]
    assert lazy["attr"] is plain["attr"] is True


def test_nothing_changes_once_the_real_module_is_imported():
    pytest.importorskip("rfc3987_syntax")
    r = subprocess.run([sys.executable, "-c", "import sys, rfc3987_syntax\n"
                        "from labkit import lazy_grammar as L\n"
                        "print(L.defer(), type(sys.modules['rfc3987_syntax'])"
                        ".__name__)"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.stdout.split() == ["False", "module"], r.stderr[-2000:]
