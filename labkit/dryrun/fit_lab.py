"""The dry-run adapter of lab 12 (fit): its configurations at real size.

    python -m labkit dryrun --profile gpu8 --only fit

Registers ``fit`` in :data:`labkit.dryrun.labs.ADAPTERS` when imported
(``labkit.dryrun.labs`` imports it). One case per run of
:func:`labkit.predict.fit_runs.runs` -- the list preflight prices too --
built as :func:`labkit.runs.fit.train` builds it (on the meta device and
materialised sharded, :func:`labkit.training.meta_init.built`; then
``labkit.training.recompute.apply``, ``labkit.training.wrap.wrap`` and
Adam; one step of ``accumulation`` micro-batches through
``tracker.forward``):

- the gpu cell's DDP of the ~7B model (gpu8), which the prediction
  refuses and the GPU cell sees fail with CUDA OOM;
- the planner's choice (:func:`labkit.predict.fit.choose`), which fits;
- the ``accumulation`` part, one case per ``accumulation_runs`` entry,
  built by the run's own ``accumulation_setup``
  (:mod:`labkit.runs.blocks.accumulation`) and stepped by its
  ``accumulate``: with gradient sync off FSDP2 holds the unsharded
  gradients between micro-batches.

``predicted`` is the run's :func:`labkit.predict.fit.per_rank_bytes`
split into the ledger's terms and the exact activation ledger.
"""
from __future__ import annotations

from labkit.dryrun.cases import Case, gpt_config, lab
from labkit.predict import fit_runs as R


def _data(c, cfg, ctx, world, k):
    from labkit.nn.model import batch, local_batch
    return [local_batch(*batch(c, cfg.micro_batch * world, i,
                               device=ctx.device), ctx.rank, world)
            for i in range(k)]


def _case(p: dict, run: R.Run) -> Case:
    """A training step as :func:`labkit.runs.fit.train` takes it."""
    c = gpt_config(p["model"])
    world, cfg = p["world_size"], run.cfg

    def setup(ctx):
        from labkit.nn.model import build
        from labkit.training.meta_init import built
        from labkit.training.train import make_optimizer
        from labkit.training.wrap import autocast
        model = built(lambda: build(c), cfg.strategy, ctx, bf16=p["bf16"],
                      recompute=cfg.recompute)
        if cfg.strategy == "ddp" and ctx.backend == "fake":
            from labkit.dryrun.fake import fake_ddp_hook
            fake_ddp_hook(model)   # as labs.dp_case does
        opt = make_optimizer(model)
        amp = autocast(ctx, cfg.strategy, p["bf16"])
        data = _data(c, cfg, ctx, world, cfg.accumulation)

        def step(tracker):   # labkit.runs.fit.train's step
            opt.zero_grad(set_to_none=True)   # first: grads stay counted
            for x, y in data:
                with amp:
                    loss = tracker.forward(model, x, y) / cfg.accumulation
                loss.backward()
            opt.step()
        return model, opt, step
    return Case("fit", run.variant, "every rank", world, 0, setup,
                run.allocated, ("fit", run.variant, str(c), world, cfg))


def _accumulation_case(p: dict, run: R.Run) -> Case:
    """One step of ``accumulate`` as the accumulation part takes it."""
    c = gpt_config(p["model"])
    world, cfg, k, name = (p["world_size"], run.cfg, run.micro_batches,
                           run.accumulation_run)

    def setup(ctx):
        from labkit.runs.blocks import accumulation as A
        strategy, no_sync = A.ACCUMULATION_RUNS[name]
        model, opt, amp = A.accumulation_setup(c, ctx, strategy, p["bf16"],
                                               cfg.recompute)
        data = _data(c, cfg, ctx, world, k)

        def step(tracker):   # runs.blocks.accumulation.accumulation's
            opt.zero_grad(set_to_none=True)
            A.accumulate(model, amp, strategy, no_sync, k, data.__getitem__,
                         tracker.forward, keep=name in A.NO_RESHARD)
            opt.step()
        return model, opt, step
    return Case("fit", run.variant, "every rank", world, 0, setup,
                run.allocated, ("fit-acc", name, str(c), world, cfg,
                                p["bf16"]))


@lab("fit")
def _fit(p: dict) -> list[Case]:
    if p.get("flops_per_s") == "measured":   # the CPU profile: as the lab
        from labkit.measure.roofline import planner_rate
        p = {**p, "flops_per_s": planner_rate(
            p["model"], p["global_batch"] // p["world_size"])["flops_per_s"]}
    return [_accumulation_case(p, r) if r.accumulation_run else _case(p, r)
            for r in R.runs(p)]
