"""The `deepspeed` module tree of dsrt.compat, without the Hugging Face libraries: what they import
exists and works (the Trainer itself runs in tests/hf). Each check that imports dsrt.compat runs in
a fresh interpreter, since the line changes the process's import system."""
import copy
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402

BUILD_PYTHON = os.path.dirname(os.path.dirname(os.path.abspath(dsrt.__file__)))  # DSRT_BUILD_DIR/python


def python(code, expect_ok=True):
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON, DSRT_LOG_LEVEL="error")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)
    if expect_ok:
        assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_the_names_the_hf_libraries_import():
    done = python("""
        import dsrt.compat
        import importlib.metadata, importlib.util
        from packaging.version import Version
        version = importlib.metadata.version("deepspeed")
        assert Version(version) >= Version("0.9.3"), version  # transformers' and accelerate's floor
        assert importlib.util.find_spec("deepspeed") is not None
        assert importlib.metadata.metadata("deepspeed")["Name"] == "deepspeed"
        import deepspeed
        assert deepspeed.__version__ == version and "+dsrt." in version
        from deepspeed import DeepSpeedEngine, comm as dist
        import dsrt.torch_front
        assert DeepSpeedEngine is dsrt.torch_front.DsrtEngine
        import deepspeed.runtime.lr_schedules, deepspeed.runtime.engine
        assert "WarmupDecayLR" in deepspeed.runtime.lr_schedules.VALID_LR_SCHEDULES
        assert deepspeed.runtime.engine.DeepSpeedEngine is DeepSpeedEngine
        from deepspeed.utils import logger
        from deepspeed.checkpoint.utils import clone_tensors_for_torch_save
        from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
        from deepspeed.zero import Init, GatheredParameters
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
        from deepspeed.utils.zero_to_fp32 import (get_fp32_state_dict_from_zero_checkpoint,
                                                  load_state_dict_from_zero_checkpoint)
        import deepspeed.zero
        assert deepspeed.zero.Init is Init is dsrt.zero_front._ZeroInit
        # One module object under both names: state and classes are shared.
        import sys
        import dsrt.deepspeed.utils
        assert sys.modules["deepspeed.utils"] is dsrt.deepspeed.utils
        assert sys.modules["deepspeed"] is dsrt.deepspeed
        try:
            import deepspeed.no_such_module
            raise SystemExit("expected ModuleNotFoundError")
        except ModuleNotFoundError:
            pass
        print("ok", version)
    """)
    assert done.stdout.startswith("ok 0.")


def test_compat_refuses_after_another_deepspeed_was_imported():
    done = python("""
        import sys, types
        other = types.ModuleType("deepspeed")
        other.__file__ = "/elsewhere/deepspeed/__init__.py"
        other.__version__ = "0.14.0"
        sys.modules["deepspeed"] = other  # as if the real DeepSpeed had been imported first
        import dsrt.compat
    """, expect_ok=False)
    assert done.returncode != 0
    assert "import dsrt.compat first" in done.stderr and "0.14.0" in done.stderr


def test_comm_init_distributed_falls_back_to_gloo_without_cuda():
    done = python("""
        import os, socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import dsrt.compat
        from deepspeed import comm as dist
        import torch
        dist.init_distributed(dist_backend="nccl" if not torch.cuda.is_available() else "gloo",
                              auto_mpi_discovery=False)
        import torch.distributed
        assert torch.distributed.get_backend() == "gloo"
        assert dist.get_rank() == 0 and dist.get_world_size() == 1 and dist.is_initialized()
        t = torch.ones(3)
        dist.all_reduce(t)
        dist.barrier()
        assert t.tolist() == [1.0, 1.0, 1.0]
        print("ok")
    """)
    assert "ok" in done.stdout


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_deepspeed_adam_steps_as_torch(adamw_mode):
    from dsrt.deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(11)
    ours = torch.nn.Linear(6, 4)
    reference = torch.nn.Linear(6, 4)
    reference.load_state_dict(ours.state_dict())
    kwargs = dict(lr=0.03, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.1)
    optimizer = DeepSpeedCPUAdam(ours.parameters(), adamw_mode=adamw_mode, **kwargs)
    torch_optimizer = (torch.optim.AdamW if adamw_mode else torch.optim.Adam)(reference.parameters(), **kwargs)
    for _ in range(5):
        x = torch.randn(3, 6)
        for model, opt in ((ours, optimizer), (reference, torch_optimizer)):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
    for a, b in zip(ours.parameters(), reference.parameters()):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)


