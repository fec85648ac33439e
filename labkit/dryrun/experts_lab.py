"""``labkit dryrun`` adapter of lab 13 (experts): expert parallelism at
real size on fake tensors.

    python -m labkit dryrun --profile gpu8 --only experts

Registered in :data:`labkit.dryrun.cases.ADAPTERS` when imported
(:mod:`labkit.dryrun.labs` imports it). The run module's own pieces
(:func:`labkit.runs.experts.record`, :func:`~labkit.runs.experts.parallel`,
DDP over the dense part, the experts' gradients reduced over ``dp``, Adam)
build one rank of the profile's ``dp x ep`` mesh (gpu8: Mixtral 8x7B's
MoE layers, EP over 8 ranks, one expert per rank and layer).

What a fake rank cannot do is route: the kept counts, the drops and the
split sizes of the all-to-all are read from the router's output
(``bincount``, boolean masks, ``.tolist()`` after the counts' all-to-all),
and fake tensors have no values. :class:`EvenRouting` keeps every tensor
the router makes (scores, top-k, weights, aux loss) and replaces only
those reads by an even, dropless split -- every expert ``k T / E`` rows
from every rank, so each rank receives ``k T`` rows -- which the dry run
states as its assumption. Predicted, per rank:

- model states: the dense part (embedding, attention, router, norms,
  head) whole on every rank and ``E / ep`` experts per layer, each
  parameter with its gradient and Adam's two moments in the model's dtype
  (:mod:`labkit.predict.model.params`);
- activations: the MoE ledger on one EP rank
  (:func:`labkit.predict.activations.moe.ep_decoder_saved`) for the even
  split, less the kept mask (the even path indexes without one) and the
  aux loss the layer holds (alive, not saved: the dry run counts what
  autograd saves), plus the token ids the embedding saves (a view of the
  whole batch's ``[B, s + 1]`` int64 storage, which the ledger leaves to
  the caller);
- the all-to-all bytes per layer: :func:`labkit.predict.experts
  .all_to_all_bytes` for the even counts (dispatch and combine, forward).
"""
from __future__ import annotations

import argparse

import torch

from labkit.dryrun.cases import Case, lab
from labkit.nn.moe import router as R
from labkit.nn.moe.expert_parallel import ExpertParallelMoE
from labkit.nn.moe.layer import MoE, run_experts
from labkit.predict.activations import moe as AM
from labkit.predict import experts as X
from labkit.predict.model import params as P

ASSUMED = "even dropless routing: every expert k T / E rows from each rank"


