# lab: 08_checkpoint
# base: student
# expect: 0
# Score q3 from a checkpoint folder an earlier submission left behind.
import glob
from pathlib import Path

from labkit.measure.checkpoint import dcp_bytes

folders = sorted(glob.glob("/tmp/assignment-08-*")
                 + glob.glob(str(checkpoint_root("x").parent / "*")))
m = dcp_bytes(folders[-1])
state_bytes = m["state"][0]
overhead_bytes = m["total"] - state_bytes
