"""labkit.disk: a full, read-only or unwritable folder in one line, before
a run writes to it and wherever a write fails; preflight checks every
folder a lab writes."""
import errno
import os

import pytest

from labkit import disk


def test_check_writable_names_the_fault(tmp_path, monkeypatch):
    disk.check_writable(tmp_path / "new" / "folder")      # made, writable
    assert (tmp_path / "new" / "folder").is_dir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        disk.check_writable(tmp_path / "afile" / "sub")
    with pytest.raises(ValueError, match=f"disk full at {tmp_path}: "):
        disk.check_writable(tmp_path, need_bytes=1e18)
    for code, said in ((errno.EROFS, "read-only at"),
                       (errno.ENOSPC, "disk full at"),
                       (errno.EACCES, "not writable at")):
        def fail(*a, code=code, **k):
            raise OSError(code, os.strerror(code))
        monkeypatch.setattr(disk.tempfile, "mkstemp", fail)
        with pytest.raises(ValueError) as e:
            disk.check_writable(tmp_path)
        assert str(e.value) == f"{said} {tmp_path}"


def test_said_turns_a_write_error_into_one_line(tmp_path):
    with pytest.raises(disk.DiskError) as e:
        with disk.said(tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device",
                          str(tmp_path / "f"))
    assert str(e.value) == f"disk full at {tmp_path / 'f'}"
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOSPC
    with pytest.raises(FileNotFoundError):     # not a disk fault: as is
        with disk.said(tmp_path):
            open(tmp_path / "none")


def test_preflight_fails_on_a_read_only_folder_and_runs_no_probe(
        monkeypatch):
    from labkit import preflight

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(disk.tempfile, "mkstemp", read_only)
    monkeypatch.setattr(preflight, "probe",
                        lambda *a, **k: pytest.fail("probe launched"))
    checks = preflight.run("cpu")
    bad = [c for c in checks if c.status == "fail"]
    assert {c.name for c in bad} == {"writable cpu", "writable runs",
                                     "writable checkpoints", "busbw probe"}
    assert all("read-only at" in c.found for c in bad
               if c.name != "busbw probe")
    assert preflight.summary(checks)["exit"] == 2


def test_labkit_preflight_keeps_its_0_1_2_promise(monkeypatch, capsys):
    from labkit import __main__ as cli
    from labkit import preflight

    def broken(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", "/x/_build")
    monkeypatch.setattr(preflight, "run", broken)
    assert cli.main(["preflight", "--no-probe"]) == 2
    assert capsys.readouterr().err == (
        "python -m labkit preflight: error: read-only at /x/_build\n")
