"""Text the build generates, in the page's language (issue 32): the lab
stamp (book/_ext/lab_stamp.py), the result tables of Results.show
(book/_ext/lab_results.py) and the calculators' tooltips
(book/_ext/calc_help.py)."""
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit import lab
from labkit.results import provenance

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import calc_help  # noqa: E402
import calculators  # noqa: E402
import lab_results  # noqa: E402
import lab_stamp  # noqa: E402

PROV = {"device": "cpu: x86_64, 2 cores", "gpu_count": 0, "gpu_model": None,
        "torch": "2.13.0", "cuda": None, "nccl": None,
        "date": "2026-11-30T12:00:00+00:00", "commit": "abc",
        "profile": "cpu"}


def test_the_stamp_is_said_in_the_builds_language():
    data = json.dumps(provenance.record(PROV, 2))
    en = lab_stamp.stamp_text(data, "en")
    assert en == provenance.stamp(PROV, 2)            # as before
    zh = lab_stamp.stamp_text(data, "zh_CN")
    assert zh.startswith(provenance.stamp(PROV, 2, "zh"))
    assert zh.endswith(lab_stamp.OUTPUTS["zh"])        # outputs stay English
    # not run: no outputs on the page, nothing to say about them
    assert lab_stamp.stamp_text("{}", None) == provenance.STAMP["en"][
        "not_run"]
    assert lab_stamp.stamp_text("{}", "zh_CN") == provenance.STAMP["zh"][
        "not_run"]


@pytest.mark.parametrize("bad, why", [("{nope", "not JSON"),
                                      ("[1]", "not a provenance record"),
                                      ('{"torch": "2"}', "lacks device")])
def test_a_bad_stamp_is_one_line(bad, why):
    with pytest.raises(ValueError, match=why):
        lab_stamp.stamp_text(bad, "en")


def test_the_directive_makes_a_note_that_is_not_a_message():
    from docutils.core import publish_doctree
    from docutils.parsers.rst import directives
    directives.register_directive("lab-stamp", lab_stamp.directive())
    data = json.dumps(provenance.record(PROV, 2))
    tree = publish_doctree(f".. lab-stamp::\n\n   {data}\n")
    (note,) = tree.children
    assert note.tagname == "note" and note.line
    assert note.astext() == provenance.stamp(PROV, 2)
    assert note.children[0]["translatable"] is False


def _shown(monkeypatch):
    import IPython
    import IPython.display
    out = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display",
                        lambda *a, **k: out.append((a, k)))
    return out


def test_results_show_emits_the_table_as_data(monkeypatch):
    out = _shown(monkeypatch)
    res = lab.Results("x")
    res.add("model_states", "ddp", 2, 1079296, 1079300.0, "bytes",
            device="cpu: x", recompute=True)
    res.add("step_s", "fsdp", 4, None, 0.25, "s", device="cpu: x")
    res.show()
    (bundle,), kw = out[0]
    assert kw == {"raw": True}
    data = bundle[lab.MIME]
    assert data["columns"] == [*lab.FIELDS, "device", "recompute"]
    assert data["rows"] == [
        ["model_states", "ddp", "2", "1,079,296", "1,079,300", "1.0000",
         "bytes", "cpu: x", "True"],
        ["step_s", "fsdp", "4", "", "0.25", "", "s", "cpu: x", "nan"]]
    # the HTML (a notebook, the English page before) shows the same cells
    for row in data["rows"]:
        for cell in row:
            assert f">{cell}</td>" in bundle["text/html"]
    assert "1,079,296" in bundle["text/plain"]


def test_results_show_prints_in_plain_python(capsys):
    res = lab.Results("x")
    res.add("q", "ddp", 2, 10, 11, "bytes", device="cpu")
    res.show()
    assert "1.1000" in capsys.readouterr().out


def test_result_tables_titles_in_the_pages_language():
    data = {"columns": [*lab.FIELDS, "device", "recompute"],
            "rows": [["m", "ddp", "2", "1,079,296", "1,079,300", "1.0000",
                      "bytes", "cpu: x", "True"]]}
    en, zh = (lab_results.table_html(data, x) for x in ("en", "zh"))
    assert "<th lang=\"en\">predicted</th>" in en
    assert "<th lang=\"zh\">预测值</th>" in zh
    assert "<th lang=\"en\">recompute</th>" in zh     # a lab's own key
    cells = en[en.index("<tbody>"):]
    assert cells == zh[zh.index("<tbody>"):]          # numbers untouched
    assert set(lab_results.TITLES["zh"]) == {*lab.FIELDS, "device"}
    assert lab_results.MIME == lab.MIME


def test_the_renderer_takes_only_its_mime_type():
    data = {"columns": ["ratio"], "rows": [["0.9"]]}
    mime = SimpleNamespace(mime_type=lab.MIME, content=data)
    zh = SimpleNamespace(renderer=SimpleNamespace(sphinx_env=SimpleNamespace(
        config=SimpleNamespace(language="zh_CN"))))
    (node,) = lab_results.ResultsRenderer.handle_mime(zh, mime, False)
    assert "比值" in node.astext() and "0.9" in node.astext()
    assert lab_results.ResultsRenderer.handle_mime(zh, mime, True) is None
    other = SimpleNamespace(mime_type="text/html", content="<p>")
    assert lab_results.ResultsRenderer.handle_mime(zh, other, False) is None
    from myst_nb.core.render import get_mime_priority, load_mime_renders
    lab_results.register()
    lab_results.register()
    assert load_mime_renders().count(lab_results.ResultsRenderer) == 1
    assert get_mime_priority("html", [])[0] == lab.MIME


def test_every_calculator_tooltip_has_its_chinese():
    """Every calculator of the book builds in Chinese, each shown option's
    tooltip from calc_help.HELP (a missing one stops the build)."""
    import re
    found = calc_help.book_calculators(ROOT)
    assert {c[1] for c in found} >= {"memory", "comm", "flops", "pipeline"}
    for page, name, argv, shown in found:
        box = calculators.calculator_html(name, argv, shown, "zh")
        tips = re.findall(r'<label title="([^"]*)"', box)
        assert tips and all(re.search(r"[\u4e00-\u9fff]", t) for t in tips), \
            (page, name, tips)
    with pytest.raises(KeyError, match="no tooltip for the option help"):
        calc_help.help_text("a new option", "zh")
    assert calc_help.help_text("a new option", "en") == "a new option"
