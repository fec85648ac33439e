"""Run one rank's module so that it dies with its torchrun agent.

    torchrun ... -m labkit.launch.rank MODULE ARGS   # as `launch` does

Sets ``PR_SET_PDEATHSIG`` (SIGKILL) and then runs ``MODULE`` as
``__main__``, exactly as ``python -m MODULE ARGS`` would. torchrun starts
each rank in a session of its own, so when torchrun is SIGKILLed its
ranks would run on; with this, Linux kills them (the guard,
:mod:`labkit.launch.guard`, sweeps up anything that still remains). It
also starts the rank's heartbeat (:mod:`labkit.launch.heartbeat`) and,
in a rehearsal, shows it the node's GPUs (:mod:`labkit.rehearse.node`).
"""
import os
import runpy
import signal
import sys

from labkit.launch.guard import die_with_parent

if __name__ == "__main__":
    agent = os.getppid()
    die_with_parent(signal.SIGKILL)
    if os.getppid() != agent:   # the agent died before the line above
        sys.exit(128 + signal.SIGKILL)
    if len(sys.argv) < 2:
        sys.exit("usage: python -m labkit.launch.rank MODULE [ARGS...]")
    from labkit.launch import heartbeat
    heartbeat.start()    # the launch names a rank that stops beating
    if os.environ.get("LABKIT_REHEARSE_GPUS"):   # a node's GPUs, shown
        from labkit.rehearse.node import pretend
        pretend(int(os.environ["LABKIT_REHEARSE_GPUS"]))
    module = sys.argv.pop(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
