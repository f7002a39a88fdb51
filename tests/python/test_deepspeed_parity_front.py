"""The Python front where DeepSpeed 0.19.8 is the reference: floating-point buffers keep the dtype
they were loaded in (a rotary inv_freq stays fp32 under bf16) unless data_types.buffer_dtype says
otherwise, and a bf16 step with a non-finite gradient is skipped (bf16.check_grad_overflow)."""
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
