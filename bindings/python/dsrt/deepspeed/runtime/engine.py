"""deepspeed.runtime.engine: DeepSpeedEngine is dsrt's PyTorch-front engine (the same class, so
Accelerate's isinstance checks and unwrap_model see it), and initialize() maps what the HF
libraries pass to dsrt.initialize."""

import json
import math
import os

import torch

from ... import _core
from ...torch_front import DsrtEngine, initialize as _dsrt_initialize
from ..ops.adam import DeepSpeedCPUAdam, FusedAdam

DeepSpeedEngine = DsrtEngine


def _unsupported(message):
    return _core.UnsupportedError(_core.capi.DSRT_ERR_UNSUPPORTED, message)


def _config_dict(args, config, config_params):
    source = config if config is not None else config_params
    if source is None and args is not None:
        source = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if source is None or isinstance(source, dict):
        return source
    if isinstance(source, _core.Config):
        return source.to_dict()
    with open(os.fspath(source)) as f:
        return json.load(f)


def _finite(source):
    """DeepSpeed reads a config dict as Python values, so Accelerate can write steps_per_print =
    float("inf") (never print); dsrt's config is JSON, where that is the largest exact integer."""
    if not isinstance(source, dict):
        return source
    steps = source.get("steps_per_print")
    if isinstance(steps, float) and math.isinf(steps) and steps > 0:
        source = dict(source, steps_per_print=2 ** 53)

    def check(value, path):
        if isinstance(value, float) and not math.isfinite(value):
            raise _core.ConfigError(_core.capi.DSRT_ERR_CONFIG, "%s is %r; DeepSpeed configs take finite numbers"
                                    % (path, value))
        if isinstance(value, dict):
            for key, item in value.items():
                check(item, "%s.%s" % (path, key) if path else key)
        if isinstance(value, list):
            for index, item in enumerate(value):
                check(item, "%s.%d" % (path, index))

    check(source, "")
    return source


def _describe_deepspeed_adam(optimizer):
    """The config "optimizer" section a DeepSpeedCPUAdam or FusedAdam stands for (Accelerate wraps
    the Trainer's optimizer in DeepSpeedCPUAdam when the optimizer is offloaded)."""
    group = optimizer.param_groups[0]
    keys = ("lr", "betas", "eps", "weight_decay")
    for other in optimizer.param_groups[1:]:
        if any(other.get(k) != group.get(k) for k in keys):
            raise _unsupported("the optimizer's param_groups differ in lr, betas, eps or weight_decay (the HF "
                               "Trainer's two groups: weight decay and none); dsrt runs one hyperparameter group "
                               "for now: set weight_decay to 0, or describe the optimizer in the config's "
                               "\"optimizer\" section")
    params = {"lr": group["lr"], "betas": list(group["betas"]), "eps": group["eps"],
              "weight_decay": group["weight_decay"]}
    if optimizer.adamw_mode:
        return {"type": "AdamW", "params": params}
    return {"type": "Adam", "params": dict(params, adam_w_mode=False)}


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, lr_scheduler=None,
               mpu=None, dist_init_required=None, collate_fn=None, config=None, config_params=None, **kwargs):
    if mpu is not None:
        raise _unsupported("deepspeed.initialize(mpu=...): model parallelism is not implemented by dsrt")
    source = _finite(_config_dict(args, config, config_params))
    if isinstance(optimizer, (DeepSpeedCPUAdam, FusedAdam)):
        if source is not None and "optimizer" not in source:
            source = dict(source, optimizer=_describe_deepspeed_adam(optimizer))
        optimizer = None
    if model_parameters is not None:
        model_parameters = list(model_parameters)
        if any(isinstance(p, dict) for p in model_parameters):
            params = [p for group in model_parameters for p in group["params"]]
            if len(model_parameters) > 1:
                raise _unsupported("deepspeed.initialize(model_parameters=<%d parameter groups>): dsrt runs one "
                                   "hyperparameter group for now; pass the parameters as one list"
                                   % len(model_parameters))
            model_parameters = params
    return _dsrt_initialize(args=args, model=model, optimizer=optimizer, model_parameters=model_parameters,
                            training_data=training_data, lr_scheduler=lr_scheduler, dist_init_required=dist_init_required,
                            collate_fn=collate_fn, config=source, config_params=None, **kwargs)


__all__ = ["DeepSpeedEngine", "initialize"]
