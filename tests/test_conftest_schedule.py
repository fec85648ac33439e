"""conftest.py's schedule of make test: the longest units first, the ones
that read the built book last, and the wait for the strict build that runs
beside the tests (LABKIT_BOOK_BUILDING)."""
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parent.parent


def test_collection_puts_the_longest_first_and_the_book_readers_last():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "--collect-only", "-q",
         "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True,
        text=True, timeout=300).stdout
    units = []
    for line in out.splitlines():
        if "::" in line:
            u = conftest._unit(line.split("::")[0])
            if not units or units[-1] != u:
                units.append(u)
    assert len(units) == len(set(units)), "a unit is split"
    first = [u for u in units if u in conftest.FIRST]
    assert units[:len(first)] == first and set(first) == set(conftest.FIRST)
    n = len(conftest.BOOK_UNITS)
    assert sorted(units[-n:]) == sorted(conftest.BOOK_UNITS)


def test_no_build_beside_the_tests_means_no_wait(monkeypatch):
    monkeypatch.delenv("LABKIT_BOOK_BUILDING", raising=False)
    conftest.book_built()


def test_a_failed_build_fails_the_reader_naming_its_log(tmp_path,
                                                        monkeypatch):
    rc = tmp_path / "book-strict.rc"
    rc.write_text("2\n")
    monkeypatch.setenv("LABKIT_BOOK_BUILDING", str(rc))
    monkeypatch.setattr(conftest, "_BOOK", {})
    with pytest.raises(pytest.fail.Exception,
                       match=r"exited 2: see .*book-strict\.log"):
        conftest.book_built()


def test_the_reader_waits_for_the_exit_status(tmp_path, monkeypatch):
    rc = tmp_path / "book-strict.rc"
    monkeypatch.setenv("LABKIT_BOOK_BUILDING", str(rc))
    monkeypatch.setattr(conftest, "_BOOK", {})
    writer = subprocess.Popen([sys.executable, "-c",
                               "import time, sys; time.sleep(1.5); "
                               f"open({str(rc)!r}, 'w').write('0')"])
    try:
        conftest.book_built()               # returns once it is 0
    finally:
        writer.wait(timeout=30)
    assert conftest._BOOK["rc"] == 0
