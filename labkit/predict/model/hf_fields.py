"""The checked reading of one ``config.json`` field: an integer, a float,
a boolean, the context length, a head width, each held to the bounds of
the flag it stands for (``labkit.cli_rules.HF_KEYS``: the key and the file
in the one-line error). Shared by :mod:`labkit.predict.model.hf_config`
and :mod:`labkit.predict.model.hf_config_moe` (pure Python).
"""
from __future__ import annotations


def _int(cfg: dict, key: str, default=None) -> int:
    from labkit.cli_rules import HF_KEYS, value
    v = cfg.get(key)
    if v is None:             # absent or null: transformers' default
        v = default
    if v is None:
        raise ValueError(f"config.json has no {key!r}")
    if HF_KEYS.get(key):
        return value(v, HF_KEYS[key], int, f"config.json: {key!r}")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"config.json: {key!r} must be a positive "
                         f"integer, got {v!r}")
    return v


def _float(cfg: dict, key: str, default: float) -> float:
    from labkit.cli_rules import HF_KEYS, value
    v = cfg.get(key)
    return default if v is None else value(v, HF_KEYS[key], float,
                                           f"config.json: {key!r}")


def _bool(cfg: dict, key: str, default: bool) -> bool:
    from labkit.cli_rules import boolean
    return boolean(cfg[key], f"config.json: {key!r}") if key in cfg \
        else default


def _seq(cfg: dict, key: str) -> int:
    """The context length, 0 when the config does not say."""
    from labkit.cli_rules import HF_KEYS, value
    v = cfg.get(key)
    return 0 if v is None else value(v, HF_KEYS[key], int,
                                      f"config.json: {key!r}")


def _heads(cfg: dict, hidden: int, heads: int, head_dim_default) -> int:
    head_dim = _int(cfg, "head_dim", 0) if cfg.get("head_dim") is not None \
        else head_dim_default
    if not head_dim:
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
