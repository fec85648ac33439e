"""Lines from a jail's pipe, with a deadline and a size limit.

    lines = Lines(proc.stdout)
    line = lines.readline(deadline)      # bytes, None at end of file;
                                         # TimeoutError, ValueError (size)

Linear in what is read: each chunk is searched for a newline once and
kept in a list (a 64 MiB line costs one join, not a copy per chunk).
"""
from __future__ import annotations

import os
import select
import time

LINE_LIMIT = 64 << 20   # bytes of one message from a jail


class Lines:
    def __init__(self, f, limit: int = LINE_LIMIT):
        self.fd, self.limit = f.fileno(), limit
        self.parts: list[bytes] = []   # only the last may hold a newline
        self.size = 0

    def _take(self) -> bytes | None:
        last = self.parts[-1]
        nl = last.find(b"\n")
        if nl < 0:
            return None
        line = b"".join(self.parts[:-1]) + last[:nl]
        rest = last[nl + 1:]
        self.parts = [rest] if rest else []
        self.size = len(rest)
        return line

    def readline(self, deadline: float) -> bytes | None:
        while True:
            if self.parts:
                line = self._take()
                if line is not None:
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not select.select([self.fd], [], [], left)[0]:
                continue
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.size += len(chunk)
            if self.size > self.limit:
                raise ValueError(f"a message over {self.limit >> 20} MiB")
            self.parts.append(chunk)
