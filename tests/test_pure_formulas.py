"""Pure formula modules never import torch (they run anywhere, instantly)."""
import pkgutil
import subprocess
import sys

import labkit.predict

MODULES = [m.name for m in pkgutil.walk_packages(labkit.predict.__path__,
                                                "labkit.predict.")]


def test_predict_modules_do_not_import_torch():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in MODULES) +
            "bad = [m for m in ('torch', 'numpy') if m in sys.modules]\n"
            "print(','.join(bad))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "torch" not in r.stdout.split(","), MODULES
