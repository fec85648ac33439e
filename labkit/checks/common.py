"""What every lab's check asks first: the profile and its world sizes."""
from __future__ import annotations

from labkit.checks.params import PROFILES, max_ranks
from labkit.checks.rules import require


def _profile(profile) -> bool:
    """True on a GPU profile."""
    require(profile in PROFILES, f"unknown profile {profile!r}")
    return profile != "cpu"


def _sizes(sizes, what: str, on_gpu: bool) -> int:
    """World sizes (``what``) as integers >= 2, and on a GPU profile as
    many visible GPUs as the largest; returns the largest."""
    from labkit.launch import cuda_device_count
    require(len(sizes) > 0 and all(isinstance(n, int) and n >= 2
                                   for n in sizes),
            f"{what} must be integers >= 2, got {sizes!r}")
    world = max(sizes)
    require(world <= max_ranks(), f"{what}: {world} ranks exceed this "
            f"machine's {max_ranks()} (8 per core; LABKIT_MAX_RANKS "
            "overrides)")
    require(not on_gpu or world <= cuda_device_count(),
            f"{world} ranks need as many GPUs; {cuda_device_count()} are "
            "visible")
    return world


def _known(values, known, what: str, hint: str = "") -> None:
    """Every one of ``values`` among ``known``; the first that is not is
    named in one line with the names ``known`` holds."""
    bad = next((v for v in values if v not in known), None)
    require(bad is None, f"unknown {what} {bad!r}: one of "
            f"{', '.join(known)}{hint}")


def _gpt_only(config, why: str) -> None:
    """A lab whose lesson is exact for the GPT block only refuses the
    Llama-style one (``model['arch']``), saying why."""
    require(config.arch == "gpt", f"model['arch']={config.arch!r}: {why}; "
            "use 'gpt'")


def checked(fn):
    """``fn`` with every argument checked by its rule
    (:mod:`labkit.checks.params`) first, and any stray exception of the
    lab's own check (a ``TypeError`` from a value of the wrong kind...)
    turned into the one ``ValueError`` that names the lab."""
    import functools
    import inspect

    from labkit.checks.params import parse
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.arguments.update(parse(bound.arguments))
        try:
            return fn(*bound.args, **bound.kwargs)
        except (TypeError, ZeroDivisionError, KeyError, AttributeError,
                IndexError, OverflowError) as e:
            raise ValueError(f"lab {fn.__name__}: bad parameters: "
                             f"{type(e).__name__}: {e}") from None
    return run
