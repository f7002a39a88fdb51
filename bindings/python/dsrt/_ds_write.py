"""Writing a dsrt checkpoint (read by _dsrt_format.Checkpoint) as a DeepSpeed 0.19 checkpoint:
the files DeepSpeed's load_checkpoint reads at ZeRO stage 0-3 for a given world size and
precision, and that its zero_to_fp32.py consolidates. DeepSpeed's own objects inside them
(ZeroStageEnum, LossScaler / DynamicLossScaler, fragment_address) are written as references to
DeepSpeed's classes with their values, without importing DeepSpeed."""

import collections
import copyreg
import io
import os
import pickle
import shutil
import tempfile
import warnings

import numpy as np

DS_VERSION = "0.19.8"
_ZERO_STAGE = ("deepspeed.runtime.zero.config", "ZeroStageEnum")
_FRAGMENT = ("deepspeed.utils.tensor_fragment", "fragment_address")
_SCALERS = ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"), ("deepspeed.runtime.fp16.loss_scaler",
                                                                   "DynamicLossScaler")
_ADAM_DEFAULTS = {"amsgrad": False, "foreach": None, "maximize": False, "capturable": False,
                  "differentiable": False, "fused": None}


class Record:
    """An object of DeepSpeed class module.name: built by calling it with args, or (args None)
    created without __init__ and given the attributes in state."""

    def __init__(self, module, name, args=None, state=None):
        self.module, self.name, self.args, self.state = module, name, args, state


_refs = {}


def _class_ref(module, name):
    key = (module, name)
    if key not in _refs:
        _refs[key] = type(name, (), {"__module__": module, "__qualname__": name})
    return _refs[key]


class _Pickler(pickle._Pickler):
    """Writes Records as DeepSpeed's classes (by name only; nothing of DeepSpeed is imported)."""

    def reducer_override(self, obj):
        if isinstance(obj, Record):
            cls = _class_ref(obj.module, obj.name)
            if obj.args is not None:
                return cls, tuple(obj.args)
            return copyreg._reconstructor, (cls, object, None), dict(obj.state)
        return NotImplemented

    def save_global(self, obj, name=None):
        for (module, cls_name), ref in _refs.items():
            if obj is ref:
                self.write(pickle.GLOBAL + module.encode() + b"\n" + cls_name.encode() + b"\n")
                self.memoize(obj)
                return
        super().save_global(obj, name)


class _PickleModule:
    Pickler = _Pickler
    Unpickler = pickle.Unpickler
    HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
    dump = staticmethod(lambda obj, f, protocol=2: _Pickler(f, protocol).dump(obj))


def _save(obj, path):
    import torch
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_module=_PickleModule)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


def _torch_dtype(name):
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _scaler_record(m, config, dtype):
    import torch
    s = m["loss_scaler"]
    if dtype != "fp16" or not s["dynamic"]:
        return Record(*_SCALERS[0], state={"cur_scale": float(s["cur_scale"]) if dtype == "fp16" else 1.0,
                                           "dynamic": False})
    fp16 = config.get("fp16", {}) if isinstance(config.get("fp16"), dict) else {}
    hysteresis = int(fp16.get("hysteresis", 2))
    return Record(*_SCALERS[1], state={
        "cur_scale": float(s["cur_scale"]), "dynamic": True, "cur_iter": int(s["cur_iter"]),
        "last_overflow_iter": int(s["last_overflow_iter"]), "scale_factor": 2.0,
        "scale_window": int(fp16.get("loss_scale_window", 1000)), "min_scale": float(fp16.get("min_loss_scale", 1)),
        "delayed_shift": hysteresis, "cur_hysteresis": int(s["cur_hysteresis"]),
        "consecutive_hysteresis": bool(fp16.get("consecutive_hysteresis", False)),
        "raise_error_at_min_scale": True, "dtype": torch.float16})


def _torch_group(values, optimizer, group_index, params):
    """A torch param_groups entry from dsrt's group values (lr, betas, eps, weight_decay...)."""
    out = {}
    if "lr" in values:
        out["lr"] = values["lr"]
    if optimizer in ("SGD",):
        for key in ("momentum", "dampening", "weight_decay"):
            if key in values:
                out[key] = values[key]
        out["nesterov"] = bool(values.get("nesterov", 0.0))
    else:
        if "beta1" in values:
            out["betas"] = (values["beta1"], values.get("beta2", 0.999))
        for key in ("eps", "weight_decay"):
            if key in values:
                out[key] = values[key]
        if optimizer in ("Adam", "AdamW"):
            out.update(_ADAM_DEFAULTS)
    out["params"] = params
    return out