def even(rows: int, experts: int) -> list:
    """``rows`` spread as evenly as whole rows allow over ``experts``."""
    return [rows // experts + (e < rows % experts) for e in range(experts)]


class EvenRouting(ExpertParallelMoE):
    """:class:`ExpertParallelMoE` with the router's counts assumed even."""

    def route(self, x):
        a = self.a
        w, idx, probs = R.route(self.gate(x), a.top_k, a.router,
                                a.norm_topk, a.routed_scaling)
        f = torch.full((a.experts,), 1 / a.experts, device=x.device)
        self.aux_loss = a.experts * (f * probs.float().mean(0)).sum()
        kept = even(idx.numel(), a.experts)
        self.stats = {"tokens": x.shape[0], "capacity": None,
                      "routed": kept, "kept": kept}
        return w, idx, None

    @staticmethod
    def plan(idx, keep, weights):
        order = torch.argsort(idx.reshape(-1), stable=True)
        t = torch.arange(idx.shape[0], device=idx.device)
        return (t.repeat_interleave(idx.shape[1])[order],
                weights.reshape(-1)[order], None)

    def exchange_counts(self, x) -> list:
        mine = self.stats["kept"][self.first:self.first + self.per]
        return [list(mine) for _ in range(self.ep)]   # every peer alike


class EvenMoE(MoE):
    """The one-process :class:`MoE` of a record's decoder
    (``dryrun --hf-config``) with the same even, dropless split: the
    router's scores, top-k and weights are computed, the counts are
    assumed (:data:`ASSUMED`)."""

    route = EvenRouting.route

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        w, idx, _ = self.route(x)
        tok, wt, _ = EvenRouting.plan(idx, None, w)
        out = run_experts(self.experts, x[tok], self.stats["kept"])
        y = torch.zeros_like(x).index_add_(
            0, tok, (out * wt.unsqueeze(1)).to(x.dtype))
        return (y + self.shared_out(x)).view(shape)


def even_routing(model) -> None:
    """Every :class:`MoE` of ``model`` routes evenly (in place: the same
    modules and weights, the class swapped), so fake tensors can run it."""
    for m in model.modules():
        if type(m) is MoE:
            m.__class__ = EvenMoE


def args(p: dict) -> argparse.Namespace:
    from labkit.runs.experts import parser
    keys = ("ep", "experts", "top_k", "layers", "hidden", "heads",
            "expert_ffn", "vocab", "seq")
    argv = [f"--{k.replace('_', '-')}={p[k]}" for k in keys]
    argv += [f"--batch={p['global_batch']}", f"--lr={p['lr']}",
             f"--aux={p['aux']}"] + (["--bf16"] if p["bf16"] else [])
    return parser().parse_args(argv)


def predicted(a: argparse.Namespace, world: int) -> dict:
    from labkit.runs.experts import record
    rec = record(a)
    elt = 2 if a.bf16 else 4
    ts = P.tensors(rec)       # (name, shape, part), Hugging Face's names
    per_rank = sum(P.numel(s) for n, s, _ in ts if ".mlp.experts." not in n)
    expert = sum(P.numel(s) for n, s, _ in ts
                 if ".mlp.experts." in n) // a.ep
    params = (per_rank + expert) * elt
    micro = a.batch // world
    K = a.top_k * micro * a.seq
    kept = even(K, a.experts)
    per = a.experts // a.ep
    routed = [(K, [kept[j] * a.ep for j in range(per)])] * rec.moe_layers
    act = [e for e in AM.ep_decoder_saved(
        rec, a.seq, micro, routed, "fsdp_bf16" if a.bf16 else "fp32")
        if e.name not in ("kept mask", "aux loss (held by the layer)")]
    ids = a.batch * (a.seq + 1) * 8   # the embedding's token ids: a view
    a2a = X.all_to_all_bytes([kept] * a.ep, 0, a.ep, a.hidden, elt)
    return {"params": params, "grads": params, "optimizer": 2 * params,
            "states": 4 * params, "activations": AM.total(act) + ids,
            "routing": ASSUMED, "all_to_all_bytes_per_layer": a2a,
            "tokens_received_per_layer": sum(routed[0][1])}


@lab("experts")
def _experts(p: dict) -> list[Case]:
    from labkit.runs import experts as RX
    a = args(p)
    world = p["world_size"]
    X.check(a.experts, a.top_k, a.ep, world)

    def setup(ctx):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.nn.parallel import DistributedDataParallel as DDP

        from labkit.dryrun.fake import fake_ddp_hook
        from labkit.nn.model import GPTConfig, batch, build_arch, local_batch
        from labkit.nn.moe.layer import total_aux_loss
        mesh = init_device_mesh(ctx.device.type, (world // a.ep, a.ep),
                                mesh_dim_names=("dp", "ep"))
        base = build_arch(RX.record(a), seed=a.seed).to(
            ctx.device, torch.bfloat16 if a.bf16 else torch.float32)
        model = DDP(RX.parallel(base, mesh.get_group("ep"), EvenRouting,
                                copy_base=False))
        if ctx.backend == "fake":
            fake_ddp_hook(model)
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
        c = GPTConfig(vocab=a.vocab, seq=a.seq)
        x, y = local_batch(*batch(c, a.batch, 0, a.seed, device=ctx.device),
                           ctx.rank, world)

        def step(tracker):      # labkit.runs.experts.balance, one step
            opt.zero_grad(set_to_none=True)

            def loss_of(x, y):
                out = model(x).float()
                ce = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                       y.flatten())
                return ce + a.aux * total_aux_loss(model.module)
            loss = tracker.forward(loss_of, x, y)
            loss.backward()
            RX.reduce_expert_grads(model.module, mesh.get_group("dp"),
                                   world)
            opt.step()
        return model, opt, step
    key = ("experts", str(sorted(vars(a).items())), world)
    return [Case("experts", f"dp{world // a.ep}xep{a.ep}", "every rank",
                 world, 0, setup, predicted(a, world), key)]
