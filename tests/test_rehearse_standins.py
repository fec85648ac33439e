"""The rehearsal's stand-ins for what a rank's own process gives it
(labkit.rehearse.world), found by executing every lab's notebook with
``--cells all`` (issue 28): each rank's groups, module globals and
library state are those a fresh process on a GPU node would have."""
from __future__ import annotations

import sys
import types

import torch
import torch.distributed as tdist

from labkit.rehearse.world import rehearsed_rank


def test_a_gloo_subgroup_is_fake_and_its_cpu_tensors_lawful():
    """Megatron's ``initialize_model_parallel`` makes gloo groups beside
    the nccl ones (lab 5): a real gloo group wants a real store. On the
    node a CPU tensor in a gloo group is lawful; in the nccl world it is
    not."""
    with rehearsed_rank(2, 0) as r:
        with r.rules:
            g = tdist.new_group([0, 1], backend="gloo")
            tdist.all_reduce(torch.ones(3), group=g)
            assert r.rules.violations == []
            tdist.all_reduce(torch.ones(3))
    assert len(r.rules.violations) == 1
    assert "a CPU tensor (3,) in an nccl collective" in r.rules.violations[0]


def test_megatron_parallel_state_ends_with_the_rank():
    """A tp=2 rank's Megatron state must not reach the next launch's
    tp=4 ranks in the same kernel (each is a fresh process on the node)."""
    from megatron.core import parallel_state as ps
    with rehearsed_rank(2, 1):
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        assert ps.get_tensor_model_parallel_world_size() == 2
    assert not ps.model_parallel_is_initialized()
    with rehearsed_rank(4, 3):
        ps.initialize_model_parallel(tensor_model_parallel_size=4)
        assert ps.get_tensor_model_parallel_world_size() == 4
        assert ps.get_tensor_model_parallel_rank() == 3


def test_init_device_mesh_bound_at_import_is_the_fake_worlds():
    """``from torch.distributed.device_mesh import init_device_mesh`` at
    a run module's top (lab 13) gets the fake world's mesh too."""
    import torch.distributed.device_mesh as dm
    real = dm.init_device_mesh
    mod = types.ModuleType("labkit._bound_at_import")
    mod.init_device_mesh = real
    sys.modules[mod.__name__] = mod
    try:
        with rehearsed_rank(8, 7):
            assert mod.init_device_mesh is not real
            mesh = mod.init_device_mesh("meta", (1, 8),
                                        mesh_dim_names=("dp", "ep"))
            assert mesh.device_type == "meta"
            assert mesh["ep"].size() == 8
        assert mod.init_device_mesh is real
    finally:
        del sys.modules[mod.__name__]


def test_a_data_dependent_operator_is_a_limit_said_in_words():
    """Lab 13's router counts tokens per expert (``bincount``): a shape
    read from values fake tensors do not have -- not rehearsed, with the
    reason; never a failure, never an invented count."""
    from labkit.rehearse.hook import fake_limit, limit_reason
    p = ("launch labkit.runs.experts on 8 ranks, rank 0: error: "
         "DynamicOutputShapeException: aten.bincount.default "
         "(at moe/router.py:75)")
    assert fake_limit(p)
    why = limit_reason(p)
    assert why.startswith("fake tensors cannot run it (its output's shape "
                          "depends on values (data-dependent)): launch")
    assert "aten.bincount" in why and "\n" not in why
    assert not fake_limit("rank 0: error: device rule: a CPU tensor")


def test_a_cell_past_the_timeout_is_listed_and_the_rest_run():
    """nbclient interrupts a cell past the timeout (lab 1's five 1.4B
    strategies under load): the cell is listed, the notebook goes on."""
    from labkit.rehearse import notebooks as N
    st, why = N._status({}, ("KeyboardInterrupt", ""), [], [])
    assert st == "not rehearsed"
    assert f"ran past the rehearsal's {N.CELL_TIMEOUT_S} s" in why


