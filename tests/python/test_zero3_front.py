"""Frozen parameters (a LoRA-style model), parameters read by a module other than their owner
under ZeRO-3, and a forward that raises, against plain PyTorch."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front needs torch (Debian: python3-torch)")
import dsrt  # noqa: E402
from torch_reference import assert_fp32_weights_match, train_beside  # noqa: E402


class LoRA(torch.nn.Module):
    """A frozen base with a trainable low-rank adapter and a trainable head."""

    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(12, 16)
        self.lora_a = torch.nn.Linear(12, 4, bias=False)
        self.lora_b = torch.nn.Linear(4, 16, bias=False)
        self.head = torch.nn.Linear(16, 5)
        self.base.requires_grad_(False)
        torch.nn.init.normal_(self.lora_b.weight, std=0.2)  # not the usual zeros, so every part moves

    def forward(self, x):
        return self.head(torch.tanh(self.base(x) + self.lora_b(self.lora_a(x))))


def config(stage, **extra):
    result = {"train_micro_batch_size_per_gpu": 8,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.05}},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                                    "reduce_bucket_size": 50}}
    result.update(extra)
    return result


def data(count, seed):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 12, generator=generator), torch.randn(8, 5, generator=generator)) for _ in range(count)]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_lora_model_in_bf16_matches_plain_pytorch_mixed_precision(stage):
    torch.manual_seed(10)
    model = LoRA()
    master = copy.deepcopy(model)  # plain PyTorch's bf16 training: fp32 masters, bf16 compute copies
    frozen_before = model.base.weight.detach().clone()
    engine, *_ = dsrt.initialize(model=model, config=config(stage, bf16={"enabled": True}), comm=dsrt.Comm.local())
    assert model.base.weight.dtype == torch.bfloat16 and model.base.weight.numel() == (0 if stage == 3 else 16 * 12)
    trainable = [(n, p) for n, p in master.named_parameters() if p.requires_grad]
    ref_opt = torch.optim.AdamW([p for _, p in trainable], lr=0.01, betas=(0.9, 0.99), weight_decay=0.05)
    for x, y in data(5, seed=11):
        loss = torch.nn.functional.mse_loss(engine(x).float(), y)
        engine.backward(loss)
        engine.step()
        work = copy.deepcopy(master).to(torch.bfloat16)
        torch.nn.functional.mse_loss(work(x.to(torch.bfloat16)).float(), y).backward()
        grads = dict(work.named_parameters())
        for name, param in trainable:
            param.grad = grads[name].grad.float()
        ref_opt.step()
        ref_opt.zero_grad()
    for name, param in trainable:
        err = float((engine.get_fp32_param(name) - param.detach()).norm() / param.detach().norm())
        assert err < 1e-5, "%s: relative error %g at stage %d" % (name, err, stage)
    # The frozen base: a dsrt frozen tensor, cast, never trained; under ZeRO-3 empty outside use
    # (each rank holds its share) and gathered whole for the forward.
    assert torch.equal(engine.get_fp32_param("base.weight"), frozen_before.to(torch.bfloat16).float())
    assert "base.weight" in engine._engine.tensors
    if stage == 3:
        assert model.lora_a.weight.numel() == 0 and model.base.weight.numel() == 0
        engine._acquire_param(model.base.weight)
        assert torch.equal(model.base.weight, frozen_before.to(torch.bfloat16))
        engine._release_param(model.base.weight)
        assert model.base.weight.numel() == 0
    else:
        assert torch.equal(model.base.weight, frozen_before.to(torch.bfloat16))
    engine.close()


class SharedRead(torch.nn.Module):
    """The parent reads fc1.weight in its own forward, outside fc1's forward (as tied weights do)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        hidden = torch.tanh(self.fc1(x))
        return self.fc2(hidden @ self.fc1.weight.t())


@pytest.mark.parametrize("stage", [0, 3])
def test_parameters_read_outside_their_module_are_gathered(stage):
    torch.manual_seed(12)
    model = SharedRead()
    reference = copy.deepcopy(model)
    engine, *_ = dsrt.initialize(model=model, config=config(stage), comm=dsrt.Comm.local())
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01, betas=(0.9, 0.99), weight_decay=0.05)
    train_beside(engine, reference, ref_opt, [(a[:, :8], b[:, :3]) for a, b in data(4, seed=13)])
    assert_fp32_weights_match(engine, reference, what=" at stage %d" % stage)
    if stage == 3:
        assert any(p is model.fc1.weight for p in engine._external[id(model)])  # registered on first read
        assert model.fc1.weight.numel() == 0 and not engine._gathered
        model.fc1.weight  # read outside any forward: stays released, as in DeepSpeed
        assert model.fc1.weight.numel() == 0
    engine.close()
    assert type(model._parameters).__name__ != "_ZeroParamDict"


