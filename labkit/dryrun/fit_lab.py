"""The dry-run adapter of lab 12 (fit): its configurations at real size.

    python -m labkit dryrun --profile gpu8 --only fit

Registers ``fit`` in :data:`labkit.dryrun.labs.ADAPTERS` when imported
(``labkit.dryrun.labs`` imports it). Two cases per profile, built as
:func:`labkit.runs.fit.train` builds them (``labkit.training.recompute.apply``, then
``labkit.training.wrap.wrap``, then Adam; one step of ``accumulation`` micro-batches
through ``tracker.forward``):

- the profile's ``over_budget`` configuration (gpu8: DDP of the ~7B model),
  which the prediction refuses and the GPU cell sees fail with CUDA OOM;
- the planner's choice (:func:`labkit.predict.fit.choose`), which fits;
- the ``accumulation`` part, one case per ``accumulation_runs`` entry,
  built by the run's own ``accumulation_setup``
  (:mod:`labkit.runs.blocks.accumulation`: the planner's recompute, bf16 and
  micro-batch) and stepped by its ``accumulate`` (``max(accumulation, 2)``
  micro-batches, as the notebook launches it): with gradient sync off
  FSDP2 holds the unsharded gradients between micro-batches.

``predicted`` is :func:`labkit.predict.fit.per_rank_bytes` split into the
ledger's terms and the exact activation ledger.
"""
from __future__ import annotations

from labkit.dryrun.cases import Case, gpt_config, lab
from labkit.predict import fit as F
from labkit.predict.memory import ledger


def _case(p: dict, cfg: F.Config, variant: str) -> Case:
    c = gpt_config(p["model"])
    world = p["world_size"]
    precision = "fsdp_bf16" if p["bf16"] else "fp32"

    def setup(ctx):
        from labkit.nn.model import batch, build, local_batch
        from labkit.training.recompute import apply
        from labkit.training.train import make_optimizer
        from labkit.training.wrap import autocast, wrap
        model = wrap(apply(build(c), cfg.recompute), cfg.strategy, ctx,
                     bf16=p["bf16"])
        if cfg.strategy == "ddp" and ctx.backend == "fake":
            from labkit.dryrun.fake import fake_ddp_hook
            fake_ddp_hook(model)   # as labs.dp_case does
        opt = make_optimizer(model)
        amp = autocast(ctx, cfg.strategy, p["bf16"])
        data = [local_batch(*batch(c, cfg.micro_batch * world, i,
                                   device=ctx.device), ctx.rank, world)
                for i in range(cfg.accumulation)]

        def step(tracker):   # labkit.runs.fit.train's step
            opt.zero_grad(set_to_none=True)   # first: grads stay counted
            for x, y in data:
                with amp:
                    loss = tracker.forward(model, x, y) / cfg.accumulation
                loss.backward()
            opt.step()
        return model, opt, step
    mem = F.per_rank_bytes(p["model"], world, cfg, precision,
                           "cuda" if p["profile"] != "cpu" else "cpu")
    led = ledger(mem["params"], world, F.ZERO[cfg.strategy],
                 precision="fp32")
    predicted = {"params": led.params_gpu, "grads": led.grads_gpu,
                 "optimizer": led.optimizer_gpu,
                 "activations": mem["activations"],
                 "states": mem["states"], "total": mem["total"]}
    return Case("fit", variant, "every rank", world, 0, setup, predicted,
                ("fit", variant, str(c), world, cfg))


def _accumulation_case(p: dict, cfg: F.Config, run: str) -> Case:
    from labkit.predict.sharding.accumulation import unsharded_grad_bytes
    c = gpt_config(p["model"])
    world, k = p["world_size"], max(cfg.accumulation, 2)

    def setup(ctx):
        from labkit.nn.model import batch, local_batch
        from labkit.runs.blocks import accumulation as R
        strategy, no_sync = R.ACCUMULATION_RUNS[run]
        if strategy == "ddp" and ctx.backend == "fake":
            raise ValueError("accumulation under DDP: not dry-run here")
        model, opt, amp = R.accumulation_setup(c, ctx, strategy, p["bf16"],
                                               cfg.recompute)
        data = [local_batch(*batch(c, cfg.micro_batch * world, i,
                                   device=ctx.device), ctx.rank, world)
                for i in range(k)]

        def step(tracker):   # runs.blocks.accumulation.accumulation's
            opt.zero_grad(set_to_none=True)
            R.accumulate(model, amp, strategy, no_sync, k, data.__getitem__,
                         tracker.forward, keep=run in R.NO_RESHARD)
            opt.step()
        return model, opt, step
    no_sync = run.endswith("no_sync")
    precision = "fsdp_bf16" if p["bf16"] else "fp32"
    mem = F.per_rank_bytes(p["model"], world, cfg, precision,
                           "cuda" if p["profile"] != "cpu" else "cpu")
    led = ledger(mem["params"], world, F.ZERO[cfg.strategy],
                 precision="fp32")
    units = F.units(p["model"])   # the GPT or the Llama-style block
    held = unsharded_grad_bytes(units, world, cfg.strategy, k, no_sync)
    extra = held - led.grads_gpu     # unsharded grads beside the shards
    predicted = {"params": led.params_gpu, "grads": led.grads_gpu,
                 "optimizer": led.optimizer_gpu,
                 "activations": mem["activations"], "held_grads": held,
                 "states": mem["states"], "total": mem["total"] + extra}
    return Case("fit", f"accumulation: {run} k={k} "
                f"recompute={cfg.recompute} mb={cfg.micro_batch}",
                "every rank", world, 0, setup, predicted,
                ("fit-acc", run, str(c), world, cfg, p["bf16"]))


@lab("fit")
def _fit(p: dict) -> list[Case]:
    world, gb = p["world_size"], p["global_batch"]
    o = p["over_budget"]
    bad = F.Config(o["strategy"], o["recompute"], o["micro_batch"],
                   gb // world // o["micro_batch"])
    precision = "fsdp_bf16" if p["bf16"] else "fp32"
    where = "cuda" if p["profile"] != "cpu" else "cpu"
    best = F.choose(F.plan(p["model"], world, gb, p["budget_bytes"],
                           p["flops_per_s"], p["link_bytes_per_s"],
                           precision, where))
    good = F.Config(best["strategy"], best["recompute"], best["micro_batch"],
                    best["accumulation"])
    runs = [r for r in p.get("accumulation_runs", []) if r != "ddp"]
    return [_case(p, bad, f"over budget: {bad.strategy}"),
            _case(p, good, f"chosen: {good.strategy} "
                           f"recompute={good.recompute} mb={good.micro_batch}"),
            *(_accumulation_case(p, good, r) for r in runs)]
