"""deepspeed.ops.adam: DeepSpeedCPUAdam and FusedAdam.

Handed to deepspeed.initialize (Accelerate does so when the optimizer is offloaded), they describe
the Adam/AdamW dsrt runs in its own kernels (dsrt's CPU SIMD Adam for offload). Used on their own,
they are torch optimizers with DeepSpeed's arguments that step as torch's Adam (adamw_mode=False)
or AdamW (adamw_mode=True, the default) do.
"""

import math

import torch


class _DeepSpeedAdam(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, adamw_mode=True):
        if amsgrad:
            raise NotImplementedError("%s: amsgrad is not supported (as in DeepSpeed)" % type(self).__name__)
        if not bias_correction:
            raise NotImplementedError("%s(bias_correction=False) is not implemented by dsrt's stand-in"
                                      % type(self).__name__)
        self.adamw_mode = adamw_mode
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                if self.adamw_mode:
                    param.mul_(1 - lr * decay)  # decoupled weight decay
                elif decay != 0:
                    grad = grad.add(param, alpha=decay)  # L2, as torch's Adam
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                correction1 = 1 - beta1 ** state["step"]
                correction2 = 1 - beta2 ** state["step"]
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(correction2)).add_(eps)
                param.addcdiv_(state["exp_avg"], denom, value=-lr / correction1)
        return loss


class DeepSpeedCPUAdam(_DeepSpeedAdam):
    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adamw_mode=True, fp32_optimizer_states=True):
        super().__init__(model_params, lr, bias_correction, betas, eps, weight_decay, amsgrad, adamw_mode)


class FusedAdam(_DeepSpeedAdam):
    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0.0, amsgrad=False, set_grad_none=True):
        super().__init__(params, lr, bias_correction, betas, eps, weight_decay, amsgrad, adam_w_mode)
