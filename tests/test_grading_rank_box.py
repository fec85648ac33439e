"""scripts/grading/rank_box.py: a rerun's rank in a Landlock box of its
own writes only in its own folder, reads nothing of another rank's, makes
no TCP connection; and a submission whose ranks talk through /tmp
(tests/hostile/shared_tmp_04.py) crashes on the hub instead of scoring."""
import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import rank_box  # noqa: E402

pytestmark = pytest.mark.skipif(rank_box.abi() < 4,
                                reason="no Landlock ABI 4 in this kernel")


def boxed(tmp_path, probe) -> dict:
    """What ``probe()`` returns in a forked child boxed to ``mine``."""
    work = tmp_path / "work"
    for d in ("mine", "theirs"):
        (work / d).mkdir(parents=True)
    (work / "theirs" / "shard.txt").write_text("rank 0's")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            rank_box.enter([work / "mine"], shared=[work])
            out = probe(work)
        except BaseException as e:  # noqa: BLE001
            out = {"crash": repr(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def attempt(fn) -> str:
    try:
        fn()
        return "ok"
    except OSError as e:
        return type(e).__name__


def test_a_boxed_rank_writes_only_its_own_folder(tmp_path):
    tmp = f"/tmp/rank-box-{os.getpid()}"

    def probe(work):
        return {"own": attempt(lambda: (work / "mine" / "x").write_text("1")),
                "tmp": attempt(lambda: Path(tmp).write_text("1")),
                "shm": attempt(lambda: Path("/dev/shm/rb").write_text("1")),
                "theirs": attempt(lambda: (work / "theirs" / "shard.txt")
                                  .read_text()),
                "next to": attempt(lambda: (work / "y").write_text("1")),
                "torch": attempt(lambda: Path(
                    __import__("torch").__file__).read_text()),
                "null": attempt(lambda: open("/dev/null", "w").write("x"))}
    got = boxed(tmp_path, probe)
    assert got == {"own": "ok", "tmp": "PermissionError",
                   "shm": got["shm"] if not Path("/dev/shm").is_dir()
                   else "PermissionError",
                   "theirs": "PermissionError",
                   "next to": "PermissionError", "torch": "ok",
                   "null": "ok"}, got
    assert not Path(tmp).exists()


def test_a_boxed_rank_makes_no_tcp_connection(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def probe(work):
        def connect():
            with socket.create_connection(("127.0.0.1", port), 2):
                pass

        def bind():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
        return {"connect": attempt(connect), "bind": attempt(bind)}
    got = boxed(tmp_path, probe)
    srv.close()
    assert got == {"connect": "PermissionError", "bind": "PermissionError"}


@pytest.mark.distributed
def test_ranks_that_talk_through_tmp_crash_on_the_hub(tmp_path):
    from test_grading_ranks import fresh_fork_ranks

    from labkit import buildit
    text = (ROOT / "tests" / "hostile" / "shared_tmp_04.py").read_text()
    src = re.search(r"SRC = r'''(.*?)'''", text, re.S).group(1)
    h = buildit.harness("zero")
    got = fresh_fork_ranks("zero", src, h.HIDDEN, 2, tmp_path, 120, True)
    assert "Permission denied" in (got["error"] or ""), got["error"]
    assert buildit.score({**got, "loopback_bytes": 0})[0] == 0
