"""``python -m labkit.runs.schedules``: :mod:`labkit.runs.schedules.run`."""
from labkit.runs.schedules.run import main

main()
