"""\"auto\" config values resolved as the HF Trainer and Accelerate do: from args (TrainingArguments'
names), the torch optimizer, the training data, the batch sizes and model.config."""
import copy
import math
import types

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402
from dsrt import _auto  # noqa: E402
from torch_reference import assert_fp32_weights_match, train_beside  # noqa: E402


def hf_args(**overrides):
    """TrainingArguments' names, with values unlike its defaults so a test sees where each came from."""
    values = dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, learning_rate=3e-3,
                  adam_beta1=0.85, adam_beta2=0.97, adam_epsilon=1e-7, weight_decay=0.03, max_grad_norm=0.7,
                  warmup_steps=0, warmup_ratio=0.0, max_steps=-1, num_train_epochs=3, fp16=False, bf16=False)
    values.update(overrides)
    return types.SimpleNamespace(**values)


AUTO_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
    "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
}


def number(engine, key):
    return engine._config.get_number(key)


def test_every_value_comes_from_args_and_the_data():
    model = torch.nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(40, 4))
    engine, optimizer, loader, _ = dsrt.initialize(args=hf_args(warmup_ratio=0.25, bf16=True), model=model,
                                                   config=copy.deepcopy(AUTO_CONFIG), training_data=data,
                                                   comm=dsrt.Comm.local())
    assert number(engine, "train_micro_batch_size_per_gpu") == 3
    assert number(engine, "gradient_accumulation_steps") == 2
    assert number(engine, "train_batch_size") == 6  # micro x accumulation x world
    assert math.isclose(number(engine, "gradient_clipping"), 0.7)
    assert math.isclose(number(engine, "optimizer.params.lr"), 3e-3)
    assert math.isclose(number(engine, "optimizer.params.betas.0"), 0.85)
    assert math.isclose(number(engine, "optimizer.params.betas.1"), 0.97)
    assert math.isclose(number(engine, "optimizer.params.eps"), 1e-7)
    assert math.isclose(number(engine, "optimizer.params.weight_decay"), 0.03)
    assert math.isclose(number(engine, "scheduler.params.warmup_max_lr"), 3e-3)
    assert number(engine, "scheduler.params.warmup_min_lr") == 0
    assert engine.bfloat16_enabled()
    # 40 samples in micro-batches of 3: 14 batches, 7 optimizer steps an epoch, 3 epochs
    assert len(loader) == 14
    assert number(engine, "scheduler.params.total_num_steps") == 21
    assert number(engine, "scheduler.params.warmup_num_steps") == math.ceil(21 * 0.25)
    engine.close()


def test_max_steps_and_warmup_steps_win_over_epochs_and_ratio():
    model = torch.nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(40, 4))
    engine, *_ = dsrt.initialize(args=hf_args(max_steps=50, warmup_steps=7, warmup_ratio=0.5), model=model,
                                 config=copy.deepcopy(AUTO_CONFIG), training_data=data, comm=dsrt.Comm.local())
    assert number(engine, "scheduler.params.total_num_steps") == 50
    assert number(engine, "scheduler.params.warmup_num_steps") == 7
    engine.close()


