"""The DeepSpeed-shaped PyTorch front: a DeepSpeed-style script gives plain PyTorch's weights."""
import collections
import copy
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 33)
        self.norm = torch.nn.LayerNorm(33)
        self.fc2 = torch.nn.Linear(33, 5)

    def forward(self, x):
        return self.fc2(self.norm(torch.tanh(self.fc1(x))))


class UpcastNet(torch.nn.Module):
    """16-bit storage, fp32 compute: CPU torch has no fp16 matmul, so the model upcasts weights."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 33)
        self.fc2 = torch.nn.Linear(33, 5)

    def forward(self, x):
        hidden = torch.tanh(torch.nn.functional.linear(x.float(), self.fc1.weight.float(), self.fc1.bias.float()))
        return torch.nn.functional.linear(hidden, self.fc2.weight.float(), self.fc2.bias.float())


def ds_config(stage, gas=1, clip=0.5, **extra):
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": clip,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.02, "betas": [0.9, 0.99], "eps": 1e-8,
                                                    "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.02,
                                                      "warmup_num_steps": 4, "warmup_type": "linear"}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 200, "allgather_bucket_size": 300,
                              "stage3_param_persistence_threshold": 40, "stage3_prefetch_bucket_size": 100},
    }
    config.update(extra)
    return config


def batches(count, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 12, generator=generator), torch.randn(8, 5, generator=generator)) for _ in range(count)]


def warmup_lr(step, min_lr, max_lr, warmup):
    """The lr of optimizer step `step` (from 0) under DeepSpeed's WarmupLR (warmup_type linear):
    the optimizer starts at warmup_min_lr, and the scheduler stepped after step k sets
    min_lr + (max_lr - min_lr) * min(1, k / warmup_num_steps) for step k + 1."""
    if step == 0:
        return min_lr
    iteration = step - 1
    gamma = iteration / warmup if iteration < warmup else 1.0
    return min_lr + (max_lr - min_lr) * gamma


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("gas", [1, 2])
def test_matches_torch_adamw_with_clipping(stage, gas):
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    engine, optimizer, _, scheduler = dsrt.initialize(model=model, model_parameters=model.parameters(),
                                                      config=ds_config(stage, gas))
    torch_opt = torch.optim.AdamW(reference.parameters(), lr=0.02, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    data = batches(6 * gas)
    for i, (x, y) in enumerate(data):
        if i % gas == 0:
            lr = warmup_lr(i // gas, min_lr=0.0, max_lr=0.02, warmup=4)
            assert math.isclose(engine.get_lr()[0], lr, rel_tol=1e-12, abs_tol=1e-15)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y) / gas
        ref_loss.backward()
        if (i + 1) % gas == 0:
            for group in torch_opt.param_groups:
                group["lr"] = lr
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
            torch_opt.step()
            torch_opt.zero_grad()
    assert engine.global_steps == 6
    for name, param in reference.named_parameters():
        ours = engine.get_fp32_param(name)
        err = (ours - param.detach()).norm() / param.detach().norm()
        assert err < 1e-5, "%s: relative error %g at stage %d" % (name, err, stage)
    assert scheduler.get_last_lr() == engine.get_lr()
    engine.close()


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_config_without_gradient_clipping_clips_at_one(stage):
    """No gradient_clipping key: DeepSpeed 0.19's default 1.0, i.e. torch's clip_grad_norm_(1.0) on
    the averaged gradients (coefficient 1.0 / (norm + 1e-6) when below 1)."""
    torch.manual_seed(3)
    model = Net()
    reference, unclipped = copy.deepcopy(model), copy.deepcopy(model)
    config = ds_config(stage, gas=2)
    del config["gradient_clipping"], config["scheduler"]
    engine, *_ = dsrt.initialize(model=model, model_parameters=model.parameters(), config=config)
    assert engine._config.get_number("gradient_clipping") == 1.0
    optimizers = [torch.optim.AdamW(m.parameters(), lr=0.02, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
                  for m in (reference, unclipped)]
    for i, (x, y) in enumerate(batches(8, seed=5)):
        y = 3.0 * y  # gradient norms well above 1 on every step
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
        for m in (reference, unclipped):
            (torch.nn.functional.mse_loss(m(x), y) / 2).backward()
        if i % 2 == 1:
            norm = float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0))
            assert norm > 2.0, "the job must clip: norm %g" % norm
            assert math.isclose(engine.get_global_grad_norm(), norm, rel_tol=1e-4)
            for opt in optimizers:
                opt.step()
                opt.zero_grad()
    far = 0.0
    for (name, param), other in zip(reference.named_parameters(), unclipped.parameters()):
        ours = engine.get_fp32_param(name)
        err = (ours - param.detach()).norm() / param.detach().norm()
        assert err < 1e-5, "%s: relative error %g at stage %d" % (name, err, stage)
        far = max(far, float((ours - other.detach()).norm() / other.detach().norm()))
    assert far > 1e-3, "clipping made no difference (%g): the test would pass without it" % far
    engine.close()


def test_stage3_parameters_are_empty_outside_use_and_gathered_on_request():
    model = Net()
    engine, *_ = dsrt.initialize(model=model, config=ds_config(3))
    assert model.fc1.weight.numel() == 0  # partitioned: nothing resident outside forward/backward
    with dsrt.GatheredParameters([model.fc1.weight]):
        assert tuple(model.fc1.weight.shape) == (33, 12)
        full = model.fc1.weight.detach().clone()
    assert model.fc1.weight.numel() == 0
    assert torch.allclose(full, engine.get_fp32_param("fc1.weight"))
    x, y = batches(1)[0]
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
    assert model.fc1.weight.numel() == 0
    engine.close()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(precision):
    torch.manual_seed(1)
    model = UpcastNet()
    config = ds_config(2, clip=1.0)
    config[precision] = {"enabled": True}
    if precision == "fp16":
        config["fp16"].update({"initial_scale_power": 8, "loss_scale_window": 5, "hysteresis": 1})
    engine, *_ = dsrt.initialize(model=model, config=config)
    assert next(model.parameters()).dtype == (torch.bfloat16 if precision == "bf16" else torch.float16)
    x, y = batches(1, seed=3)[0]
    losses = []
    for _ in range(40):
        loss = torch.nn.functional.mse_loss(engine(x).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    if precision == "fp16":
        assert engine.loss_scale > 2 ** 8  # grew after loss_scale_window clean steps
    engine.close()


def test_fp16_overflow_skips_step_and_halves_scale():
    torch.manual_seed(2)
    model = UpcastNet()
    config = ds_config(1)
    config["fp16"] = {"enabled": True, "initial_scale_power": 10, "hysteresis": 1}
    engine, *_ = dsrt.initialize(model=model, config=config)
    before = engine.get_fp32_param("fc2.bias").clone()
    x, y = batches(1)[0]
    x[0, 0] = float("inf")
    loss = torch.nn.functional.mse_loss(engine(x).float(), y)
    engine.backward(loss)
    result = engine.step()
    assert result.overflow and result.boundary
    assert engine.loss_scale == 2 ** 9
    assert torch.equal(engine.get_fp32_param("fc2.bias"), before)
    engine.close()


def test_checkpoint_client_state_round_trip(tmp_path):
    torch.manual_seed(4)
    model = Net()
    engine, *_ = dsrt.initialize(model=model, config=ds_config(2))
    for x, y in batches(3):
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    engine.save_checkpoint(tmp_path, client_state={"epoch": 7, "note": "from python"})
    saved = engine.get_fp32_param("fc1.weight")
    engine.close()
    model2 = Net()
    engine2, *_ = dsrt.initialize(model=model2, config=ds_config(2))
    path, client = engine2.load_checkpoint(tmp_path)
    assert client == {"epoch": 7, "note": "from python"}
    assert engine2.global_steps == 3
    assert torch.equal(engine2.get_fp32_param("fc1.weight"), saved)
    assert torch.equal(model2.fc1.weight.detach(), saved)  # the working copy was restored too
    engine2.close()


def test_auto_values_resolved_from_model_and_args():
    class WithConfig(Net):
        class config:
            hidden_size = 16

    model = WithConfig()
    args = type("Args", (), {"per_device_train_batch_size": 2, "max_grad_norm": 0.25, "learning_rate": 4e-4})()
    config = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_clipping": "auto",
              "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                    "stage3_param_persistence_threshold": "auto"}}
    engine, *_ = dsrt.initialize(args=args, model=model, config=config)
    assert engine._config.get_number("zero_optimization.reduce_bucket_size") == 256
    assert engine._config.get_number("zero_optimization.stage3_param_persistence_threshold") == 160
    assert engine._config.get_number("gradient_clipping") == 0.25
    assert engine.train_batch_size() == 2
    assert math.isclose(engine.get_lr()[0], 4e-4)
    engine.close()


def test_passing_a_torch_optimizer_is_refused_with_advice():
    model = Net()
    with pytest.raises(dsrt.UnsupportedError) as info:
        dsrt.initialize(model=model, optimizer=torch.optim.RMSprop(model.parameters(), lr=0.1), config=ds_config(0))
    assert "optimizer" in info.value.message


def test_gradients_reach_dsrt_during_backward():
    """Each parameter's gradient is handed over as soon as autograd has it (torch >= 2.1: a
    post-accumulate-grad hook; older: the AccumulateGrad node's hook), not after backward."""
    torch.manual_seed(5)
    model = Net()
    engine, *_ = dsrt.initialize(model=model, config=ds_config(2))
    handed = []
    for name, tensor in engine._engine.tensors.items():
        original = tensor.grad_ready
        tensor.grad_ready = lambda name=name, original=original: (handed.append(name), original())
    x, y = batches(1)[0]
    x.requires_grad_(True)
    seen_at_input = []
    x.register_hook(lambda grad: seen_at_input.append(set(handed)))
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    # fc2 and the norm are behind the input's gradient in backward: handed over before it
    assert {"fc2.weight", "fc2.bias", "norm.weight", "norm.bias"} <= seen_at_input[0]
    assert sorted(handed) == sorted(name for name, _ in model.named_parameters())
    assert all(param.grad is None for param in model.parameters())
    engine.step()
    engine.close()


