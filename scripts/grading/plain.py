"""Plain data across the jail wall: numbers, strings, lists, dicts, arrays.

    encode(value) -> JSON-able tree      (student side, untrusted)
    decode(tree)  -> value               (grader side)

Built-in types are plain, and so are their subclasses that keep the
built-in's behaviour (a namedtuple, ``torch.Size``, ``os.statvfs(...)``,
``collections.Counter``): they travel as the built-in value (a tuple, a
dict), so that an honest helper of such a type is read by value. A
subclass that redefines comparison, hashing or arithmetic (an ``int``
whose ``==`` is always true) is not plain (``NotPlain``; ``suspicious``
says so, and the grader calls it tampering only when a test reads it).
Arrays and
tensors travel as raw bytes with dtype and shape; dataclass records of the
course package (``labkit.*``) as their fields, rebuilt by the grader with
the class's own constructor. torch's dtypes and devices (a hidden test
passes ``torch.float8_e4m3fn`` to the student's function) travel by name
(``{"__torch__": ["dtype", "float8_e4m3fn"]}``) and are rebuilt only as
a dtype or a device of torch's own; a tensor of a one-byte float (FP8,
which numpy has no type for) as its raw bytes. Nothing is ever
unpickled.
"""
from __future__ import annotations

import base64
import dataclasses
import importlib
import math
import re

SCALARS = (type(None), bool, int, float, str)
MAX_DEPTH = 40
DEVICE = re.compile(r"^(cpu|cuda|meta|mps|xpu)(:\d{1,3})?$")


class NotPlain(TypeError):
    """A value the grader cannot take as data."""


BASES = (bool, int, float, str, tuple, list, dict, set, frozenset)
# the standard library's and torch's own subclasses of the plain types
TRUSTED = ("collections", "torch", "os", "posix", "time", "typing",
           "numpy", "sys", "builtins", "pathlib", "enum")
BEHAVIOUR = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
             "__hash__", "__bool__", "__abs__", "__sub__", "__rsub__",
             "__add__", "__radd__", "__truediv__", "__rtruediv__",
             "__mul__", "__rmul__", "__float__", "__int__", "__index__",
             "__len__", "__iter__", "__getitem__", "__contains__",
             "__round__", "__neg__", "__pow__", "__class__",
             "__getattribute__", "__instancecheck__"}


def _base(v):
    return next((b for b in BASES if isinstance(v, b)), None)


def suspicious(v) -> bool:
    """A subclass of a plain type that redefines its behaviour (``==``,
    arithmetic, ...): a value that could pass any comparison."""
    base, t = _base(v), type(v)
    if base is None or t is base:
        return False
    if t.__module__.split(".")[0] in TRUSTED:
        return False
    for k in t.__mro__[:t.__mro__.index(base)]:
        if BEHAVIOUR & set(vars(k)) or type(k) is not type:
            return True
    return False


def _array(v):
    t = type(v)
    mod = t.__module__.split(".")[0]
    if mod == "numpy":
        import numpy as np
        if t is np.ndarray and not v.dtype.hasobject:
            return {"kind": "numpy", "scalar": False}, np.ascontiguousarray(v)
        if isinstance(v, np.generic) and t.__module__ == "numpy":
            return {"kind": "numpy", "scalar": True}, np.asarray(v)
    if mod == "torch" and t.__name__ in ("Tensor", "Parameter"):
        import torch
        a = v.detach().cpu()
        kind = {"kind": "torch", "dtype": str(a.dtype).split(".")[-1]}
        if a.dtype.is_floating_point and a.element_size() == 2:
            a = a.float()
        elif a.dtype.is_floating_point and a.element_size() == 1:
            a = a.view(torch.uint8)          # FP8: its bits, rebuilt
        return kind, a.contiguous().numpy()
    return None


def encode(v, depth: int = 0):
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    if type(v) in (ValueList, ValueTuple):      # the grader's own view
        v = (list if isinstance(v, list) else tuple)(v)
    t = type(v)
    if t in SCALARS:
        if t is float and not math.isfinite(v):
            return {"__float__": repr(v)}
        return v
    if t in (list, tuple, set, frozenset):
        tag = {list: "__list__", tuple: "__tuple__"}.get(t, "__set__")
        items = sorted(v, key=repr) if tag == "__set__" else v
        return {tag: [encode(x, depth + 1) for x in items]}
    if t is dict:
        return {"__dict__": [[encode(k, depth + 1), encode(x, depth + 1)]
                             for k, x in v.items()]}
    base = _base(v)
    if base is not None and not suspicious(v):   # an honest subclass
        if base in (dict,):
            return encode(dict(dict.items(v)), depth)
        if base in (tuple, list, set, frozenset):
            return encode(base(base.__iter__(v)), depth)
        return encode(base(v), depth)
    arr = _array(v)
    if arr is not None:
        kind, a = arr
        return {"__array__": dict(kind, npdtype=a.dtype.str,
                                  shape=list(a.shape),
                                  data=base64.b64encode(a.tobytes()).decode())}
    if dataclasses.is_dataclass(v) and not isinstance(v, type) \
            and t.__module__.startswith("labkit."):
        return {"__record__": f"{t.__module__}:{t.__qualname__}",
                "fields": {f.name: encode(getattr(v, f.name), depth + 1)
                           for f in dataclasses.fields(v) if f.init}}
    named = _torch_name(v)
    if named is not None:
        return {"__torch__": named}
    raise NotPlain(f"a {t.__module__}.{t.__qualname__}")