def test_stage3_forward_that_raises_leaves_parameters_released():
    """On every torch: torch >= 2.1 runs the release hook itself (always_call); before, engine's
    forward releases what the failed forward gathered."""
    class Failing(torch.nn.Linear):
        def forward(self, x):
            assert self.weight.numel() == 33 * 12  # gathered for the forward
            raise RuntimeError("forward failed")

    model = torch.nn.Sequential(torch.nn.Linear(12, 12), Failing(12, 33))
    engine, *_ = dsrt.initialize(model=model, config=config(3), comm=dsrt.Comm.local())
    with pytest.raises(RuntimeError, match="forward failed"):
        engine(torch.randn(2, 12))
    assert model[1].weight.numel() == 0 and not engine._gathered and not engine._fwd_stack
    model[1].forward = lambda x: torch.nn.Linear.forward(model[1], x)  # the next forward works
    out = engine(torch.randn(2, 12))
    engine.backward(out.sum())
    engine.step()
    assert not engine._gathered
    engine.close()


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_frozen_layer_between_trainable_ones_passes_gradients_through(stage):
    """A frozen layer in the middle: the gradient of the first layer flows through the frozen
    weight, which ZeRO-3 gathers again for that backward (and releases by the step)."""
    torch.manual_seed(31)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                                torch.nn.Tanh(), torch.nn.Linear(16, 3))
    model[2].requires_grad_(False)
    reference = copy.deepcopy(model)
    frozen_before = model[2].weight.detach().clone()
    engine, *_ = dsrt.initialize(model=model, config=config(stage), comm=dsrt.Comm.local())
    trainable = [p for p in reference.parameters() if p.requires_grad]
    ref_opt = torch.optim.AdamW(trainable, lr=0.01, betas=(0.9, 0.99), weight_decay=0.05)
    train_beside(engine, reference, ref_opt, [(a[:, :8], b[:, :3]) for a, b in data(4, seed=32)])
    assert_fp32_weights_match(engine, reference, what=" at stage %d" % stage)
    assert torch.equal(engine.get_fp32_param("2.weight"), frozen_before)
    if stage == 3:
        assert model[2].weight.numel() == 0 and not engine._gathered
        # Released once its module's backward is done, before the step.
        x, y = data(1, seed=33)[0]
        engine.backward(torch.nn.functional.mse_loss(engine(x[:, :8]), y[:, :3]))
        assert model[2].weight.numel() == 0 and id(model[2].weight) not in engine._gathered
        engine.step()
        # Each rank's share of the frozen layer (one rank: all of it) is counted as working memory.
        assert engine.memory()["working_params"][0] >= (16 * 16 + 16) * 4
    engine.close()


class CountingMemmove:
    """Counts the private copies Tensor.acquire makes (ctypes.memmove in dsrt._core)."""

    def __init__(self, real):
        self.real = real
        self.calls = 0

    def __call__(self, dst, src, count):
        self.calls += 1
        return self.real(dst, src, count)


def train_stage3_mlp(monkeypatch, share, offload):
    torch.manual_seed(21)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 5))
    extra = {"offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}} if offload else {}
    cfg = config(3)
    cfg["zero_optimization"].update(extra)
    engine, *_ = dsrt.initialize(model=model, config=cfg, comm=dsrt.Comm.local())
    engine._engine._share_copies = share
    counter = CountingMemmove(dsrt._core.ctypes.memmove)
    monkeypatch.setattr(dsrt._core.ctypes, "memmove", counter)
    losses = []
    for x, y in data(4, seed=22):
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    monkeypatch.setattr(dsrt._core.ctypes, "memmove", counter.real)
    masters = {name: tensor.read_fp32() for name, tensor in engine._engine.tensors.items()}
    return losses, masters, counter.calls


@pytest.mark.parametrize("offload", [False, True])
def test_stage3_backward_gathers_share_the_forward_copy_bit_for_bit(monkeypatch, offload):
    # 6 tensors, 4 steps. Autograd keeps the weights of the 2nd and 3rd Linear (for the gradient of
    # their inputs; the 1st's input needs none, a bias is never kept): their backward gathers share
    # the forward's copy, the other gathers copy.
    losses, masters, copies = train_stage3_mlp(monkeypatch, share=True, offload=offload)
    plain_losses, plain_masters, plain_copies = train_stage3_mlp(monkeypatch, share=False, offload=offload)
    assert copies == plain_copies - 2 * 4
    assert losses == plain_losses
    assert masters.keys() == plain_masters.keys()
    for name in masters:
        assert masters[name].tobytes() == plain_masters[name].tobytes(), name
