"""deepspeed.checkpoint.utils.clone_tensors_for_torch_save, which Accelerate calls on a model's
state_dict before torch.save: under dsrt the parameters are views of dsrt's buffers, and saving a
view would store the whole buffer behind it."""

import torch


def clone_tensors_for_torch_save(item, device=torch.device("cpu")):
    """A copy of item (a tensor, or lists, tuples and dicts of them, nested) whose tensors are
    detached clones on device, each with storage of its own size."""
    if torch.is_tensor(item):
        return item.detach().to(device, copy=True)
    if isinstance(item, list):
        return [clone_tensors_for_torch_save(v, device) for v in item]
    if isinstance(item, tuple):
        return tuple(clone_tensors_for_torch_save(v, device) for v in item)
    if isinstance(item, dict):
        return type(item)({k: clone_tensors_for_torch_save(v, device) for k, v in item.items()})
    return item
