"""``python -m labkit.rehearse --profile gpu8``: see :mod:`labkit.rehearse.run`."""
import sys

from labkit.rehearse.run import main

sys.exit(main())
