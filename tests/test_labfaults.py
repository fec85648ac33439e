"""labkit.results.labfaults: the runner's one-line notes and its quiet logs."""
import logging

import pytest

from labkit.results import labfaults


@pytest.fixture
def restore_loggers():
    """The runner's loggers as they were, after the test."""
    yield
    for name in labfaults.RUNNER_LOGGERS:
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            if getattr(h, "labkit_runner_log", False):
                logger.removeHandler(h)
                h.close()
        logger.propagate = True


def test_runner_log_keeps_papermill_and_asyncio_off_the_terminal(
        tmp_path, capfd, restore_loggers):
    log = tmp_path / "runner.log"
    labfaults.runner_log(log)
    labfaults.runner_log(log)          # twice: one handler, not two
    logging.getLogger("papermill").error(
        "Kernel died while waiting for execute reply.")
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    text = log.read_text()
    assert text.count("Kernel died while waiting") == 1
    assert "never retrieved" in text


def test_a_full_disk_loses_the_record_silently(tmp_path, capfd,
                                               restore_loggers):
    labfaults.runner_log(tmp_path / "no-such-dir" / "runner.log")
    logging.getLogger("papermill").error("something")
    assert capfd.readouterr().err == ""


def test_first_line_is_the_cells_error():
    class E(Exception):
        ename, evalue = "LaunchError", "rank 1 died: OOM\nmore"
    assert labfaults.first_line(E()) == "LaunchError: rank 1 died: OOM"
