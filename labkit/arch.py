"""The architecture record under its short name (``from labkit import
arch``): it lives in :mod:`labkit.predict.model.arch` -- pure Python, so the
ledgers and the in-page calculators (which load ``labkit.predict`` only)
read it too; Hugging Face ``config.json`` files are read by
:mod:`labkit.predict.model.hf_config`.

    from labkit import arch
    arch.preset("llama3-8b"), arch.from_hf_config("config.json")
    python -m labkit params --hf-config config.json --json
"""
from labkit.predict.model.arch import *  # noqa: F401,F403
from labkit.predict.model.arch import (  # noqa: F401
    PRESETS, Arch, from_hf_config)
