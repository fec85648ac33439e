"""The activation ledger of a mixture-of-experts block: every tensor
:class:`labkit.nn.moe.layer.MoE` (and the decoder around it) keeps for
backward, from the record and the router's own counts (pure Python; the
twin of :func:`labkit.measure.activations_moe.measure`).

    from labkit.predict.activations import moe as AM
    AM.saved(a, seq=16, batch=4, kept=[[38, 28, 35, 27]])   # per layer
    AM.moe_saved(a, tokens=64, kept=[38, 28, 35, 27])       # the layer
    AM.ep_saved(a, tokens=64, sent=119, received=[60, 61])  # one EP rank

Which experts the tokens visit is the router's choice, so the ledger
takes the kept assignments per expert (``kept[e]``, ``K = sum(kept)``,
what ``MoE.stats["kept"]`` records) as the all-to-all ledger does
(:mod:`labkit.predict.experts`). What autograd saves, op by op, for
``T`` tokens of width ``h``, ``E`` experts, top ``k``, experts of width
``f`` (SwiGLU), on CPU:

- the router: its Linear's input (the ln2 output, shared with the shared
  expert; a bf16 copy under autocast, with the gate weight's copy);
  ``softmax`` / ``sigmoid`` their output, the scores ``[T, E]`` in fp32;
  ``topk`` its indices ``[T, k]`` int64; with ``norm_topk`` the division
  keeps the top-k scores ``[T, k]`` and their sum ``[T, 1]`` (fp32);
- the aux loss (Switch Eq. 4): the mul keeps ``f_i`` (``[E]`` fp32); the
  layer holds the loss itself (``self.aux_loss``, a scalar);
- capacity: the kept mask ``[T, k]`` bool (indexing the weights keeps it);
- permute (the dispatch buffer): the sort order ``[K]`` int64, the
  permuted token ids ``[K]`` int64, the permuted gate weights ``[K]``
  (model dtype), and the permuted rows ``x[tok]``, ``[K, h]`` -- the
  experts' input (under autocast the experts keep bf16 copies instead:
  two per expert, gate and up, ``[n_e, h]``);
- each expert ``e`` with ``n_e = kept[e]`` rows: the SwiGLU's four
  ``[n_e, f]`` (gate out, up out, SiLU out, their product), under
  autocast plus its three weights' bf16 copies;
- combine: the concatenated expert outputs ``[K, h]`` (the weights'
  gradient needs them), the weighted rows ``[K, h]`` (``index_add_``
  keeps its source; under autocast an fp32 copy of them);
- shared experts: the same four ``[T, f_shared]`` of a dense SwiGLU.

So the routed part grows with ``K = k T`` (dropless), not with ``E``:
``K (3 h + 4 f)`` elements plus the router's ``T (E + 2 k + 1)``.
Precisions: ``fp32`` and ``autocast_bf16`` (``torch.autocast`` on CPU)
and ``fsdp_bf16`` (bf16 weights). Node-limited routing (groups) is not
covered.

Under expert parallelism (:func:`ep_saved`, the forward of
:class:`labkit.nn.moe.expert_parallel.ExpertParallelMoE`) a rank keeps its
router's tensors for its own ``T`` tokens and ``S`` kept assignments,
but the experts' side sizes by what it *received*: ``R = sum(received)``
rows (the all-to-all's output, regrouped: ``[R, h]``, the regroup order
and its inverse ``[R]`` int64) and its local experts' SwiGLUs for their
received counts; the combine keeps the returned rows ``[S, h]`` (the
all-to-all's output) instead of the concatenated outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.predict.activations import arch as AA
from labkit.predict.activations.ledger import (PRECISIONS, Saved,
                                               _dtypes, total)

__all__ = ["moe_saved", "ep_saved", "block_saved", "saved",
           "ep_decoder_saved", "total"]
BYTES = {"fp32": 4, "bf16": 2, "int64": 8, "bool": 1}
# the dense block's MLP entries, which the MoE layer replaces
MLP_NAMES = ("gate", "up", "down", "silu")


@dataclass(frozen=True)
class MoESaved(Saved):
    """:class:`Saved` that knows ``bool`` (the kept mask)."""

    @property
    def bytes(self) -> int:
        return self.numel * BYTES[self.dtype]


def _check(a, precision):
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: {PRECISIONS}")
    if not a.experts or a.mlp != "swiglu" or a.expert_groups:
        raise ValueError("this ledger is a SwiGLU MoE block's (experts > "
                         "0, no expert groups)")
    if a.shared_gate:
        raise ValueError("the shared expert's sigmoid gate is not covered")
    if AA.variants(a):   # the dense ledger's variants: not
        raise ValueError(   # yet held to a measured MoE block
            f"not covered: {', '.join(AA.variants(a)) or 'Q/K norms'}")


def _counts(a, kept):
    if len(kept) != a.experts or any(
            not isinstance(n, int) or n < 0 for n in kept):
        raise ValueError(f"kept must be {a.experts} counts >= 0, got "
                         f"{kept!r}")
    return list(kept)


def _swiglu(S, name, rows, f, lin, cast, h):
    out = []
    if cast:
        out += [S(f"{name} gate input (bf16 copy)", (rows, h), "bf16"),
                S(f"{name} up input (bf16 copy)", (rows, h), "bf16"),
                S(f"{name}.gate.weight (bf16 copy)", (f, h), "bf16",
                  "weight_cast"),
                S(f"{name}.up.weight (bf16 copy)", (f, h), "bf16",
                  "weight_cast"),
                S(f"{name}.down.weight (bf16 copy)", (h, f), "bf16",
                  "weight_cast")]
    return out + [S(f"{name} gate.out (silu input)", (rows, f), lin),
                  S(f"{name} up.out", (rows, f), lin),
                  S(f"{name} silu.out", (rows, f), lin),
                  S(f"{name} silu*up (down input)", (rows, f), lin)]


def _router(a, S, T, precision):
    """The router, the aux loss and the kept mask (every EP rank too)."""
    h, E, k = a.hidden, a.experts, a.top_k
    res, lin, _ = _dtypes(precision, "cpu")
    out = [S("router input (ln2 output)", (T, h), lin)]
    if precision == "autocast_bf16":
        out[0] = S("router input (bf16 cast of ln2 output)", (T, h), lin)
        out.append(S("router.weight (bf16 copy)", (E, h), "bf16",
                     "weight_cast"))
    out += [S(f"router {a.router} out (scores)", (T, E), "fp32"),
            S("top-k indices", (T, k), "int64")]
    if a.norm_topk:
        out += [S("top-k scores (div input)", (T, k), "fp32"),
                S("top-k score sum", (T, 1), "fp32")]
    out += [S("aux loss f_i", (E,), "fp32"),
            S("aux loss (held by the layer)", (), "fp32"),
            S("kept mask", (T, k), "bool")]
    return out


def moe_saved(a, tokens: int, kept: list, precision: str = "fp32",
              where: str = "moe") -> list:
    """What one MoE layer keeps for ``tokens`` tokens (its input, the
    ln2 output, included) with ``kept[e]`` assignments on expert ``e``."""
    _check(a, precision)
    kept = _counts(a, kept)
    h, T, K = a.hidden, tokens, sum(kept)
    res, lin, _ = _dtypes(precision, "cpu")
    cast = precision == "autocast_bf16"
    wdt = "bf16" if precision != "fp32" else "fp32"   # the gate weights

    def S(name, shape, dtype, kind="activation"):
        return MoESaved(where, name, shape, dtype, kind)
    out = _router(a, S, T, precision)
    out += [S("sort order (argsort by expert)", (K,), "int64"),
            S("permuted token ids", (K,), "int64"),
            S("permuted gate weights", (K,), wdt)]
    if not cast:
        out.append(S("permuted rows x[tok] (experts' input)", (K, h), lin))
    for e, n in enumerate(kept):
        out += _swiglu(S, f"expert {e}", n, a.expert_ffn, lin, cast, h)
    out += [S("expert outputs (cat)", (K, h), lin),
            S("weighted rows (index_add_ source)", (K, h), res)]
    if a.shared_experts:
        out += _swiglu(S, "shared", T, a.shared_ffn, lin, cast, h)
    return [e for e in out if e.bytes]


def ep_saved(a, tokens: int, sent: int, received: list,
             precision: str = "fp32", where: str = "moe") -> list:
    """What one EP rank's MoE layer keeps: its router for its ``tokens``,
    ``sent`` kept assignments dispatched, ``received[j]`` rows for its
    ``j``-th local expert from all EP peers together."""
    _check(a, precision)
    h, T, S_, R = a.hidden, tokens, sent, sum(received)
    res, lin, _ = _dtypes(precision, "cpu")
    cast = precision == "autocast_bf16"
    wdt = "bf16" if precision != "fp32" else "fp32"

    def S(name, shape, dtype, kind="activation"):
        return MoESaved(where, name, shape, dtype, kind)
    out = _router(a, S, T, precision)
    out += [S("sort order (argsort by expert)", (S_,), "int64"),
            S("permuted token ids", (S_,), "int64"),
            S("permuted gate weights", (S_,), wdt),
            S("regroup order (by local expert)", (R,), "int64"),
            S("its inverse (back to source order)", (R,), "int64")]
    if not cast:
        out.append(S("received rows, regrouped (experts' input)", (R, h),
                     lin))
    for j, n in enumerate(received):
        out += _swiglu(S, f"local expert {j}", n, a.expert_ffn, lin, cast,
                       h)
    out += [S("returned rows (combine all-to-all out)", (S_, h), lin),
            S("weighted rows (index_add_ source)", (S_, h), res)]
    if a.shared_experts:
        out += _swiglu(S, "shared", T, a.shared_ffn, lin, cast, h)
    return [e for e in out if e.bytes]


def _dense(a):
    return a.with_(experts=0, top_k=0, shared_experts=0,
                   first_dense_layers=0)


def block_saved(a, batch: int, seq: int, moe: list,
                precision: str = "fp32", where: str = "block") -> list:
    """A decoder block with an MoE MLP: the dense block's attention and
    norms (:func:`labkit.predict.activations.arch.block_saved`) and the
    MoE layer's entries ``moe`` in place of the dense MLP."""
    dense = AA.block_saved(_dense(a), batch, seq, precision, "none", where)
    keep = [MoESaved(e.where, e.name, e.shape, e.dtype, e.kind)
            for e in dense if not e.name.startswith(MLP_NAMES)]
    return keep + [MoESaved(where, *(getattr(e, k) for k in
                                     ("name", "shape", "dtype", "kind")))
                   for e in moe]


