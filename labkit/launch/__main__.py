"""``python -m labkit.launch MODULE --nproc N [...] -- ARGS``
(:mod:`labkit.launch.cli`)."""
import sys

from labkit.launch.cli import main

sys.exit(main())
