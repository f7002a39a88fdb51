"""Reading DeepSpeed's checkpoint files (torch.save pickles) without DeepSpeed and without running
any code the files name. torch.load runs through a restricted unpickler: tensors, storages,
dtypes, torch.Size, OrderedDict and plain containers load as usual; DeepSpeed's own objects
(ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address, ...) load as inert records of
their arguments and attributes (DeepSpeedObject); any other global is refused with an error naming
it. Nothing here imports DeepSpeed, and no global outside these lists is ever looked up."""

import collections
import pickle

# Plain Python globals a checkpoint may hold (torch.save of a state_dict and DeepSpeed's metadata).
_PLAIN = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("builtins", "complex"): complex,
    ("builtins", "object"): object,  # the base argument of copyreg._reconstructor
}
_PLAIN.update({("__builtin__", name): value for (_, name), value in list(_PLAIN.items()) if _ == "builtins"})
_STORAGE_DTYPES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
                   "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
                   "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool"}
class DeepSpeedObject:
    """An object of a DeepSpeed class, kept as data: `ds_class` ("module.Name"), `args` (what it
    was built from) and its attributes. Never runs DeepSpeed code."""
    ds_class = "?"
    args = ()

    def __init__(self, *args):
        self.args = args

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = dict(state[0] or {}, **(state[1] or {}))
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state

    @property
    def value(self):
        """An enum's value (ZeroStageEnum(2) -> 2), else the first argument."""
        return self.args[0] if self.args else None

    def __repr__(self):
        return "<%s %r %r>" % (self.ds_class, self.args, {k: v for k, v in self.__dict__.items() if k != "args"})


_classes = {}


def _deepspeed_class(module, name):
    key = module + "." + name
    if key not in _classes:
        _classes[key] = type(name, (DeepSpeedObject,), {"ds_class": key})
    return _classes[key]


def _reconstructor(cls, base, state):
    """copyreg._reconstructor for DeepSpeed classes only (plain objects pickled by protocol 2)."""
    if not (isinstance(cls, type) and issubclass(cls, DeepSpeedObject)) or base is not object or state is not None:
        raise pickle.UnpicklingError("refusing to rebuild %r from a checkpoint" % (cls,))
    return cls.__new__(cls)


class _StorageType:
    """What a pickled storage class stands for: its element type."""

    def __init__(self, dtype):
        self.dtype = dtype


def _rebuild_tensor(storage, offset, size, stride, *_ignored):
    return storage.as_strided(tuple(size), tuple(stride), offset)


def _rebuild_parameter(data, *_ignored):
    return data


def _rebuild_from_type(func, new_type, args, state):
    """torch._tensor._rebuild_from_type_v2: a tensor (or Parameter) saved with its Python type; the
    plain tensor is kept."""
    if func not in (_rebuild_tensor, _rebuild_parameter) or new_type is not _TENSOR_TYPE:
        raise pickle.UnpicklingError("refusing to rebuild a tensor of type %r from a checkpoint" % (new_type,))
    return func(*args)


_TENSOR_TYPE = object()  # torch.Tensor / torch.nn.Parameter as a _rebuild_from_type_v2 argument


def _torch_globals():
    import torch
    allowed = {}
    for name in dir(torch):
        value = getattr(torch, name)
        if isinstance(value, torch.dtype):
            allowed[("torch", name)] = value
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"):
        allowed[("torch._utils", name)] = _rebuild_tensor
    for name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
        allowed[("torch._utils", name)] = _rebuild_parameter
    allowed[("torch._tensor", "_rebuild_from_type_v2")] = _rebuild_from_type
    allowed[("torch", "Tensor")] = _TENSOR_TYPE
    allowed[("torch.nn.parameter", "Parameter")] = _TENSOR_TYPE
    allowed[("torch", "Size")] = torch.Size
    allowed[("torch", "device")] = torch.device
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles one torch.save zip archive; storages come from the archive's records."""
    _allowed = None

    def __init__(self, file, records, prefix):
        super().__init__(file, encoding="utf-8")
        self._records, self._prefix, self._storages = records, prefix, {}

    def find_class(self, module, name):
        if RestrictedUnpickler._allowed is None:
            RestrictedUnpickler._allowed = _torch_globals()
        key = (module, name)
        if key in _PLAIN:
            return _PLAIN[key]
        if key in RestrictedUnpickler._allowed:
            return RestrictedUnpickler._allowed[key]
        if module in ("torch", "torch.cuda") and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if key in (("copyreg", "_reconstructor"), ("copy_reg", "_reconstructor")):
            return _reconstructor
        if module == "deepspeed" or module.startswith("deepspeed."):
            return _deepspeed_class(module, name)
        raise pickle.UnpicklingError(
            "this checkpoint file holds an object of %s.%s, which dsrt does not load (only tensors, plain "
            "containers and DeepSpeed's own records); load it with DeepSpeed and save the values as plain "
            "tensors" % (module, name))

    def persistent_load(self, pid):
        import torch
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError("unexpected persistent id %r in a torch.save archive" % (pid,))
        storage_type, key = pid[1], str(pid[2])
        dtype = getattr(torch, storage_type.dtype) if isinstance(storage_type, _StorageType) else storage_type
        if not isinstance(dtype, torch.dtype):
            raise pickle.UnpicklingError("unexpected storage type %r" % (storage_type,))
        if key not in self._storages:
            raw = self._records.read(self._prefix + "data/" + key)
            if not raw:
                self._storages[key] = torch.empty(0, dtype=dtype)
            else:
                self._storages[key] = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
        return self._storages[key]


def load(path):
    """The object torch.save wrote to path (the zip format, torch >= 1.6), loaded on the CPU through
    the restricted unpickler. Needs torch, not DeepSpeed."""
    import io
    import zipfile
    if not zipfile.is_zipfile(path):
        raise pickle.UnpicklingError("%s is not a torch.save zip archive (saved with the legacy format?); load "
                                     "and save it again with torch >= 1.6" % path)
    with zipfile.ZipFile(path) as records:
        names = [n for n in records.namelist() if n.endswith("/data.pkl")]
        if len(names) != 1:
            raise pickle.UnpicklingError("%s is not a torch.save archive (no single data.pkl)" % path)
        prefix = names[0][:-len("data.pkl")]
        return RestrictedUnpickler(io.BytesIO(records.read(names[0])), records, prefix).load()