def test_a_mesh_rank_table_is_real_and_nothing_else_turns_constant():
    """Lab 10 names each collective's mesh dimension by the ranks of its
    group (``mesh["tp"].mesh.flatten().tolist()``: a ``nonzero()`` on
    the rank ids inside). On the node the table is a CPU tensor of rank
    ids, never data: real here too. Values from fake data stay NaN (not
    rehearsed); the table mixed with fake data is fake; an integer
    tensor that is not a rank table is not kept as a constant (an
    earlier fix kept every small integer tensor's values, and so ran
    real operators on them at real sizes)."""
    import math
    import torch.distributed.device_mesh as dm
    from torch._subclasses.fake_tensor import FakeTensor
    with rehearsed_rank(8, 5) as r:
        mesh = dm.init_device_mesh("meta", (2, 4),
                                   mesh_dim_names=("dp", "tp"))
        assert mesh["tp"].mesh.flatten().tolist() == [4, 5, 6, 7]
        assert mesh["dp"].mesh.flatten().tolist() == [1, 5]
        assert mesh.mesh.reshape(-1, 4).tolist() == [[0, 1, 2, 3],
                                                    [4, 5, 6, 7]]
        assert mesh.get_local_rank("dp") == 1
        x = torch.ones(4, 4) * 2
        assert math.isnan(x.sum().item())
        mixed = x[mesh["tp"].mesh - 4]
        assert isinstance(mixed, FakeTensor) and mixed.shape == (4, 4)
        ints = torch.arange(16).flatten()
        assert isinstance(ints, FakeTensor) and ints.constant is None
    assert r.not_rehearsed == 1
    assert type(dm.DeviceMesh.__dict__["mesh"].fget).__name__ == "function"
    assert "rehearse" not in dm.DeviceMesh.__dict__["mesh"].fget.__module__


def test_all_gather_object_carries_its_bytes_on_the_gpu_as_nccl_does():
    """Lab 3 gathers each rank's (node, host) with ``all_gather_object``:
    on an nccl group torch moves the pickled bytes to the rank's GPU
    first. The fake world's group serves the CPU too, for which torch
    would keep them on the CPU and the device rule would fire where the
    node runs fine. A peer's object is no fake rank's to know: this
    rank's, counted as not rehearsed. A gloo group's bytes stay on the
    CPU (lawful there)."""
    from labkit.rehearse.nccl import object_collectives
    from labkit.rehearse.world import Rank
    seen = {}

    def main(argv):
        got = [None] * 4
        tdist.all_gather_object(got, (0, "node-a"))
        seen["world"] = got
        g = tdist.new_group([0, 1, 2, 3], backend="gloo")
        pair = [None] * 4
        tdist.all_gather_object(pair, {"rank": 2}, group=g)
        seen["gloo"] = pair
    with rehearsed_rank(4, 2) as r:
        r.main(main, [])
    assert r.error is None and r.rules.violations == []
    assert seen["world"] == [(0, "node-a")] * 4
    assert seen["gloo"] == [{"rank": 2}] * 4
    assert r.not_rehearsed == 6
    # torch's own choice for the fake world's group (CPU): the rule fires
    with rehearsed_rank(4, 2) as r:
        with r.rules:
            import torch.distributed.distributed_c10d as c10d
            assert c10d._get_object_coll_device() == "cpu"
            with object_collectives(r.rules):
                assert c10d._get_object_coll_device() == "meta"
            data, size = c10d._object_to_tensor((0, "x"), "cpu", None)
            tdist.all_gather([torch.zeros_like(size)] * 4, size)
    assert "allgather_: a CPU tensor (1,) in an nccl collective" in \
        r.rules.violations[0]


def test_dtensor_caches_end_with_the_rank():
    """DTensor caches redistribution plans and sharding by device mesh,
    and rank 7's 2x4 mesh equals rank 0's although its "tp" group has
    another name (each rank registers only its own groups). Rank 7 of
    lab 10, rehearsed after rank 0 in one kernel, redistributed over
    rank 0's group: each rank's process starts with none cached."""
    import torch.distributed.device_mesh as dm
    from torch.distributed.tensor import DTensor, Replicate, Shard
    names = []
    for rank in (0, 7):
        with rehearsed_rank(8, rank) as r:
            with r.rules:
                mesh = dm.init_device_mesh("meta", (2, 4),
                                           mesh_dim_names=("dp", "tp"))
                names.append(mesh["tp"]._dim_group_names[0])
                x = DTensor.from_local(torch.ones(2, 4, device="meta"),
                                       mesh["tp"], [Shard(0)])
                x = x * 2     # sharding propagation: cached by mesh
                y = x.redistribute(placements=[Replicate()]).to_local()
                assert y.shape == (8, 4) and y.device.type == "meta"
            assert r.rules.violations == []
    assert names[0] != names[1]


