"""DeepSpeed checkpoints both ways.

    import_checkpoint(ds_dir, dsrt_dir)   a checkpoint written by DeepSpeed (ZeRO stage 0-3, fp32,
                                          bf16 or fp16, any world size) becomes a dsrt checkpoint
    export_checkpoint(dsrt_dir, ds_dir)   a dsrt checkpoint becomes one DeepSpeed loads and goes on
                                          from (and that its zero_to_fp32.py consolidates)

Both carry everything training needs: the fp32 masters, the optimizer states (Adam's exp_avg and
exp_avg_sq, SGD's momentum), the step counters, the loss scaler, the schedule's position (a
config scheduler's, or a client scheduler's state_dict), the parameter groups' hyper-parameters
and the client state. dsrt loads the imported checkpoint at any world size and ZeRO stage.

Needs torch (DeepSpeed's files are torch.save archives) but not DeepSpeed: its objects in the files
are read by a restricted unpickler that runs no code from them. Command line:

    python -m dsrt.ds_checkpoint import DS_DIR DSRT_DIR [--tag T]
    python -m dsrt.ds_checkpoint export DSRT_DIR DS_DIR [--tag T] [--stage S] [--world-size N]
                                                          [--dtype fp32|bf16|fp16] [--module-from FILE]
(`dsrt checkpoint import|export` runs these.)"""

import argparse
import os
import pickle
import sys

from . import _ds_read
from . import _dsrt_format

SCHEDULER_KEY = "__dsrt_client_lr_scheduler__"  # in the front's pickled client state (_checkpoint_front)
_OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "lamb": "Lamb", "adagrad": "Adagrad",
               "lion": "Lion", "onebitadam": "OneBitAdam"}
_STATES_OF = {"exp_avg_sq": "AdamW", "momentum_buffer": "SGD", "sum": "Adagrad"}

Unsupported = _ds_read.Unsupported
is_deepspeed_checkpoint = _ds_read.is_deepspeed_checkpoint


def _optimizer_name(state):
    section = state.config.get("optimizer") if isinstance(state.config, dict) else None
    if isinstance(section, dict) and isinstance(section.get("type"), str):
        name = _OPTIMIZERS.get(section["type"].lower().replace("_", ""))
        if name:
            return name
    for key, name in _STATES_OF.items():  # a client optimizer: named by the states it keeps
        if key in state.state_names:
            return name
    return "Lion" if state.state_names == ["exp_avg"] else "AdamW"