def _torch_name(v):
    """``["dtype", name]`` or ``["device", name]`` for torch's own dtype
    or device, else None."""
    if type(v).__module__.split(".")[0] != "torch":
        return None
    import torch
    if type(v) is torch.dtype:
        return ["dtype", str(v).split(".")[-1]]
    if type(v) is torch.device:
        return ["device", str(v)]
    return None


def _torch_dtype(name):
    import torch
    d = getattr(torch, name, None) if type(name) is str and \
        name.isidentifier() else None
    if type(d) is not torch.dtype:
        raise NotPlain("a dtype torch does not have")
    return d


def _torch_value(named):
    if type(named) is not list or len(named) != 2 or \
            named[0] not in ("dtype", "device") or type(named[1]) is not str:
        raise NotPlain("a malformed torch value")
    import torch
    if named[0] == "dtype":
        return _torch_dtype(named[1])
    if not DEVICE.match(named[1]):
        raise NotPlain("a device torch does not have")
    return torch.device(named[1])


def _same(a, b) -> bool:
    r = a == b
    if type(r) is bool:
        return r
    try:
        import numpy as np
        return bool(np.all(r))
    except Exception:  # noqa: BLE001 - not comparable: not equal
        return False


class _ByValue:
    """A student's list or tuple on the grader's side: equal to any list
    or tuple of equal items (an answer is compared by value, whichever
    sequence type the key happens to return)."""

    def __eq__(self, other):
        if not isinstance(other, (list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(
            _same(a, b) for a, b in zip(self, other))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq


class ValueList(_ByValue, list):
    __hash__ = None


class ValueTuple(_ByValue, tuple):
    __hash__ = tuple.__hash__


def decode(tree, depth: int = 0, by_value: bool = False):
    """``by_value``: lists and tuples compare equal to either (the
    evaluator's view of a student's answer)."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    t = type(tree)
    if t in SCALARS:
        return tree
    if t is list:  # JSON lists only appear inside tags
        raise NotPlain("an untagged list")
    if t is not dict or len(tree) not in (1, 2):
        raise NotPlain(f"a malformed value ({t.__name__})")
    if "__float__" in tree:
        s = tree["__float__"]
        if s not in ("nan", "inf", "-inf"):
            raise NotPlain("a malformed float")
        return float(s)
    seqs = ((ValueList, ValueTuple) if by_value else (list, tuple))
    for tag, make in (("__list__", seqs[0]), ("__tuple__", seqs[1]),
                      ("__set__", set)):
        if tag in tree:
            return make(decode(x, depth + 1, by_value)
                        for x in _items(tree[tag]))
    if "__dict__" in tree:
        out = {}
        for pair in _items(tree["__dict__"]):
            if type(pair) is not list or len(pair) != 2:
                raise NotPlain("a malformed dict")
            k = decode(pair[0], depth + 1, by_value)
            if type(k) not in SCALARS and not isinstance(k, tuple):
                raise NotPlain("a dict key that is not plain")
            out[k] = decode(pair[1], depth + 1, by_value)
        return out
    if "__array__" in tree:
        return _decode_array(tree["__array__"])
    if "__torch__" in tree:
        return _torch_value(tree["__torch__"])
    if "__record__" in tree:
        mod, _, name = str(tree["__record__"]).partition(":")
        if not mod.startswith("labkit.") or not name.isidentifier():
            raise NotPlain("a record of a class outside the course package")
        cls = getattr(importlib.import_module(mod), name)
        if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
            raise NotPlain(f"{name} is not a record")
        fields = tree.get("fields")
        if type(fields) is not dict:
            raise NotPlain("a malformed record")
        return cls(**{str(k): decode(x, depth + 1, by_value)
                      for k, x in fields.items()})
    raise NotPlain("an unknown tag")


def _items(x):
    if type(x) is not list:
        raise NotPlain("a malformed container")
    return x


def _decode_array(d):
    import numpy as np
    if type(d) is not dict:
        raise NotPlain("a malformed array")
    dtype = np.dtype(str(d["npdtype"]))
    if dtype.hasobject:
        raise NotPlain("an array of objects")
    shape = tuple(int(n) for n in d["shape"])
    a = np.frombuffer(base64.b64decode(d["data"]), dtype=dtype)
    a = a.reshape(shape).copy()
    if d.get("kind") == "torch":
        import torch
        dt = _torch_dtype(str(d["dtype"]))
        t = torch.from_numpy(a)
        if dt.is_floating_point and dt.itemsize == 1 and \
                t.dtype == torch.uint8:
            return t.view(dt)              # FP8's bits, as encoded
        return t.to(dt)
    return a[()] if d.get("scalar") else a
