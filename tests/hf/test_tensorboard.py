"""The tensorboard monitor with the real tensorboard package (installed by scripts/test-hf.sh):
the front writes DeepSpeed's events to output_path/job_name, and the event files hold the same
names, sample steps and values as the csv_monitor files dsrt's core writes in the same run."""
import csv
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard", reason="the tensorboard package is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

import dsrt  # noqa: E402  (DSRT_BUILD_DIR/python, see conftest.py)


def test_tensorboard_events_equal_the_csv_monitor(tmp_path):
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "wall_clock_breakdown": True,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.02}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.02,
                                                           "warmup_num_steps": 3, "warmup_type": "linear"}},
              "tensorboard": {"enabled": True, "output_path": str(tmp_path / "tb"), "job_name": "job"},
              "csv_monitor": {"enabled": True, "output_path": str(tmp_path / "csv"), "job_name": "job"}}
    engine, *_ = dsrt.initialize(model=model, config=config, comm=dsrt.Comm.local())
    for _ in range(10):
        x = torch.randn(2, 6)
        engine.backward((engine(x) - x[:, :1]).square().mean())
        engine.step()
    engine.close()  # closes the SummaryWriter

    events = EventAccumulator(str(tmp_path / "tb" / "job"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/elapsed_time_ms_forward",
                "Train/Samples/elapsed_time_ms_backward", "Train/Samples/elapsed_time_ms_backward_allreduce",
                "Train/Samples/elapsed_time_ms_step"}
    assert tags == expected
    for tag in sorted(tags):
        with open(tmp_path / "csv" / "job" / (tag.replace("/", "_") + ".csv"), newline="") as f:
            rows = list(csv.reader(f))[1:]
        scalars = events.Scalars(tag)
        assert [s.step for s in scalars] == [int(step) for step, _ in rows], tag
        # TensorBoard stores float32 values.
        for scalar, (_, value) in zip(scalars, rows):
            assert scalar.value == pytest.approx(float(value), rel=1e-6), tag
    assert [s.step for s in events.Scalars("Train/Samples/lr")] == [4, 8, 12, 16, 20]
