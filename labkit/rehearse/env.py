"""The names a rehearsal shares across processes: the environment
variables that switch it on and name its log, and the mark of DeepSpeed's
CPU accelerator in a rank's error. Imported by the hook, the notebooks' and
the ranks' side alike (no labkit imports here).
"""
ENV, LOG = "LABKIT_REHEARSE", "LABKIT_REHEARSE_LOG"
# a rank's error raised by DeepSpeed on this machine's CPU accelerator
# (labkit.rehearse.world, which marks it)
DEEPSPEED_ON_CPU = "DeepSpeed's accelerator here is the CPU"
