"""The `deepspeed` module, backed by dsrt.

`import dsrt.compat` (first line of a script) or the pip-installable stand-in
(bindings/python/deepspeed_compat) makes `import deepspeed` and every `deepspeed.*` module below
resolve to this package, with the package metadata the Hugging Face libraries check. What is here
is what the HF Trainer, Accelerate and DeepSpeed scripts call, each backed by dsrt for real:
initialize, init_distributed, add_config_arguments, DeepSpeedEngine, zero.Init,
zero.GatheredParameters, comm, runtime.lr_schedules, utils.logger, utils.zero_to_fp32,
checkpoint.utils, ops.adam. Anything else raises AttributeError/ImportError at once, never later.
"""

import sys

from .. import _core
from .. import distributed as _distributed
from . import comm, runtime
from .runtime import zero
from .runtime.engine import DeepSpeedEngine
from .version import __version__, __version_major__, __version_minor__, __version_patch__  # noqa: F401

# `import deepspeed.zero` and `from deepspeed.zero import Init` work as with DeepSpeed, where zero is
# deepspeed.runtime.zero under a second name.
sys.modules[__name__ + ".zero"] = zero

init_distributed = comm.init_distributed  # DeepSpeed's is deepspeed.comm's (nccl falls back to gloo without CUDA)
add_config_arguments = _distributed.add_config_arguments

# dsrt's own version, for messages ("deepspeed (dsrt 0.1.0)").
dsrt_version = _core.version()


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, lr_scheduler=None,
               mpu=None, dist_init_required=None, collate_fn=None, config=None, config_params=None, **kwargs):
    """deepspeed.initialize: (engine, optimizer, dataloader, lr_scheduler) from dsrt.initialize.

    Accepts what the HF Trainer and Accelerate pass: config_params as a dict, model_parameters
    (Accelerate's DummyOptim.params), a torch Adam/AdamW or DeepSpeedCPUAdam/FusedAdam as the
    description of the optimizer dsrt runs. lr_scheduler may be a torch LR scheduler built on the
    client optimizer, or a callable taking the optimizer initialize returns and building one (the
    Trainer's lr_scheduler_type when the config has an "optimizer" section and no "scheduler"):
    dsrt steps it after every applied step and checkpoints its state_dict. Passing one beside a
    config "scheduler" section is a ConfigError (see dsrt.initialize)."""
    from .runtime.engine import initialize as _initialize

    return _initialize(args=args, model=model, optimizer=optimizer, model_parameters=model_parameters,
                       training_data=training_data, lr_scheduler=lr_scheduler, mpu=mpu,
                       dist_init_required=dist_init_required, collate_fn=collate_fn, config=config,
                       config_params=config_params, **kwargs)
