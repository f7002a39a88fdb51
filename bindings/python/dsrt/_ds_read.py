"""Reading a checkpoint written by DeepSpeed (0.19) into full tensors: every trainable parameter's
fp32 master and optimizer states, the parameter groups, counters, loss scaler, schedule and client
state, whatever the ZeRO stage (0-3), precision (fp32, bf16, fp16) and world size it was saved
with. The files are read with the restricted unpickler of _ds_pickle (no DeepSpeed needed)."""

import glob
import os
import pickle
import re

import numpy as np

from . import _core, _ds_pickle

# Keys of DeepSpeed's model-states file; anything else there is the client state.
MODEL_KEYS = {"module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
              "frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd", "sparse_tensor_module_names",
              "skipped_steps", "global_steps", "global_samples", "dp_world_size", "mp_world_size", "ds_config",
              "ds_version", "checkpoint_parallel_dimensions", "data_parallel_world_size", "tensor_parallel_world_size",
              "universal_checkpoint_info", "ds_checkpoint_version", "hp_mappings"}
STATE_KEYS = ("exp_avg", "exp_avg_sq", "momentum_buffer", "sum")


class Unsupported(_core.UnsupportedError):
    """A DeepSpeed checkpoint layout this reader does not handle (the message says which and why)."""

    def __init__(self, message):
        super().__init__(_core.capi.DSRT_ERR_UNSUPPORTED, message)


class DeepSpeedState:
    """A DeepSpeed checkpoint as full tensors (numpy float32), ready to become a dsrt checkpoint.

    names / shapes / groups: the trainable parameters in model order, their group index;
    master: [array]; states: {state name: [array]}; group_hyper: one dict per group (dsrt names:
    lr, weight_decay, beta1, beta2, eps, momentum, dampening, nesterov); counters; scaler;
    scheduler_iteration and client_scheduler (a client scheduler's state_dict, or None);
    client_state (dict); config (DeepSpeed's ds_config); stage, world_size, working_dtype; frozen:
    [(name, shape, array)]; tag."""


def is_deepspeed_tag(tag_dir):
    """True when tag_dir holds DeepSpeed's files (and no dsrt manifest)."""
    if not os.path.isdir(tag_dir) or os.path.isfile(os.path.join(tag_dir, "manifest.json")):
        return False
    return any(n.endswith("_model_states.pt") for n in os.listdir(tag_dir))


def is_deepspeed_checkpoint(directory, tag=None):
    """True when directory (with `latest`, or the tag given) or directory itself is a DeepSpeed checkpoint."""
    if is_deepspeed_tag(directory):
        return True
    if tag is None:
        latest = os.path.join(directory, "latest")
        if not os.path.isfile(latest):
            return False
        with open(latest) as f:
            tag = f.read().strip()
    return is_deepspeed_tag(os.path.join(directory, tag))


def resolve(directory, tag=None):
    """(tag, tag folder) of a DeepSpeed checkpoint: the folder with `latest`, or a tag folder itself."""
    directory = os.fspath(directory)
    if tag is None and is_deepspeed_tag(directory):
        return os.path.basename(os.path.normpath(directory)), directory
    if tag is None:
        latest = os.path.join(directory, "latest")
        if not os.path.isfile(latest):
            raise FileNotFoundError("%s has no 'latest' file and is not a DeepSpeed tag folder; pass the tag" % directory)
        with open(latest) as f:
            tag = f.read().strip()
    tag_dir = os.path.join(directory, tag)
    if not is_deepspeed_tag(tag_dir):
        raise FileNotFoundError("%s holds no DeepSpeed checkpoint (no *_model_states.pt)" % tag_dir)
    return tag, tag_dir


def _np(tensor):
    import torch
    return tensor.detach().to(torch.float32).contiguous().numpy().copy()


def _enabled(config, key):
    section = config.get(key) if isinstance(config, dict) else None
    return isinstance(section, dict) and bool(section.get("enabled"))


def _hyper(group):
    out = {}
    for key in ("lr", "weight_decay", "eps", "momentum", "dampening"):
        if isinstance(group.get(key), (int, float)):
            out[key] = float(group[key])
    if "betas" in group:
        out["beta1"], out["beta2"] = float(group["betas"][0]), float(group["betas"][1])
    if "nesterov" in group:
        out["nesterov"] = 1.0 if group["nesterov"] else 0.0
    return out


