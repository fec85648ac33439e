"""``python -m labkit.nn PRESET``: a decoder of an architecture preset
(default ``llama-tiny``), its size and one loss at init."""
import math
import sys

from labkit import arch
from labkit.nn.model import GPTConfig, batch, build_arch, count_params

a = arch.preset(sys.argv[1] if len(sys.argv) > 1 else "llama-tiny")
m = build_arch(a)
x, y = batch(GPTConfig(vocab=a.vocab, seq=32), 8, step=0)
print(f"{a.name}: parameters {count_params(m):,}  loss at init "
      f"{m(x, y).item():.4f} (ln V = {math.log(a.vocab):.4f})")
