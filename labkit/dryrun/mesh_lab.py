"""``labkit dryrun`` adapter of lab 10 (mesh): FSDP2 x TP on a 2-D mesh.

    python -m labkit dryrun --profile gpu8 --only mesh

Registered in :data:`labkit.dryrun.labs.ADAPTERS` when imported (the
registry imports it). Each layout ``DxT[+sp]`` of the profile is built by
:func:`labkit.runs.mesh.setup`, the run module's own function; every rank
of a layout holds the same shapes, so rank 0 stands for all. Predicted:
the TP-then-FSDP ledger of the block's record
(:func:`labkit.predict.mesh.arch.rank_param_bytes`; fp32 weights and gradients, Adam's two moments) and Korthikanti et al.
2022's activations (Table 2) with ``t`` and sequence parallelism.
"""
from __future__ import annotations

from labkit.dryrun.cases import Case, gpt_config, lab
from labkit.nn.model import arch_of, batch, local_batch
from labkit.predict.mesh import arch as MA
from labkit.predict.memory import activation_bytes_per_layer


@lab("mesh")
def _mesh(p: dict) -> list[Case]:
    from labkit.runs.mesh import parse_layout, setup as mesh_setup
    c = gpt_config(p["model"])
    cases = []
    for text in p["layouts"]:
        lay = parse_layout(text, p["world_size"])
        micro = p["global_batch"] // lay["dp"]

        def setup(ctx, lay=lay):
            model, opt, mesh, amp = mesh_setup(lay, c, ctx, p["bf16"])
            x, y = local_batch(*batch(c, p["global_batch"], 0,
                                      device=ctx.device),
                               mesh.get_local_rank("dp"), lay["dp"])

            def step(tracker):  # labkit.training.train.train_step, forward counted
                opt.zero_grad(set_to_none=True)
                if amp is None:
                    loss = tracker.forward(model, x, y)
                else:
                    with amp:
                        loss = tracker.forward(model, x, y)
                loss.backward()
                opt.step()
            return model, opt, step
        params = MA.rank_param_bytes(arch_of(c), lay["dp"], lay["tp"])
        act = c.layers * activation_bytes_per_layer(
            c.seq, micro, c.hidden, c.heads, tp=lay["tp"],
            sequence_parallel=lay["sp"])
        act *= 1 if p["bf16"] else 2  # Table 2 counts 16-bit activations
        states = 4 * params           # fp32 weights, grads, Adam m and v
        cases.append(Case("mesh", text, "every rank", p["world_size"], 0,
                          setup, {"params": params, "grads": params,
                                  "optimizer": 2 * params,
                                  "states": states, "activations": act,
                                  "total": states + act},
                          ("mesh", text, str(c), micro, p["bf16"])))
    return cases
