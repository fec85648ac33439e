"""labkit.node and scripts/torch_build.py: the torch build for a node's
driver, from recorded ``nvidia-smi`` outputs (tests/nvidia_smi/;
h100_driver570/575.txt are the h200_driver580 recording with the header
and GPU line of a 570.133.20 / 575.57.08 driver on an H100, written in
that layout)."""
import importlib.util
from pathlib import Path

import pytest

from labkit import node

ROOT = Path(__file__).resolve().parent.parent
SMI = ROOT / "tests" / "nvidia_smi"
PIN = "2.13.0"


def smi(name):
    return node.parse_nvidia_smi((SMI / name).read_text())


def test_nvidia_smi_outputs_are_read():
    n = smi("h100x8_driver535.txt")
    assert (n.driver, n.cuda) == ("535.104.05", "12.2")
    assert n.gpus == ["NVIDIA H100 80GB HBM3"] * 8
    n = smi("h200_driver580.txt")
    assert (n.driver, n.cuda, n.gpus) == ("580.159.03", "13.0",
                                         ["NVIDIA H200"])
    assert smi("t4_driver470.txt").gpus == ["Tesla T4"]
    assert smi("a100x2_driver565.txt").cuda == "12.7"
    bad = smi("no_driver.txt")
    assert bad.driver is None and "couldn't communicate" in bad.error


@pytest.mark.parametrize("fixture,build", [
    ("h200_driver580.txt", "cu130"),      # CUDA 13.0: torch 2.13's cu130
    ("h100_driver575.txt", "cu126"),      # 12.9: no cu128/cu129 for 2.13
    ("h100_driver570.txt", "cu126"),      # 12.8: the same (issue 28, 5)
    ("a100x2_driver565.txt", "cu126"),    # 12.7: newest build <= 12.7
    ("h100x8_driver535.txt", "cu126"),    # 12.2: minor version compat
])
def test_the_build_fits_the_driver(fixture, build):
    c = node.choose(smi(fixture), PIN)
    assert c.build == build
    assert c.pip_args == ["--index-url", f"{node.INDEX}/{build}"]


def test_every_build_is_one_torch_publishes():
    """PyTorch's RELEASE.md compatibility matrix, row 2.13: stable CUDA
    12.6 and 13.0 (13.2 experimental); no 12.8 since 2.11."""
    assert node.BUILDS["2.13"] == ("12.6", "13.0")
    for f in sorted(SMI.glob("*.txt")):
        n = node.parse_nvidia_smi(f.read_text())
        try:
            c = node.choose(n, PIN)
        except node.NoBuild:
            continue
        assert c.build[2:] in {b.replace(".", "") for b in
                               node.BUILDS["2.13"]}, (f.name, c.build)


def test_an_old_driver_stops_in_one_line_naming_driver_and_builds():
    with pytest.raises(node.NoBuild) as e:
        node.choose(smi("t4_driver470.txt"), PIN)
    msg = str(e.value)
    assert "\n" not in msg and "470.223.02" in msg and "11.4" in msg
    assert "12.6, 13.0" in msg and "560.28.03" in msg
    with pytest.raises(node.NoBuild, match="no working driver"):
        node.choose(smi("no_driver.txt"), PIN)


def test_overrides_and_the_cpu_machine():
    assert node.choose(None, PIN).pip_args == []     # no nvidia-smi
    t4 = smi("t4_driver470.txt")
    assert node.choose(t4, PIN, {"CUDA": "cpu"}).pip_args == [
        "--index-url", f"{node.INDEX}/cpu"]
    assert node.choose(t4, PIN, {"CUDA": "12.8"}).build == "cu128"
    url = "https://example.invalid/whl/cu118"
    assert node.choose(t4, PIN, {"TORCH_INDEX": url}).pip_args == [
        "--index-url", url]


def test_mismatch_names_driver_and_build():
    h100 = smi("h100x8_driver535.txt")
    msg = node.mismatch("2.13.0+cu130", "13.0", h100)
    assert "535.104.05" in msg and "13.0" in msg and "12.2" in msg
    assert node.mismatch("2.13.0+cu126", "12.6", h100) is None
    assert node.mismatch("2.13.0+cpu", None, h100) is None
    assert "no working driver" in node.mismatch("2.13.0", "12.6",
                                                smi("no_driver.txt"))


def test_torch_build_script(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "torch_build", ROOT / "scripts" / "torch_build.py")
    tb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tb)
    for k in ("CUDA", "TORCH_INDEX"):
        monkeypatch.delenv(k, raising=False)
    pin = tb.pinned_torch()
    assert tb.main([], smi_text="") == 0              # CPU: unchanged
    assert capsys.readouterr().out == ""
    assert tb.main([], (SMI / "a100x2_driver565.txt").read_text()) == 0
    assert capsys.readouterr().out.split() == [
        f"torch=={pin}", "--index-url", f"{node.INDEX}/cu126"]
    assert tb.main([], (SMI / "t4_driver470.txt").read_text()) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("make setup: driver")


def test_the_node_recipe_is_one_script_without_npm_or_a_browser():
    """make node-setup runs scripts/node_setup.sh: the toolchain the labs
    compile with, nothing the book's calculators or the grader need
    (its run in a clean root file system: scripts/rehearse_node.py)."""
    import os
    import re
    import subprocess
    text = (ROOT / "scripts" / "node_setup.sh").read_text()
    pkgs = set(re.search(r'PKGS="([^"]*)"', text).group(1).split())
    assert {"python3-dev", "build-essential", "ninja-build", "git",
            "make"} <= pkgs
    assert not {"npm", "chromium", "bubblewrap"} & pkgs
    assert "npm " not in text and "calculators.py" not in text
    assert subprocess.run(["sh", "-n", "scripts/node_setup.sh"],
                          cwd=ROOT).returncode == 0
    env = {k: v for k, v in os.environ.items()   # not make test's -w
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    plan = subprocess.run(["make", "--no-print-directory", "-n",
                           "node-setup"], cwd=ROOT, env=env,
                          capture_output=True, text=True).stdout
    assert plan.strip() == "sh scripts/node_setup.sh"