def _ranked(paths, pattern):
    found = {}
    for p in paths:
        m = re.search(pattern, os.path.basename(p))
        if m:
            found[int(m.group(1))] = p
    if sorted(found) != list(range(len(found))):
        raise Unsupported("the optimizer files of ranks %s are not 0..N-1" % sorted(found))
    return [found[r] for r in range(len(found))]


def _scaler(obj, global_steps, config):
    """dsrt's loss_scaler fields from DeepSpeed's LossScaler / DynamicLossScaler (or a dict)."""
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    dynamic = bool(get("dynamic", False)) or type(obj).__name__ == "DynamicLossScaler"
    fp16 = config.get("fp16", {}) if isinstance(config.get("fp16"), dict) else {}
    return {"dynamic": dynamic, "cur_scale": float(get("cur_scale", 1.0)),
            "cur_iter": int(get("cur_iter", global_steps)), "last_overflow_iter": int(get("last_overflow_iter", -1)),
            "cur_hysteresis": int(get("cur_hysteresis", fp16.get("hysteresis", 2) if dynamic else 1))}


def _step_of(state):
    for entry in state.values():
        step = entry.get("step")
        if step is not None:
            return int(float(step))
    return None


def read(directory, tag=None):
    """The DeepSpeedState of a DeepSpeed checkpoint folder (or tag folder). Raises Unsupported for a
    layout dsrt does not import, CheckpointError for files that are not what DeepSpeed writes."""
    tag, tag_dir = resolve(directory, tag)
    try:
        return _read(tag, tag_dir)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, pickle.UnpicklingError) as error:
        raise _core.CheckpointError(
            _core.capi.DSRT_ERR_CHECKPOINT,
            "%s is not a DeepSpeed checkpoint dsrt can read (%s: %s); it expects the files DeepSpeed 0.19 "
            "writes (mp_rank_00_model_states.pt and *zero_pp_rank_*_optim_states.pt)"
            % (tag_dir, type(error).__name__, error)) from error


