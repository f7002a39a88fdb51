"""Training a dsrt engine beside the same model in plain PyTorch, and comparing the weights: the
shared part of the tests that take torch.optim as the reference."""

import torch


def train_beside(engine, reference, reference_optimizer, batches, clip=1.0):
    """One engine step and one reference step per (x, y) batch, on the MSE loss. The reference clips
    its gradients to a global norm of `clip` (0: not at all) with torch's clip_grad_norm_, DeepSpeed's
    rule; the default 1.0 is DeepSpeed 0.19's gradient_clipping when the config has no such key."""
    for x, y in batches:
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), clip)
        reference_optimizer.step()
        reference_optimizer.zero_grad()


def assert_fp32_weights_match(engine, reference, tolerance=1e-5, what=""):
    """Every parameter's fp32 master in dsrt against the reference's, by relative error."""
    for name, param in reference.named_parameters():
        err = float((engine.get_fp32_param(name) - param.detach()).norm() / param.detach().norm())
        assert err < tolerance, "%s: relative error %g%s" % (name, err, what)