def _fsdp1_step(strategy: str, world_size: int, rank: int):
    """One bf16 training step of the tiny GPT wrapped by ``labkit.training.wrap``
    as lab 3 wraps it, on a rehearsed rank; the flat parameters' devices."""
    from labkit import dist
    from labkit.nn.model import GPTConfig, rank_batches
    from labkit.training.train import setup, train_step
    cfg = GPTConfig(layers=1, hidden=32, heads=2, vocab=64, seq=8)
    seen = {}

    def main(argv):
        ctx = dist.init()
        model, opt, amp = setup(strategy, cfg, ctx, True, 0,
                                bucket_cap_mb=25, shard_group=2)
        seen["devices"] = {p.device.type for p in model.parameters()}
        for x, y in rank_batches(cfg, 2 * world_size, ctx, 1, 0):
            seen["loss"] = train_step(model, opt, x, y, amp).device.type
    with rehearsed_rank(world_size, rank) as r:
        r.main(main, [])
    return r, seen


def test_fsdp1_given_the_meta_gpu_keeps_its_flat_parameters_there():
    """Lab 3's FSDP1 strategies get ``device_id=ctx.device`` (``meta``,
    no index): FSDP1 then takes the device module's current device, as
    it takes ``torch.cuda.current_device()`` on the node. The CPU's
    (``torch.meta`` was ``torch.cpu``) kept every flat parameter on the
    CPU, and the device rule fired on each all-gather; and FSDP1's move
    of a unit (``param.data = param.to(device)``) is refused by a fake
    CPU tensor, so the stand-in moves it as ``nn.Module.to`` does."""
    assert not hasattr(torch, "meta")
    for strategy, rank in (("fsdp1_full_shard", 0),
                           ("fsdp1_hybrid_shard", 3), ("fsdp2_hybrid", 3)):
        r, seen = _fsdp1_step(strategy, 4, rank)
        assert r.error is None and r.rules.violations == [], strategy
        assert seen == {"devices": {"meta"}, "loss": "meta"}, strategy
        assert r.peak > 0
    assert not hasattr(torch, "meta")


def test_a_cpu_state_fsdp1_does_not_move_is_still_seen():
    """The stand-in moves only what FSDP1 moves: a module wrapped
    without ``device_id`` stays on the CPU, and its collective breaks
    the device rule, as NCCL would refuse it."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with rehearsed_rank(2, 0) as r:
        with r.rules:
            m = FSDP(torch.nn.Linear(4, 4), device_id=torch.device("cpu"))
            m(torch.ones(2, 4)).sum().backward()
    assert {p.device.type for p in m.parameters()} == {"cpu"}
    assert r.rules.violations and "a CPU tensor" in r.rules.violations[0]


def test_the_meta_gpus_streams_record_events():
    """FSDP2's HSDP (lab 3's ``fsdp2_hybrid``) asserts that its
    all-reduce stream recorded an event on any device but the CPU; the
    CPU's streams record none (``record_event`` returns None)."""
    from labkit.rehearse.world import meta_device_module
    m = meta_device_module()
    assert m.current_device() == "meta"
    for s in (m.Stream(), m.current_stream(), m.default_stream()):
        assert s.record_event() is not None
    with m.stream(m.Stream()):
        assert m.current_stream().record_event() is not None


def test_a_barrier_is_lawful_on_the_nccl_world():
    """``dist.barrier()`` all-reduces a tensor torch makes on the machine's
    accelerator (``torch._C._get_accelerator()``): the GPU on the node,
    the CPU here. The rank's code never chose it (lab 7's gpu8 cell was
    failed for it); a CPU tensor the code passes is still seen."""
    with rehearsed_rank(2, 0) as r:
        with r.rules:
            tdist.barrier()
            assert r.rules.violations == []
            tdist.all_reduce(torch.ones(1))
    assert "all_reduce" in r.rules.violations[0] or \
        "allreduce" in r.rules.violations[0]


