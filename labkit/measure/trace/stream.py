"""A Chrome trace read event by event, never whole: bounded memory.

    meta, events = trace_stream.open_trace("rank-0.json.gz")
    for e in events:          # one dict at a time
        ...
    meta["distributedInfo"]   # the other top-level keys, once read

``json.loads`` of a 500 MB trace builds every event at once (3.3 GB of
dicts here, 104 s); this reads the file in 1 MiB pieces (``.json`` or
``.json.gz``) and decodes one event at a time with the C decoder's
``raw_decode``, so memory holds one piece and what the reader keeps of
each event. Errors are one ``ValueError`` line naming the file: truncated,
a damaged gzip stream, not JSON, not a Chrome trace (the object form
``{"traceEvents": [...]}`` or the bare array form). Also here: the
whole-file :func:`load` (for callers that want the dict) and
:func:`trace_files` (the traces of a run folder).
"""
from __future__ import annotations

import codecs
import contextlib
import gc
import gzip
import io
import json
import re
import zlib
from pathlib import Path

CHUNK = 1 << 20
MAX_VALUE = 64 << 20    # one event (or top-level value) at most
# The work bound of a .json.gz: what it may inflate to, read by counting
# (the gzip footer's size is modulo 4 GiB). Profiler traces compress
# about 10 to 20 times; a 4 MB file that inflates to 4 GB is refused
# at 400 MB, in seconds.
INFLATE_RATIO, INFLATE_MIN, INFLATE_MAX = 100, 64 << 20, 4 << 30


def inflate_limit(compressed: int) -> int:
    """The most bytes a gzip file of ``compressed`` bytes may inflate to."""
    return min(INFLATE_MAX, max(INFLATE_MIN, INFLATE_RATIO * compressed))


def _too_big(path, limit: int) -> ValueError:
    return ValueError(f"{path}: inflates to more than {limit >> 20:,} MiB "
                      f"({INFLATE_RATIO}x its compressed size at most; "
                      "not a profiler trace?)")
_WS = " \t\n\r"
_NONBLANK = re.compile(r"[^ \t\n\r]")
_decode = json.JSONDecoder().raw_decode


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        raw = open(path, "rb")
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        self.f = gzip.GzipFile(fileobj=raw) if gz else raw
        self.left = inflate_limit(path.stat().st_size) if gz else None
        self.text = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf, self.pos, self.eof = "", 0, False

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            data = self.f.read(CHUNK)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(f"{self.path}: truncated or damaged gzip file "
                             f"({e})") from None
        if self.left is not None:
            self.left -= len(data)
            if self.left < 0:
                raise _too_big(self.path, inflate_limit(
                    self.path.stat().st_size))
        try:
            piece = self.text.decode(data, final=not data)
        except UnicodeDecodeError as e:
            raise ValueError(f"{self.path}: not valid JSON ({e})") from None
        if not data:
            self.eof = True
        self.buf = self.buf[self.pos:] + piece
        self.pos = 0
        return bool(data) or bool(piece)

    def peek(self) -> str:
        """The next non-blank character ('' at the end)."""
        while True:
            m = _NONBLANK.search(self.buf, self.pos)   # not char by char
            if m:
                self.pos = m.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            got = self.peek() or "the end of the file"
            raise ValueError(f"{self.path}: not valid JSON, truncated? "
                             f"(expected {char!r}, found {got!r})")
        self.pos += 1

    def value(self):
        self.peek()
        while True:
            try:
                v, end = _decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                # maybe cut at the piece's end: read on, up to MAX_VALUE
                # past its start (an event is a few hundred bytes)
                if len(self.buf) - self.pos < MAX_VALUE and self.more():
                    continue
                raise ValueError(f"{self.path}: not valid JSON, truncated? "
                                 f"({e.msg})") from None
            if end == len(self.buf) and not self.eof and \
                    not isinstance(v, (dict, list, str)):
                if self.more():        # a number may go on
                    continue
            self.pos = end
            return v


def _array(r: _Reader):
    r.expect("[")
    if r.peek() == "]":
        r.pos += 1
        return
    while True:
        yield r.value()
        c = r.peek()
        if c == ",":
            r.pos += 1
        elif c == "]":
            r.pos += 1
            return
        else:
            raise ValueError(f"{r.path}: not valid JSON, truncated? "
                             f"(in traceEvents, found {c or 'the end'!r})")


def open_trace(path: str | Path):
    """``(meta, events)``: the top-level keys other than ``traceEvents``
    (filled in as the file is read) and a generator of its events."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file")
    if not p.is_file():
        raise ValueError(f"{p}: not a regular file")
    if p.stat().st_size == 0:
        raise ValueError(f"{p}: the file is empty")
    r = _Reader(p)
    meta: dict = {}
    first = r.peek()
    if first == "[":
        return meta, _array(r)
    if first != "{":
        raise ValueError(f"{p}: not valid JSON, truncated? (starts with "
                         f"{first!r})" if first else f"{p}: the file is "
                         "empty")

    def events():
        r.expect("{")
        seen = False
        while r.peek() != "}":
            key = r.value()
            if not isinstance(key, str):
                raise ValueError(f"{p}: not valid JSON (a key that is not "
                                 "a string)")
            r.expect(":")
            if key == "traceEvents":
                if r.peek() != "[":
                    raise ValueError(f"{p}: not a Chrome trace (no "
                                     "'traceEvents' list)")
                seen = True
                yield from _array(r)
            else:
                meta[key] = r.value()
            if r.peek() == ",":
                r.pos += 1
            elif r.peek() != "}":
                raise ValueError(f"{p}: not valid JSON, truncated? "
                                 "(expected ',' or '}')")
        r.pos += 1
        if not seen:
            raise ValueError(f"{p}: not a Chrome trace (no 'traceEvents' "
                             "list)")
    return meta, events()


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while a trace is parsed.

    A 34 MB trace is 109k small dicts; building them sets off the collector
    again and again, each pass walking everything alive, and that took two
    thirds of the reading time (0.9 s -> 0.34 s of CPU time here). JSON
    holds no reference cycles, so nothing is left for it to collect.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(path: str | Path) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``) with one-line errors."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file")
    raw = p.read_bytes()
    if not raw:
        raise ValueError(f"{p}: the file is empty")
    if raw[:2] == b"\x1f\x8b":
        limit = inflate_limit(len(raw))
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as g:
                raw = g.read(limit + 1)
                if len(raw) > limit:
                    raise _too_big(p, limit)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(f"{p}: truncated or damaged gzip file "
                             f"({e})") from None
    try:
        with _gc_paused():
            data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: not valid JSON, truncated? ({e})") from None
    if isinstance(data, list):  # the bare-array form of the format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(
            data.get("traceEvents"), list):
        raise ValueError(f"{p}: not a Chrome trace (no 'traceEvents' list)")
    return data


def trace_files(run_dir: str | Path) -> list[Path]:
    p = Path(run_dir)
    if not p.exists():
        raise ValueError(f"{p}: no such file or folder")
    if p.is_file():
        return [p]
    files = sorted(f for f in p.iterdir() if f.is_file()
                   and f.name.endswith((".json", ".json.gz")))
    if not files:
        raise ValueError(f"{p}: no trace files (*.json, *.json.gz) in it")
    return files
