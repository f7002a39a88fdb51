"""The optimizer and lr_scheduler objects DeepSpeed's initialize() returns beside the engine:
dsrt steps both inside engine.step(), so these only report and redirect."""

import torch

from . import _core
from ._core import StateError


class _OptimizerFacade(torch.optim.Optimizer):
    """What DeepSpeed returns as the optimizer: param_groups with the live values of dsrt's groups
    (the lr the schedule gives the next step, or what the host's code wrote); a torch LR scheduler
    may be built on it. dsrt steps it inside engine.step()."""

    def __init__(self, engine):  # noqa: super().__init__ would take the parameters over
        self._engine = engine
        self.defaults = {}
        self.state = {}
        self.param_groups = engine._groups.param_groups

    @property
    def overflow(self):
        """Whether the last boundary was skipped (inf/nan gradients), as DeepSpeed's optimizers say
        (Accelerate reads it for optimizer_step_was_skipped)."""
        last = self._engine._last_boundary
        return last is not None and last.overflow

    def zero_grad(self, set_to_none=True):
        pass  # dsrt zeroes its gradient buffers at every micro-step

    def step(self, closure=None):
        raise StateError(_core.capi.DSRT_ERR_STATE, "call engine.step(), which runs the optimizer at the "
                         "accumulation boundary, instead of optimizer.step()")


class _SchedulerFacade:
    """What DeepSpeed returns as lr_scheduler: get_last_lr(); dsrt steps it inside engine.step()."""

    def __init__(self, engine):
        self._engine = engine

    def get_last_lr(self):
        return self._engine.get_lr()

    def get_lr(self):
        return self._engine.get_lr()

    def step(self, *args, **kwargs):
        pass  # stepped by engine.step() after every applied optimizer step, as DeepSpeed's engine does
