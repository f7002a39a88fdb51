"""Checkpoints in the PyTorch front: DeepSpeed's save_checkpoint / load_checkpoint over dsrt's
checkpoint format. dsrt stores the parameters it trains (fp32 masters, optimizer states, schedule,
counters); the front adds the client state and the frozen parameters (requires_grad=False), which
dsrt does not hold, as frozen_parameters.pt beside them (DeepSpeed saves them in the module state
unless exclude_frozen_parameters=True)."""

import os
import pickle
import shutil
import warnings

import torch

from . import _core

_FROZEN_FILE = "frozen_parameters.pt"
MODULE_EXTRAS_FILE = "module_extras.pt"  # buffers and tied weights, for an export to DeepSpeed's format
_RECOVERY_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deepspeed", "utils", "recovery_script.py")


def _write_recovery_script(save_dir):
    """zero_to_fp32.py beside `latest`, executable, as DeepSpeed writes its own: it consolidates the
    folder's fp32 weights (dsrt.deepspeed.utils.zero_to_fp32)."""
    target = os.path.join(save_dir, "zero_to_fp32.py")
    shutil.copyfile(_RECOVERY_SCRIPT, target)
    os.chmod(target, 0o755)


_IMPORT_DIR = ".dsrt-import"  # inside a DeepSpeed save_dir: the dsrt copy load_checkpoint reads


def deepspeed_tag_dir(load_dir, tag):
    """The tag folder when load_dir/tag holds a checkpoint written by DeepSpeed, else None."""
    from . import _ds_read
    tag_dir = os.path.join(load_dir, tag)
    return tag_dir if _ds_read.is_deepspeed_tag(tag_dir) else None


_SCHEDULER_KEY = "__dsrt_client_lr_scheduler__"  # inside the pickled client state


