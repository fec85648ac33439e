"""What fake tensors cannot do: the errors of a rank that are a limit of
the rehearsal, not a rule the lab broke, and the words that say so.
Shared by the hook (:mod:`labkit.rehearse.hook`) and the rehearsal of a
lab's launches (:mod:`labkit.rehearse.run`); no labkit imports.
"""


# a rank's error that says what fake tensors cannot do, not a rule broken
FAKE_LIMITS = ("DynamicOutputShapeException", "DataDependentOutputException",
               "UnsupportedOperatorException", "data is not allocated",
               "Cannot access data pointer", "Cannot copy out of meta",
               "cannot be converted to a Python", "NotImplementedError",
               "Not implemented.",        # an op the fake group lacks
               "DeepSpeed's accelerator here is the CPU",  # world.py
               "the objects a peer pickled are values",    # nccl.py
               "Expected supported device, got meta",  # torch's own list
               "DataLoader worker (pid",   # forks of the fake world
               "is not pickleable",        # DCP's plans hold fake objects
               "the fake rank's process crashed",   # isolate.CRASHED
               # the same defect, caught before it crashes (lab 5's DTensor
               # block on meta: isolate.py); "meta" is the stand-in's only
               'the storage of a tensor on device "meta"')


# what the first kinds mean, in words, for the "not rehearsed" line
LIMIT_WORDS = {
    "DynamicOutputShapeException": "its output's shape depends on values "
    "(data-dependent)",
    "DataDependentOutputException": "it reads values (data-dependent)",
    "is not pickleable": "DCP pickles each rank's save plan to gather "
    "it, and a plan of fake tensors holds objects that do not pickle",
    "DataLoader worker (pid": "DataLoader's worker processes are forks "
    "of this process, which holds the fake world",
    "got meta": "torch accepts CUDA there, not the meta device that "
    "stands for it (GradScaler's device check)",
    'on device "meta"': "torch's fake tensors on the meta device lost a "
    "storage (a DTensor split on meta; the same defect also ends the "
    "process, see labkit.rehearse.isolate)",
    "the fake rank's process crashed": "torch's code under fake tensors "
    "on the meta device ended the rank's process (a signal); the rank's "
    "Python code cannot, and on the GPU it runs real tensors",
    "DeepSpeed's accelerator here is the CPU": "DeepSpeed makes its "
    "buffers on its accelerator, chosen at import: CUDA on the node, the "
    "CPU here, while the rank's GPU is the meta device"}


def fake_limit(problem: str) -> bool:
    return any(k in problem for k in FAKE_LIMITS)


def limit_reason(problem: str) -> str:
    """The "not rehearsed" reason of a rank's fake-tensor limit."""
    words = next((w for k, w in LIMIT_WORDS.items() if k in problem), "")
    return "fake tensors cannot run it" + (f" ({words})" if words else "") \
        + f": {problem}"
