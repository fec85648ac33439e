"""book/_ext/zh_tables.py: the Chinese build shows a glued table's twin."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book"
                       / "_ext"))
import zh_tables  # noqa: E402

PAGE = '''```{code-cell} ipython3
glue_table(glue, "tbl_a", df)
glue("tbl_b", df, display=False)
```

```{glue:figure} tbl_a
:name: tbl-a

A caption.
```

```{glue:figure} tbl_b
```

```{glue:figure} tbl_ab
```
'''


def test_only_glue_table_keys_point_at_their_twin():
    out = zh_tables.twin_tables(PAGE)
    assert "```{glue:figure} tbl_a__zh\n:name: tbl-a" in out
    assert "```{glue:figure} tbl_b\n" in out      # glued without a twin
    assert "```{glue:figure} tbl_ab\n" in out     # another key
    assert 'glue_table(glue, "tbl_a", df)' in out  # code cells untouched


def test_inert_in_an_english_build():
    class App:
        class config:
            language = "en"
    src = [PAGE]
    zh_tables._source_read(App, "p", src)
    assert src == [PAGE]
    App.config.language = "zh_CN"
    zh_tables._source_read(App, "p", src)
    assert "tbl_a__zh" in src[0]
