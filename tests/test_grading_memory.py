"""scripts/grading/memory.py: a process's memory as the kernel counts it,
read from outside; with ``returned`` a freed tensor leaves the count."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading.memory import resident  # noqa: E402

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from grading import memory
import torch
memory.returned()
for size in (8, 4, 16):                    # MiB, freed, then bigger
    t = torch.ones(size << 18)
    print("held", flush=True); sys.stdin.readline()
    del t
    print("freed", flush=True); sys.stdin.readline()
"""


def test_a_tensor_is_counted_while_it_lives_and_not_after():
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(ROOT / "scripts")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        for size in (8, 4, 16):
            assert p.stdout.readline().strip() == "held"
            held = resident(p.pid)
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "freed"
            freed = resident(p.pid)
            p.stdin.write("\n")
            p.stdin.flush()
            assert abs(held - freed - (size << 20)) < 256 << 10, \
                (size, held, freed)
    finally:
        p.kill()
        p.wait()
    assert resident(p.pid) == -1            # gone: no count
