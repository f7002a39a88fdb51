"""The Python front where DeepSpeed 0.19.8 is the reference: floating-point buffers keep the dtype
they were loaded in (a rotary inv_freq stays fp32 under bf16) unless data_types.buffer_dtype says
otherwise, a bf16 step with a non-finite gradient is skipped (bf16.check_grad_overflow), and the
lower-memory bf16 mode (bf16_master_weights_and_grads, bf16_optimizer_states) keeps bf16 masters."""
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402


class Rotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, dtype=torch.float32) / 8)))
        self.register_buffer("steps", torch.tensor(3))  # an integer buffer is never cast

    def forward(self, x):
        return self.fc(x) * torch.cos(self.inv_freq).to(x.dtype)


def config(**extra):
    result = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 1}}
    result.update(extra)
    return result


def test_buffers_keep_their_dtype_as_under_deepspeed():
    torch.manual_seed(3)
    model = Rotary()
    expected = model.inv_freq.clone()
    engine, _, _, _ = dsrt.initialize(model=model, config=config(), comm=dsrt.Comm.local())
    assert model.fc.weight.dtype == torch.bfloat16
    assert model.inv_freq.dtype == torch.float32
    assert torch.equal(model.inv_freq, expected)  # not rounded through bf16
    assert model.steps.dtype == torch.int64
    loss = engine(torch.randn(2, 8)).float().square().mean()
    engine.backward(loss)
    engine.step()
    engine.close()


def test_buffer_dtype_casts_buffers():
    model = Rotary()
    engine, _, _, _ = dsrt.initialize(model=model, config=config(data_types={"buffer_dtype": "bf16"}),
                                      comm=dsrt.Comm.local())
    assert model.inv_freq.dtype == torch.bfloat16
    assert model.steps.dtype == torch.int64
    engine.close()


def test_bf16_step_with_a_non_finite_gradient_is_skipped():
    torch.manual_seed(4)
    model = Rotary()
    engine, _, _, _ = dsrt.initialize(model=model, config=config(bf16={"enabled": True, "check_grad_overflow": True}),
                                      comm=dsrt.Comm.local())
    before = engine.get_fp32_param("fc.weight").clone()
    x = torch.randn(2, 8)
    x[0, 0] = float("inf")
    engine.backward(engine(x).float().sum())
    engine.step()
    assert not engine.was_step_applied()
    assert torch.equal(engine.get_fp32_param("fc.weight"), before)
    engine.backward(engine(torch.randn(2, 8)).float().square().mean())
    engine.step()
    assert engine.was_step_applied()
    assert not torch.equal(engine.get_fp32_param("fc.weight"), before)
    engine.close()


def test_bf16_master_weights_stay_bf16_and_skip_non_finite_steps():
    # DeepSpeed's lower-memory bf16 mode through the front: the masters get_fp32_param returns are bf16
    # values (no fp32 copy exists), they move, and a non-finite gradient still skips the step.
    torch.manual_seed(5)
    model = Rotary()
    engine, _, _, _ = dsrt.initialize(model=model, comm=dsrt.Comm.local(), config=config(
        bf16={"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}))
    before = engine.get_fp32_param("fc.weight").clone()
    assert torch.equal(before, before.bfloat16().float())
    x = torch.randn(2, 8)
    x[0, 0] = float("nan")
    engine.backward(engine(x).float().sum())
    engine.step()
    assert not engine.was_step_applied()
    assert torch.equal(engine.get_fp32_param("fc.weight"), before)
    for _ in range(3):
        engine.backward(engine(torch.randn(2, 8)).float().square().mean())
        engine.step()
    assert engine.was_step_applied()
    after = engine.get_fp32_param("fc.weight")
    assert torch.equal(after, after.bfloat16().float())
    assert not torch.equal(after, before)
    engine.close()


def test_bf16_master_weights_refused_where_deepspeed_refuses_them():
    # Without bf16 optimizer states DeepSpeed needs ZeRO-Offload's CPU Adam; at stage 0 it refuses the key.
    for extra in ({"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}},
                  {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
                   "zero_optimization": {"stage": 0}}):
        with pytest.raises(Exception, match="bf16"):
            dsrt.initialize(model=Rotary(), config=config(**extra), comm=dsrt.Comm.local())