def test_deepspeed_raising_on_its_cpu_accelerator_is_a_limit():
    """DeepSpeed makes its buffers on ``get_accelerator()``, chosen at
    import: the CPU here, CUDA on the node, while the rank's GPU is the
    meta device (lab 4's gpu8 cell: "assign a gradient with device type
    'cpu' to a tensor with device type 'meta'"). Raised inside DeepSpeed
    with a CPU accelerator, the rank's error says so and the launch is
    listed as not rehearsed; raised in the rank's own code, it is not."""
    import deepspeed.accelerator  # noqa: F401 - what the rank imported
    from labkit.rehearse.hook import fake_limit, limit_reason
    from labkit.rehearse.world import _deepspeed_here
    ns = {}
    exec(compile("def boom():\n    raise RuntimeError('assign a gradient')\n",
                 "/venv/site-packages/deepspeed/runtime/engine.py", "exec"),
         ns)
    try:
        ns["boom"]()
    except RuntimeError as e:
        note = _deepspeed_here(e)
    assert note == " [DeepSpeed's accelerator here is the CPU]"
    line = "launch x, rank 0: error: RuntimeError: assign a gradient" + note
    assert fake_limit(line) and "CUDA on the node" in limit_reason(line)
    try:
        raise RuntimeError("assign a gradient")
    except RuntimeError as e:
        assert _deepspeed_here(e) == ""
    # torch's own device lists know CUDA, not the meta device standing in
    # for it (lab 14's ShardedGradScaler); "got cpu" is the rank's fault
    assert fake_limit("rank 3: error: AssertionError: Expected supported "
                      "device, got meta")
    assert not fake_limit("rank 3: error: AssertionError: Expected "
                          "supported device, got cpu")


def test_fp8_is_judged_on_the_described_gpu(monkeypatch):
    """Lab 14's gpu8 profile asks for a real FP8 GEMM: refused on this CPU,
    it is the described node's GPU that decides under a rehearsal (an H100
    has FP8 tensor cores, a T4 has not)."""
    from labkit.checks.precision import fp8_unavailable
    from labkit.rehearse.node import describe
    assert describe("h100x8").fp8 and describe("h200").fp8
    assert not describe("t4").fp8
    monkeypatch.setenv("LABKIT_REHEARSE", "h100x8")
    assert fp8_unavailable() is None
    monkeypatch.setenv("LABKIT_REHEARSE", "t4")
    assert "Tesla T4 (rehearsed)" in fp8_unavailable()


def test_attention_on_the_meta_gpu_keeps_what_cudas_fused_kernels_keep():
    """On CUDA, ``scaled_dot_product_attention`` runs FlashAttention (bf16)
    or the memory-efficient kernel (fp32): neither keeps the seq x seq
    scores. On ``meta`` torch picks the math composite, which does: lab
    12's gpu8 launch was rehearsed at 201 GB (an OOM) where its dry run,
    the ledger and the GPU hold 51 GB. In a rehearsed rank the fused
    kernels run, with their meta functions and autograd formulas."""
    import torch.nn.functional as F
    from labkit.rehearse.attention import SDPA
    saved = []

    def attend(dtype):
        saved.clear()
        q, k, v = (torch.empty(1, 4, 512, 64, device="meta", dtype=dtype,
                               requires_grad=True) for _ in range(3))
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.sum().backward()
        assert q.grad.shape == q.shape
        return type(y.grad_fn).__name__
    with rehearsed_rank(2, 0):
        assert "Flash" in attend(torch.bfloat16)
        assert not any(s[-2:] == (512, 512) for s in saved), saved
        assert "Efficient" in attend(torch.float32)
        assert not any(s[-2:] == (512, 512) for s in saved), saved
    assert F.scaled_dot_product_attention is SDPA     # restored


def test_a_launch_whose_lesson_is_time_is_listed_not_run(monkeypatch,
                                                          tmp_path):
    """Lab 8's hang cell stalls a rank for 10 x the timeout until the
    process group's timeout ends the others: fake ranks have no timeout,
    so the rank would sleep it all (the whole-notebook rehearsal waited
    out its 1800 s cell limit). It is listed with its reason instead."""
    import pytest
    from labkit.rehearse.hook import NotRehearsed, launch
    monkeypatch.setenv("LABKIT_REHEARSE", "h100x8")
    monkeypatch.setenv("LABKIT_REHEARSE_LOG", str(tmp_path / "log.jsonl"))
    with pytest.raises(NotRehearsed, match="stalls on purpose"):
        launch("labkit.runs.tools.hang", 2, {"stall_rank": 1, "sleep_s": 1e6})


