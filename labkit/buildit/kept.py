"""What a student's object keeps alive between calls, in tensor bytes.

    kept_bytes([opt, vars(module)], skip=model_tensors)   # rank side

A ZeRO optimizer is right only if each rank keeps Adam's state for its
1/N shard (Rajbhandari et al., "ZeRO", SC 2020, sec. 5.1: 12 Psi / N
bytes of optimizer state in mixed precision); full Adam on every rank
gives the same parameters and holds N times more. The ranks cannot say
how much they hold (a number they compute about themselves proves
nothing), so the harness measures it: it walks every object reachable
from the student's optimizer and from the globals of the student's cell
(attributes, containers, ``torch.optim`` state), and sums the bytes of the
distinct tensor *storages* it finds (a view counts its whole storage: a
shard sliced out of a full buffer keeps the full buffer). The model's own
parameters and gradients are not counted (``skip``), nor any tensor's
``.grad`` (the gradient shard a rank reduces into, e.g. the master's
``.grad``, is ZeRO-2's 2 Psi / N of gradients, not optimizer state).
Modules, functions and foreign classes are not entered.
"""
from __future__ import annotations

import types

_LEAVES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, str, bytes, int, float, complex, bool,
           type(None))


def storage_key(t) -> int:
    return t.untyped_storage().data_ptr()


def kept_bytes(roots, skip=(), home: str | None = None,
               limit: int = 200_000) -> int:
    """Bytes of the distinct tensor storages reachable from ``roots``,
    without those of the tensors in ``skip``. ``home``: the module name
    whose classes are entered (class attributes are state too)."""
    import torch
    skipped = {storage_key(t) for t in skip if t is not None}
    seen, stores, stack = set(), {}, list(roots)
    while stack and len(seen) < limit:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _LEAVES):
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            if o.device.type != "meta" and storage_key(o) not in skipped:
                stores[storage_key(o)] = o.untyped_storage().nbytes()
            continue
        if isinstance(o, type):
            if home is not None and o.__module__ == home:
                stack += list(vars(o).values())
            continue
        if isinstance(o, dict):
            stack += list(o.keys()) + list(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack += list(o)
        else:
            d = getattr(o, "__dict__", None)
            if isinstance(d, dict):
                stack.append(d)
            for name in getattr(type(o), "__slots__", ()):
                if hasattr(o, name):
                    stack.append(getattr(o, name))
            if hasattr(o, "__iter__") and type(o).__module__ in (
                    "collections", "builtins"):
                try:
                    stack += list(o)
                except TypeError:
                    pass
    return sum(stores.values())
