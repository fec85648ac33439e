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
``f`` (SwiGLU; other MLPs below), on CPU:

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
  one per Linear reading them, gate and up, ``[n_e, h]``);
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
and ``fsdp_bf16`` (bf16 weights). Node-limited routing (groups) and the
shared expert's sigmoid gate are not covered.

The experts are the dense block's MLP on their rows, so a GeGLU, a
fused ``gate_up`` or a GELU expert keeps what the dense ledger's
:func:`labkit.predict.activations.block.mlp_saved` says. ``expert_bias``
(gpt-oss: the router's and the experts' biases, ``modeling_gpt_oss.py``)
adds nothing kept: ``addmm`` needs its input and weight for the
gradients, not its bias, and autocast's bf16 copy of a bias is not kept.
Everything around the MLP (norms, attention, sinks, windows, soft-caps,
post-norms, parallel attention + MLP, the head) is the dense ledger's
block (:func:`labkit.predict.activations.arch.block_saved`) with the MoE
layer's entries in the MLP's place; with ``parallel`` the router reads
ln1's output, which the attention's projections already keep (fp32,
bf16 weights: one storage, counted there).

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
from labkit.predict.activations.block import mlp_saved, mlp_users
from labkit.predict.activations.ledger import (PRECISIONS, Saved,
                                               _dtypes, total)

__all__ = ["moe_saved", "ep_saved", "block_saved", "saved",
           "ep_decoder_saved", "total"]
BYTES = {"fp32": 4, "bf16": 2, "int64": 8, "bool": 1}


@dataclass(frozen=True)
class MoESaved(Saved):
    """:class:`Saved` that knows ``bool`` (the kept mask)."""

    @property
    def bytes(self) -> int:
        return self.numel * BYTES[self.dtype]


def _check(a, precision):
    """Refuse, in one line, what this ledger has not been held to; the
    block around the MoE layer is the dense ledger's, which refuses what
    it does not cover (:func:`labkit.predict.activations.arch._family`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: {PRECISIONS}")
    if not a.experts or a.expert_groups:
        raise ValueError("this ledger is an MoE block's (experts > 0, no "
                         "expert groups)")
    if a.shared_gate:
        raise ValueError("the shared expert's sigmoid gate is not covered")
    if AA._check(_dense(a), precision, "none", "cpu") != "rope":
        raise ValueError("an MoE block in the GPT's layout (learned "
                         "positions) is not covered")


def _counts(a, kept):
    if len(kept) != a.experts or any(
            not isinstance(n, int) or n < 0 for n in kept):
        raise ValueError(f"kept must be {a.experts} counts >= 0, got "
                         f"{kept!r}")
    return list(kept)


def _expert(a, S, name, rows, f, lin, cast):
    """One expert (or the shared one) on ``rows`` rows: the dense MLP's
    entries (:func:`labkit.predict.activations.block.mlp_saved`); under
    autocast each Linear reading the rows keeps its bf16 copy of them."""
    out = ([S(f"{name} {u} input (bf16 copy)", (rows, a.hidden), "bf16")
            for u in mlp_users(a)] if cast else [])
    return out + mlp_saved(a, S, (rows,), f, lin, cast, f"{name} ")


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
        out += _expert(a, S, f"expert {e}", n, a.expert_ffn, lin, cast)
    out += [S("expert outputs (cat)", (K, h), lin),
            S("weighted rows (index_add_ source)", (K, h), res)]
    if a.shared_experts:
        out += _expert(a, S, "shared", T, a.shared_ffn, lin, cast)
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
        out += _expert(a, S, f"local expert {j}", n, a.expert_ffn, lin,
                       cast)
    out += [S("returned rows (combine all-to-all out)", (S_, h), lin),
            S("weighted rows (index_add_ source)", (S_, h), res)]
    if a.shared_experts:
        out += _expert(a, S, "shared", T, a.shared_ffn, lin, cast)
    return [e for e in out if e.bytes]


def _dense(a):
    """The record's dense twin: its blocks' attention and norms, its
    head (no experts, no expert biases)."""
    return a.with_(experts=0, top_k=0, shared_experts=0,
                   first_dense_layers=0, expert_bias=False)


def block_saved(a, batch: int, seq: int, moe: list,
                precision: str = "fp32", where: str = "block",
                local: bool = False) -> list:
    """A decoder block with an MoE MLP: the dense block's attention and
    norms (:func:`labkit.predict.activations.arch.block_saved`; ``local``:
    a sliding-window layer) and the MoE layer's entries ``moe`` in place
    of the dense MLP."""
    if a.parallel and precision != "autocast_bf16":
        # the router reads ln1's output, kept by the attention already
        moe = [e for e in moe if not e.name.startswith("router input")]
    return [MoESaved(where, e.name, e.shape, e.dtype, e.kind) for e in
            AA.block_saved(_dense(a), batch, seq, precision, "none", where,
                           "cpu", local, mlp=moe)]


def _decoder(a, seq, batch, moe, precision, strided_targets):
    _check(a, precision)
    if len(moe) != a.moe_layers:
        raise ValueError(f"need one entry per MoE layer ({a.moe_layers}),"
                         f" got {len(moe)}")
    head = _dense(a).with_(layers=1, window=0, window_layers=(),
                           cross_layers=())
    out = [e for e in AA.saved(head, seq, batch, precision,
                               strided_targets=strided_targets)
           if e.where != "block 0"]        # the head and the loss
    for i in range(a.layers):
        w, local = f"block {i}", i in a.window_layers
        if i < a.first_dense_layers:
            out += AA.block_saved(_dense(a), batch, seq, precision, "none",
                                  w, "cpu", local)
        else:
            out += block_saved(a, batch, seq,
                               moe[i - a.first_dense_layers], precision, w,
                               local)
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
