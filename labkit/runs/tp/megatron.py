"""Chapter 5's block split with megatron-core's parallel linear layers.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --variants megatron

Optional (needs ``megatron-core``): ``ColumnParallelLinear`` /
``RowParallelLinear`` run on CPU with gloo when built with
``use_cpu_initialization=True``.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from labkit.runs.tp.layers import LocalAttention, LocalMLP, TPBlock
from labkit.runs.tp.scratch import scratch_block


def megatron_available() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:
        return False


class _MegatronLinear(nn.Module):
    """megatron-core returns ``(output, bias)``; keep the output only."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    @property
    def weight(self):
        return self.inner.weight

    @property
    def bias(self):
        return self.inner.bias

    def forward(self, x):
        return self.inner(x)[0]


def megatron_block(ref, heads: int, rank: int, tp: int) -> TPBlock:
    """The scratch split with megatron-core's parallel linear layers.

    Column-parallel layers run ``f`` inside (the backward all-reduce of the
    input gradient), row-parallel ones ``g`` (``input_is_parallel=True``).
    The shards are the scratch variant's, copied in after construction.
    """
    from megatron.core import parallel_state
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.tensor_parallel import (ColumnParallelLinear,
                                               RowParallelLinear)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp)
    dtype = ref.ln1.weight.dtype
    cfg = ModelParallelConfig(tensor_model_parallel_size=tp,
                              use_cpu_initialization=True,
                              params_dtype=dtype)
    h = ref.ln1.normalized_shape[0]
    width = ref.mlp.fc.out_features
    shards = scratch_block(ref, heads, rank, tp)

    def column(n_in, n_out, src):
        lin = ColumnParallelLinear(n_in, n_out, config=cfg,
                                   init_method=nn.init.zeros_, bias=True,
                                   gather_output=False)
        return _load(lin, src)

    def row(n_in, n_out, src):
        lin = RowParallelLinear(n_in, n_out, config=cfg,
                                init_method=nn.init.zeros_, bias=True,
                                input_is_parallel=True, skip_bias_add=False)
        return _load(lin, src)

    def _load(lin, src):
        lin = lin.to(device=ref.ln1.weight.device)
        with torch.no_grad():
            lin.weight.copy_(src.weight)
            lin.bias.copy_(src.bias)
        return _MegatronLinear(lin)

    a, m = shards.attn, shards.mlp
    attn = LocalAttention(h // heads, row(h, h, a.proj),
                          qkv=column(h, 3 * h, a.qkv))
    mlp = LocalMLP(column(h, width, m.fc), row(width, h, m.proj))
    return TPBlock(shards.ln1, attn, shards.ln2, mlp)
