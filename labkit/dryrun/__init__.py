"""Dry run: every lab's GPU profile at its real sizes, on a CPU, in seconds.

    python -m labkit dryrun --profile gpu8 [--only memory] [--json]
    python -m labkit dryrun --layers 80 --hidden 8192 --heads 64 \
        --vocab 32000 --seq 4096 --batch 1 --gpus 8 --strategy fsdp2_full \
        --gpu h100-80gb --json

Each lab is built the way its run module builds it on the node and wrapped
the same way (DDP, FSDP1/FSDP2, tensor and pipeline parallel), then one
training step runs at the profile's world size -- on fake tensors
(:mod:`labkit.dryrun.fake`): shapes, dtypes and every operator of the step,
no data and no memory. One fake rank stands for each distinct rank role.
Per rank, :mod:`labkit.dryrun.account` counts parameters, gradients,
optimizer state, activations, gathered weights and the peak, beside the
ledger and activation prediction and the GPU's memory: fits or not, with
the margin.

Files: ``fake.py`` (the fake world), ``account.py`` (the bytes),
``step.py`` (one counted step), ``cases.py`` (the registry),
``labs.py``, ``fit_lab.py``, ``mesh_lab.py`` (one adapter per lab),
``cli.py`` (this command), ``budget.py`` (its time limit, from the
work: layer shards at a measured cost, with a floor).

Adding a lab (the 2-D mesh lab, the capstone): one function in
``labs.py`` that turns the lab's profile section into cases, each with a
``setup(ctx)`` that calls the run module's own building function::

    @lab("mesh")
    def _mesh(p: dict) -> list[Case]:
        def setup(ctx):
            model, opt = runs.mesh.build_and_wrap(p, ctx)  # the run's own
            def step(tracker):
                loss = tracker.forward(model, x, y)   # activations counted
                loss.backward()
                opt.step()
            return model, opt, step
        return [Case("mesh", "fsdp+tp", "every rank", p["world_size"], 0,
                     setup, predicted=...)]   # "states": the ledger's bytes

or ``cannot("mesh", "why")``. A profile section with neither is listed as
"no dry-run adapter yet".

What a dry run is not: the fake ranks' device is the CPU (PyTorch's CPU
build refuses CUDA device guards), so CUDA-only arguments
(``device_ids``, FSDP1's ``device_id``) are not exercised; the optimizer
is the fused Adam the node uses where the model is on the GPU before the
optimizer is built (``wrap`` moves it: every dry-run case; lab 4's
DeepSpeed runs, not dry-run, move it too: ``runs.zero.engine_model``,
except where the optimizer is offloaded); autocast is CPU autocast (the same bf16
casts of matmuls). The CUDA context, cuBLAS/NCCL workspaces and allocator
fragmentation are not counted: the margin should leave room for them.

The package imports ``labkit.nn``, ``labkit.training``, ``labkit.predict``
and ``labkit.preflight``; the run modules' own parsers are read lazily
(listed in ``.importlinter``).
"""
