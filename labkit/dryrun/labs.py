"""Each lab, as its run module builds it, at a profile's sizes.

An adapter is one function registered under the lab's name; it reads the
lab's section of ``labs/profiles/<profile>.yaml`` and returns the
:class:`Case` s to dry-run -- one per variant and per *rank role* (ranks
that hold the same tensors share one fake rank). A lab that cannot be
dry-run is registered with :func:`cannot` and a reason. Adding a lab::

    @lab("mesh")
    def _mesh(p: dict) -> list[Case]:
        cfg = gpt_config(p["model"])
        return [Case("mesh", "fsdp+tp", "rank 0", p["world_size"], 0,
                     setup=lambda ctx: my_run_module.setup(cfg, ctx),
                     predicted=...)]

``setup(ctx)`` returns ``(model, optimizer or None, step)``; ``step``
takes the :class:`~labkit.dryrun.account.Tracker` and runs forward
(through ``tracker.forward``), backward and the optimizer step exactly
as the run module does. Reuse the run module's own building function.
"""
from __future__ import annotations

import torch

from labkit.dryrun.cases import (ADAPTERS, REASONS, Case,  # noqa: F401
                                 cannot, gpt_config, lab, predicted)
from labkit.nn.model import GPTConfig, batch, local_batch  # noqa: F401
from labkit.predict.memory import activation_bytes_per_layer

# adapters kept in files of their own register themselves on import; they
# import labkit.dryrun.cases, not this file
from labkit.dryrun import experts_lab, fit_lab, mesh_lab  # noqa: E402,F401


def dp_case(lab_name: str, strategy: str, c: GPTConfig, world: int,
            global_batch: int, bf16: bool, **wrap_kw) -> Case:
    """A data-parallel strategy as :func:`labkit.training.train.setup` builds it
    (labs 1, 3, 4, 7, 8): every rank holds the same, rank 0 stands for all.
    """
    from labkit.training.train import setup as dp_setup

    def setup(ctx):
        from labkit.dryrun.fake import fake_ddp_hook
        model, opt, amp = dp_setup(strategy, c, ctx, bf16, 0, **wrap_kw)
        if strategy == "ddp" and ctx.backend == "fake":
            fake_ddp_hook(model)
        x, y = local_batch(*batch(c, global_batch, 0, device=ctx.device),
                           ctx.rank, ctx.world_size)

        def step(tracker):  # labkit.training.train.train_step, forward counted
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = tracker.forward(model, x, y)
            loss.backward()
            opt.step()
        return model, opt, step
    micro = global_batch // world
    used = {k: v for k, v in wrap_kw.items()  # what wrap() reads
            if k != "shard_group" or "hybrid" in strategy}
    key = ("dp", strategy, str(c), world, micro, bf16,
           tuple(sorted(used.items())))
    return Case(lab_name, strategy, "every rank", world, 0, setup,
                predicted(c, strategy, world, micro, bf16,
                          wrap_kw.get("shard_group")), key)


@lab("memory")
def _memory(p: dict) -> list[Case]:
    c = gpt_config(p["model"])
    return [dp_case("memory", s, c, w, p["global_batch"], p["bf16"])
            for w in p["world_sizes"] for s in p["strategies"]]


@lab("sharding")
def _sharding(p: dict) -> list[Case]:
    c = gpt_config(p["model"])
    return [dp_case("sharding", s, c, p["world_size"], p["global_batch"],
                    p["bf16"], shard_group=p["shard_group"])
            for s in p["strategies"]]


@lab("zero")
def _zero(p: dict) -> list[Case]:
    c = gpt_config(p["model"])
    return [dp_case("zero", s, c, p["world_size"], p["global_batch"],
                    p["bf16"]) for s in p["fsdp"]]


@lab("profiling")
def _profiling(p: dict) -> list[Case]:  # runs/profiling.train: DDP
    c = gpt_config(p["model"])
    w = p["world_size"]
    return [dp_case("profiling", "ddp", c, w, p["batch"] * w, p["bf16"])]


@lab("checkpoint")
def _checkpoint(p: dict) -> list[Case]:  # runs/checkpoint.train: FSDP2
    c = gpt_config(p["model"])
    return [dp_case("checkpoint", "fsdp2_full", c, p["world_size"],
                    p["global_batch"], False)]


cannot("collectives", "no model and no training step: the lab's memory is "
       "its message buffers (up to max_bytes per rank), nothing to dry-run")
cannot("colossalai", "lab 9's ranks run in the second environment "
       ".venv-colossalai (torch 2.5.1 and Colossal-AI); the dry run runs in "
       "the course's .venv (torch 2.13), where Colossal-AI is not "
       "installed (its plugins under fake tensors: not tried). On the "
       "node, the gpu cell's GeminiPlugin takes HybridAdam, which "
       "JIT-builds Colossal-AI's fused CUDA Adam on first use (0.5.0 "
       "ships no prebuilt kernels in colossalai._C): it needs nvcc of "
       "torch 2.5.1's CUDA major (12) at CUDA_HOME, and minutes")


