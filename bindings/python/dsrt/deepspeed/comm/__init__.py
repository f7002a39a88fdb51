"""deepspeed.comm: the collectives DeepSpeed scripts and Accelerate call, over torch.distributed.

dsrt's engine does its own communication (MPI, NCCL or TCP, see dsrt.distributed); this module is
the script's: init_distributed brings up torch.distributed as DeepSpeed's does, and the rest are
torch.distributed's functions under DeepSpeed's names. Accelerate asks for the "nccl" backend
whatever the machine; without CUDA, init_distributed uses "gloo" instead and says so once.
"""

import sys

from ... import distributed as _distributed

_NOTE_SHOWN = []


def _dist():
    import torch.distributed as dist

    return dist


def init_distributed(dist_backend=None, auto_mpi_discovery=True, distributed_port=29500, verbose=True,
                     timeout=None, init_method=None, dist_init_required=None, config=None, rank=-1, world_size=-1):
    import torch

    if dist_backend == "nccl" and not torch.cuda.is_available():
        if not _NOTE_SHOWN:
            _NOTE_SHOWN.append(True)
            print("dsrt: deepspeed.comm.init_distributed(dist_backend='nccl') on a machine without CUDA: "
                  "using the gloo backend", file=sys.stderr)
        dist_backend = "gloo"
    kwargs = dict(dist_backend=dist_backend, auto_mpi_discovery=auto_mpi_discovery,
                  distributed_port=distributed_port, verbose=verbose, init_method=init_method,
                  dist_init_required=dist_init_required, config=config, rank=rank, world_size=world_size)
    if timeout is not None:
        kwargs["timeout"] = timeout
    return _distributed.init_distributed(**kwargs)


def is_initialized():
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def is_available():
    return _dist().is_available()


def get_rank(group=None):
    return _dist().get_rank(group) if is_initialized() else 0


def get_world_size(group=None):
    return _dist().get_world_size(group) if is_initialized() else 1


def get_local_rank():
    import os

    return int(os.environ.get("LOCAL_RANK", "0"))


def get_world_group():
    return _dist().group.WORLD


def barrier(group=None, async_op=False, device_ids=None):
    if is_initialized():
        return _dist().barrier(group=group, async_op=async_op)
    return None


def all_reduce(tensor, op=None, group=None, async_op=False):
    dist = _dist()
    return dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op is None else op, group=group, async_op=async_op)


def broadcast(tensor, src, group=None, async_op=False):
    return _dist().broadcast(tensor, src, group=group, async_op=async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    return _dist().all_gather(tensor_list, tensor, group=group, async_op=async_op)


def broadcast_object_list(object_list, src, group=None, device=None):
    return _dist().broadcast_object_list(object_list, src, group=group)


def new_group(ranks=None, **kwargs):
    return _dist().new_group(ranks, **kwargs)


def destroy_process_group(group=None):
    dist = _dist()
    if dist.is_initialized():
        dist.destroy_process_group(group) if group is not None else dist.destroy_process_group()


def __getattr__(name):
    # ReduceOp and the rest of torch.distributed's names, as deepspeed.comm re-exports them.
    if name == "ReduceOp":
        return _dist().ReduceOp
    raise AttributeError("module 'deepspeed.comm' (dsrt) has no attribute %r" % name)