def _decoder(a, seq, batch, moe, precision, strided_targets):
    _check(a, precision)
    if len(moe) != a.moe_layers:
        raise ValueError(f"need one entry per MoE layer ({a.moe_layers}),"
                         f" got {len(moe)}")
    out = [e for e in AA.saved(_dense(a).with_(layers=1), seq, batch,
                               precision, strided_targets=strided_targets)
           if e.where != "block 0"]        # the head and the loss
    for i in range(a.layers):
        w = f"block {i}"
        if i < a.first_dense_layers:
            out += AA.block_saved(_dense(a), batch, seq, precision, "none",
                                  w)
        else:
            out += block_saved(a, batch, seq,
                               moe[i - a.first_dense_layers], precision, w)
    return out


def saved(a, seq: int, batch: int, kept: list, precision: str = "fp32",
          strided_targets: bool = True) -> list:
    """Every tensor one forward of the whole MoE decoder keeps for
    backward; ``kept[i]`` the per-expert kept counts of MoE layer ``i``
    (the dense first layers take none)."""
    _check(a, precision)
    moe = [moe_saved(a, batch * seq, k, precision) for k in kept]
    return _decoder(a, seq, batch, moe, precision, strided_targets)


def ep_decoder_saved(a, seq: int, batch: int, routed: list,
                     precision: str = "fp32",
                     strided_targets: bool = True) -> list:
    """The same on one EP rank; ``routed[i] = (sent, received)`` of MoE
    layer ``i`` (:func:`ep_saved`)."""
    _check(a, precision)
    moe = [ep_saved(a, batch * seq, s, r, precision) for s, r in routed]
    return _decoder(a, seq, batch, moe, precision, strided_targets)


def router_bytes(a, tokens: int, precision: str = "fp32") -> int:
    """The part every rank keeps whatever the routing (router, aux, mask):
    ``T (E + 2 k + 1)`` fp32 scores and weights, ``8 k T`` of indices."""
    return total(_router(a, lambda *x: MoESaved("moe", *x), tokens,
                         precision))