def _read(tag, tag_dir):
    model_files = sorted(glob.glob(os.path.join(tag_dir, "*mp_rank_00_model_states.pt")))
    if not model_files:
        raise Unsupported("%s has no mp_rank_00 model states; model-parallel checkpoints are not supported" % tag_dir)
    if glob.glob(os.path.join(tag_dir, "*mp_rank_01_*")):
        raise Unsupported("%s is a tensor/pipeline-parallel checkpoint (mp_rank_01 files); dsrt imports data-parallel "
                          "ZeRO checkpoints only" % tag_dir)
    plain = os.path.join(tag_dir, "mp_rank_00_model_states.pt")
    model = _ds_pickle.load(plain if os.path.isfile(plain) else model_files[0])
    config = model.get("ds_config") or {}
    zero = config.get("zero_optimization", {}) if isinstance(config.get("zero_optimization"), dict) else {}
    state = DeepSpeedState()
    state.tag, state.config = tag, config
    state.stage = int(zero.get("stage", 0))
    state.working_dtype = "bf16" if _enabled(config, "bf16") else "fp16" if _enabled(config, "fp16") else "fp32"
    state.world_size = int(model.get("dp_world_size", 1))
    if int(model.get("mp_world_size", 1)) != 1:
        raise Unsupported("%s was saved with model parallelism (mp_world_size %s); dsrt imports data-parallel "
                          "checkpoints only" % (tag_dir, model.get("mp_world_size")))
    module = model["module"]
    buffers = set(model.get("buffer_names") or [])
    shared = model.get("shared_params") or {}
    optim_files = _ranked(glob.glob(os.path.join(tag_dir, "*zero_pp_rank_*_mp_rank_00_optim_states.pt")),
                          r"zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$")
    if model.get("param_shapes"):
        group_names = [list(shapes.keys()) for shapes in model["param_shapes"]]
        shapes = {n: tuple(int(d) for d in s) for g in model["param_shapes"] for n, s in g.items()}
    else:  # stage 0 without a ZeRO optimizer: the model's parameters, in order
        names = [n for n in module if n not in buffers and n not in shared]
        group_names = [names]
        shapes = {n: tuple(module[n].shape) for n in names}
    group_of = {n: g for g, names in enumerate(group_names) for n in names}
    order = [n for n in module if n in group_of]
    order += [n for names in group_names for n in names if n not in set(order)]
    state.names, state.shapes = order, [shapes[n] for n in order]
    state.groups = [group_of[n] for n in order]
    values = {}  # stream -> {name: array}
    layout = set(_ds_pickle.load(optim_files[0]).get("optimizer_state_dict", {})) if optim_files else set()
    if "single_partition_of_fp32_groups" in layout:
        base, step = _read_zero12(optim_files, group_names, shapes, values)
    elif "fp32_flat_groups" in layout:
        base, step = _read_zero3(optim_files, group_names, shapes, values)
    elif optim_files:
        raise ValueError("optimizer files of an unknown layout (keys: %s)" % (", ".join(sorted(layout)) or "none"))
    else:
        base, step = _read_stage0(model, group_names, shapes, values)
    osd = base["osd"]
    state.group_hyper = [_hyper(g) for g in base["param_groups"]]
    if len(state.group_hyper) != len(group_names):
        raise Unsupported("%s: %d optimizer parameter groups for %d groups of parameters" %
                          (tag_dir, len(state.group_hyper), len(group_names)))
    state.master = [values["fp32_master"][n] for n in order]
    state.state_names = [k for k in STATE_KEYS if k in values]
    state.states = {k: [values[k][n] for n in order] for k in state.state_names}
    global_steps = int(model.get("global_steps", 0))
    skipped = int(model.get("skipped_steps", 0))
    applied = step if step is not None else global_steps - skipped
    state.counters = {"global_step": global_steps, "skipped_steps": skipped,
                      "applied_steps": max(0, min(applied, global_steps))}
    scaler_src = osd.get("loss_scaler") if isinstance(osd, dict) and "loss_scaler" in osd else osd
    state.scaler = _scaler(scaler_src, global_steps, config)
    if isinstance(osd, dict) and "dynamic_loss_scale" in osd:
        state.scaler["dynamic"] = bool(osd["dynamic_loss_scale"])
    scheduler = model.get("lr_scheduler")
    state.client_scheduler = None
    state.scheduler_iteration = -1
    if isinstance(config.get("scheduler"), dict) and isinstance(scheduler, dict):
        state.scheduler_iteration = int(scheduler.get("last_batch_iteration", -1))
    elif isinstance(scheduler, dict):
        state.client_scheduler = scheduler
    state.scheduler_iteration = max(-1, min(state.scheduler_iteration, global_steps))
    state.client_state = {k: v for k, v in model.items() if k not in MODEL_KEYS}
    state.frozen = _frozen(model, module, state.stage, tag_dir)
    state.buffers = {n: module[n] for n in buffers if n in module}
    return state


def _frozen(model, module, stage, tag_dir):
    shapes = model.get("frozen_param_shapes") or {}
    if not shapes:
        return []
    if stage == 3:
        raise Unsupported("%s holds frozen parameters saved at ZeRO stage 3 (frozen_param_fragments); dsrt imports "
                          "frozen parameters from stages 0-2 only: load the weights with DeepSpeed and consolidate "
                          "them, or make the parameters trainable for the import" % tag_dir)
    return [(n, tuple(int(d) for d in s), _np(module[n]).reshape(tuple(s))) for n, s in shapes.items()]


def _read_stage0(model, group_names, shapes, values):
    """Stage 0: the torch optimizer's state_dict (fp32) or the 16-bit optimizer's fp32 groups."""
    opt = model.get("optimizer")
    if not isinstance(opt, dict):
        raise Unsupported("the checkpoint holds no optimizer state (saved without the optimizer?)")
    names = [n for g in group_names for n in g]
    if "fp32_groups" in opt:  # FP16_Optimizer / unfused 16-bit optimizer at stage 0
        osd = opt["optimizer_state_dict"]
        flat_masters = [t for group in opt["fp32_groups"] for t in group]
        if len(flat_masters) != len(names):
            raise Unsupported("stage 0: %d fp32 masters for %d parameters" % (len(flat_masters), len(names)))
        values["fp32_master"] = {n: _np(t).reshape(shapes[n]) for n, t in zip(names, flat_masters)}
        scaler = {"dynamic": bool(opt.get("dynamic_loss_scale")), "cur_scale": opt.get("cur_scale", 1.0),
                  "cur_iter": opt.get("cur_iter", 0), "last_overflow_iter": opt.get("last_overflow_iter", -1),
                  "cur_hysteresis": opt.get("cur_hysteresis", 1)}
    else:
        osd = opt
        values["fp32_master"] = {n: _np(model["module"][n]).reshape(shapes[n]) for n in names}
        scaler = {"dynamic": False, "cur_scale": 1.0}
    if len(osd["param_groups"]) != 1 and len(group_names) == 1:
        raise Unsupported("a stage-0 checkpoint with several parameter groups: its state is indexed by position, "
                          "which does not name the parameters; save it at ZeRO stage 1-3 to import it")
    index = [i for g in osd["param_groups"] for i in g["params"]]
    for i, name in zip(index, names):
        for key, value in osd["state"].get(i, {}).items():
            if key in STATE_KEYS:
                values.setdefault(key, {})[name] = _np(value).reshape(shapes[name])
    return {"osd": scaler, "param_groups": osd["param_groups"]}, _step_of(osd["state"])


