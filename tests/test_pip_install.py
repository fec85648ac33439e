"""scripts/pip_install.py: uv is given what pip's configuration says, so
both install the same pins from the same places."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import pip_install  # noqa: E402


def test_pip_configuration_becomes_uv_flags(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cons = tmp_path / "c.txt"
    cons.write_text("torch<=9\n")
    args, env = pip_install.uv_args({
        "find-links": [str(wheels), str(tmp_path / "missing")],
        "extra-index-url": ["file:///a/simple file:///b/simple"],
        "index-url": ["https://x/simple", "https://y/simple"],
        "constraint": [str(cons)], "cert": ["/etc/ca.crt"],
        "default-timeout": ["180"]})
    # pip's strategy: the best version over every index
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = list(zip(args[2::2], args[3::2]))
    assert ("--find-links", str(wheels)) in pairs
    assert all(str(tmp_path / "missing") not in v for _, v in pairs)
    assert ("--extra-index-url", "file:///a/simple") in pairs
    assert ("--extra-index-url", "file:///b/simple") in pairs
    assert [v for f, v in pairs if f == "--index-url"] == ["https://y/simple"]
    assert ("--constraint", str(cons)) in pairs
    assert env == {"SSL_CERT_FILE": "/etc/ca.crt", "UV_HTTP_TIMEOUT": "180"}
    no_index, _ = pip_install.uv_args({"no-index": ["true"]})
    assert "--no-index" in no_index


def test_pip_config_is_read_as_pip_reads_it(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /w1 /w2\n"
                    "extra-index-url = file:///i/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    got = pip_install.pip_config()
    assert "/w1 /w2" in got["find-links"]
    assert got["extra-index-url"] == ["file:///i/simple"]

