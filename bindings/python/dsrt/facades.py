"""The optimizer and lr_scheduler objects DeepSpeed's initialize() returns beside the engine:
dsrt steps both inside engine.step(), so these only report and redirect."""

from . import _core
from ._core import StateError


class _OptimizerFacade:
    """What DeepSpeed returns as the optimizer: param_groups with the current lr; dsrt steps it."""

    def __init__(self, engine):
        self._engine = engine
        group = {"params": [p for _, p in engine._params], "lr": engine.get_lr()[0]}
        for key, name in (("betas", "betas"), ("eps", "eps"), ("weight_decay", "weight_decay")):
            try:
                if key == "betas":
                    group[key] = tuple(engine._config.get_number("optimizer.params.betas.%d" % i) for i in (0, 1))
                else:
                    group[key] = engine._config.get_number("optimizer.params." + name)
            except _core.Error:
                pass  # an optimizer without it
        self.param_groups = [group]

    def _follow_schedule(self):
        """After each boundary: the lr the schedule gives the next step, as DeepSpeed's scheduler
        writes it into the optimizer's param_groups (the HF Trainer and user code read it there)."""
        lr = self._engine.get_lr()[0]
        for group in self.param_groups:
            group["lr"] = lr

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
