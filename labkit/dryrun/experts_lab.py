"""``labkit dryrun`` and lab 13 (experts): not dry-run yet, and why.

    python -m labkit dryrun --profile gpu8 --only experts

Registered in :data:`labkit.dryrun.cases.REASONS` when imported
(:mod:`labkit.dryrun.labs` imports it).
"""
from __future__ import annotations

from labkit.dryrun.cases import cannot

cannot("experts", "no adapter yet (not tried): expert parallelism sizes "
       "its all-to-all from the router's counts, read with .tolist() "
       "after an all-to-all of the counts, which a fake rank cannot "
       "return; lab 13 measures the bytes on CPU exactly, and `labkit "
       "plan --hf-config` prices the per-GPU states at real sizes")
