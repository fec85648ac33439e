"""Lab 4's explanation rule: the ledger plus the terms DeepSpeed adds.

    exp = expected_bytes(cfg, numels, world_size, no_grad_input_numels,
                         optimizer_class=run["optimizer_class"])
    exp["grads"]["expected"] <= measured <= exp["grads"]["expected"]
                                           + exp["grads"]["slack"]

The measured side is :func:`labkit.measure.zero.state.state_bytes`.
"""
from __future__ import annotations


def expected_bytes(cfg: dict, numels: list[int], world_size: int,
                   no_grad_input_numels: list[int] = (),
                   optimizer_class: str | None = None,
                   grad_accum_dtype: str | None = None) -> dict:
    """The ledger for a DeepSpeed run, plus the terms DeepSpeed adds.

    ``cfg`` is a :class:`labkit.predict.zero.ZeroConfig` as a dict,
    ``numels`` the sizes of the model's parameters in order, and
    ``no_grad_input_numels`` those of modules whose input carries no
    gradient (the token embeddings). For the snapshot taken at the end of
    backward (:func:`at_end_of_backward`), each category is ``{"ledger":
    labkit.predict.memory.ledger, <term>: bytes, ..., "expected": ledger +
    terms, "slack": bytes}``: the measured value lies in ``[expected,
    expected + slack]``. Terms (DeepSpeed 0.19.8):

    - ``padding``: ZeRO-1/2 flatten all weights into one buffer padded to
      a multiple of 2 N elements (``nccl_start_alignment_factor`` x N);
      ZeRO-3 pads every parameter to a multiple of N before cutting it.
    - ``master_copy`` (fp32 runs): ZeRO-1/2/3 keep their fp32 master
      partition as a copy even when the weights are fp32 already, 4 bytes
      per parameter / N that the fp32 ledger (4 + 4 + 8) has no line for.
      (Under bf16 it is the ledger's own K = 12 = 4 + 8.)
    - ``persistent`` (ZeRO-3): parameters with at most
      ``stage3_param_persistence_threshold`` elements stay whole on every
      rank (``mark_persistent_parameters`` in ``parameter_offload.py``),
      on top of their partition (one rank: the partition is the whole
      parameter, one copy).
    - ``inputs_without_grad`` (ZeRO-3): a module whose input needs no
      gradient (the embeddings, fed token ids) never triggers DeepSpeed's
      post-backward release hook; its gathered weights are freed with
      everything else right after backward (``partition_all_parameters``);
      not at one rank, where nothing is partitioned away.
    - ``fp32_accumulation`` and ``optimizer_partition``: the optimizer
      DeepSpeed wrapped (``optimizer_class``, the run's
      ``type(engine.optimizer).__name__``) is ``BF16_Optimizer`` where
      ``engine._do_optimizer_sanity_check`` returns ``BFLOAT16``: bf16
      weights with fp32 gradient accumulation (``grad_accum_dtype``) at
      ZeRO-1, and at ZeRO-0 itself in DeepSpeed releases whose
      ``get_data_types`` defaulted bf16 to fp32 accumulation when ZeRO was
      off. It keeps the whole fp32 gradient (``fp32_groups_gradients_flat``,
      padded to 2 N) beside the bf16 ``.grad`` (freed as it goes under
      ``immediate_grad_update``), and the fp32 master and Adam moments over
      this rank's 1/N of the weights even at ZeRO-0
      (``deepspeed/runtime/bf16_optimizer.py``).
    - ``fp32_partition``: ZeRO-1/2 reduce into an fp32 gradient partition
      under ZeRO-Offload or with ``grad_accum_dtype`` fp32.
    - slack for ``grads`` (ZeRO-2/3): the last gradient bucket, not yet
      reduced when autograd ends: at most ``reduce_bucket_size`` elements
      plus one parameter; ZeRO-2 also keeps, until the step, the whole
      gradient of a parameter that its partition boundary cuts.
    """
    from labkit.predict.memory import ledger as _ledger
    n = world_size
    stage = cfg["stage"]
    e = 2 if cfg["precision"] in ("bf16", "fp16") else 4
    phi = sum(numels)
    offload = ("params" if cfg["offload_param"] != "none" else
               "optimizer" if cfg["offload_optimizer"] != "none" else "none")
    led = _ledger(phi, n, f"zero{stage}",
                  precision="fp32" if e == 4 else "mixed", optimizer="adam",
                  offload=offload)
    out = {"params": {"ledger": led.params_gpu + led.params_cpu},
           "grads": {"ledger": led.grads_gpu + led.grads_cpu},
           "optimizer": {"ledger": led.optimizer_gpu + led.optimizer_cpu}}
    if stage in (1, 2):
        align = 2 * n
        padded = -(-phi // align) * align
    elif stage == 3:
        padded = sum(-(-k // n) * n for k in numels)
    else:
        padded = phi
    bf16_opt = optimizer_class == "BF16_Optimizer"
    if bf16_opt and stage == 0:   # flattened and padded like ZeRO-1
        padded = -(-phi // (2 * n)) * 2 * n
    pad = padded - phi
    acc = {"fp32": 4, "bf16": 2, "fp16": 2}.get(grad_accum_dtype or "", e)
    if bf16_opt and stage > 1:
        raise ValueError("BF16_Optimizer wraps ZeRO-0/1 only; got stage "
                         f"{stage}")
    if bf16_opt:
        if stage == 0:
            out["params"]["padding"] = e * pad
            out["optimizer"]["optimizer_partition"] = (
                12 * padded / n - out["optimizer"]["ledger"])
        out["grads"]["fp32_accumulation"] = (4 if acc == e else acc) * padded
        if cfg.get("immediate_grad_update"):
            out["grads"]["lp_grads_released"] = -e * phi
    if stage in (1, 2):
        out["params"]["padding"] = e * pad
    if stage >= 2:
        out["grads"]["padding"] = e * pad / n
    if stage == 3:
        out["params"]["padding"] = e * pad / n
    if stage >= 1:
        out["optimizer"]["padding"] = 12 * pad / n if e == 2 else 8 * pad / n
        if e == 4:
            out["optimizer"]["master_copy"] = 4 * padded / n
    if stage in (1, 2) and e == 2 and not bf16_opt and (
            offload == "optimizer" or acc == 4):
        # ZeRO-Offload reduces the 16-bit gradients into the fp32 master
        # partition's own .grad on the host (``master.grad``): 4 bytes per
        # parameter / N, where the ledger's 16-bit gradients count 2.
        out["grads"]["fp32_partition"] = (4 * padded - e * phi) / n
        out["grads"].pop("padding", None)
    if stage == 3 and n > 1:   # one rank: the partition is the parameter
        thr = cfg["stage3_param_persistence_threshold"]
        persistent = [k for k in numels if k <= thr]
        out["params"]["persistent"] = e * sum(persistent)
        out["params"]["inputs_without_grad"] = e * sum(
            k for k in no_grad_input_numels if k > thr)
    for cat in out.values():
        cat["expected"] = sum(cat.values())
        cat["slack"] = 0
    for cat, gpu in (("params", led.params_gpu), ("grads", led.grads_gpu),
                     ("optimizer", led.optimizer_gpu)):
        out[cat]["ledger_gpu"] = gpu   # the GPU's share (offload: less)
    if bf16_opt and cfg.get("immediate_grad_update"):
        out["grads"]["slack"] = e * max(numels)   # the last hook's .grad
    if stage >= 2:
        out["grads"]["slack"] = e * (cfg["reduce_bucket_size"] + max(numels))
        if stage == 2:
            out["grads"]["slack"] += e * max(numels)
    return out


def volume_units(records, params: float) -> float:
    """ZeRO communication volume of counted collectives, in units of Phi.

    ``labkit.predict.sharding.units_of_phi``, which counts DeepSpeed's
    ZeRO-1/2 reduce-to-owner path (``use_multi_rank_bucket_allreduce:
    false``: N ``dist.reduce`` of Phi/N elements) as 1 per element, like
    the reduce-scatter it replaces.
    """
    from labkit.predict.sharding import units_of_phi
    return units_of_phi(records, params)
