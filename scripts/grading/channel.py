"""The grader's result channel: every line authenticated.

    out = Signer(pipe, first_line_of_stdin)   # in the evaluator
    out.send({"questions": ...})              # -> "MAC JSON\\n"
    msg = verify(secret, line)                # in grade.py; None: forged

``grade.py`` makes a fresh secret per submission and writes it as the
first line of the evaluator's stdin before any process of that
submission runs. A line whose HMAC-SHA256 does not match is not the
evaluator's, and grading stops with "tampering". (No student code runs in
the evaluator's jail; this is the second wall.)
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets


def new_secret() -> str:
    return secrets.token_hex(32)


def mac(secret: str, payload: bytes) -> str:
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


class Signer:
    def __init__(self, pipe, first_line: str):
        try:
            self.secret = str(json.loads(first_line)["secret"])
        except (ValueError, KeyError, TypeError):
            self.secret = new_secret()  # unverifiable: the grader refuses
        self.pipe = pipe

    def send(self, msg: dict) -> None:
        payload = json.dumps(msg)
        self.pipe.write(f"{mac(self.secret, payload.encode())} {payload}\n")
        self.pipe.flush()


def verify(secret: str, line: bytes):
    """The message of an authenticated line, else None."""
    tag, _, payload = line.partition(b" ")
    if not hmac.compare_digest(tag, mac(secret, payload).encode()):
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return None
