"""The checked reading of one ``config.json`` field: a positive integer,
a head width. Shared by :mod:`labkit.predict.model.hf_config` and
:mod:`labkit.predict.model.hf_config_moe` (pure Python, no imports).
"""
from __future__ import annotations


def _int(cfg: dict, key: str, default=None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise ValueError(f"config.json has no {key!r}")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"config.json: {key!r} must be a positive "
                         f"integer, got {v!r}")
    return v


def _heads(cfg: dict, hidden: int, heads: int, head_dim_default) -> int:
    head_dim = cfg.get("head_dim") or head_dim_default
    if head_dim is None:
        if hidden % heads:
            raise ValueError(
                f"config.json: 'num_attention_heads' ({heads}) does not "
                f"divide 'hidden_size' ({hidden}) and there is no "
                "'head_dim'")
        head_dim = hidden // heads
    if not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"config.json: 'head_dim' must be a positive "
                         f"integer, got {head_dim!r}")
    return head_dim