def test_initialize_takes_a_deepspeed_adam_as_the_optimizer_description():
    from dsrt.deepspeed import initialize
    from dsrt.deepspeed.ops.adam import DeepSpeedCPUAdam

    model = torch.nn.Linear(3, 2)
    engine, optimizer, _, _ = initialize(model=model, optimizer=DeepSpeedCPUAdam(model.parameters(), lr=0.25),
                                         config_params={"train_micro_batch_size_per_gpu": 1,
                                                        "steps_per_print": float("inf")},
                                         comm=dsrt.Comm.local())
    assert engine._config.get_string("optimizer.type") == "AdamW"
    assert engine.get_lr() == [0.25] and optimizer.overflow is False
    engine.close()
    two_groups = DeepSpeedCPUAdam([{"params": [model.weight], "weight_decay": 0.1},
                                   {"params": [model.bias], "weight_decay": 0.0}])
    with pytest.raises(dsrt.UnsupportedError, match="one hyperparameter group"):
        initialize(model=model, optimizer=two_groups, config_params={"train_micro_batch_size_per_gpu": 1},
                   comm=dsrt.Comm.local())


@pytest.mark.parametrize("stage", [0, 2])
def test_config_optimizer_with_a_scheduler_callable_follows_torch(tmp_path, stage):
    """The HF Trainer's form for a config with an "optimizer" section and no "scheduler": a callable
    that builds a torch LambdaLR on the optimizer it is given. dsrt's steps follow torch's AdamW
    under the same LambdaLR, and a checkpoint taken after 4 of 9 steps resumes the schedule."""
    from dsrt.deepspeed import initialize

    lam = lambda step: 1.0 / (1.0 + 0.7 * step) if step % 3 else 0.4 + 0.1 * step  # noqa: E731
    torch.manual_seed(31)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    reference.load_state_dict(start)
    params = {"lr": 0.03, "betas": [0.8, 0.95], "eps": 1e-7, "weight_decay": 0.05}
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=params["lr"], betas=tuple(params["betas"]),
                                eps=params["eps"], weight_decay=params["weight_decay"])
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, lam)
    generator = torch.Generator().manual_seed(77)
    data = [(torch.randn(4, 6, generator=generator), torch.randn(4, 3, generator=generator)) for _ in range(9)]
    config = {"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "AdamW", "params": params}}
    built = []

    def build(optimizer):
        assert isinstance(optimizer, torch.optim.Optimizer)
        built.append(torch.optim.lr_scheduler.LambdaLR(optimizer, lam))
        return built[-1]

    def make(m):
        engine, optimizer, _, scheduler = initialize(model=m, model_parameters=m.parameters(), lr_scheduler=build,
                                                     config_params=copy.deepcopy(config), comm=dsrt.Comm.local())
        assert scheduler is built[-1] and built[-1].optimizer is optimizer
        return engine, optimizer, scheduler

    lrs = []
    engine, optimizer, scheduler = make(model)
    for x, y in data[:4]:
        lrs.append(engine.get_lr()[0])
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    engine.save_checkpoint(str(tmp_path))
    engine.close()
    model2 = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    model2.load_state_dict(start)
    engine, optimizer, scheduler = make(model2)
    assert scheduler.last_epoch == 0
    engine.load_checkpoint(str(tmp_path))
    assert scheduler.last_epoch == 4  # the schedule resumed where it was saved, not from its start
    for x, y in data[4:]:
        lrs.append(engine.get_lr()[0])
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    ref_lrs = []
    for x, y in data:
        ref_lrs.append(ref_opt.param_groups[0]["lr"])
        torch.nn.functional.mse_loss(reference(x), y).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)  # no gradient_clipping key: DeepSpeed's 1.0
        ref_opt.step()
        ref_opt.zero_grad()
        ref_sched.step()
    assert lrs == pytest.approx(ref_lrs, rel=1e-12)
    assert lrs == pytest.approx([0.03 * lam(i) for i in range(9)], rel=1e-12)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(ref_opt.param_groups[0]["lr"], rel=1e-12)
    for name, param in reference.named_parameters():
        err = float((engine.get_fp32_param(name) - param.detach()).norm() / param.detach().norm())
        assert err < 1e-5, "%s: %g" % (name, err)
    engine.close()