def test_a_run_whose_flags_name_its_steps_keeps_them():
    """The rehearsal shortens loops (``--steps`` to 2); lab 8's run kills a
    rank in step ``--kill-step`` and refused the cut run ("--kill-step
    must be a step of the run"): such a run keeps its steps. Data-loader
    workers forked from the fake world are a limit, said in words."""
    from labkit.rehearse.hook import cut, fake_limit, limit_reason
    assert cut(["--steps", "20", "--repeats", "3"])[0] == \
        ["--steps", "2", "--repeats", "1"]
    assert cut(["--steps", "20", "--kill-step", "12"])[0] == \
        ["--steps", "20", "--kill-step", "12"]
    line = ("rank 0: error: RuntimeError: DataLoader worker (pid(s) 31266) "
            "exited unexpectedly")
    assert fake_limit(line) and "forks of this process" in limit_reason(line)
    # lab 8: DCP gathers each rank's pickled save plan (fake objects in it)
    line = ("rank 0: error: CheckpointError: checkpoint of step 5 in x not "
            "written: RuntimeError: <pybind11_builtins.x object at 0x7f> is "
            "not pickleable.")
    assert fake_limit(line) and "save plan" in limit_reason(line)


def test_fit_to_gpu_reads_the_described_gpu(monkeypatch, capsys):
    """Lab 1's gpu1 profile trims its model to the GPU (``fit_to_gpu``):
    on this CPU the check refused ("needs a CUDA GPU") and the whole gpu1
    notebook went unrehearsed; under a rehearsal the described node's GPU
    decides: 24 layers fit an H200, a 16 GB T4 trains fewer."""
    from labkit.checks.data_parallel import memory
    model = {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 50304,
             "seq": 1024, "arch": "gpt"}
    monkeypatch.setenv("LABKIT_REHEARSE", "h200")
    assert memory("gpu1", [1], ["ddp"], model, 8, 5, fit_to_gpu=True)[2] \
        == model
    monkeypatch.setenv("LABKIT_REHEARSE", "t4")
    small = memory("gpu1", [1], ["ddp"], model, 8, 5, fit_to_gpu=True)[2]
    assert 0 < small["layers"] < 24
    assert "Tesla T4 (rehearsed)" in capsys.readouterr().out


