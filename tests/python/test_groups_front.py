"""The PyTorch front's parameter groups and LR schedules against torch.optim (groups_front_worker.py):
AdamW/Adam/SGD/Adagrad with decay/no-decay groups of different lr and LambdaLR, passed as a client optimizer
and scheduler, stepped by the host, or as model_parameters dicts with a scheduler callable; at ZeRO
stages 0-3 on 1-3 ranks (fp32: < 1e-5 relative over 20 steps; bf16 within bf16 rounding)."""
import copy
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import dsrt  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import groups_front_worker as worker  # noqa: E402

SEED = int(os.environ.get("DSRT_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("form,kind", [("client_scheduler", "AdamW"), ("host_scheduler", "SGD"),
                                       ("dict_groups", "Adam"), ("host_scheduler", "AdamW"),
                                       ("client_scheduler", "SGD"), ("host_scheduler", "Adagrad")])
def test_fp32_matches_torch(stage, form, kind):
    failures = worker.check(None, stage, form, kind, "fp32", SEED)
    assert not failures, "seed %d:\n%s" % (SEED, "\n".join(failures))


@pytest.mark.parametrize("stage", [0, 3])
def test_bf16_within_rounding(stage):
    """(torch 1.13 has no fp16 matmul on the CPU: fp16 groups are checked in test_param_groups.py.)"""
    failures = worker.check(None, stage, "client_scheduler", "AdamW", "bf16", SEED)
    assert not failures, "seed %d:\n%s" % (SEED, "\n".join(failures))


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks(ranks):
    if shutil.which("mpirun") is None or not dsrt.has_feature("mpi"):
        pytest.skip("mpirun or dsrt's MPI support is missing")
    flags = ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
    if os.getuid() == 0:
        flags.append("--allow-run-as-root")
    env = dict(os.environ, DSRT_LOG_LEVEL="error")
    env.setdefault("DSRT_BUILD_DIR", str(HERE.parents[1] / "build"))
    out = subprocess.run(["mpirun", *flags, "-np", str(ranks), "-x", "DSRT_BUILD_DIR", "-x", "DSRT_LOG_LEVEL",
                          sys.executable, str(HERE / "groups_front_worker.py"), str(SEED)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, "seed %d:\n%s\n%s" % (SEED, out.stdout[-4000:], out.stderr[-4000:])


def test_config_scheduler_and_torch_scheduler_together_are_refused():
    model = worker.Net()
    client = torch.optim.AdamW(model.parameters(), lr=0.01)
    cfg = dict(worker.config(0, "AdamW", "fp32", False),
               scheduler={"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 5}})
    with pytest.raises(dsrt.ConfigError, match="both would drive the learning rate"):
        dsrt.initialize(model=model, optimizer=client, lr_scheduler=torch.optim.lr_scheduler.LambdaLR(client, worker.lam),
                        config=cfg)


def test_host_lr_under_a_config_scheduler_is_refused():
    model = worker.Net()
    cfg = dict(worker.config(0, "AdamW", "fp32", True),
               scheduler={"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 5}})
    engine, optimizer, _, _ = dsrt.initialize(model=model, model_parameters=worker.trainer_groups(model, "AdamW"),
                                              config=cfg)
    x, y = torch.randn(4, 12), torch.randn(4, 5)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()
    assert [g["lr"] for g in optimizer.param_groups] == [engine._engine.get_group_hyper(0, "lr")] * 2
    optimizer.param_groups[1]["lr"] = 0.5
    with pytest.raises(dsrt.StateError, match="scheduler WarmupLR sets lr of every group"):
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.close()


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("one_step", [False, True])
def test_host_boundaries_match_torch_accumulating_by_hand(stage, one_step):
    """The Trainer/Accelerate pattern: the loss divided by the window's length by the host,
    backward(scale_wrt_gas=False), set_gradient_accumulation_boundary before each backward, a short
    last window; engine.step() after every micro-step, or once per window (one_step)."""
    torch.manual_seed(SEED % 1000)
    model = worker.Net()
    reference = copy.deepcopy(model)
    cfg = worker.config(stage, "AdamW", "fp32", True)
    cfg["gradient_accumulation_steps"] = 4
    cfg["gradient_clipping"] = 0.5
    engine, *_ = dsrt.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    ref_opt = torch.optim.AdamW(reference.parameters(), weight_decay=0.0, **worker.KINDS["AdamW"])
    generator = torch.Generator().manual_seed(SEED % 997)
    for window in (4, 2, 4, 1):
        for i in range(window):
            x, y = torch.randn(4, 12, generator=generator), torch.randn(4, 5, generator=generator)
            engine.set_gradient_accumulation_boundary(i == window - 1)
            assert engine.is_gradient_accumulation_boundary() == (i == window - 1)
            engine.backward(torch.nn.functional.mse_loss(engine(x), y) / window, scale_wrt_gas=False)
            if not one_step or i == window - 1:
                assert engine.step().boundary == (i == window - 1)
            (torch.nn.functional.mse_loss(reference(x), y) / window).backward()
        norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        assert abs(engine.get_global_grad_norm() - float(norm)) <= 1e-5 * float(norm)
        ref_opt.step()
        ref_opt.zero_grad()
    for name, param in reference.named_parameters():
        err = float((engine.get_fp32_param(name) - param.detach()).norm() / param.detach().norm())
        assert err < 1e-5, "%s: %g (seed %d)" % (name, err, SEED)
    engine.close()


@pytest.mark.parametrize("stage", [1, 3])
def test_checkpoint_resumes_groups_and_client_scheduler(tmp_path, stage):
    """10 steps of the Trainer shape (client AdamW with two groups, LambdaLR passed to initialize),
    saved after 5 and resumed in a fresh engine, model and scheduler: equal to torch's 10 steps."""
    torch.manual_seed(SEED % 1000)
    model = worker.Net()
    start = copy.deepcopy(model)
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(worker.trainer_groups(reference, "AdamW"), **worker.KINDS["AdamW"])
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, worker.lam)
    generator = torch.Generator().manual_seed(SEED % 991)
    data = [(torch.randn(4, 12, generator=generator), torch.randn(4, 5, generator=generator)) for _ in range(10)]

    def make(m):
        client = torch.optim.AdamW(worker.trainer_groups(m, "AdamW"), **worker.KINDS["AdamW"])
        sched = torch.optim.lr_scheduler.LambdaLR(client, worker.lam)
        engine, optimizer, _, _ = dsrt.initialize(model=m, optimizer=client, lr_scheduler=sched,
                                                  config=worker.config(stage, "AdamW", "fp32", False))
        return engine, optimizer

    engine, _ = make(model)
    for x, y in data[:5]:
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    engine.save_checkpoint(tmp_path, client_state={"epoch": 3})
    engine.close()
    engine, optimizer = make(start)
    _, client_state = engine.load_checkpoint(tmp_path)
    assert client_state == {"epoch": 3}
    for x, y in data[5:]:
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    for x, y in data:
        torch.nn.functional.mse_loss(reference(x), y).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)  # no gradient_clipping key: DeepSpeed's 1.0
        ref_opt.step()
        ref_opt.zero_grad()
        ref_sched.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([g["lr"] for g in ref_opt.param_groups], rel=1e-12)
    for name, param in reference.named_parameters():
        err = float((engine.get_fp32_param(name) - param.detach()).norm() / param.detach().norm())
        assert err < 1e-5, "%s: %g (seed %d)" % (name, err, SEED)
    engine.close()


@pytest.mark.parametrize("kind,name", [("Adam", "beta1"), ("SGD", "momentum")])
def test_onecycle_drives_the_momentum_of_config_groups(kind, name):
    """A config OneCycle with cycle_momentum drives Adam's beta1 (and, unless DeepSpeed turns it off
    for SGD, the momentum); the front shows dsrt's values in param_groups without sending them back."""
    model = worker.Net()
    params = {"lr": 0.01, "momentum": 0.9} if kind == "SGD" else {"lr": 0.01}
    cfg = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": kind, "params": params},
           "zero_allow_untested_optimizer": True,
           "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.02,
                                                        "cycle_first_step_size": 3}}}
    engine, optimizer, _, _ = dsrt.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    lrs, moms = [], []
    x, y = torch.randn(4, 12), torch.randn(4, 5)
    for _ in range(3):  # the first cycle's rising half (cycle_first_step_size 3)
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
        group = optimizer.param_groups[0]
        lrs.append(group["lr"])
        moms.append(engine._engine.get_group_hyper(0, name))
    assert lrs == sorted(lrs) and lrs[0] < lrs[-1], lrs
    if kind == "Adam":
        assert moms == sorted(moms, reverse=True) and moms[0] > moms[-1], moms  # momentum falls as lr rises
    else:
        assert moms == [0.9] * 3, moms  # DeepSpeed does not cycle SGD's momentum
    engine.close()
