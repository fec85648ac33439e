"""The architecture record itself: the fields of a decoder and the checks
that keep them honest (the MoE and MLA fields are checked by
:mod:`labkit.predict.model.arch_moe`). Presets, ``config.json`` reading
and the command-line flags live in :mod:`labkit.predict.model.arch`,
which imports this; nothing here imports them back.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

MLPS = ("gelu", "swiglu", "geglu")   # geglu: gated, GELU gate (Gemma)
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
    # the block's variants (labkit.predict.model.families explains each)
    pre_norms: bool = True       # a norm before attention and before MLP
    post_norms: bool = False     # a norm on each branch's output (Gemma 2)
    parallel: bool = False       # attention and MLP read one norm (Phi-1)
    qk_norm_full: bool = False   # q/k norm over all heads at once (OLMo 2)
    mlp_fused: bool = False      # gate and up as one Linear (Phi-3)
    head_bias: bool = False      # the output layer's bias (Phi-1)
    sinks: bool = False          # one learned logit per head (gpt-oss)
    expert_bias: bool = False    # router and experts' biases (gpt-oss)
    window: int = 0              # sliding window of the local layers
    window_layers: tuple = ()    # which layers are local
    rotary_fraction: float = 1.0  # of head_dim that RoPE turns (Phi-1)
    attn_softcap: float = 0.0    # tanh cap on scores (Gemma 2): no bytes
    logit_softcap: float = 0.0   # ... on the output logits
    multimodal: str = ""         # the whole model's type (this: its LM)
    cross_layers: tuple = ()     # gated cross-attention (Llama 3.2 Vision)
    embed_extra: int = 0         # embedding rows beyond the vocabulary

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
        check_block(self)

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
    def gated(self) -> bool:     # SwiGLU or GeGLU: gate, up and down
        return self.mlp != "gelu"

    @property
    def block_norms(self) -> int:  # norms of width hidden in one block
        return 1 if self.parallel else 2 * (self.pre_norms + self.post_norms)

    @property
    def extras(self) -> tuple:
        """The variants set beyond the course's GPT and Llama blocks
        (:mod:`labkit.nn.decoder` builds each; a ledger that has not been
        held to one names it when it refuses)."""
        return extras(self)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.experts else 0

    def with_(self, **kw) -> "Arch":
        """A copy with some fields changed (``a.with_(layers=2)``)."""
        return replace(self, **kw)

    def as_dict(self) -> dict:
        return asdict(self)


def check_block(a) -> None:
    """The block variants' checks (:mod:`labkit.predict.model.families`
    says what each field means)."""
    for k in ("pre_norms", "post_norms", "parallel", "qk_norm_full",
              "mlp_fused", "head_bias", "sinks", "expert_bias"):
        if not isinstance(getattr(a, k), bool):
            raise ValueError(f"{k} must be true or false, got "
                             f"{getattr(a, k)!r}")
    if not a.pre_norms and not a.post_norms:
        raise ValueError("a block needs pre_norms or post_norms")
    if a.parallel and (a.post_norms or not a.pre_norms):
        raise ValueError("parallel attention + MLP has one pre-norm and no "
                         "post_norms")
    if a.qk_norm_full and not a.qk_norm:
        raise ValueError("qk_norm_full needs qk_norm")
    if a.expert_bias and not a.experts:
        raise ValueError("expert_bias needs experts")
    w = a.window
    if not isinstance(w, int) or isinstance(w, bool) or w < 0:
        raise ValueError(f"window must be an integer >= 0, got {w!r}")
    layers = a.window_layers
    if not isinstance(layers, tuple) or bool(w) != bool(layers) or any(
            not isinstance(i, int) or not 0 <= i < a.layers for i in layers):
        raise ValueError("window_layers: a tuple of layer indices, "
                         "non-empty exactly when window > 0")
    cross = a.cross_layers
    if not isinstance(cross, tuple) or any(
            not isinstance(i, int) or not 0 <= i < a.layers
            or i in a.window_layers for i in cross) or len(set(cross)) \
            != len(cross) or (cross and (a.experts or a.parallel
                                         or len(cross) >= a.layers)):
        raise ValueError("cross_layers: distinct dense layer indices, none "
                         "of them local (window_layers)")
    e = a.embed_extra
    if not isinstance(e, int) or isinstance(e, bool) or e < 0:
        raise ValueError(f"embed_extra must be an integer >= 0, got {e!r}")
    for k in ("attn_softcap", "logit_softcap"):
        v = getattr(a, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{k} must be a number >= 0 (0: none), got "
                             f"{v!r}")
    if not 0 < a.rotary_fraction <= 1:
        raise ValueError(f"rotary_fraction must be in (0, 1], got "
                         f"{a.rotary_fraction!r}")


def extras(a) -> tuple:
    """The variants ``a`` has that the Llama-style block does not."""
    out = [k for k in ("post_norms", "parallel", "qk_norm_full",
                       "head_bias", "sinks", "expert_bias")
           if getattr(a, k)]
    if not a.pre_norms:
        out.append("no pre_norms")
    if a.mlp == "geglu":
        out.append("geglu")
    if a.cross_layers:
        out.append("cross_layers")
    return tuple(out)   # a window changes FLOPs past it, not the block
