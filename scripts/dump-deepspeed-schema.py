#!/usr/bin/env python3
"""Dumps the training-config fields of the installed DeepSpeed as JSON: for every key, its dotted
path, type, default, numeric range and deprecation, read from DeepSpeed's own config classes
(pydantic models) and, for the sections DeepSpeed still reads with dict lookups, from the
KEY / KEY_DEFAULT constant pairs of their constants modules.

    python scripts/dump-deepspeed-schema.py > tests/data/deepspeed-schema.json

Run it with the Python of an environment where deepspeed imports (scripts/check-deepspeed.sh
makes one). tests/cpp/test_config_schema_deepspeed.cpp compares dsrt's schema table with the
committed output; tests/data/deepspeed-schema-allow.txt lists each intended difference."""
import enum
import importlib
import inspect
import json
import math
import pathlib
import sys
import typing

import deepspeed
import pydantic
from deepspeed.runtime.config_utils import DeepSpeedConfigModel

# Where each pydantic section model is mounted in the config. Nested models (offload_param inside
# zero_optimization, ...) are found from the field annotations.
MODELS = [
    ("zero_optimization", "deepspeed.runtime.zero.config", "DeepSpeedZeroConfig"),
    ("fp16", "deepspeed.runtime.precision_config", "DeepSpeedFP16Config"),
    ("bf16", "deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    ("tensorboard", "deepspeed.monitor.config", "TensorBoardConfig"),
    ("wandb", "deepspeed.monitor.config", "WandbConfig"),
    ("csv_monitor", "deepspeed.monitor.config", "CSVConfig"),
    ("comet", "deepspeed.monitor.config", "CometConfig"),
    ("comms_logger", "deepspeed.comm.config", "CommsLoggerConfig"),
    ("flops_profiler", "deepspeed.profiling.config", "DeepSpeedFlopsProfilerConfig"),
    ("activation_checkpointing", "deepspeed.runtime.activation_checkpointing.config",
     "DeepSpeedActivationCheckpointingConfig"),
    ("aio", "deepspeed.runtime.swap_tensor.aio_config", "DeepSpeedAIOConfig"),
]

# runtime/constants.py holds the keys of several sections; the section of a constant by its name
# (the first matching prefix), the top level otherwise.
CONSTANT_SECTION_OF = [
    ("FP16_", "fp16"),
    ("BFLOAT16_", "bf16"),
    ("CHECKPOINT_PARALLEL_WRITE_", "checkpoint.parallel_write"),
    ("CHECKPOINT_", "checkpoint"),
    ("LOAD_UNIVERSAL_CHECKPOINT", "checkpoint"),
    ("USE_NODE_LOCAL_STORAGE_CHECKPOINT", "checkpoint"),
    ("GRAD_ACCUM_DTYPE", "data_types"),
    ("PARAM_DTYPE", "data_types"),
    ("BUFFER_DTYPE", "data_types"),
    ("KEEP_IN_FP32_MODULES", "data_types"),
    ("LEGACY_FUSION", "optimizer"),
    ("TORCH_AUTOCAST_", "torch_autocast"),
]

# Sections read with get_scalar_param(section, KEY, KEY_DEFAULT): (path prefix, module, the
# constant names' prefix or None for every KEY with a KEY_DEFAULT).
CONSTANT_SECTIONS = [
    ("", "deepspeed.runtime.constants", None),
    ("aio", "deepspeed.runtime.swap_tensor.constants", "AIO_"),
    ("activation_checkpointing", "deepspeed.runtime.activation_checkpointing.config", "ACT_CHKPT_"),
    ("flops_profiler", "deepspeed.profiling.constants", "FLOPS_PROFILER_"),
]


def jsonable(value):
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def type_name(annotation):
    """bool, int, number, string, choice, object, list, or the annotation's text."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Union and len(args) == 1:
        return type_name(args[0])
    if origin is typing.Union:
        return "|".join(sorted(type_name(a) for a in args))
    if inspect.isclass(annotation):
        if issubclass(annotation, pathlib.PurePath):
            return "string"
        if issubclass(annotation, bool):
            return "bool"
        if issubclass(annotation, enum.Enum):
            return "choice"
        if issubclass(annotation, int):
            return "int"
        if issubclass(annotation, float):
            return "number"
        if issubclass(annotation, str):
            return "string"
        if issubclass(annotation, pydantic.BaseModel):
            return "object"
        if issubclass(annotation, dict):
            return "object"
        if issubclass(annotation, (list, tuple)):
            return "list"
    if origin in (list, tuple):
        return "list"
    if origin is dict:
        return "object"
    if origin is typing.Literal:
        return "choice"
    return str(annotation)


def nullable(annotation):
    return type(None) in typing.get_args(annotation)


def submodel(annotation):
    for candidate in [annotation, *typing.get_args(annotation)]:
        if inspect.isclass(candidate) and issubclass(candidate, pydantic.BaseModel):
            return candidate
    return None


def choices(annotation):
    for candidate in [annotation, *typing.get_args(annotation)]:
        if inspect.isclass(candidate) and issubclass(candidate, enum.Enum):
            return sorted(str(m.value) for m in candidate)
        if typing.get_origin(candidate) is typing.Literal:
            return sorted(str(v) for v in typing.get_args(candidate))
    return None


def bounds(field):
    out = {}
    for item in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(item, name, None)
            if value is not None:
                out[name] = jsonable(value)
    return out


def default_of(field):
    if field.default_factory is not None:
        try:
            return jsonable(field.default_factory())
        except Exception as error:  # a factory that needs arguments
            return "<factory: %s>" % error
    if field.is_required():
        return "<required>"
    return jsonable(field.default)


def dump_model(prefix, model, rows):
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = prefix + "." + key if prefix else key
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        row = {
            "path": path,
            "type": type_name(field.annotation),
            "default": default_of(field),
            "nullable": nullable(field.annotation),
            "source": model.__module__ + "." + model.__name__,
        }
        row.update(bounds(field))
        options = choices(field.annotation)
        if options:
            row["choices"] = options
        if field.alias and field.alias != name:
            row["field_name"] = name
        if extra.get("deprecated"):
            row["deprecated"] = True
            if extra.get("new_param"):
                row["new_param"] = extra["new_param"]
        rows.append(row)
        nested = submodel(field.annotation)
        if nested is not None and nested is not model:
            dump_model(path, nested, rows)


def dump_constants(prefix, module_name, name_prefix, rows, known):
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        print("skipping %s: %s" % (module_name, error), file=sys.stderr)
        return
    values = vars(module)
    for const, key in sorted(values.items()):
        if not isinstance(key, str) or const.endswith("_DEFAULT") or (name_prefix and not const.startswith(name_prefix)):
            continue
        if const + "_DEFAULT" not in values or not key.replace("_", "").isalnum():
            continue
        section = prefix
        if module_name == "deepspeed.runtime.constants":
            section = next((sec for start, sec in CONSTANT_SECTION_OF if const.startswith(start)), "")
        path = section + "." + key if section else key
        if path in known:
            continue
        default = values[const + "_DEFAULT"]
        if callable(default) or isinstance(default, (dict, type(module))):
            continue
        known.add(path)
        row = {"path": path, "default": jsonable(default), "source": module_name + "." + const}
        if isinstance(default, bool):
            row["type"] = "bool"
        elif isinstance(default, int):
            row["type"] = "int"
        elif isinstance(default, float):
            row["type"] = "number"
        elif isinstance(default, str):
            row["type"] = "string"
        rows.append(row)


def main():
    rows = []
    for prefix, module_name, class_name in MODELS:
        try:
            model = getattr(importlib.import_module(module_name), class_name)
        except Exception as error:
            print("skipping %s: %s" % (class_name, error), file=sys.stderr)
            continue
        if inspect.isclass(model) and issubclass(model, DeepSpeedConfigModel):
            dump_model(prefix, model, rows)
    known = {row["path"] for row in rows}
    for prefix, module_name, name_prefix in CONSTANT_SECTIONS:
        dump_constants(prefix, module_name, name_prefix, rows, known)
    # Keys DeepSpeed has removed and now refuses, with its message.
    config_module = importlib.import_module("deepspeed.runtime.config")
    for prefix, table in (("", "_REMOVED_TOP_LEVEL_CONFIG_KEYS"), ("zero_optimization", "_REMOVED_ZERO_CONFIG_KEYS")):
        for key, message in getattr(config_module, table, {}).items():
            path = prefix + "." + key if prefix else key
            rows = [row for row in rows if row["path"] != path]
            rows.append({"path": path, "removed": message, "source": "deepspeed.runtime.config." + table})
    rows.sort(key=lambda row: row["path"])
    json.dump({"deepspeed": deepspeed.__version__, "fields": rows}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