@lab("tensor_parallel")
def _tensor_parallel(p: dict) -> list[Case]:
    """runs/tensor_parallel: one block, bf16, split over ``tp`` ranks
    (``dtensor``: parallelize_module; ``scratch``: by hand), one forward,
    backward and SGD step. Every rank holds the same shapes."""
    from labkit.runs import tensor_parallel as T
    dtype = T.DTYPES[p["dtype"]]
    cfg = GPTConfig(vocab=8, seq=p["seq"], layers=1, hidden=p["hidden"],
                    heads=p["heads"])
    b, s, h = p["micro_batch"], p["seq"], p["hidden"]
    cases = []
    for tp in p["tp_sizes"]:
        for variant in ("dtensor", "scratch"):
            def setup(ctx, tp=tp, variant=variant):
                from labkit.nn.model import Block
                ref = Block(cfg).to(device=ctx.device, dtype=dtype)
                if variant == "dtensor":
                    from torch.distributed.device_mesh import \
                        init_device_mesh
                    mesh = init_device_mesh(ctx.device.type, (tp,))
                    block = T.dtensor_block(ref, cfg.heads, mesh,
                                            fused_qkv=False)
                else:
                    block = T.scratch_block(ref, cfg.heads, ctx.rank, tp)
                opt = torch.optim.SGD(block.parameters(), lr=0.1)
                x = torch.randn(b, s, h, device=ctx.device, dtype=dtype)
                w = torch.randn(b, s, h, device=ctx.device, dtype=dtype)

                def step(tracker):
                    out = tracker.forward(block, x.requires_grad_(True))
                    (out * w).sum().backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                return block, opt, step
            per = 12 * h * h // tp * dtype.itemsize  # Shoeybi et al. Sec. 3
            act = activation_bytes_per_layer(s, b, h, p["heads"], tp=tp)
            cases.append(Case("tensor_parallel", f"{variant} tp={tp}",
                              "every rank", tp, 0, setup,
                              # the run drops its gradients after the step
                              {"params": per, "grads": 0, "optimizer": 0,
                               "states": per, "activations": act,
                               "total": per + act}))
    return cases


cannot("pipeline_parallel", "torch.distributed.pipelining's schedule "
       "starts with a warm-up exchange between stages (a vote tensor sent "
       "point to point and read with .item(), then shapes pickled with "
       "send_object_list); a fake rank receives no data (tried: "
       "DataDependentOutputException in schedules._warmup_p2p)")
ZERO_DEEPSPEED = ("DeepSpeed variants not dry-run: deepspeed.initialize, "
                  "forward and backward run on fake tensors, but the "
                  "engine's step reads the gradient norm for its overflow "
                  "check (.item(); tried: DataDependentOutputException in "
                  "stage_1_and_2.has_overflow and stage3's "
                  "is_invalid_grad_norm); only the lab's FSDP rows are "
                  "dry-run")

cannot("precision", "nothing to dry-run: its quantities are values "
       "(gradients underflowing in fp16, a loss scaler's .item() checks, "
       "FP8 quantisation errors), which fake tensors do not carry; its "
       "bytes are counted exactly on CPU and its FP8 ledger is pure "
       "(labkit.predict.precision)")
cannot("roofline", "nothing to dry-run: it measures this machine's "
       "FLOP/s, bytes/s and op times, which fake tensors do not have; "
       "its FLOPs and bytes per op are pure (labkit.predict.roofline)")
cannot("schedules", "torch.distributed.pipelining's schedules start with "
       "the warm-up exchange lab 6's cannot fake (a vote tensor read with "
       ".item()); its bytes are counted exactly on CPU: what autograd "
       "saves per forward, walked along each rank's order")
cannot("hangs", "nothing to dry-run: its faults are waits at the process "
       "group's timeout, a killed process and py-spy reading live ranks; "
       "its tensors are a few kilobytes")
cannot("optimizers", "nothing to dry-run: its optimizer states are "
       "counted to the byte on CPU ranks and predicted by pure formulas "
       "(labkit.predict.optimizers); 8-bit AdamW's states come from "
       "bitsandbytes' own kernels, which fake tensors do not run")
cannot("context_parallel", "no adapter yet: ring and Ulysses attention "
       "exchange K/V blocks point to point (isend/irecv) and by all-to-all, "
       "which the fake process group was not yet tried with; its memory "
       "per rank is the one-process activations / CP degree, measured on "
       "CPU by lab 11")
