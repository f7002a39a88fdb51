"""Parameter groups, host-driven hyperparameters and host-driven accumulation boundaries of the
low-level engine, against torch.optim (AdamW, Adam, SGD, Adagrad with 3 groups and LambdaLR) and
against torch accumulating by hand (short windows, scale_wrt_gas off, several backward passes per
step), at ZeRO stages 0-3 on 1, 2 and 3 ranks (groups_worker.py does the work; on several ranks
the tensors straddle partitions). Also the bad inputs: unknown group, negative lr, a value the
optimizer does not use, setting values mid-window, and the config scheduler's values.
"""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import dsrt

HERE = pathlib.Path(__file__).resolve().parent
SEED = int(os.environ.get("DSRT_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
CONFIG = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}


def run_worker(ranks, *cases):
    env = dict(os.environ, DSRT_LOG_LEVEL="error")
    cmd = [sys.executable, str(HERE / "groups_worker.py"), str(SEED), *cases]
    if ranks > 1:
        if shutil.which("mpirun") is None or not dsrt.has_feature("mpi"):
            pytest.skip("mpirun or dsrt's MPI support is missing")
        flags = ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
        if os.getuid() == 0:
            flags.append("--allow-run-as-root")
        cmd = ["mpirun", *flags, "-np", str(ranks), "-x", "DSRT_BUILD_DIR", "-x", "DSRT_LOG_LEVEL", *cmd]
    env.setdefault("DSRT_BUILD_DIR", str(HERE.parents[1] / "build"))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, "seed %d, %d rank(s):\n%s\n%s" % (SEED, ranks, out.stdout[-4000:], out.stderr[-4000:])


@pytest.mark.parametrize("case", ["adamw", "adam_l2", "sgd", "adagrad", "lamb", "lion", "adamw_cpu_offload",
                                  "sgd_nvme_offload", "adamw_fp16", "sgd_bf16", "boundaries"])
def test_one_rank_against_torch(case):
    pytest.importorskip("torch")
    run_worker(1, case)


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_against_torch(ranks):
    pytest.importorskip("torch")
    # (16-bit gradients are checked on one rank: across ranks they are summed in 16 bits at stages 2-3.)
    run_worker(ranks, "adamw", "sgd", "lamb", "adamw_cpu_offload", "sgd_nvme_offload", "boundaries")


def test_checkpoint_restores_groups_and_reshards(tmp_path):
    """Saved on 2 ranks at stage 2 halfway through the adamw case, resumed on 1 rank at stage 3: the
    groups' values come back and the end result still equals torch's 20 steps."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    import groups_worker as w
    os.environ["DSRT_GROUPS_CKPT"] = str(tmp_path / "ckpt")
    try:
        run_worker(2, "ckpt_save")
    finally:
        del os.environ["DSRT_GROUPS_CKPT"]
    init, grads = w.make_data(SEED)
    optimizer, kind, groups = w.CASES["adamw"]
    values = [w.dsrt_values(g) for g in groups]
    names = list(w.SHAPES)
    comm = dsrt.Comm.local()
    ours = w.run_dsrt(comm, w.zero_config(3, optimizer), init, grads, values, names,
                      steps=range(w.STEPS // 2, w.STEPS), load_from=str(tmp_path / "ckpt"))
    theirs = w.run_torch(kind, init, grads, groups)
    for n in names:
        assert w.relative(ours[n], theirs[n]) < 1e-5, n

    # Another group layout: an error naming the tensor.
    engine = dsrt.Engine(w.zero_config(1, optimizer), comm)
    for n in names:
        engine.add_param(n, init=init[n])
    engine.add_group()
    engine.add_group()
    engine.tensors["b2"].group = 2
    engine.build()
    with pytest.raises(dsrt.CheckpointError, match="tensor 'b1' is in parameter group 1 there but in group 0 here"):
        engine.load_checkpoint(str(tmp_path / "ckpt"))
    engine.close()


def small_engine(config=CONFIG):
    engine = dsrt.Engine(config)
    w = engine.add_param("w", init=[1.0, 2.0, 3.0])
    b = engine.add_param("b", init=[0.5])
    return engine, w, b


def test_bad_input_names_group_and_value():
    engine, w, b = small_engine()
    with pytest.raises(dsrt.InvalidArgumentError, match="group 3 does not exist.*2 group"):
        g = engine.add_group(weight_decay=0.0)
        assert g == 1
        w.group = 3
    with pytest.raises(dsrt.InvalidArgumentError, match="group 1: lr is -0.5.*negative"):
        engine.set_group_hyper(1, "lr", -0.5)
    with pytest.raises(dsrt.InvalidArgumentError, match="AdamW does not use 'momentum'"):
        engine.set_group_hyper(1, "momentum", 0.9)
    with pytest.raises(dsrt.InvalidArgumentError, match="unknown hyperparameter 'learning_rate'"):
        engine.set_group_hyper(0, "learning_rate", 0.1)
    with pytest.raises(dsrt.InvalidArgumentError, match=r"beta2 is 1.*\[0, 1\)"):
        engine.set_group_hyper(1, "beta2", 1.0)
    b.group = 1
    engine.build()
    with pytest.raises(dsrt.StateError, match="already built"):
        engine.add_group()
    with pytest.raises(dsrt.StateError, match="already built"):
        w.group = 1
    # Mid-window: a gradient requested (gas 1, so before step()), and after a non-boundary step.
    w.grad()
    with pytest.raises(dsrt.StateError, match="accumulation window is open"):
        engine.set_group_hyper(1, "lr", 0.1)
    with pytest.raises(dsrt.StateError, match="accumulation window is open"):
        engine.set_scale_wrt_gas(False)
    engine.set_gradient_accumulation_boundary(False)
    assert not engine.step().boundary
    with pytest.raises(dsrt.StateError, match="1 micro-step"):
        engine.set_group_hyper(0, "weight_decay", 0.1)
    engine.set_gradient_accumulation_boundary(True)
    assert engine.step().boundary
    engine.set_group_hyper(1, "lr", 0.1)  # between windows
    assert engine.get_group_hyper(1, "lr") == 0.1
    engine.close()


def test_config_scheduler_drives_lr_of_every_group():
    config = dict(CONFIG, scheduler={"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01,
                                                                   "warmup_num_steps": 4, "warmup_type": "linear"}})
    engine, w, b = small_engine(config)
    g = engine.add_group()
    with pytest.raises(dsrt.StateError, match="scheduler WarmupLR sets lr of every group"):
        engine.set_group_hyper(g, "lr", 0.5)
    engine.set_group_hyper(g, "weight_decay", 0.5)  # not driven by the schedule: the host's
    b.group = g
    engine.build()
    lrs = []
    for _ in range(4):
        w.grad().numpy()[...] = 1.0
        w.grad_ready()
        engine.step()
        lrs.append((engine.group_lr(0), engine.group_lr(1)))
    # DeepSpeed's WarmupLR (linear, min 0): step 0 runs at the min lr, step k at max_lr * min(1, (k - 1) / 4);
    # both groups alike.
    expected = [0.0 if k == 0 else 0.01 * min(1.0, (k - 1) / 4) for k in range(4)]
    assert [a for a, _ in lrs] == [b_ for _, b_ in lrs]
    assert all(abs(a - e) < 1e-12 for (a, _), e in zip(lrs, expected)), (lrs, expected)
    assert engine.get_group_hyper(1, "weight_decay") == 0.5
    engine.close()


def test_device_option_wins_over_the_environment(monkeypatch):
    """The engine option names the device: "cpu" keeps the states on the CPU whatever DSRT_DEVICE
    says; a GPU in a build or machine without one is an error naming the option."""
    monkeypatch.setenv("DSRT_DEVICE", "cuda:7")
    with dsrt.Engine(CONFIG, device="cpu") as engine:
        engine.add_param("w", init=[1.0, 2.0])
        engine.build()
        assert engine.device == (dsrt.capi.DSRT_DEVICE_CPU, 0)
    monkeypatch.delenv("DSRT_DEVICE")
    if not dsrt.has_feature("cuda"):
        with pytest.raises((dsrt.UnsupportedError, dsrt.DeviceError), match="the engine option device is 'cuda:0'"):
            dsrt.Engine(CONFIG, device="cuda:0")
    with pytest.raises(dsrt.InvalidArgumentError, match="device is 'gpu'"):
        dsrt.Engine(CONFIG, device="gpu")