def test_a_client_scheduler_beside_a_config_scheduler_is_refused():
    from dsrt.deepspeed import initialize

    model = torch.nn.Linear(3, 2)
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}}}
    with pytest.raises(dsrt.ConfigError, match="both would drive the learning rate"):
        initialize(model=model, model_parameters=model.parameters(), config_params=config, comm=dsrt.Comm.local(),
                   lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0))


def test_clone_tensors_for_torch_save_gives_tensors_of_their_own():
    from dsrt.deepspeed.checkpoint.utils import clone_tensors_for_torch_save

    base = torch.arange(10.0)
    state = {"a": base[2:5], "nested": [base[:1], (base[8:],)], "n": 3}
    cloned = clone_tensors_for_torch_save(state)
    assert torch.equal(cloned["a"], base[2:5]) and cloned["n"] == 3
    assert cloned["a"].untyped_storage().nbytes() == 12 if hasattr(cloned["a"], "untyped_storage") else \
        cloned["a"].storage().size() == 3
    base.zero_()
    assert cloned["a"].tolist() == [2.0, 3.0, 4.0] and cloned["nested"][1][0].tolist() == [8.0, 9.0]


@pytest.mark.parametrize("stage", [2, 3])
def test_consolidated_state_dict_and_zero_to_fp32(tmp_path, stage):
    from dsrt.deepspeed.utils.zero_to_fp32 import (get_fp32_state_dict_from_zero_checkpoint,
                                                   load_state_dict_from_zero_checkpoint)

    torch.manual_seed(12)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    model[0].bias.requires_grad_(False)  # a frozen parameter travels beside dsrt's states
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.05}},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                                    "stage3_gather_16bit_weights_on_model_save": True}}
    engine, *_ = dsrt.initialize(model=model, config=config, comm=dsrt.Comm.local())
    for _ in range(3):
        engine.backward(engine(torch.randn(2, 5)).square().mean())
        engine.step()
    assert engine.zero_gather_16bit_weights_on_model_save()
    state = engine._zero3_consolidated_16bit_state_dict()
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert list(state) == names
    for name in names:
        assert torch.equal(state[name], engine.get_fp32_param(name))  # fp32 run: working copy == master
    engine.save_checkpoint(tmp_path)
    assert os.access(tmp_path / "zero_to_fp32.py", os.X_OK)
    engine.close()

    fp32 = get_fp32_state_dict_from_zero_checkpoint(tmp_path)
    assert sorted(fp32) == sorted(names)
    for name in names:
        assert torch.equal(fp32[name], state[name])
    fresh = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    loaded = load_state_dict_from_zero_checkpoint(fresh, tmp_path)
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, state[name])
    # The script beside `latest`, as a user runs it.
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON)
    subprocess.run([sys.executable, str(tmp_path / "zero_to_fp32.py"), str(tmp_path), str(tmp_path / "out.bin")],
                   env=env, check=True, capture_output=True)
    written = torch.load(tmp_path / "out.bin")
    assert all(torch.equal(written[name], state[name]) for name in names)


def test_a_damaged_deepspeed_folder_is_named_as_such(tmp_path):
    """A folder with DeepSpeed's file names but not its contents: the error names the folder and
    what dsrt expects, from the consolidation and from load_checkpoint (real DeepSpeed checkpoints
    are imported: tests/python/test_ds_checkpoint.py)."""
    from dsrt.deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    tag = tmp_path / "global_step3"
    tag.mkdir()
    (tmp_path / "latest").write_text("global_step3")
    torch.save({"module": {"w": torch.ones(2)}}, tag / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": {}}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(dsrt.CheckpointError, match="not a DeepSpeed checkpoint dsrt can read"):
        get_fp32_state_dict_from_zero_checkpoint(tmp_path)
    model = torch.nn.Linear(2, 1)
    engine, *_ = dsrt.initialize(model=model, config={"train_micro_batch_size_per_gpu": 1}, comm=dsrt.Comm.local())
    with pytest.raises(dsrt.CheckpointError, match="mp_rank_00_model_states.pt"):
        engine.load_checkpoint(tmp_path)
    engine.close()
