"""dsrt: ZeRO training memory for every host.

Low-level objects (any framework): Config, Comm, Engine, Tensor, Checkpoint, with errors raised as
dsrt.Error subclasses. The raw SWIG module is dsrt.capi.

DeepSpeed-shaped PyTorch front: a DeepSpeed script ports by changing `import deepspeed` to
`import dsrt as deepspeed`: init_distributed(), add_config_arguments(), initialize(),
engine.backward(), engine.step(), zero.Init, zero.GatheredParameters.

For libraries that `import deepspeed` themselves (the Hugging Face Trainer, Accelerate):
`import dsrt.compat` first makes `deepspeed` mean dsrt.deepspeed, DeepSpeed's module tree backed
by dsrt (or pip-install bindings/python/deepspeed_compat). See docs/huggingface.md.
"""

from . import capi
from ._core import (BF16, F16, F32, BufferView, Checkpoint, CheckpointError, Comm, CommError, Config,
                    ConfigError, DeviceError, Engine, Error, InternalError, InvalidArgumentError, IOError,
                    OutOfMemoryError, StateError, StepResult, Tensor, UnsupportedError, has_feature,
                    set_log_callback, version)
from .distributed import add_config_arguments, init_distributed

__version__ = capi.dsrt_version_string()


def __getattr__(name):
    # The PyTorch front is imported lazily so the low-level API works without torch.
    if name in ("initialize", "DsrtEngine"):
        from . import torch_front
        return getattr(torch_front, name)
    if name in ("GatheredParameters", "zero"):
        from . import zero_front
        return getattr(zero_front, name)
    raise AttributeError("module 'dsrt' has no attribute %r" % name)