def _json_safe(value):
    """The config as JSON dsrt's parser takes: non-finite numbers (the HF Trainer sets
    steps_per_print to inf) are left out, other non-JSON values become strings."""
    import math
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, float) and not math.isfinite(v):
                continue
            out[str(k)] = _json_safe(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value if not (isinstance(v, float) and not math.isfinite(v))]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def read_module_state(path):
    """{name: tensor} of a model file: safetensors (read here, the safetensors package is not
    needed) or a torch.save file of a state_dict (read through the restricted unpickler)."""
    import json
    import torch
    from . import _ds_pickle
    path = os.fspath(path)
    if not path.endswith(".safetensors"):
        state = _ds_pickle.load(path)
        return dict(state.get("module", state)) if isinstance(state, dict) else {}
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}
    with open(path, "rb") as f:
        raw = f.read()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        data = bytearray(raw[base + begin:base + end])
        tensor = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        out[name] = tensor.view(dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def import_checkpoint(ds_dir, dsrt_dir, tag=None, out_tag=None, order=None, save_latest=True):
    """Writes the DeepSpeed checkpoint in ds_dir (the folder with `latest`, or a tag folder; tag
    picks another) as a dsrt checkpoint in dsrt_dir under out_tag (default: the same tag). order:
    the parameter names in the order the loading engine registers them (default: the model's
    order as DeepSpeed saved the module). Returns the tag folder written."""
    state = _ds_read.read(ds_dir, tag)
    names = list(state.names)
    if order is not None:
        order = list(order)
        missing, unexpected = sorted(set(order) - set(names)), sorted(set(names) - set(order))
        if missing or unexpected:
            raise Unsupported("the DeepSpeed checkpoint in %s does not match the model (missing: %s; unexpected: %s)"
                              % (ds_dir, ", ".join(missing) or "none", ", ".join(unexpected) or "none"))
        names = order
    index = {n: i for i, n in enumerate(state.names)}
    pick = [index[n] for n in names]
    client = dict(state.client_state)
    config = _json_safe(state.config)
    if state.client_scheduler is not None:
        client[SCHEDULER_KEY] = state.client_scheduler
    tensors = [(state.names[i], state.shapes[i], state.groups[i]) for i in pick]
    streams = [[state.master[i] for i in pick]] + [[state.states[k][i] for i in pick] for k in state.state_names]
    return _dsrt_format.write_checkpoint(
        os.fspath(dsrt_dir), out_tag or state.tag, tensors=tensors, streams=streams, state_names=state.state_names,
        optimizer=_optimizer_name(state), working_dtype=state.working_dtype, zero_stage=state.stage,
        counters=state.counters, scaler=state.scaler, scheduler_iteration=state.scheduler_iteration,
        client_state=pickle.dumps(client), groups=state.group_hyper, config=config,
        frozen=state.frozen, save_latest=save_latest)


def export_checkpoint(dsrt_dir, ds_dir, tag=None, stage=None, world_size=None, dtype=None, module_state=None,
                      save_latest=True):
    """Writes the dsrt checkpoint in dsrt_dir (tag: default `latest`) as a DeepSpeed checkpoint in
    ds_dir, laid out for `world_size` ranks at ZeRO `stage` with `dtype` working weights (each
    defaults to the dsrt checkpoint's own). module_state: a model's state_dict (or the path of a
    .safetensors / torch file holding one) whose entries that are not trained tensors of the
    checkpoint (buffers, tied weights such as an LM head sharing the embedding) go into the
    module state, so that DeepSpeed's strict module load finds them; default: the
    module_extras.pt the PyTorch front saves in the tag folder, if any. Returns the tag folder."""
    if isinstance(module_state, (str, os.PathLike)):
        module_state = read_module_state(module_state)
    from . import _ds_write
    ckpt = _dsrt_format.Checkpoint(os.fspath(dsrt_dir), tag)
    extras = os.path.join(ckpt.path, "module_extras.pt")  # written by the PyTorch front's save_checkpoint
    if module_state is None and os.path.isfile(extras):
        module_state = read_module_state(extras)
    return _ds_write.write(ckpt, os.fspath(ds_dir), stage=stage, world_size=world_size, dtype=dtype,
                           buffers=module_state, save_latest=save_latest)


def _main(argv):
    parser = argparse.ArgumentParser(
        prog="dsrt checkpoint",
        description="Converts checkpoints between DeepSpeed's format and dsrt's (runs in Python; needs torch, "
                    "not DeepSpeed).")
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="a DeepSpeed checkpoint folder -> a dsrt checkpoint folder")
    imp.add_argument("ds_dir", help="DeepSpeed's save_dir (holds 'latest') or one of its tag folders")
    imp.add_argument("dsrt_dir", help="the dsrt checkpoint folder to write (the tag is added, 'latest' updated)")
    imp.add_argument("--tag", help="the DeepSpeed tag to read (default: the one 'latest' names)")
    exp = sub.add_parser("export", help="a dsrt checkpoint folder -> a DeepSpeed checkpoint folder")
    exp.add_argument("dsrt_dir", help="dsrt's checkpoint folder (holds 'latest')")
    exp.add_argument("ds_dir", help="the DeepSpeed checkpoint folder to write")
    exp.add_argument("--tag", help="the dsrt tag to read (default: the one 'latest' names)")
    exp.add_argument("--stage", type=int, choices=(0, 1, 2, 3), help="ZeRO stage DeepSpeed will load it at "
                     "(default: the dsrt checkpoint's)")
    exp.add_argument("--world-size", type=int, help="number of DeepSpeed ranks (default: the dsrt checkpoint's)")
    exp.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="DeepSpeed's working precision "
                     "(default: the dsrt checkpoint's)")
    exp.add_argument("--module-from", help="a model file (.safetensors, or a torch.save state_dict) whose buffers "
                     "and tied weights go into the module state (e.g. the HF Trainer's model.safetensors)")
    args = parser.parse_args(argv)
    try:
        if args.command == "import":
            path = import_checkpoint(args.ds_dir, args.dsrt_dir, tag=args.tag)
        else:
            if args.world_size is not None and args.world_size < 1:
                parser.error("--world-size must be at least 1")
            path = export_checkpoint(args.dsrt_dir, args.ds_dir, tag=args.tag, stage=args.stage,
                                     world_size=args.world_size, dtype=args.dtype, module_state=args.module_from)
    except (Unsupported, _dsrt_format.FormatError, OSError, pickle.UnpicklingError, ValueError, KeyError) as error:
        sys.stderr.write("dsrt checkpoint %s: %s\n" % (args.command, error))
        return 1
    print("wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