@pytest.mark.parametrize("stage", [0, 2, 3])
@pytest.mark.parametrize("gas", [1, 2])
@pytest.mark.parametrize("passes", [1, 2])
def test_backward_reduces_the_micro_step_with_the_same_result(stage, gas, passes):
    """engine.backward() ends the micro-step (dsrt_engine_end_backward) when autograd returns, so
    step() only runs the optimizer; a host calling loss.backward() itself leaves the reduction to
    step(). Both give the same weights bit for bit, also with two backward passes per step."""
    torch.manual_seed(3)
    model = Net()
    fronts = []
    for _ in range(2):
        engine, *_ = dsrt.initialize(model=copy.deepcopy(model), config=ds_config(stage, gas))
        fronts.append(engine)
    ended = []
    original = fronts[0]._engine.end_backward
    fronts[0]._engine.end_backward = lambda: (ended.append(1), original())
    data = batches(4 * gas * passes, seed=7)
    for i in range(4 * gas):
        for p in range(passes):
            x, y = data[i * passes + p]
            fronts[0].backward(torch.nn.functional.mse_loss(fronts[0](x), y))
            torch.nn.functional.mse_loss(fronts[1](x), y).backward()
        for engine in fronts:
            engine.step()
    assert len(ended) == 4 * gas * passes
    assert fronts[0].global_steps == fronts[1].global_steps == 4
    for name, _ in model.named_parameters():
        ours, theirs = fronts[0].get_fp32_param(name), fronts[1].get_fp32_param(name)
        assert torch.equal(ours, theirs), name
        assert not torch.equal(ours, dict(model.named_parameters())[name].detach().float()), name
    for engine in fronts:
        engine.close()


