"""What DeepSpeed scripts and the HF Trainer read and pass: param_groups' lr following the
schedule, backward's return value, save_checkpoint's save_latest and exclude_frozen_parameters,
GatheredParameters(fwd_module=...), ZeRO-3's ds_* attributes, dataloader_drop_last."""
import os

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402


def config(stage=0, gas=1, **extra):
    result = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.04}},
              "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.04,
                                                                "warmup_num_steps": 3, "total_num_steps": 8,
                                                                "warmup_type": "linear"}},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    result.update(extra)
    return result


def warmup_decay_lr(iteration, min_lr=0.001, max_lr=0.04, warmup=3, total=8):
    """DeepSpeed's documented WarmupDecayLR (linear warmup) after the scheduler's step `iteration`:
    the warmup's lr while iteration < warmup_num_steps, then max_lr decayed linearly to 0 at
    total_num_steps: max(0, (total - iteration) / (total - warmup))."""
    if iteration < warmup:
        return min_lr + (max_lr - min_lr) * iteration / warmup
    return min_lr + (max_lr - min_lr) * max(0.0, (total - iteration) / (total - warmup))


def test_param_groups_lr_follows_the_schedule_and_backward_returns_the_loss():
    torch.manual_seed(20)
    model = torch.nn.Linear(3, 2)
    engine, optimizer, _, scheduler = dsrt.initialize(model=model, config=config(gas=2), comm=dsrt.Comm.local())
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.001)  # the optimizer starts at warmup_min_lr
    boundaries = 0
    for micro in range(16):
        loss = model(torch.randn(2, 3)).square().mean()
        returned = engine.backward(loss)
        assert torch.equal(returned, loss.detach() / 2)  # DeepSpeed: the loss scaled by 1/accumulation
        engine.step()
        if micro % 2 == 1:
            assert optimizer.param_groups[0]["lr"] == pytest.approx(warmup_decay_lr(boundaries), abs=1e-12)
            boundaries += 1
        assert optimizer.param_groups[0]["lr"] == scheduler.get_last_lr()[0] == engine.get_lr()[0]
    assert boundaries == 8
    engine.close()


class Frozen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(3, 4)
        self.embed.requires_grad_(False)
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.embed(x))


def train_steps(engine, model, count):
    for _ in range(count):
        engine.backward(engine(torch.randn(2, 3)).square().mean())
        engine.step()


def test_save_latest_and_frozen_parameters_in_checkpoints(tmp_path):
    torch.manual_seed(21)
    model = Frozen()
    engine, *_ = dsrt.initialize(model=model, config=config(), comm=dsrt.Comm.local())
    train_steps(engine, model, 2)
    engine.save_checkpoint(tmp_path, tag="first")
    assert open(tmp_path / "latest").read().strip() == "first"
    frozen = model.embed.weight.detach().clone()
    train_steps(engine, model, 1)
    engine.save_checkpoint(tmp_path, tag="second", save_latest=False)
    assert open(tmp_path / "latest").read().strip() == "first"  # untouched
    assert os.path.isdir(tmp_path / "second")
    engine.save_checkpoint(tmp_path, tag="third", exclude_frozen_parameters=True)
    # The frozen layer is a dsrt frozen tensor: in dsrt's own checkpoint, not in a file of the front.
    assert os.path.exists(tmp_path / "first" / "frozen_params.bin")
    assert not os.path.exists(tmp_path / "first" / "frozen_parameters.pt")
    with torch.no_grad():
        model.embed.weight.mul_(3)  # changed after the save ...
    engine.load_checkpoint(tmp_path, tag="first")
    assert torch.equal(model.embed.weight, frozen)  # ... and restored by the load
    engine.close()
    fresh = Frozen()
    engine2, *_ = dsrt.initialize(model=fresh, config=config(), comm=dsrt.Comm.local())
    engine2.load_checkpoint(tmp_path, tag="first", load_module_only=True)
    assert torch.equal(fresh.embed.weight, frozen)
    engine2.close()
    latest_free = tmp_path / "new"
    engine3, *_ = dsrt.initialize(model=Frozen(), config=config(), comm=dsrt.Comm.local())
    engine3.save_checkpoint(latest_free, tag="only", save_latest=False)
    assert not os.path.exists(latest_free / "latest")
    engine3.close()


def test_stage3_attributes_and_gathered_parameters_with_fwd_module():
    torch.manual_seed(22)

    class Reader(torch.nn.Module):
        def __init__(self, other):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(4))
            self.other = [other]  # a parameter it reads without owning the module

        def forward(self, x):
            return x * self.scale + self.other[0].weight.sum(1)

    source = torch.nn.Linear(3, 4)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), source)
    reader = Reader(source)
    model.append(reader) if hasattr(model, "append") else model.add_module("2", reader)
    engine, *_ = dsrt.initialize(model=model, config=config(stage=3), comm=dsrt.Comm.local())
    ids = set()
    for name, param in model.named_parameters():
        assert param.numel() == 0
        assert param.ds_numel == engine._by_param[id(param)].numel and param.ds_shape == torch.Size(
            engine._by_param[id(param)].shape)
        ids.add(param.ds_id)
    assert ids == set(range(len(list(model.parameters()))))
    with dsrt.GatheredParameters([source.weight], fwd_module=reader):
        assert tuple(source.weight.shape) == (4, 3)
    assert source.weight.numel() == 0
    assert any(p is source.weight for p in engine._external[id(reader)])
    out = engine(torch.randn(2, 3))  # reader's forward gathers source.weight as its external parameter
    engine.backward(out.square().mean())
    engine.step()
    assert not engine._gathered
    engine.close()


def test_dataloader_drop_last_from_the_config():
    data = torch.utils.data.TensorDataset(torch.arange(9.0).reshape(9, 1))
    for drop_last, sizes in ((False, [2, 2, 2, 2, 1]), (True, [2, 2, 2, 2])):
        model = torch.nn.Linear(1, 1)
        engine, _, loader, _ = dsrt.initialize(model=model, config=config(dataloader_drop_last=drop_last),
                                               training_data=data, comm=dsrt.Comm.local())
        assert [len(batch) for (batch,) in loader] == sizes
        engine.close()
