"""The command line's rule for every input: rc 2 and one line, no hang.

    parser = argparse.ArgumentParser(...)
    module.add_arguments(parser)
    cli_rules.apply("plan", parser)   # every int/float/file checked
    args = parser.parse_args(argv)
    cli_rules.check_costs("plan", args)

``python -m labkit`` (labkit/__main__.py) applies it to every command, so a
command adds its arguments and nothing else: each ``type=float`` argument
must be finite (``nan``, ``inf`` and ``1e400`` are refused) and each
``int`` or ``float`` inside its bounds in :data:`LIMITS` (by the
argument's name, for every command, unless the command names it itself);
a size whose work grows with it (a pipeline schedule simulated step by
step, fake tensors of that many layers) has a bound there or a cost in
:data:`COSTS`. File arguments (:data:`FILES`) must be a regular file (not
a folder, ``/dev/null`` or a FIFO) or the folder they name. Anything a
command still raises is said in one line by :func:`one_line`.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import stat

INF = math.inf
# (command or "*", argument) -> (low, high, low excluded); ints and floats
LIMITS = {
    ("*", "gpus"): (1, 2 ** 20, False),
    ("*", "gpus_per_node"): (1, 1024, False),
    ("*", "shard_group"): (1, 2 ** 20, False),
    ("*", "stage"): (0, 3, False),
    ("*", "stages"): (1, 4096, False),
    ("*", "microbatches"): (1, 10 ** 6, False),
    ("*", "chunks"): (1, 1024, False),
    ("*", "layers"): (1, 10 ** 5, False),
    ("*", "hidden"): (1, 2 ** 24, False),
    ("*", "heads"): (1, 2 ** 16, False),
    ("*", "seq"): (1, 2 ** 26, False),
    ("*", "vocab"): (1, 2 ** 26, False),
    ("*", "batch"): (1, 2 ** 24, False),
    ("*", "micro_batch"): (1, 2 ** 24, False),
    ("*", "tp"): (1, 2 ** 20, False), ("*", "pp"): (1, 4096, False),
    ("*", "cp"): (1, 2 ** 20, False),
    ("*", "top"): (1, 10 ** 6, False),
    ("*", "first_stage_layers"): (0, 10 ** 5, False),
    ("*", "last_stage_layers"): (0, 10 ** 5, False),
    ("*", "params"): (0, 1e16, True),
    ("*", "gpu_mem"): (0, 1e6, True),
    ("*", "host_mem_gb"): (0, 1e9, True),
    ("memory", "host_mem"): (0, 1e9, True),
    ("memory", "cuda_context_gb"): (0, 64, False),
    ("memory", "nccl_buffsize"): (0, 2 ** 34, False),
    ("memory", "nccl_channels"): (1, 256, False),
    ("memory", "slack"): (0, 1, False),
    ("*", "reserve_gb"): (0, 1e6, False),
    ("*", "efficiency"): (0, 1, True), ("*", "link_efficiency"): (0, 1, True),
    ("*", "mfu"): (0, 1, True),
    ("*", "forward"): (0, 1e9, True), ("*", "backward"): (0, 1e9, True),
    ("*", "comm"): (0, 1e9, False),
    ("*", "param_bytes"): (0, 64, True), ("*", "grad_bytes"): (0, 64, True),
    ("*", "tokens_per_gpu"): (0, 1e15, True),
    ("*", "tflops_per_gpu"): (0, 1e9, True),
    ("*", "iteration_seconds"): (0, 1e9, True),
    # keys of a Hugging Face config.json (:data:`HF_KEYS`), as their flags
    ("*", "ffn"): (1, 2 ** 26, False), ("*", "head_dim"): (1, 2 ** 16, False),
    ("*", "experts"): (1, 2 ** 16, False),
    ("*", "max_seq"): (0, 2 ** 26, False),
    ("*", "norm_eps"): (0, 1, True), ("*", "rope_theta"): (0, 1e12, True),
    ("*", "routed_scaling"): (0, 1e6, True),
    ("profile", "max_memory"): (0.05, 1e6, False),
    # fake tensors are built layer by layer and rank by rank (~0.2 s a
    # layer on 2 cores): the largest published models have < 128 layers
    ("dryrun", "layers"): (1, 128, False),
    ("dryrun", "gpus"): (1, 1024, False),
    ("dryrun", "batch"): (1, 2 ** 20, False),
}
DEFAULT_INT = (0, 2 ** 62, False)        # an int no table names
DEFAULT_FLOAT = (0, 1e300, False)        # a float no table names
# the pipeline's schedule is simulated event by event: p x m x v events
COSTS = {
    "pipeline": ("--stages x --microbatches x --chunks", 200_000,
                 lambda a: a.stages * a.microbatches * max(a.chunks or 1, 1),
                 "events to simulate"),
}
# a dry run builds fake tensors layer by layer, sharded over --gpus:
# 80 layers on 16 GPUs take 14 CPU-s; the work grows with both
COSTS["dryrun"] = ("--layers x --gpus (at least 8)", 2_048,
                   lambda a: (a.layers or 0) * max(a.gpus or 1, 8),
                   "layer shards to build")
# --plot draws each (stage, micro-batch, chunk) as two boxes: 64 x 64 took
# 70 s on a busy 2-core machine, 1,024 a few seconds
PLOT_COSTS = {
    "pipeline": ("--stages x --microbatches x --chunks with --plot", 1_024,
                 lambda a: a.stages * a.microbatches * max(a.chunks or 1, 1)),
}
# argument -> "in" (a file to read; run_dir may be a folder) or "out"
FILES = {"run_dir": "in", "hf_config": "in", "trace": "in", "config": "in",
         "plot": "out"}
TIME_LIMIT_S = 600.0    # LABKIT_CLI_TIMEOUT_S overrides
# a config.json key -> the flag whose bounds it has (checked by value())
HF_KEYS = {
    "num_hidden_layers": "layers", "n_layer": "layers",
    "first_k_dense_replace": "first_stage_layers",
    "hidden_size": "hidden", "n_embd": "hidden", "kv_lora_rank": "hidden",
    "q_lora_rank": "hidden",
    "num_attention_heads": "heads", "n_head": "heads",
    "num_key_value_heads": "heads", "vocab_size": "vocab",
    "intermediate_size": "ffn", "n_inner": "ffn",
    "moe_intermediate_size": "ffn", "shared_expert_intermediate_size": "ffn",
    "head_dim": "head_dim", "qk_nope_head_dim": "head_dim",
    "qk_rope_head_dim": "head_dim", "v_head_dim": "head_dim",
    "max_position_embeddings": "max_seq", "n_positions": "seq",
    "num_local_experts": "experts", "num_experts": "experts",
    "n_routed_experts": "experts", "n_shared_experts": "experts",
    "n_group": "experts", "topk_group": "experts",
    "num_experts_per_tok": "top",
    "rms_norm_eps": "norm_eps", "layer_norm_epsilon": "norm_eps",
    "layer_norm_eps": "norm_eps", "sliding_window": "max_seq",
    "rope_theta": "rope_theta", "routed_scaling_factor": "routed_scaling",
}


def _bounds(command: str, dest: str, kind):
    return LIMITS.get((command, dest)) or LIMITS.get(("*", dest)) or (
        DEFAULT_INT if kind is int else DEFAULT_FLOAT)


def _n(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _rule(low, high, open_low, kind) -> str:
    what = "an integer" if kind is int else "a finite number"
    if open_low:
        return f"{what} > {_n(low)} and <= {_n(high)}"
    return f"{what} in [{_n(low)}, {_n(high)}]"


def _number(kind, low, high, open_low):
    def parse(text: str):
        try:
            v = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(
                f"{text!r}: must be {_rule(low, high, open_low, kind)}")
        if not math.isfinite(v) or v < low or v > high or (
                open_low and v == low):
            raise argparse.ArgumentTypeError(
                f"{text!r}: must be {_rule(low, high, open_low, kind)}")
        return v
    parse.__name__ = kind.__name__
    return parse


def value(v, name: str, kind=int, where: str = "", command: str = "*"):
    """A number read from a file, a notebook or a profile, checked as the
    flag ``--name`` is: ``v``, or ValueError in one line naming
    ``where`` (the key and its file). A bool is not a number here; an
    int is a float; a float is an int only when whole (``4096.0``)."""
    low, high, open_low = _bounds(command, name, kind)
    rule = _rule(low, high, open_low, kind)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if ok and kind is int and isinstance(v, float):
        ok = math.isfinite(v) and v == int(v)
    if ok:
        ok = math.isfinite(v) and low <= v <= high and not (
            open_low and v == low)
    if not ok:
        raise ValueError(f"{where or name}: {v!r}: must be {rule}")
    return kind(v)


def boolean(v, where: str):
    """A boolean read from a file: JSON ``true``/``false`` only, as
    transformers 5's strict configs take them (``"false"``, 0, 1 and
    null are refused there: ``expected bool, got str``), never the
    truth of a string."""
    if not isinstance(v, bool):
        raise ValueError(f"{where}: {v!r}: must be true or false (a JSON "
                         "boolean, not a string or a number)")
    return v


def _file(mode: str, dest: str, inner):
    def parse(text: str):
        if not text:
            raise argparse.ArgumentTypeError("an empty path")
        if mode == "out":
            parent = os.path.dirname(os.path.abspath(text))
            if not os.path.isdir(parent):
                raise argparse.ArgumentTypeError(
                    f"{text!r}: no folder {parent}")
            if os.path.isdir(text):
                raise argparse.ArgumentTypeError(f"{text!r} is a folder")
            if os.path.exists(text) and not os.path.isfile(text):
                raise argparse.ArgumentTypeError(   # /dev/full, a FIFO
                    f"{text!r} is not a regular file: need a file name")
        else:
            try:
                st = os.stat(text)
            except OSError as e:
                raise argparse.ArgumentTypeError(
                    f"{text!r}: {e.strerror.lower()}")
            folder_ok = dest == "run_dir" and stat.S_ISDIR(st.st_mode)
            if not (stat.S_ISREG(st.st_mode) or folder_ok):
                kind = ("a folder" if stat.S_ISDIR(st.st_mode) else
                        "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                        "a device" if stat.S_ISCHR(st.st_mode) else
                        "not a regular file")
                raise argparse.ArgumentTypeError(
                    f"{text!r} is {kind}: need a regular file"
                    + (" or a folder of traces" if dest == "run_dir"
                       else ""))
            if not os.access(text, os.R_OK):
                raise argparse.ArgumentTypeError(f"{text!r}: not readable")
        return inner(text) if inner else text
    return parse


def apply(command: str, parser: argparse.ArgumentParser) -> None:
    """Give every number and file argument of ``parser`` its rule."""
    for action in parser._actions:
        kind = action.type
        if kind in (int, float):
            action.type = _number(kind, *_bounds(command, action.dest, kind))
        elif action.dest in FILES and action.nargs in (None, "?"):
            action.type = _file(FILES[action.dest], action.dest, kind)


def check_costs(command: str, args) -> None:
    """The work bound: the command's estimate of its work, refused in one
    line beyond it before anything runs."""
    if command in COSTS:
        what, high, cost, unit = COSTS[command]
        n = cost(args)
        if n > high:
            raise ValueError(f"{what} = {n:,} {unit}; at most {high:,}")
    if command in PLOT_COSTS and getattr(args, "plot", None):
        what, high, cost = PLOT_COSTS[command]
        n = cost(args)
        if n > high:
            raise ValueError(f"{what} = {n:,} operations to draw; at most "
                             f"{high:,} (the numbers need no --plot)")


@contextlib.contextmanager
def time_limit(seconds: float | None = None, how: str = ""):
    """A last guard against a hang: ``TimeoutError`` after ``seconds``
    (``LABKIT_CLI_TIMEOUT_S`` wins, then ``seconds``, then
    :data:`TIME_LIMIT_S`); ``how``: how a command derived its limit from
    its work, said in the one line."""
    env = os.environ.get("LABKIT_CLI_TIMEOUT_S")
    if env or seconds is None:
        seconds, how = float(env or TIME_LIMIT_S), ""

    def ring(signum, frame):
        if how:
            raise TimeoutError(f"stopped at its time limit of {seconds:,.0f}"
                               f" s ({how}); LABKIT_CLI_TIMEOUT_S sets "
                               "another")
        raise TimeoutError(f"no answer after {seconds:g} s (an input too "
                           "large?); LABKIT_CLI_TIMEOUT_S raises the limit")
    if seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def one_line(e: BaseException) -> str:
    """What went wrong, in one line: the disk, memory, depth, or the
    error's own message."""
    from labkit import disk
    if isinstance(e, disk.DiskError):    # already names its path
        return str(e)
    if isinstance(e, OSError):
        text = disk.describe(e)
        if text:
            return text
        where = f": {e.filename}" if e.filename else ""
        return f"{e.strerror or e}{where}"
    if isinstance(e, MemoryError):
        return "out of memory (the input is too large for this machine)"
    if isinstance(e, RecursionError):
        return "input nested too deeply (JSON depth beyond the " \
               "interpreter's recursion limit)"
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, ValueError):
        return text[:500]
    return f"{type(e).__name__}: {text}"[:500]