class CheckpointMixin:
    """Expects _engine (dsrt Engine), _frozen ([(name, param)]) and global_rank."""

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """DeepSpeed's save_checkpoint. save_latest=False leaves the folder's `latest` file as it
        was. Frozen floating-point parameters are dsrt's frozen tensors, always in its checkpoint;
        exclude_frozen_parameters=True leaves out only the non-floating ones the front keeps."""
        save_dir = os.fspath(save_dir)
        latest = os.path.join(save_dir, "latest")
        before = None
        if not save_latest and os.path.isfile(latest):
            with open(latest) as f:
                before = f.read()
        groups = getattr(self, "_groups", None)
        if groups is not None and not groups.window_open:
            groups.push()  # values written since the last boundary (a scheduler's next lr) are saved too
        state = dict(client_state or {})
        scheduler = getattr(self, "_client_scheduler", None)
        if scheduler is not None and hasattr(scheduler, "state_dict"):
            # A client LR scheduler's state travels with the checkpoint, as DeepSpeed saves it.
            state[_SCHEDULER_KEY] = scheduler.state_dict()
        self._engine.client_state = pickle.dumps(state)
        self._engine.save_checkpoint(save_dir, tag)
        tag_dir = os.path.join(save_dir, tag if tag is not None else "global_step%d" % self._engine.global_step)
        if self.global_rank == 0:
            _write_recovery_script(save_dir)
            self._save_module_extras(tag_dir)
            if self._frozen and not exclude_frozen_parameters:
                torch.save({name: param.detach().to("cpu", torch.float32) for name, param in self._frozen},
                           os.path.join(tag_dir, _FROZEN_FILE))
            if not save_latest:
                if before is None:
                    os.remove(latest) if os.path.exists(latest) else None
                else:
                    with open(latest, "w") as f:
                        f.write(before)
        return True

    def _save_module_extras(self, tag_dir):
        """MODULE_EXTRAS_FILE: the model's state_dict entries dsrt does not train (buffers, and
        tied weights under their second name), for an export to DeepSpeed's format, whose strict
        module load wants them (ds_checkpoint.export_checkpoint reads it)."""
        mine = set(self._engine.tensors) | {name for name, _ in self._frozen}
        extras = {name: value.detach().cpu().clone() for name, value in self.module.state_dict().items()
                  if name not in mine and torch.is_tensor(value)}
        if extras:
            torch.save(extras, os.path.join(tag_dir, MODULE_EXTRAS_FILE))

    def _load_frozen(self, load_dir, tag):
        path = os.path.join(load_dir, tag, _FROZEN_FILE)
        frozen_tensors = getattr(self, "_frozen_params", [])
        if not (self._frozen or frozen_tensors) or not os.path.isfile(path):
            return
        # A dict of fp32 tensors: nothing to unpickle but tensors, so the safe loader (torch >= 1.13).
        stored = torch.load(path, map_location="cpu", weights_only=True)
        for name, param in self._frozen:
            if name in stored:
                param.data.copy_(stored[name].to(param.dtype))
        # Checkpoints saved before dsrt held frozen parameters kept them here.
        for tensor, _ in frozen_tensors:
            if tensor.name in stored:
                tensor.write_fp32(stored[tensor.name].to(torch.float32).contiguous().numpy())

    def _tag_of(self, load_dir, tag):
        if tag is not None:
            return tag
        with open(os.path.join(load_dir, "latest")) as f:
            return f.read().strip()

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True, load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False, custom_load_fn=None):
        """Returns (load_path, client_state) like DeepSpeed. As DeepSpeed does, a folder without a
        `latest` file and no tag is not an error (scripts call this to resume if they can): it
        warns and returns (None, None). load_module_only=True loads the weights alone (fresh
        optimizer states, schedule and step count), strictly by name unless load_module_strict is
        False. dsrt restores everything else together: the other partial loads raise
        UnsupportedError. Any failure raises (CheckpointError, IOError...) with the engine unchanged."""
        load_dir = os.fspath(load_dir)
        if custom_load_fn is not None:
            raise _core.UnsupportedError(_core.capi.DSRT_ERR_UNSUPPORTED,
                                         "load_checkpoint(custom_load_fn=...): dsrt reads its own checkpoint format")
        if tag is None and not os.path.isfile(os.path.join(load_dir, "latest")):
            warnings.warn("load_checkpoint: no 'latest' file in %s, so nothing was loaded; pass tag= to load "
                          "a particular checkpoint" % load_dir, stacklevel=2)
            return None, None
        if deepspeed_tag_dir(load_dir, self._tag_of(load_dir, tag)) is not None:
            load_dir, tag = self._import_deepspeed(load_dir, self._tag_of(load_dir, tag))
        if load_module_only:
            return self._load_weights(load_dir, tag, load_module_strict)
        if not (load_optimizer_states and load_lr_scheduler_states):
            raise _core.UnsupportedError(
                _core.capi.DSRT_ERR_UNSUPPORTED,
                "load_checkpoint(load_optimizer_states=%s, load_lr_scheduler_states=%s): dsrt restores the "
                "optimizer states, schedule and counters together; pass load_module_only=True to load the "
                "weights alone" % (load_optimizer_states, load_lr_scheduler_states))
        self._engine.load_checkpoint(load_dir, tag)
        self._load_frozen(load_dir, self._tag_of(load_dir, tag))
        blob = self._engine.client_state
        client_state = pickle.loads(blob) if blob else {}
        groups = getattr(self, "_groups", None)
        if groups is not None:
            groups.pull()  # param_groups show the restored values
        scheduler_state = client_state.pop(_SCHEDULER_KEY, None) if isinstance(client_state, dict) else None
        scheduler = getattr(self, "_client_scheduler", None)
        if scheduler_state is not None and scheduler is not None and hasattr(scheduler, "load_state_dict"):
            scheduler.load_state_dict(scheduler_state)
        return load_dir, client_state

    def _import_deepspeed(self, load_dir, tag):
        """A checkpoint written by DeepSpeed: rank 0 converts it (ds_checkpoint.import_checkpoint, in
        this engine's parameter order) into load_dir/.dsrt-import, which every rank then loads."""
        from . import ds_checkpoint
        target = os.path.join(load_dir, _IMPORT_DIR)
        comm = getattr(self, "_comm", None)
        failure = None
        if self.global_rank == 0:
            try:
                ds_checkpoint.import_checkpoint(load_dir, target, tag=tag, order=[t.name for t, _ in self._params])
            except Exception as error:  # every rank must hear of it, not wait at the barrier
                failure = error
            if comm is not None and comm.world_size > 1:
                with open(os.path.join(load_dir, _IMPORT_DIR + ".status"), "w") as f:
                    f.write("" if failure is None else "%s: %s" % (type(failure).__name__, failure))
        if comm is not None and comm.world_size > 1:
            comm.barrier()
            if failure is None and self.global_rank != 0:
                with open(os.path.join(load_dir, _IMPORT_DIR + ".status")) as f:
                    message = f.read()
                if message:
                    failure = _core.CheckpointError(_core.capi.DSRT_ERR_CHECKPOINT,
                                                    "importing the DeepSpeed checkpoint failed on rank 0: " + message)
        if failure is not None:
            raise failure
        return target, tag

    def _load_weights(self, load_dir, tag, strict):
        reader = _core.Checkpoint(load_dir, tag)
        try:
            stored = set(reader.names())
            mine = self._engine.tensors
            missing, unexpected = sorted(set(mine) - stored), sorted(stored - set(mine))
            if strict and (missing or unexpected):
                raise _core.CheckpointError(
                    _core.capi.DSRT_ERR_CHECKPOINT,
                    "load_checkpoint(load_module_only=True): the checkpoint in %s does not match the model "
                    "(missing: %s; unexpected: %s); pass load_module_strict=False to load the common tensors"
                    % (load_dir, ", ".join(missing) or "none", ", ".join(unexpected) or "none"))
            values = {}
            for name, tensor in mine.items():
                if name not in stored:
                    continue
                if tuple(reader.shape(name)) != tuple(tensor.shape):
                    raise _core.CheckpointError(
                        _core.capi.DSRT_ERR_CHECKPOINT,
                        "load_checkpoint: %s has shape %r in the checkpoint and %r in the model"
                        % (name, tuple(reader.shape(name)), tuple(tensor.shape)))
                values[name] = reader.read(name)
        finally:
            reader.close()
        # Every value is read and checked before the first is written: a bad checkpoint changes nothing.
        for name, value in values.items():
            mine[name].write_fp32(value)
        tag_dir = self._tag_of(load_dir, tag)
        self._load_frozen(load_dir, tag_dir)
        client_path = os.path.join(load_dir, tag_dir, "client_state.bin")
        client_state = {}
        if os.path.isfile(client_path) and os.path.getsize(client_path) > 0:
            with open(client_path, "rb") as f:
                client_state = pickle.loads(f.read())
        return load_dir, client_state
