"""The architecture record itself: the fields of a decoder and the checks
that keep them honest (the MoE and MLA fields are checked by
:mod:`labkit.predict.model.arch_moe`). Presets, ``config.json`` reading
and the command-line flags live in :mod:`labkit.predict.model.arch`,
which imports this; nothing here imports them back.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

MLPS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")


@dataclass(frozen=True)
class Arch:
    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int = 0                 # 0: 4 x hidden
    kv_heads: int = 0            # 0: heads (multi-head attention)
    head_dim: int = 0            # 0: hidden // heads
    mlp: str = "gelu"
    norm: str = "layernorm"
    qk_norm: bool = False
    positions: str = "learned"
    max_seq: int = 0             # learned positions: the table's rows
    tied: bool = False
    qkv_fused: bool = False      # one Linear for Q, K, V (GPT-2, Megatron)
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    final_norm: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    experts: int = 0             # mixture of experts: 0 = dense
    top_k: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    first_dense_layers: int = 0
    name: str = ""
    # mixture of experts and MLA (labkit.predict.model.arch_moe explains them)
    shared_ffn: int = 0          # 0: shared_experts x expert_ffn
    shared_gate: bool = False    # qwen2_moe: a sigmoid gate on it
    router: str = "softmax"      # or "sigmoid" (DeepSeek-V3)
    norm_topk: bool = True       # the k weights renormalised to sum 1
    routed_scaling: float = 1.0
    expert_groups: int = 0       # DeepSeek-V3 n_group (node-limited)
    group_top_k: int = 0         # DeepSeek-V3 topk_group
    q_lora_rank: int = 0         # MLA (DeepSeek-V2/V3); 0: plain q_proj
    kv_lora_rank: int = 0        # > 0: multi-head latent attention
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self):
        ints = ("layers", "hidden", "heads", "vocab", "ffn", "kv_heads",
                "head_dim", "max_seq", "experts", "top_k", "shared_experts",
                "expert_ffn", "first_dense_layers")
        for k in ints:
            v = getattr(self, k)
            low = 1 if k in ints[:4] else 0
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{k} must be an integer >= {low}, "
                                 f"got {v!r}")
        for k, ok in (("mlp", MLPS), ("norm", NORMS),
                      ("positions", POSITIONS)):
            if getattr(self, k) not in ok:
                raise ValueError(f"{k} must be one of {', '.join(ok)}, "
                                 f"got {getattr(self, k)!r}")
        fill = dict(ffn=4 * self.hidden, kv_heads=self.heads)
        if not self.head_dim:
            if self.hidden % self.heads:
                raise ValueError(f"heads ({self.heads}) do not divide "
                                 f"hidden ({self.hidden}): give head_dim")
            fill["head_dim"] = self.hidden // self.heads
        for k, v in fill.items():
            if not getattr(self, k):
                object.__setattr__(self, k, v)
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) do not divide "
                             f"heads ({self.heads})")
        if self.positions == "learned" and not self.max_seq:
            raise ValueError("learned positions need max_seq (the table)")
        if self.experts:
            if not 1 <= self.top_k <= self.experts or not self.expert_ffn:
                raise ValueError(
                    f"experts={self.experts} needs 1 <= top_k <= experts "
                    f"and expert_ffn > 0 (got top_k={self.top_k}, "
                    f"expert_ffn={self.expert_ffn})")
            if self.first_dense_layers > self.layers:
                raise ValueError("first_dense_layers > layers")
        from labkit.predict.model.arch_moe import check   # the MoE/MLA fields
        check(self)

    # -- derived sizes -----------------------------------------------------
    @property
    def q_dim(self) -> int:      # width of all query heads together
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:     # width of the K (or the V) projection
        return self.kv_heads * self.head_dim

    @property
    def gqa_group(self) -> int:  # query heads per K/V head
        return self.heads // self.kv_heads

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.experts else 0

    def with_(self, **kw) -> "Arch":
        """A copy with some fields changed (``a.with_(layers=2)``)."""
        return replace(self, **kw)

    def as_dict(self) -> dict:
        return asdict(self)
