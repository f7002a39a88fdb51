"""Parameter groups for the PyTorch front: where they come from, and keeping dsrt's groups equal to
the param_groups the host's code writes.

Sources, as DeepSpeed's initialize takes them:
- model_parameters as a list of dicts ({"params": [...], "weight_decay": 0.0, "lr": ...}): one
  group per dict; a value a dict does not give is the config's;
- a client torch optimizer (Adam, AdamW, SGD, Adagrad): one group per entry of its param_groups;
- otherwise one group of every trainable parameter.

The param_groups dicts stay live: before the first gradient of every accumulation window the front
reads them and sends dsrt every value that changed (dsrt_engine_set_group_hyper), so anything that
writes param_groups between windows (torch's LR schedulers, the HF Trainer's schedule, user code)
drives dsrt. With a "scheduler" section in the config the schedule drives lr (OneCycle also the
momentum): after each boundary the front writes the schedule's values into param_groups, and a host
that writes another gets dsrt's StateError naming the scheduler.
"""

from . import _core

# Which torch param_group keys each dsrt optimizer reads, and their dsrt names.
_KEYS = {
    "adam": ("lr", "weight_decay", "betas", "eps"),
    "adamw": ("lr", "weight_decay", "betas", "eps"),
    "lamb": ("lr", "weight_decay", "betas", "eps", "max_coeff", "min_coeff"),
    "lion": ("lr", "weight_decay", "betas"),
    "sgd": ("lr", "weight_decay", "momentum", "dampening", "nesterov"),
    "adagrad": ("lr", "weight_decay", "eps"),
}
# torch options dsrt's kernels do not have: refused when turned on (or non-zero), never silently dropped.
_REFUSED = ("amsgrad", "maximize", "capturable", "differentiable", "lr_decay")


def _unsupported(message):
    return _core.UnsupportedError(_core.capi.DSRT_ERR_UNSUPPORTED, message)


def dsrt_values(kind, group, index):
    """{dsrt name: value} of a torch-style param group for optimizer kind ("adamw", ...)."""
    for key in _REFUSED:
        if group.get(key):
            raise _unsupported("param group %d sets %s=True, which dsrt's %s does not implement; turn it off"
                               % (index, key, kind))
    out = {}
    for key in _KEYS.get(kind, ("lr", "weight_decay")):
        if key not in group:
            continue
        value = group[key]
        if key == "betas":
            out["beta1"], out["beta2"] = float(value[0]), float(value[1])
        elif key == "nesterov":
            out["nesterov"] = 1.0 if value else 0.0
        else:
            out[key] = float(value)
    return out


def groups_of(model_parameters, optimizer):
    """The list of group dicts (each with "params") dsrt's groups mirror, or None for one group."""
    if optimizer is not None and getattr(optimizer, "param_groups", None):
        return optimizer.param_groups
    if model_parameters is None:
        return None
    if not isinstance(model_parameters, (list, tuple)):
        model_parameters = list(model_parameters)
    if model_parameters and all(isinstance(g, dict) for g in model_parameters):
        for i, g in enumerate(model_parameters):
            if "params" not in g:
                raise _core.InvalidArgumentError(_core.capi.DSRT_ERR_INVALID_ARGUMENT,
                                                 "model_parameters[%d] is a dict without \"params\"" % i)
        # The front's own dicts: params as a list, the values the dict gives.
        return [dict(g, params=list(g["params"])) for g in model_parameters]
    if any(isinstance(g, dict) for g in model_parameters):
        raise _core.InvalidArgumentError(_core.capi.DSRT_ERR_INVALID_ARGUMENT,
                                         "model_parameters mixes parameter-group dicts and tensors; use one form")
    return None


class GroupSync:
    """Keeps dsrt's groups equal to a list of torch-style param_groups dicts."""

    def __init__(self, engine, kind, param_groups, scheduled):
        self._engine = engine
        self._kind = kind
        self.param_groups = param_groups
        self._scheduled = scheduled  # a config "scheduler" section drives lr
        self._sent = [dict() for _ in param_groups]
        self.window_open = False

    def push(self, initial=False):
        """Send every value that changed since the last push (before build, or between windows)."""
        for g, group in enumerate(self.param_groups):
            values = dsrt_values(self._kind, group, g)
            for name, value in values.items():
                if self._sent[g].get(name) == value:
                    continue
                if initial and self._scheduled and name == "lr":
                    continue  # the schedule's first lr is written back below
                self._engine.set_group_hyper(g, name, value)
                self._sent[g][name] = value

    def adopt(self):
        """The groups' current values are dsrt's own (read back from it): nothing to send for them.
        Pushing them would also set values a config scheduler drives (OneCycle's momentum), which
        dsrt refuses."""
        for g, group in enumerate(self.param_groups):
            self._sent[g].update(dsrt_values(self._kind, group, g))

    def begin_window(self):
        if not self.window_open:
            self.push()
            self.window_open = True

    def after_boundary(self):
        """The window is closed; with a config schedule, its next lr goes into param_groups."""
        self.window_open = False
        if self._scheduled:
            self.write_schedule()

    def write_schedule(self):
        """The schedule's next lr into param_groups, and under OneCycle's momentum cycle its betas
        (SGD: momentum), as DeepSpeed's schedules write every param group. A value the host has
        written since the last push stays (it is sent at the next window)."""
        for g, group in enumerate(self.param_groups):
            lr = self._engine.get_group_hyper(g, "lr")
            group["lr"] = lr
            self._sent[g]["lr"] = lr
            keys = _KEYS.get(self._kind, ())
            sent = self._sent[g]
            if "betas" in keys and "betas" in group:
                if (float(group["betas"][0]), float(group["betas"][1])) == (sent.get("beta1"), sent.get("beta2")):
                    betas = (self._engine.get_group_hyper(g, "beta1"), self._engine.get_group_hyper(g, "beta2"))
                    group["betas"] = betas
                    sent["beta1"], sent["beta2"] = betas
            if "momentum" in keys and "momentum" in group and float(group["momentum"]) == sent.get("momentum"):
                momentum = self._engine.get_group_hyper(g, "momentum")
                group["momentum"] = momentum
                sent["momentum"] = momentum

    def pull(self):
        """After a checkpoint load: param_groups take the values dsrt restored (as torch's
        optimizer.load_state_dict restores param_groups)."""
        for g, group in enumerate(self.param_groups):
            for key in _KEYS.get(self._kind, ("lr", "weight_decay")):
                if key == "betas":
                    group[key] = (self._engine.get_group_hyper(g, "beta1"), self._engine.get_group_hyper(g, "beta2"))
                elif key == "nesterov":
                    group[key] = bool(self._engine.get_group_hyper(g, "nesterov"))
                else:
                    group[key] = self._engine.get_group_hyper(g, key)
            self._sent[g] = dsrt_values(self._kind, group, g)
        self.window_open = False
