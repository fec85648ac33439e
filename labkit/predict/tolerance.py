"""How far a correct split may differ from the unsharded reference: a few
machine epsilons of the dtype (pure Python; the TP labs and tests use it
through :func:`labkit.predict.tensor_parallel.check_tolerance`).

    from labkit.predict.tensor_parallel import check_tolerance
    check_tolerance("bf16")      # 4 x 2^-7
"""
from __future__ import annotations

# Machine epsilon (the gap between 1 and the next number) of the labs'
# dtypes: 2^-23 for fp32 (23 stored mantissa bits), 2^-7 for bf16 (7).
EPS = {"fp32": 2.0 ** -23, "bf16": 2.0 ** -7}
ROUNDINGS = 4   # eps allowed between two orders of the same sums


def check_tolerance(dtype: str) -> float:
    """Largest error of a correct split against the unsharded block.

    A correct split computes the same sums as the reference in another
    order, in the same precision; each side's result is rounded, and the
    roundings it inherits through the block are of the same size at the
    labs' shapes (Higham, "Accuracy and Stability of Numerical Algorithms",
    2002, Sec. 3.1: a sum rounded in another order differs by a few units
    of ``u = eps / 2`` relative to its size). Errors are measured relative
    to the largest value of the reference (outputs, gradients), or absolute
    for the parameters after one SGD step (LayerNorm weights of about 1, so
    one unit of their last place is ``eps``). The tolerance is
    ``ROUNDINGS * eps``: 4.8e-7 for fp32, 3.1e-2 for bf16. A wrong split
    errs by whole percents to tens of percents, far above either.
    """
    if dtype not in EPS:
        raise ValueError(f"unknown dtype {dtype!r}: {', '.join(EPS)}")
    return ROUNDINGS * EPS[dtype]