def test_a_rehearsed_rank_writes_in_its_launchs_folder(tmp_path, monkeypatch):
    """A real launch gives its ranks ``LABKIT_RUN_DIR`` (their heartbeats,
    lab 8's steps.jsonl): rehearsed ranks wrote into the caller's working
    directory instead (a notebook's: labs/ of the checkout). They write
    into the launch's ``run_dir``, else a new folder under _build."""
    import sys as _sys
    from labkit.rehearse.node import describe
    from labkit.rehearse.run import rehearse_ranks
    (tmp_path / "writes_here.py").write_text(
        "import os, pathlib\n"
        "def main(argv=None):\n"
        "    d = pathlib.Path(os.environ.get('LABKIT_RUN_DIR', '.'))\n"
        "    (d / f\"r{os.environ['RANK']}.txt\").write_text('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    given = tmp_path / "run"
    res = rehearse_ranks("writes_here", 2, [], describe(), ranks="all",
                         run_dir=given)
    assert not res["problems"] and sorted(p.name for p in given.iterdir()) \
        == ["r0.txt", "r1.txt"]
    rehearse_ranks("writes_here", 2, [], describe(), ranks="all")
    assert list(cwd.iterdir()) == []
    _sys.modules.pop("writes_here", None)


def test_the_notebooks_own_measurement_runs_on_the_rehearsals_gpu(
        monkeypatch):
    """Lab 1 measures the activations kept per precision and recompute in
    the notebook's own process. Its GPU profiles took ``cuda`` to be absent
    and built the real-size model on this CPU (the gpu8 rehearsal was
    killed at 13.3 GB). Under a rehearsal the kernel's device is the
    stand-in GPU: fake tensors at the real size, CUDA's autocast and fused
    attention, the ledger's ``cuda`` bytes, no real memory."""
    import resource
    from labkit.measure.activations import measure
    from labkit.nn.model import GPTConfig, arch_of, batch, build_arch
    from labkit.predict import activations as A
    from labkit.predict.activations import arch as AA
    from labkit.training.recompute import apply
    from labkit.rehearse.kernel import kernel_device
    assert kernel_device("cpu").device.type == "cpu"
    assert kernel_device("gpu8").kind == ("cuda" if torch.cuda.is_available()
                                          else "cpu")
    monkeypatch.setenv("LABKIT_REHEARSE", "h100x8")
    assert kernel_device("cpu").device.type == "cpu"
    on = kernel_device("gpu8")
    assert (on.device.type, on.kind) == ("meta", "cuda")
    config = GPTConfig(layers=24, hidden=2048, heads=16, vocab=50304,
                       seq=1024, arch="gpt")        # lab 1's gpu8 model
    record, mb = arch_of(config), 2
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for prec in A.PRECISIONS:
        for rc in A.RECOMPUTE:
            with on.enter():
                x, y = batch(config, mb, step=0, device=on.device)
                with on.device:
                    net = apply(build_arch(record), rc)
                if prec == "fsdp_bf16":
                    net = net.to(torch.bfloat16)
                amp = (torch.autocast("meta", dtype=torch.bfloat16)
                       if prec == "autocast_bf16" else None)
                got = measure(net, x, y, amp, settle_s=0)
            want = A.total(AA.saved(record, config.seq, mb, prec, rc,
                                    strided_targets=not y.is_contiguous(),
                                    device=on.kind))
            # the fused kernels' meta functions also return their RNG
            # state (uint64, 16-24 bytes a layer): nothing else differs
            rng = sum(t[1] for t in got["tensors"] if "attention" in t[3]
                      and t[0] in ("int64", "torch.uint64"))
            assert got["total"] - rng == want, (prec, rc)
            assert rng <= 24 * config.layers, (prec, rc, rng)
    # 1.4B parameters in fp32 would be 5.6 GB: nothing real was made
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    assert grown < 1_000_000, f"{grown} KB"


def test_fit_to_gpu_trims_the_rehearsed_cases_to_the_described_gpu():
    """gpu1 rehearsed for a 16 GB T4: the notebook trains the layers the
    GPU holds (fit_to_gpu), and so do the dry-run cases beside it; they
    priced all 24 layers (44.8 GB) and failed a rehearsal the notebook
    passed. An H100 holds all 24."""
    from labkit.preflight import load_profile
    from labkit.rehearse.labs import lab_plans
    from labkit.rehearse.node import describe
    import re
    profile = {"memory": load_profile("gpu1")["memory"]}

    def layers(gpu_bytes):   # the case's key names its config
        return {int(re.search(r"layers=(\d+)", c.key[2]).group(1))
                for c in lab_plans(profile, gpu_bytes)["memory"].cases}
    t4 = layers(describe("t4").memory)
    assert len(t4) == 1 and 0 < min(t4) < 24
    assert layers(describe("h100x8").memory) == layers(None) == {24}


def test_a_node_with_fewer_gpus_lists_the_lab_as_run_labs_skips_it():
    """run_labs does not start a lab needing more GPUs than are visible;
    the rehearsal of gpu1 for one T4 ran lab 11's notebook anyway (it has
    launches) and failed on the lab's own check ("2 ranks need as many
    GPUs; 1 are visible")."""
    from labkit.rehearse import run as R
    rep = R.rehearse("gpu1", "t4", only=["context_parallel", "memory"],
                     cells=("context_parallel",))
    assert rep["failures"] == []
    assert "needs >= 2 GPUs" in rep["labs"]["context_parallel"]["listed"]
    assert all(c["fits"] for c in rep["labs"]["memory"]["cases"])


def test_another_environments_interpreter_is_not_this_one(tmp_path,
                                                          monkeypatch):
    """Lab 9 launches its ranks with .venv-colossalai's python, a link to
    the same base interpreter as .venv's: the rehearsal took it for its
    own and ran Colossal-AI's ranks where Colossal-AI is not installed."""
    import os
    import pytest
    from labkit.rehearse import hook
    venv = tmp_path / ".venv-other" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setenv("LABKIT_REHEARSE", "h100x8")
    monkeypatch.delenv("LABKIT_REHEARSE_LOG", raising=False)
    with pytest.raises(hook.NotRehearsed, match="another interpreter"):
        hook.launch("labkit.runs.colossalai", 8, {}, python=str(venv / "python"))
