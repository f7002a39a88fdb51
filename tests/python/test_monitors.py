"""DeepSpeed's monitors through the PyTorch front: csv_monitor (written by dsrt's core) with the
losses the front reports, the wall_clock_breakdown timings, the steps_per_print line with the loss,
and the clear error when tensorboard or wandb is enabled without its package. (The tensorboard
files themselves are checked in tests/hf/test_tensorboard.py, where the package is installed.)"""
import csv
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402


def config(tmp_path, gas=2, **extra):
    result = {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": gas, "steps_per_print": 1,
              "wall_clock_breakdown": True,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01,
                                                           "warmup_num_steps": 4, "warmup_type": "linear"}},
              "csv_monitor": {"enabled": True, "output_path": str(tmp_path), "job_name": "run"}}
    result.update(extra)
    return result


def read_csv(path):
    # DeepSpeed's rows end in \r\n, as Python's csv module writes them: read them back with it.
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [(int(step), float(value)) for step, value in rows[1:]]


def test_csv_monitor_files_hold_the_fronts_losses_and_the_schedule(tmp_path):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    lines = []
    dsrt.set_log_callback(lambda level, message: lines.append(message))
    try:
        engine, *_ = dsrt.initialize(model=model, config=config(tmp_path), comm=dsrt.Comm.local())
        expected_loss, lrs, window = [], [], 0.0
        for micro in range(8):
            x = torch.randn(3, 5)
            loss = (engine(x) - x.sum(dim=1, keepdim=True)).square().mean()
            window += loss.item() / 2  # DeepSpeed: the sum of loss / gradient_accumulation_steps
            engine.backward(loss)
            engine.step()
            if micro % 2 == 1:
                expected_loss.append(window)
                lrs.append(engine.get_lr()[0])
                window = 0.0
        engine.close()
    finally:
        dsrt.set_log_callback(None)
    folder = tmp_path / "run"
    header, rows = read_csv(folder / "Train_Samples_train_loss.csv")
    assert header == ["step", "train_loss"]
    assert [step for step, _ in rows] == [0, 6, 12, 18]  # samples before each boundary (batch 3 x 2)
    for (_, got), want in zip(rows, expected_loss):
        assert got == pytest.approx(want, rel=1e-12)
    header, rows = read_csv(folder / "Train_Samples_lr.csv")
    assert header == ["step", "lr"] and [step for step, _ in rows] == [6, 12, 18, 24]
    assert [value for _, value in rows] == lrs
    # DeepSpeed's WarmupLR: the k-th step runs at warmup_min_lr, then the formula at iteration k - 2.
    assert lrs == pytest.approx([0.0, 0.0025, 0.005, 0.0075], abs=1e-15)
    assert not (folder / "Train_Samples_loss_scale.csv").exists()  # fp16 only
    for phase in ("forward", "backward", "backward_allreduce", "step"):
        header, rows = read_csv(folder / ("Train_Samples_elapsed_time_ms_%s.csv" % phase))
        assert header == ["step", "elapsed_time_ms_" + phase] and len(rows) == 4
        assert all(0 <= value < 60e3 for _, value in rows)
    _, forward = read_csv(folder / "Train_Samples_elapsed_time_ms_forward.csv")
    assert all(value > 0 for _, value in forward)  # two forwards of a real model per window
    progress = [line for line in lines if "samples/s" in line]
    assert len(progress) == 4 and progress[-1].startswith("step 4:")
    assert float(progress[-1].rsplit("loss ", 1)[1]) == pytest.approx(expected_loss[-1], rel=1e-12)


def test_events_reach_the_host(tmp_path):
    torch.manual_seed(4)
    model = torch.nn.Linear(4, 2)
    engine, *_ = dsrt.initialize(model=model, config=config(tmp_path, gas=1, csv_monitor={"enabled": False}),
                                 comm=dsrt.Comm.local())
    loss = model(torch.randn(3, 4)).square().mean()
    engine.backward(loss)
    engine.step()
    events = {name: (value, step) for name, value, step in engine._engine.events()}
    assert events["Train/Samples/train_loss"] == (pytest.approx(loss.item(), rel=1e-12), 0)
    assert events["Train/Samples/lr"] == (engine.get_lr()[0], 3)
    assert not os.path.exists(tmp_path / "run")  # csv_monitor off: no files
    engine.close()


@pytest.mark.parametrize("section,package", [("tensorboard", "tensorboard"), ("wandb", "wandb")])
def test_enabled_monitor_without_its_package_is_a_clear_error(tmp_path, monkeypatch, section, package):
    # The package made unimportable the way Python marks a missing module (sys.modules[name] = None),
    # whether or not this interpreter has it.
    monkeypatch.setitem(sys.modules, package, None)
    if package == "tensorboard":
        monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    model = torch.nn.Linear(4, 2)
    extra = {section: {"enabled": True, "output_path": str(tmp_path)} if section == "tensorboard" else {"enabled": True}}
    with pytest.raises(dsrt.ConfigError) as error:
        dsrt.initialize(model=model, config=config(tmp_path, **extra), comm=dsrt.Comm.local())
    message = str(error.value)
    assert "%s.enabled is true" % section in message and "pip install %s" % package in message
    # Nothing was left half-made: the model still trains with plain torch.
    model(torch.randn(2, 4)).sum().backward()
