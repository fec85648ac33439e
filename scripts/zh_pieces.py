"""What a translated paragraph must keep, and what counts as prose to
translate: the rules ``scripts/zh_catalogs.py check`` applies to each
paragraph of the Chinese edition (issue 32).

    from zh_pieces import pieces, prose
    pieces("{glue:text}`mp_k` of `psi` is 16 bytes")  # glue, code, numbers...
    prose("`torch.cuda.memory_allocated()`")           # False: code only

A Chinese paragraph carries the same glue roles (a word's Chinese twin
``key__zh`` read as ``key``: ``labkit.words.glue_words``), the same
targets of other roles, inline code, math, link targets and numbers as
its English (:func:`pieces`); a message is prose (to translate) when
English words remain once roles, code, math, LaTeX and proper names are
taken out (:func:`prose`). Standard library only.
"""
from __future__ import annotations

import re
from collections import Counter

# Inline pieces a translation must carry unchanged (MyST syntax).
GLUE = re.compile(r"\{glue(?::\w+)?\}`[^`]*`")
GLUE_KEY = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)")
ZH_TWIN = "__zh"                # labkit.words.ZH
TWIN_CALL = re.compile(r"glue_words\(\s*glue\s*,\s*(f?)([\"'])(.+?)\2")
ROLE = re.compile(r"\{(\w+(?::\w+)?)\}`([^`]*)`")
CODE = re.compile(r"``[^`]+``|`[^`]+`")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$]+\$", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>]+)>")
# A number: digits, decimals, thousands, an exponent (6.1e-5), and "1.5x"
# read as 1.5; not the digits of a word or unit glued on (fp32, 1F1B, 80GB).
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?"
                    r"(?![A-Za-wyz\d]|[.,]\d)")
CJK = re.compile(r"[\u4e00-\u9fff]")
WORD = re.compile(r"\b[A-Za-z][a-z]{2,}\b")   # not DDP, GPU, fp32
# a proper name, the same in Chinese: DeepSpeed, PyTorch, Colossal-AI,
# Megatron-LM, GPT-3 (an inner capital, or a capital/digit part after a
# hyphen); not Summary, micro-batch
NAME = re.compile(r"(?<![\w-])[A-Z][a-z]*[A-Z][A-Za-z]*(?![\w-])"
                  r"|(?<![\w-])[A-Z][A-Za-z]*(?:-[A-Z0-9][A-Z0-9.]*)+"
                  r"(?![\w-])")
LATEX = re.compile(r"\\[A-Za-z]+")


def pieces(text: str) -> dict[str, Counter]:
    """What a translation must keep: glue roles, other roles' targets,
    code, math, link targets, and the numbers of the prose."""
    out = {"glue": Counter(re.sub(ZH_TWIN + r"(?=[:`])", "", g)
                              for g in GLUE.findall(text))}
    rest = GLUE.sub(" ", text)
    targets = []
    for name, body in ROLE.findall(rest):
        m = re.search(r"<([^>]+)>\s*$", body)
        targets.append(f"{{{name}}}{(m.group(1) if m else body).strip()}")
    out["role"] = Counter(targets)
    rest = ROLE.sub(lambda m: " " + re.sub(r"<[^>]+>\s*$", "",
                                           m.group(2)), rest)
    out["code"] = Counter(CODE.findall(rest))
    rest = CODE.sub(" ", rest)
    out["math"] = Counter(m.strip() for m in MATH.findall(rest))
    rest = MATH.sub(" ", rest)
    out["link"] = Counter("".join(g) for g in LINK.findall(rest))
    rest = LINK.sub("] ", rest)
    out["number"] = Counter(NUMBER.findall(rest))
    return out


def _role_text(m: re.Match) -> str:
    """A cross-reference's explicit text, else nothing."""
    text = re.match(r"(.*?)<[^>]+>\s*$", m.group(2), re.S)
    keep = m.group(1) in ("ref", "doc", "numref", "download") and text
    return " " + (text.group(1) if keep else "")


def prose(msgid: str) -> bool:
    """English words to translate, once roles, code, math and LaTeX (a
    display-math block is a message too) are taken out. A role keeps its
    explicit text ({ref}`the corrections <corrections>`), not its target
    ({doc}`04_zero` is the page's title, translated there); roles go
    before code, whose backticks they share. Proper names (Colossal-AI,
    DeepSpeed) are not English to translate."""
    if LATEX.search(msgid) and "$" not in msgid:
        return False                       # a math block
    rest = GLUE.sub(" ", msgid)
    rest = ROLE.sub(_role_text, rest)
    rest = MATH.sub(" ", CODE.sub(" ", rest))
    rest = LINK.sub(" ", re.sub(r"https?://\S+", " ", rest))
    return bool(WORD.search(NAME.sub(" ", rest)))


def twins(source: str) -> list[re.Pattern]:
    """The glue keys a page's code glues with a Chinese twin
    (``labkit.words.glue_words``); an f-string's ``{...}`` matches a
    word."""
    out = []
    for f, _, key in TWIN_CALL.findall(source):
        parts = re.split(r"\{[^}]*\}", key) if f else [key]
        out.append(re.compile(r"\w+".join(map(re.escape, parts)) + r"\Z"))
    return out


def twin_problems(zh: str, keys: list[re.Pattern]) -> list[str]:
    """A Chinese paragraph shows a word's Chinese twin, never its
    English (``key``), nor a twin its page does not glue."""
    bad = []
    for key in GLUE_KEY.findall(zh):
        base = key[:-len(ZH_TWIN)] if key.endswith(ZH_TWIN) else None
        if base is None and any(k.match(key) for k in keys):
            bad.append(f"English word glued in the Chinese (write "
                       f"{{glue:text}}`{key}{ZH_TWIN}`)")
        elif base is not None and not any(k.match(base) for k in keys):
            bad.append(f"no Chinese twin glued for {base} (the page's "
                       "code must glue it with labkit.words.glue_words)")
    return bad