def test_dataloader_drop_last_shortens_the_schedule():
    model = torch.nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(40, 4))
    config = dict(copy.deepcopy(AUTO_CONFIG), dataloader_drop_last=True)
    engine, _, loader, _ = dsrt.initialize(args=hf_args(), model=model, config=config, training_data=data,
                                           comm=dsrt.Comm.local())
    assert len(loader) == 13 and all(len(batch) == 3 for (batch,) in loader)
    assert number(engine, "scheduler.params.total_num_steps") == (13 // 2) * 3
    engine.close()


def batch_config(micro, gas, total):
    return dsrt.Config({"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": gas,
                        "train_batch_size": total, "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}})


@pytest.mark.parametrize("micro, gas, total, world, expected", [
    ("auto", 4, 32, 2, (4, 4, 32)),       # micro = total / (gas x world)
    (2, "auto", 32, 2, (2, 8, 32)),       # accumulation = total / (micro x world)
    ("auto", "auto", 32, 4, (8, 1, 32)),  # DeepSpeed: accumulation 1 when only the total is given
    (2, 3, "auto", 4, (2, 3, 24)),        # total = micro x accumulation x world
])
def test_batch_sizes_solve_for_the_auto_one(micro, gas, total, world, expected):
    config = batch_config(micro, gas, total)
    _auto.resolve(config, torch.nn.Linear(2, 2), world)
    got = tuple(config.get_number(k) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                               "train_batch_size"))
    assert got == expected


def test_a_total_that_does_not_divide_is_a_config_error():
    with pytest.raises(dsrt.ConfigError, match="train_micro_batch_size_per_gpu"):
        _auto.resolve(batch_config("auto", 3, 32, ), torch.nn.Linear(2, 2), 2)


@pytest.mark.parametrize("attrs, hidden", [({"hidden_size": 24}, 24), ({"hidden_sizes": [8, 40, 16]}, 40),
                                           ({"d_model": 12}, 12)])
def test_bucket_sizes_from_the_model_config(attrs, hidden):
    model = torch.nn.Linear(2, 2)
    model.config = types.SimpleNamespace(**attrs)
    config = dsrt.Config({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
                          "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                "stage3_prefetch_bucket_size": "auto",
                                                "stage3_param_persistence_threshold": "auto"}})
    _auto.resolve(config, model, 1)
    assert config.get_number("zero_optimization.reduce_bucket_size") == hidden * hidden
    assert config.get_number("zero_optimization.stage3_prefetch_bucket_size") == math.floor(0.9 * hidden * hidden)
    assert config.get_number("zero_optimization.stage3_param_persistence_threshold") == 10 * hidden


def test_an_unresolvable_auto_names_the_key_and_how_to_set_it():
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": "auto",
              "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    with pytest.raises(dsrt.ConfigError) as info:
        dsrt.initialize(model=torch.nn.Linear(2, 2), config=config, comm=dsrt.Comm.local())
    message = info.value.message
    for expected in ("gradient_clipping", "args.max_grad_norm", "optimizer.params.lr", "args.learning_rate",
                     "zero_optimization.reduce_bucket_size", "hidden_size"):
        assert expected in message, message


def train_against(torch_optimizer_class, config, **hyper):
    """dsrt with a torch optimizer describing its optimizer, against that optimizer in plain PyTorch."""
    torch.manual_seed(8)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))
    reference = copy.deepcopy(model)
    described = torch_optimizer_class(model.parameters(), **hyper)
    engine, optimizer, _, _ = dsrt.initialize(model=model, optimizer=described, config=config, comm=dsrt.Comm.local())
    ref_opt = torch_optimizer_class(reference.parameters(), **hyper)
    generator = torch.Generator().manual_seed(9)
    batches = [(torch.randn(4, 6, generator=generator), torch.randn(4, 3, generator=generator)) for _ in range(5)]
    train_beside(engine, reference, ref_opt, batches)
    assert_fp32_weights_match(engine, reference)
    return engine, optimizer


@pytest.mark.parametrize("kind", [torch.optim.AdamW, torch.optim.Adam])
def test_a_torch_optimizer_stands_for_the_missing_optimizer_section(kind):
    engine, optimizer = train_against(kind, {"train_micro_batch_size_per_gpu": 4},
                                      lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05)
    assert optimizer.param_groups[0]["betas"] == pytest.approx((0.8, 0.95))
    engine.close()


def test_a_torch_optimizer_fills_the_optimizer_sections_autos():
    config = {"train_micro_batch_size_per_gpu": 4,
              "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                        "weight_decay": "auto"}}}
    engine, _ = train_against(torch.optim.AdamW, config, lr=0.01, betas=(0.9, 0.9), eps=1e-7, weight_decay=0.1)
    assert math.isclose(number(engine, "optimizer.params.weight_decay"), 0.1)
    engine.close()


def test_optimizers_dsrt_cannot_run_are_refused_with_advice():
    model = torch.nn.Linear(3, 2)
    with pytest.raises(dsrt.UnsupportedError, match="RMSprop") as info:
        dsrt.initialize(model=model, optimizer=torch.optim.RMSprop(model.parameters(), lr=0.1),
                        config={"train_micro_batch_size_per_gpu": 1})
    assert "\"optimizer\" section" in info.value.message
    # Groups are dsrt's parameter groups; an option dsrt's kernels lack is refused, naming the group.
    groups = [{"params": [model.weight], "lr": 0.1}, {"params": [model.bias], "lr": 0.2, "amsgrad": True}]
    with pytest.raises(dsrt.UnsupportedError, match="param group 1 sets amsgrad=True"):
        dsrt.initialize(model=model, optimizer=torch.optim.AdamW(groups), config={"train_micro_batch_size_per_gpu": 1})
