"""One term per concept and one translation per sentence, over every
catalog of the Chinese edition.

    python scripts/zh_terms.py                  # every catalog; exit 1
    python scripts/zh_terms.py locale/zh_CN/LC_MESSAGES/book/18_x.po
    python scripts/zh_terms.py --fix FILE.po    # write the terms in

Two rules, each fault one line naming the catalog and the message:

- **the term list** (``locale/zh_CN/terms.tsv``): where a message's
  English holds a term (a regular expression, outside code, math, glue
  and role targets), its Chinese holds the one Chinese term and none of
  the renderings the list rules out;
- **the translation memory**: an English sentence (three English words
  in a row or more, :func:`labkit.twins.sentence`) that is a whole
  message in several catalogs has one Chinese in all of them. A short
  table cell ("nothing", "where") may differ with its table.

``--fix`` writes the term where a message's Chinese kept the English
bare or used a ruled-out rendering ("每个 micro-batch" -> "每个微批次";
"微批次（micro-batch）", the English after its Chinese, stays), and
touches no other line of the catalog: read its diff before committing.

Why data and not code: a new chapter's catalog is held to the same list
the day it is merged; a term changes in one line of ``terms.tsv`` and the
faults name every message to fix.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit.twins import sentence  # noqa: E402

LOCALE = ROOT / "locale" / "zh_CN"
TERMS = LOCALE / "terms.tsv"
# code spans, $math$, {role}`targets` and URLs are not prose
NOT_PROSE = re.compile(r"\{[\w:]+\}`[^`]*`|``[^`]+``|`[^`]+`"
                       r"|\$\$.+?\$\$|\$[^$]+\$|\]\([^)]*\)", re.S)


def terms(path: Path = TERMS) -> list[dict]:
    """The term list: ``english`` (compiled), ``chinese``, ``not``."""
    lines = [x for x in path.read_text(encoding="utf-8").splitlines()
             if x and not x.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    for row in rows:
        row["english"] = re.compile(row["english"], re.I)
        row["not"] = [x for x in row["not"].split("|") if x]
    return rows


def prose(text: str) -> str:
    """``text`` less its code, math, links and roles (a role's shown
    words kept: ``{ref}`第 3 章 <x>``` -> ``第 3 章``)."""
    def keep(m):
        s = m.group(0)
        if s.startswith("{") and s[1:].startswith(("ref", "doc", "numref",
                                                   "term")):
            return " " + re.sub(r"<[^>]*>", "", s.split("`")[1]) + " "
        return " "
    return NOT_PROSE.sub(keep, text)


CJK = r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef“”]"


def write_term(text: str, row: dict) -> str:
    """``text`` (a Chinese message) with its bare English terms and its
    ruled-out renderings written as the row's Chinese term; code, math
    and roles untouched, a space kept only beside Latin letters."""
    zh = row["chinese"]
    if not re.search(CJK, zh):
        return text
    pair = re.compile(re.escape(zh) + r"\**\s*[（(][^）)]*[）)]")

    def prose_part(t):
        # "stage（流水线阶段）": the Chinese first, the English after it
        t = re.sub(r"(\**)(" + row["english"].pattern + r")(\**)\s*（([^）]*"
                   + re.escape(zh) + r"[^）]*)）",
                   lambda m: (f"{m.group(1)}{m.group(len(m.groups()))}"
                              f"{m.group(len(m.groups()) - 1)}"
                              f"（{m.group(2)}）"), t, flags=re.I)
        t = re.sub(f"(?<={CJK}) (?=\\**{re.escape(zh)})", "", t)
        kept = []
        t = pair.sub(lambda m: kept.append(m.group(0)) or f"\0{len(kept)}\0",
                     t)
        for no in row["not"]:
            t = t.replace(no, zh)
        out, last = [], 0
        for m in re.finditer(r"( ?)(" + row["english"].pattern + r")( ?)",
                             t, re.I):
            left, right = t[m.start() - 1:m.start()], t[m.end():m.end() + 1]
            out += [t[last:m.start()],
                    " " if m.group(1) and not re.match(CJK, left or "x")
                    and left else "", zh,
                    " " if m.group(len(m.groups())) and not re.match(
                        CJK, right or "x") else ""]
            last = m.end()
        t = "".join(out + [t[last:]])
        return re.sub("\0(\\d+)\0", lambda m: kept[int(m.group(1)) - 1], t)
    out, last = [], 0
    for m in NOT_PROSE.finditer(text):
        out += [prose_part(text[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join(out + [prose_part(text[last:])])


def fix(path: Path, rows=None) -> int:
    """Write the terms into one catalog (only the msgstr lines of the
    messages that need it change); the number of messages changed."""
    from babel.messages.pofile import denormalize, normalize
    rows = terms() if rows is None else rows
    blocks = path.read_text(encoding="utf-8").split("\n\n")
    changed = 0
    for b, block in enumerate(blocks):
        lines = block.split("\n")
        at = {k: _field(lines, k) for k in ("msgid", "msgstr")}
        if None in at.values() or block.lstrip().startswith("#~"):
            continue
        en, cn = (denormalize("\n".join([lines[i][len(k) + 1:]]
                                        + lines[i + 1:j]))
                  for k, (i, j) in at.items())
        new = cn
        for row in rows:
            if cn and row["english"].search(prose(en)):
                new = write_term(new, row)
        if new != cn:
            i, j = at["msgstr"]
            out = normalize(new, prefix="", width=78).split("\n")
            lines[i:j] = ["msgstr " + out[0]] + out[1:]
            blocks[b] = "\n".join(lines)
            changed += 1
    if changed:
        path.write_text("\n\n".join(blocks), encoding="utf-8")
    return changed


def _field(lines, key):
    for i, line in enumerate(lines):
        if line.startswith(key + " "):
            j = i + 1
            while j < len(lines) and lines[j].startswith('"'):
                j += 1
            return i, j
    return None


def messages(paths):
    """``(catalog, English, Chinese)`` of every translated message."""
    from babel.messages.pofile import read_po
    for path in paths:
        with open(path, "rb") as f:
            for m in read_po(f):
                if m.id and m.string and not m.fuzzy:
                    yield path, m.id, m.string


def term_faults(msgs, rows=None) -> list[str]:
    rows = terms() if rows is None else rows
    bad = []
    for path, en, cn in msgs:
        en_p, cn_p = prose(en), prose(cn)
        for row in rows:
            if not row["english"].search(en_p):
                continue
            if row["chinese"] not in cn_p:
                bad.append(f"{_name(path)}: {row['chinese']} missing for "
                           f"{row['english'].pattern!r}: {en[:60]!r}")
            for no in row["not"]:
                if no in cn_p.replace(row["chinese"], ""):
                    bad.append(f"{_name(path)}: {no} (write "
                               f"{row['chinese']}): {cn[:60]!r}")
    return bad


def memory_faults(msgs) -> list[str]:
    seen = defaultdict(lambda: defaultdict(list))
    for path, en, cn in msgs:
        if sentence(prose(en)):
            seen[en][cn].append(_name(path))
    return [f"{en[:60]!r} has {len(cns)} translations: "
            + "; ".join(f"{', '.join(w)}: {cn[:40]!r}"
                        for cn, w in cns.items())
            for en, cns in seen.items() if len(cns) > 1]


def _name(path) -> str:
    try:
        return Path(path).resolve().relative_to(
            LOCALE / "LC_MESSAGES").as_posix()
    except ValueError:
        return str(path)


def catalogs() -> list[Path]:
    """Every page's catalog and the generated text's (``generated.po``)."""
    return sorted((LOCALE / "LC_MESSAGES").rglob("*.po")) + [
        LOCALE / "generated.po"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("po", nargs="*", type=Path,
                    help="catalogs (default: every one)")
    ap.add_argument("--fix", action="store_true",
                    help="write the terms into the catalogs, then check")
    args = ap.parse_args(argv)
    if args.fix:
        for path in args.po or catalogs():
            n = fix(path)
            if n:
                print(f"{_name(path)}: {n} messages written")
    msgs = list(messages(args.po or catalogs()))
    bad = term_faults(msgs) + memory_faults(msgs)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
