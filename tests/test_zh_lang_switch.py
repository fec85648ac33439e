"""book/_ext/lang_switch.py: every page links its twin, relatively."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
import lang_switch as L  # noqa: E402


def test_english_links_down_into_zh_and_chinese_links_back_up():
    assert L.other_url("book/01_memory", "en", "zh") == \
        "../zh/book/01_memory.html"
    assert L.other_url("book/01_memory", "zh", "en") == \
        "../../book/01_memory.html"
    assert L.other_url("index", "en", "zh") == "zh/index.html"
    assert L.other_url("index", "zh", "en") == "../index.html"


def test_the_link_is_local_and_says_its_language():
    html = L.switch_html("labs/01_memory", "en", "zh")
    assert 'href="../zh/labs/01_memory.html"' in html
    assert 'hreflang="zh-CN"' in html and ">中文<" in html
    assert "//" not in html          # no other host: the site is offline
