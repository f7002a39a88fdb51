"""deepspeed.checkpoint: utils.clone_tensors_for_torch_save."""

from . import utils  # noqa: F401
