"""The whole model's weights from the PyTorch front, as the HF Trainer and Accelerate ask for
them when they save a model: DeepSpeed's zero_gather_16bit_weights_on_model_save() and
_zero3_consolidated_16bit_state_dict()."""

import collections

import torch

from . import _core


class ModelStateMixin:
    """Expects _config (dsrt Config), stage, module, _params [(Tensor, param)], _acquire_param,
    _release_param and global_rank."""

    def zero_gather_16bit_weights_on_model_save(self):
        """zero_optimization.stage3_gather_16bit_weights_on_model_save (DeepSpeed's name for it)."""
        try:
            return bool(self._config.get_number("zero_optimization.stage3_gather_16bit_weights_on_model_save"))
        except _core.Error:
            return False

    def _zero3_consolidated_16bit_state_dict(self):
        """The module's state_dict with every parameter whole, in the working dtype (16-bit under
        fp16/bf16), on the CPU: on rank 0 an OrderedDict, on the other ranks None, as DeepSpeed
        returns it. Collective under ZeRO-3 (every rank calls it): the parameters are gathered
        (all at once, then released), so the peak is the whole model in the working dtype; tied
        parameters appear under each of their names. At other stages no gathering is needed."""
        gathered = []
        try:
            if self.stage == 3:
                for _, param in self._params + self._frozen_params:
                    self._acquire_param(param)
                    gathered.append(param)
            state = collections.OrderedDict(
                (name, value.detach().to("cpu", copy=True)) for name, value in self.module.state_dict().items())
        finally:
            for param in gathered:
                self._release_param(param)
        return state if self.global_rank == 0 else None
