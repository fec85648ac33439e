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


def test_kernel_connection_files_stay_private_and_go(tmp_path):
    """A lab's kernel writes its ports and HMAC key in the run folder's
    private .kernel/ (not the system's temporary folder), gone when the
    kernel stops; a SIGKILLed runner's are removed at the next start."""
    import json
    import os
    import stat

    import nbformat
    import papermill as pm

    from labkit.results import labruns
    run = tmp_path / "fake.20261201-000000.running"
    run.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from ipykernel import get_connection_file\n"
        "print(get_connection_file())")]
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    nbformat.write(nb, run / "in.ipynb")
    pm.execute_notebook(str(run / "in.ipynb"), str(run / "out.ipynb"),
                        kernel_name="python3", progress_bar=False,
                        kernel_manager_class=labfaults.quiet_kernel(
                            run / "kernel-stderr.log"))
    out = nbformat.read(run / "out.ipynb", 4)
    used = out.cells[0].outputs[0]["text"].strip()
    assert os.path.dirname(used) == str(run / labfaults.KERNEL_DIR), used
    assert stat.S_IMODE(os.stat(run / ".kernel").st_mode) & 0o777 == 0o700
    assert not os.path.exists(used)                   # removed at its stop
    (run / ".kernel" / "kernel-1-0.json").write_text("{}")  # a SIGKILL's
    (run / "running.json").write_text(json.dumps({"pid": 0}))
    labruns.label_interrupted(tmp_path)
    assert not (tmp_path / "fake.20261201-000000.interrupted"
                / ".kernel").exists()


def test_a_kernel_whose_port_was_taken_starts_again(tmp_path):
    """The runner starts a lab's kernel once more only when it died
    before answering because its port was taken (no cell ran)."""
    from labkit.results.labfaults import port_taken
    died = RuntimeError("Kernel died before replying to kernel_info")
    assert not port_taken(died, tmp_path)          # no log: not known
    (tmp_path / "kernel-stderr.log").write_text(
        "zmq.error.ZMQError: Address already in use "
        "(addr='tcp://127.0.0.1:42173')\n")
    assert port_taken(died, tmp_path)
    assert not port_taken(RuntimeError("a cell raised"), tmp_path)