def _read_zero12(files, group_names, shapes, values):
    """Stages 1-2 (and the bf16 optimizer): per rank, each group's flat partition, padding at the end."""
    sds = [_ds_pickle.load(f)["optimizer_state_dict"] for f in files]
    world = len(sds)
    for sd in sds:
        for pads in sd.get("param_alignment_paddings") or []:
            if any(pads):
                raise Unsupported("the checkpoint uses zero_optimization.parameter_alignment (padding between "
                                  "parameters); dsrt imports the default layout only")
    first = sds[0]
    base_key = "base_optimizer_state" if "base_optimizer_state" in first else "optimizer_state_dict"
    groups = first[base_key]["param_groups"]
    for g, names in enumerate(group_names):
        total = sum(int(np.prod(shapes[n], dtype=np.int64)) for n in names)
        pads = [int(sd["group_paddings"][g]) for sd in sds]
        per = (total + sum(pads)) // world

        def flat(pieces):
            kept = []
            for r, piece in enumerate(pieces):
                piece = _np(piece).reshape(-1)
                if piece.size == per:
                    piece = piece[:per - pads[r]]
                elif piece.size != per - pads[r]:
                    raise Unsupported("rank %d holds %d elements of group %d; expected %d (or %d with padding)" %
                                      (r, piece.size, g, per - pads[r], per))
                kept.append(piece)
            out = np.concatenate(kept) if kept else np.zeros(0, np.float32)
            if out.size != total:
                raise Unsupported("group %d: the partitions hold %d elements, the parameters %d" % (g, out.size, total))
            return out

        streams = {"fp32_master": flat([sd["single_partition_of_fp32_groups"][g] for sd in sds])}
        rank_states = [sd[base_key]["state"] for sd in sds]
        keys = [k for k in STATE_KEYS if k in rank_states[0].get(g, {})]
        for key in keys:
            streams[key] = flat([st[g][key] for st in rank_states])
        for key, data in streams.items():
            at = 0
            for n in names:
                size = int(np.prod(shapes[n], dtype=np.int64))
                values.setdefault(key, {})[n] = data[at:at + size].reshape(shapes[n])
                at += size
    return {"osd": first, "param_groups": groups}, _step_of(first[base_key]["state"])


def _read_zero3(files, group_names, shapes, values):
    """Stage 3: per rank, each group's flat partition holds every parameter's ceil(n/W) slice."""
    sds = [_ds_pickle.load(f)["optimizer_state_dict"] for f in files]
    world = len(sds)
    first = sds[0]
    inner = first["optimizer_state_dict"]
    for g, names in enumerate(group_names):
        streams = {"fp32_master": [_np(sd["fp32_flat_groups"][g]).reshape(-1) for sd in sds]}
        for key in STATE_KEYS:
            if key in inner["state"].get(g, {}):
                streams[key] = [_np(sd["optimizer_state_dict"]["state"][g][key]).reshape(-1) for sd in sds]
        for key, per_rank in streams.items():
            at = 0
            for n in names:
                size = int(np.prod(shapes[n], dtype=np.int64))
                part = -(-size // world)
                pieces = [flat[at:at + part] for flat in per_rank]
                if any(p.size != part for p in pieces):
                    raise Unsupported("stage 3: group %d's partitions are shorter than its parameters need" % g)
                values.setdefault(key, {})[n] = np.concatenate(pieces)[:size].reshape(shapes[n])
                at += part
    return {"osd": first, "param_groups": inner["param_groups"]}, _step_of(inner["state"])