Pair = collections.namedtuple("Pair", "value count")


class KeywordBlock(torch.nn.Module):
    """Called with keywords only and answering a dict holding a list and a namedtuple, as Hugging
    Face blocks do."""

    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(width, width) / width ** 0.5)
        self.gate = torch.nn.Parameter(torch.randn(width))

    def forward(self, *, hidden, scale=1.0):
        out = torch.tanh(hidden @ self.proj) * scale
        return {"hidden": out, "extras": [out * self.gate, None], "pair": Pair(out.sin(), 1)}


class KeywordNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(12, 16)
        self.block = KeywordBlock(16)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, x):
        result = self.block(hidden=self.inp(x), scale=0.5)
        return self.out(result["hidden"] + result["extras"][0] - result["pair"].value)


@pytest.mark.parametrize("stage", [0, 3])
def test_keyword_calls_and_dict_outputs_match_torch(stage):
    """Under ZeRO-3 a module's parameters are gathered again before its backward whatever the
    outputs' structure; without that, the block's saved weights would be empty in backward."""
    torch.manual_seed(6)
    model = KeywordNet()
    reference = copy.deepcopy(model)
    config = ds_config(stage)
    del config["scheduler"]  # a constant lr, as the reference uses
    engine, *_ = dsrt.initialize(model=model, config=config)
    torch_opt = torch.optim.AdamW(reference.parameters(), lr=0.02, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    for x, y in batches(4, seed=7):
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        torch_opt.step()
        torch_opt.zero_grad()
    for name, param in reference.named_parameters():
        err = (engine.get_fp32_param(name) - param.detach()).norm() / param.detach().norm()
        assert err < 1e-5, "%s: relative error %g at stage %d" % (name, err, stage)
    if stage == 3:
        assert model.block.proj.numel() == 0
    engine.close()


def test_training_data_gives_a_dataloader_of_micro_batches():
    data = torch.utils.data.TensorDataset(torch.arange(20.0).reshape(20, 1))
    model = Net()
    engine, _, loader, _ = dsrt.initialize(model=model, config=ds_config(0), training_data=data)
    sizes, values = [], []
    for (batch,) in loader:
        sizes.append(len(batch))
        values += batch.reshape(-1).tolist()
    assert sizes == [8, 8, 4]  # train_micro_batch_size_per_gpu, one rank
    assert sorted(values) == [float(i) for i in range(20)]
    engine.close()


def test_engine_lives_where_the_model_computes(monkeypatch):
    # A CPU model gets a CPU engine whatever GPUs are visible: its parameters stay CPU tensors.
    monkeypatch.delenv("DSRT_DEVICE", raising=False)
    model = torch.nn.Linear(4, 3)
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    engine, _, _, _ = dsrt.initialize(model=model, model_parameters=model.parameters(), config=config,
                                      comm=dsrt.Comm.local())
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert engine._engine.device[0] == dsrt.capi.DSRT_DEVICE_CPU
    assert "DSRT_DEVICE" not in os.environ
    # An explicit choice is left alone (and a bad one is the engine's config error).
    monkeypatch.setenv("DSRT_DEVICE", "tpu")
    with pytest.raises(dsrt.ConfigError, match="DSRT_DEVICE"):
        dsrt.initialize(model=torch.nn.Linear(4, 3), config=config, comm=dsrt.Comm.local())