def _config(m, stage, dtype):
    config = dict(m.get("config") or {})
    zero = dict(config.get("zero_optimization") or {}) if isinstance(config.get("zero_optimization"), dict) else {}
    zero["stage"] = stage
    config["zero_optimization"] = zero
    for key in ("bf16", "fp16"):
        if dtype == key or isinstance(config.get(key), dict):
            section = dict(config.get(key) or {}) if isinstance(config.get(key), dict) else {}
            section["enabled"] = dtype == key
            config[key] = section
    return config


def write(ckpt, ds_dir, stage=None, world_size=None, dtype=None, buffers=None, save_latest=True):
    import torch
    m = ckpt.manifest
    stage = int(m["zero_stage"]) if stage is None else int(stage)
    world = int(m["world_size"]) if world_size is None else int(world_size)
    dtype = m["working_dtype"] if dtype is None else dtype
    if stage not in (0, 1, 2, 3) or world < 1 or dtype not in ("fp32", "bf16", "fp16"):
        raise ValueError("export: stage %r, world size %r, dtype %r (expected 0-3, >= 1, fp32/bf16/fp16)"
                         % (stage, world, dtype))
    if stage == 0 and world > 1:
        world = 1  # stage 0 saves the replicated states once, whatever the world size
    if m.get("optimizer") not in ("Adam", "AdamW", "SGD", "Adagrad", "Lion"):
        raise ValueError("export: dsrt's %s optimizer has no torch.optim counterpart DeepSpeed would restore its "
                         "states into; export Adam, AdamW, SGD, Adagrad or Lion checkpoints" % m.get("optimizer"))
    streams = [ckpt.read_stream(i) for i in range(len(ckpt.streams))]
    state_names = ckpt.streams[1:]
    names = [n for n, _, _ in ckpt.tensors]
    shapes = {n: s for n, s, _ in ckpt.tensors}
    ngroups = max(len(m.get("param_groups") or []), 1 + max([g for _, _, g in ckpt.tensors] or [0]))
    group_names = [[n for n, _, g in ckpt.tensors if g == k] for k in range(ngroups)]
    values = {s: {n: streams[i][j] for j, n in enumerate(names)} for i, s in enumerate(ckpt.streams)}
    group_values = list(m.get("param_groups") or [{}]) + [{}] * ngroups
    counters = m["counters"]
    step = int(counters["applied_steps"])
    config = _config(m, stage, dtype)
    wdt = _torch_dtype(dtype)
    tag = ckpt.tag
    tag_dir = os.path.join(ds_dir, tag)
    os.makedirs(tag_dir, exist_ok=True)
    for old in os.listdir(tag_dir):
        if old.endswith(".pt"):
            os.remove(os.path.join(tag_dir, old))

    client = {}
    if ckpt.client_state:
        if _plain_pickle(ckpt.client_state):
            client = pickle.loads(ckpt.client_state)
        else:
            warnings.warn("export: the client state holds objects other than plain values (tensors, classes); "
                          "it is left out of the DeepSpeed checkpoint")
    from .ds_checkpoint import SCHEDULER_KEY
    client_scheduler = client.pop(SCHEDULER_KEY, None) if isinstance(client, dict) else None
    if not isinstance(client, dict):
        client = {}
    if isinstance(config.get("scheduler"), dict):
        lr_scheduler = {"last_batch_iteration": int(m["scheduler"]["last_batch_iteration"])}
        # dsrt keeps the groups' base lr and computes the schedule; DeepSpeed's param_groups hold
        # the scheduled lr its next step uses.
        for g, lr in enumerate(scheduled_lrs(m)):
            group_values[g] = dict(group_values[g], lr=lr)
    else:
        lr_scheduler = client_scheduler

    def tensor(array, dt=torch.float32):
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(dt)

    module = collections.OrderedDict()
    for n in names:
        module[n] = tensor(values["fp32_master"][n], wdt) if stage != 3 else torch.empty(0, dtype=wdt)
    frozen_shapes = collections.OrderedDict((n, torch.Size(s)) for n, s, _ in ckpt.frozen)
    for n, _, v in ckpt.frozen:
        module[n] = tensor(v, wdt)
    buffer_names = []
    frozen_names = {f for f, _, _ in ckpt.frozen}
    for n, v in (buffers or {}).items():  # a model's state_dict: the entries that are not parameters
        if n not in module and n not in frozen_names:
            module[n] = v.detach().cpu() if hasattr(v, "detach") else v
            buffer_names.append(n)
    if buffers:  # in the model's state_dict order, as DeepSpeed saves the module
        ordered = collections.OrderedDict((n, module[n]) for n in buffers if n in module)
        ordered.update((n, v) for n, v in module.items() if n not in ordered)
        module = ordered
    model_states = {
        "module": module, "buffer_names": buffer_names, "optimizer": None,
        "param_shapes": [collections.OrderedDict((n, torch.Size(shapes[n])) for n in g) for g in group_names],
        "frozen_param_shapes": frozen_shapes, "shared_params": {}, "frozen_param_fragments": collections.OrderedDict(),
        "lr_scheduler": lr_scheduler, "data_sampler": None, "random_ltd": None,
        "skipped_steps": int(counters["skipped_steps"]), "global_steps": int(counters["global_step"]),
        "global_samples": int(counters["global_step"]) * int(config.get("train_micro_batch_size_per_gpu") or 1) *
        int(config.get("gradient_accumulation_steps") or 1) * world,
        "dp_world_size": world, "mp_world_size": 1,
        "checkpoint_parallel_dimensions": {"pp_degree": 1, "tp_degree": 1}, "ds_config": config,
        "ds_version": DS_VERSION,
    }
    model_states.update(client)
    scaler = _scaler_record(m, config, dtype)
    optimizer = m["optimizer"]

    def state_entry(get):
        entry = {"step": torch.tensor(float(step))}
        for s in state_names:
            entry[s] = get(s)
        return entry

    prefix = "bf16_" if dtype == "bf16" else ""
    if stage == 0:
        order = [n for g in group_names for n in g]
        index = {n: i for i, n in enumerate(order)}
        osd = {"state": {index[n]: state_entry(lambda s, n=n: tensor(values[s][n])) for n in order},
               "param_groups": [_torch_group(group_values[g], optimizer, g, [index[n] for n in group_names[g]])
                                for g in range(ngroups)]}
        for key in ("param_shapes", "frozen_param_shapes", "shared_params", "frozen_param_fragments"):
            model_states[key] = None  # as DeepSpeed writes them without a ZeRO optimizer
        if dtype == "fp32":
            model_states["optimizer"] = osd
        else:
            s = m["loss_scaler"]
            model_states["optimizer"] = {
                "dynamic_loss_scale": bool(s["dynamic"]) and dtype == "fp16", "cur_scale": float(s["cur_scale"]),
                "cur_iter": int(s["cur_iter"]), "optimizer_state_dict": osd,
                "fp32_groups": [[tensor(values["fp32_master"][n]) for n in g] for g in group_names]}
            if dtype == "fp16" and s["dynamic"]:
                fp16 = config.get("fp16", {})
                model_states["optimizer"].update({"last_overflow_iter": int(s["last_overflow_iter"]),
                                                  "scale_factor": 2.0,
                                                  "scale_window": int(fp16.get("loss_scale_window", 1000))})
        _save(model_states, os.path.join(tag_dir, "mp_rank_00_model_states.pt"))
    elif stage in (1, 2):
        _save(model_states, os.path.join(tag_dir, "mp_rank_00_model_states.pt"))
        for r in range(world):
            singles, paddings, align_pads, slices, state = [], [], [], [], {}
            for g, gnames in enumerate(group_names):
                flat = {s: np.concatenate([values[s][n].reshape(-1) for n in gnames] or [np.zeros(0, np.float32)])
                        for s in ckpt.streams}
                total = flat["fp32_master"].size
                align = 2 * world
                per = -(-total // align) * align // world
                lo, hi = min(r * per, total), min((r + 1) * per, total)
                pad = per - (hi - lo)
                singles.append(tensor(flat["fp32_master"][lo:hi]))
                paddings.append(pad)
                align_pads.append([0] * len(gnames))
                padded = {s: np.concatenate([flat[s][lo:hi], np.zeros(pad, np.float32)]) for s in state_names}
                state[g] = state_entry(lambda s, padded=padded: tensor(padded[s]))
                mapping, at = collections.OrderedDict(), 0
                for n in gnames:
                    size = int(np.prod(shapes[n], dtype=np.int64))
                    a, b = max(at, lo), min(at + size, hi)
                    if a < b:
                        mapping[n] = Record(*_FRAGMENT, state={"numel": b - a, "start": a - lo})
                    at += size
                slices.append(mapping)
            osd = {
                "loss_scaler": scaler, "dynamic_loss_scale": bool(scaler.state["dynamic"]),
                "overflow": False, "clip_grad": float(config.get("gradient_clipping", 1.0) or 0.0),
                "base_optimizer_state": {"state": state, "param_groups": [
                    _torch_group(group_values[g], optimizer, g, [g]) for g in range(ngroups)]},
                "single_partition_of_fp32_groups": singles, "zero_stage": Record(*_ZERO_STAGE, args=(stage,)),
                "group_paddings": paddings, "param_alignment_paddings": align_pads,
                "partition_count": [world] * ngroups, "ds_version": DS_VERSION, "param_slice_mappings": slices}
            _save({"optimizer_state_dict": osd, "ds_config": config, "ds_version": DS_VERSION},
                  os.path.join(tag_dir, "%szero_pp_rank_%d_mp_rank_00_optim_states.pt" % (prefix, r)))
    else:
        for r in range(world):
            flats, state = [], {}
            for g, gnames in enumerate(group_names):
                parts = {s: [] for s in ckpt.streams}
                for n in gnames:
                    size = int(np.prod(shapes[n], dtype=np.int64))
                    part = -(-size // world)
                    for s in ckpt.streams:
                        piece = values[s][n].reshape(-1)[r * part:(r + 1) * part]
                        parts[s].append(np.concatenate([piece, np.zeros(part - piece.size, np.float32)]))
                flat = {s: np.concatenate(v) if v else np.zeros(0, np.float32) for s, v in parts.items()}
                flats.append(tensor(flat["fp32_master"]))
                state[g] = state_entry(lambda s, flat=flat: tensor(flat[s]))
            osd = {"zero_stage": Record(*_ZERO_STAGE, args=(3,)), "loss_scaler": scaler,
                   "dynamic_loss_scale": bool(scaler.state["dynamic"]), "overflow": False, "partition_count": world,
                   "optimizer_state_dict": {"state": state, "param_groups": [
                       _torch_group(group_values[g], optimizer, g, [g]) for g in range(ngroups)]},
                   "fp32_flat_groups": flats}
            _save({"optimizer_state_dict": osd, "ds_config": config, "ds_version": DS_VERSION},
                  os.path.join(tag_dir, "%szero_pp_rank_%d_mp_rank_00_optim_states.pt" % (prefix, r)))
            _save(model_states, os.path.join(tag_dir, "zero_pp_rank_%d_mp_rank_00_model_states.pt" % r))
    if save_latest:
        with open(os.path.join(ds_dir, "latest"), "w") as f:
            f.write(tag)
    return tag_dir


def _plain_pickle(blob):
    """True when blob unpickles with plain containers and numbers only (the front's client state);
    anything else is left out of the export rather than unpickled."""
    import pickletools
    try:
        for opcode, arg, _ in pickletools.genops(blob):
            if opcode.name in ("GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX",
                               "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"):
                return False
    except Exception:
        return False
    return True


def scheduled_lrs(manifest):
    """The lr of each group for the next step under the config's scheduler at the checkpoint's
    position, as DeepSpeed keeps it in param_groups: dsrt computes it (a one-element engine per
    group loads a checkpoint with the same config, groups and position)."""
    from . import _core, _dsrt_format
    config = dict(manifest.get("config") or {})
    for key in ("train_batch_size", "zero_optimization", "offload_optimizer", "offload_param"):
        config.pop(key, None)  # a one-rank, stage-0 engine in memory: only the schedule matters
    groups = manifest.get("param_groups") or [{}]
    folder = tempfile.mkdtemp(prefix="dsrt-lr-")
    try:
        states = len(manifest["streams"])
        _dsrt_format.write_checkpoint(
            folder, "t", tensors=[("g%d" % g, (1,), g) for g in range(len(groups))],
            streams=[[np.zeros(1, np.float32)] * len(groups) for _ in range(states)],
            state_names=manifest["streams"][1:], optimizer=manifest["optimizer"],
            working_dtype=manifest["working_dtype"], zero_stage=0, counters=manifest["counters"],
            scaler=manifest["loss_scaler"], scheduler_iteration=manifest["scheduler"]["last_batch_iteration"],
            client_state=b"", groups=groups, config=config)
        engine = _core.Engine(config, _core.Comm.local(), device="cpu")
        try:
            for g in range(1, len(groups)):
                engine.add_group()
            for g in range(len(groups)):
                tensor = engine.add_param("g%d" % g, shape=(1,), init=np.zeros(1, np.float32))
                if g:
                    tensor.group = g
            engine.build()
            engine.load_checkpoint(folder, "t")
            return [engine.group_lr(g) for g in range(len(groups))]
        finally:
            engine.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
