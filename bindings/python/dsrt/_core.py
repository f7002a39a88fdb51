"""The Pythonic layer over dsrt.capi: Config, Comm, Engine, Tensor, Checkpoint.

Every object owns one C handle, frees it in close() (idempotent) and supports `with`. Every
failing call raises a dsrt.Error subclass carrying the status code and dsrt_last_error_message().
Host buffers are exposed without copies: BufferView speaks the NumPy array interface, the buffer
protocol (memoryview) and DLPack (__dlpack__/__dlpack_device__), so torch, cupy and jax can view
dsrt's memory directly.
"""

import ctypes
import json
import os
import weakref

from . import capi

F32, F16, BF16 = capi.DSRT_F32, capi.DSRT_F16, capi.DSRT_BF16
DTYPE_NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
_DTYPE_SIZES = {F32: 4, F16: 2, BF16: 2}
# NumPy has no bfloat16: bf16 buffers are viewed as uint16 bit patterns.
_ARRAY_TYPESTR = {F32: "<f4", F16: "<f2", BF16: "<u2"}
# The buffer protocol's struct codes: bf16 has none, so it is exported as uint16 bit patterns too.
_BUFFER_FORMATS = {F32: "f", F16: "e", BF16: "H"}


# ---------------------------------------------------------------------------------------------
# Errors


class Error(Exception):
    """A dsrt call failed. `status` is the dsrt_status code, `message` the library's detail."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self):
        return "%s (%s)" % (self.message, capi.dsrt_status_string(self.status))


class InvalidArgumentError(Error, ValueError):
    pass


class ConfigError(Error, ValueError):
    pass


class StateError(Error, RuntimeError):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class IOError(Error, OSError):  # noqa: A001 - dsrt.IOError, like the other per-status names
    pass


class CommError(Error, RuntimeError):
    pass


class DeviceError(Error, RuntimeError):
    pass


class CheckpointError(Error, RuntimeError):
    pass


class UnsupportedError(Error, NotImplementedError):
    pass


class InternalError(Error, RuntimeError):
    pass


_ERRORS = {
    capi.DSRT_ERR_INVALID_ARGUMENT: InvalidArgumentError,
    capi.DSRT_ERR_CONFIG: ConfigError,
    capi.DSRT_ERR_STATE: StateError,
    capi.DSRT_ERR_OUT_OF_MEMORY: OutOfMemoryError,
    capi.DSRT_ERR_IO: IOError,
    capi.DSRT_ERR_COMM: CommError,
    capi.DSRT_ERR_DEVICE: DeviceError,
    capi.DSRT_ERR_CHECKPOINT: CheckpointError,
    capi.DSRT_ERR_UNSUPPORTED: UnsupportedError,
    capi.DSRT_ERR_INTERNAL: InternalError,
}


def _check(result):
    """Raise for a failed status; return the out-parameters of a raw call."""
    if isinstance(result, list):
        status, rest = result[0], result[1:]
    else:
        status, rest = result, []
    if status != capi.DSRT_OK:
        raise _ERRORS.get(status, Error)(status, capi.dsrt_last_error_message())
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def version():
    return capi.dsrt_version_string()


def has_feature(name):
    return bool(capi.dsrt_has_feature(name))


def set_log_callback(fn):
    """Send dsrt's log lines to fn(level, message); None restores stderr."""
    capi.dsrt_py_set_log_callback(fn)


class _Handle:
    """Owns one C handle; close() is idempotent and runs at garbage collection too."""

    _destroy = None

    def __init__(self, handle):
        self._handle = handle

    @property
    def handle(self):
        if self._handle is None:
            raise StateError(capi.DSRT_ERR_STATE, "%s is closed" % type(self).__name__)
        return self._handle

    def close(self):
        handle, self._handle = self._handle, None
        if handle is not None and type(self)._destroy is not None:
            type(self)._destroy(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# Buffers


class BufferView(capi.BufferBase):
    """A zero-copy view of dsrt memory: the buffer protocol (`memoryview(view)`,
    `numpy.frombuffer(view, dtype)`), the NumPy array interface (`numpy()`), and DLPack
    (`torch()`, `torch.from_dlpack(view)`). The view keeps its engine alive, and an engine closed
    while views of it live frees its memory only when the last of them (and of the memoryviews,
    arrays and tensors made from it) is gone."""

    def __init__(self, address, dtype, shape, owner, device=(capi.DSRT_DEVICE_CPU, 0)):
        self.address = int(address)
        self.dtype = int(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.device = device
        super().__init__(self.address, _BUFFER_FORMATS[self.dtype], _DTYPE_SIZES[self.dtype], self.shape,
                         device[0] == capi.DSRT_DEVICE_CPU)
        self._owner = owner  # keeps the engine (and so the memory) alive
        self.numel = _prod(self.shape)
        track = getattr(owner, "_track_view", None)
        if track is not None:
            track(self)

    @property
    def __array_interface__(self):
        if self.device[0] != capi.DSRT_DEVICE_CPU:
            raise DeviceError(capi.DSRT_ERR_DEVICE, "a device buffer has no NumPy view; use DLPack")
        return {"shape": self.shape, "typestr": _ARRAY_TYPESTR[self.dtype], "data": (self.address, False),
                "version": 3}

    def numpy(self):
        import numpy
        if self.device[0] != capi.DSRT_DEVICE_CPU:
            raise DeviceError(capi.DSRT_ERR_DEVICE, "a device buffer has no NumPy view; use DLPack")
        return numpy.asarray(self)

    def memoryview(self):
        """memoryview(view): typed ("f" float32, "e" float16, "H" bf16 bit patterns) and shaped."""
        return memoryview(self)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # The array API's keywords: numpy 2 and newer torch pass max_version (and dl_device, copy).
        # The capsule is the legacy (0.x) "dltensor" one, which the standard lets a producer return
        # for any max_version; a copy or another device is the consumer's to make.
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("a dsrt buffer lives on DLPack device %r, not %r; copy it on the consumer side"
                              % (self.__dlpack_device__(), tuple(dl_device)))
        if copy:
            raise BufferError("dsrt exports views only (copy=True asked for a copy); copy it on the consumer side")
        # The capsule holds this view (and so the engine) until the consumer drops its tensor.
        return capi.dsrt_py_dlpack_capsule(self.address, self.dtype, self.shape, self.device[0], self.device[1],
                                           self)

    def __dlpack_device__(self):
        return (2 if self.device[0] == capi.DSRT_DEVICE_CUDA else 1, self.device[1])

    def torch(self):
        import torch.utils.dlpack
        return torch.utils.dlpack.from_dlpack(self.__dlpack__())

    def __repr__(self):
        return "BufferView(%s, shape=%r, device=%r)" % (DTYPE_NAMES[self.dtype], self.shape, self.device)


def _address_of(array):
    """The data address of a C-contiguous NumPy array or ctypes object."""
    if hasattr(array, "ctypes"):
        return array.ctypes.data
    return ctypes.addressof(array)


def _float32_array(values, count=None):
    import numpy
    array = numpy.ascontiguousarray(values, dtype=numpy.float32)
    if count is not None and array.size != count:
        raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                   "expected %d values, got %d" % (count, array.size))
    return array


# ---------------------------------------------------------------------------------------------
# Config


class Config(_Handle):
    """A DeepSpeed JSON configuration: Config(path), Config(dict) or Config.from_json(text)."""

    _destroy = staticmethod(capi.dsrt_config_destroy)

    def __init__(self, source=None):
        if source is None:
            source = {}
        if isinstance(source, dict):
            handle = _check(capi.dsrt_config_parse(json.dumps(source)))
        elif isinstance(source, (str, os.PathLike)):
            handle = _check(capi.dsrt_config_load(os.fspath(source)))
        else:
            raise TypeError("Config takes a dict or a path, not %s" % type(source).__name__)
        super().__init__(handle)

    @classmethod
    def from_json(cls, text):
        self = cls.__new__(cls)
        _Handle.__init__(self, _check(capi.dsrt_config_parse(text)))
        return self

    def set(self, key_path, value):
        """Set or resolve a value by dotted path ("optimizer.params.lr", "optimizer.params.betas.0")."""
        if isinstance(value, bool):
            _check(capi.dsrt_config_set_bool(self.handle, key_path, int(value)))
        elif isinstance(value, (int, float)):
            _check(capi.dsrt_config_set_number(self.handle, key_path, float(value)))
        elif isinstance(value, str):
            _check(capi.dsrt_config_set_string(self.handle, key_path, value))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                self.set("%s.%d" % (key_path, i), item)
        else:
            raise TypeError("unsupported value type for %s: %s" % (key_path, type(value).__name__))

    def set_hidden_size(self, hidden_size):
        _check(capi.dsrt_config_set_hidden_size(self.handle, int(hidden_size)))

    def set_world_size(self, world_size):
        _check(capi.dsrt_config_set_world_size(self.handle, int(world_size)))

    def get_number(self, key_path):
        return _check(capi.dsrt_config_get_number(self.handle, key_path))

    def get_string(self, key_path):
        return _check(capi.dsrt_config_get_string(self.handle, key_path))

    def to_json(self):
        return _check(capi.dsrt_config_to_json(self.handle))

    def to_dict(self):
        return json.loads(self.to_json())

    def unresolved(self):
        text = _check(capi.dsrt_config_unresolved(self.handle))
        return [line for line in text.splitlines() if line]

    def warnings(self):
        text = _check(capi.dsrt_config_warnings(self.handle))
        return [line for line in text.splitlines() if line]


# ---------------------------------------------------------------------------------------------
# Comm


class Comm(_Handle):
    """The ranks an engine partitions over: Comm.local(), Comm.from_env() (mpirun/srun/torchrun) or
    Comm.nccl(unique_id, rank, world_size, device)."""

    _destroy = staticmethod(capi.dsrt_comm_destroy)

    @classmethod
    def local(cls):
        return cls(_check(capi.dsrt_comm_create_local()))

    @classmethod
    def from_env(cls):
        return cls(_check(capi.dsrt_comm_create_from_env()))

    @staticmethod
    def nccl_unique_id():
        """A new NCCL unique id (128 bytes) for Comm.nccl: one rank makes it, the host shares it
        (e.g. through torch.distributed). UnsupportedError in a build without NCCL."""
        buffer = ctypes.create_string_buffer(128)
        _check(capi.dsrt_nccl_unique_id(ctypes.addressof(buffer)))
        return buffer.raw

    @classmethod
    def nccl(cls, unique_id, rank, world_size, device):
        """Join an NCCL world from a shared unique id; device is this rank's CUDA ordinal."""
        unique_id = bytes(unique_id)
        if len(unique_id) != 128:
            raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                       "an NCCL unique id is 128 bytes (from Comm.nccl_unique_id), got %d"
                                       % len(unique_id))
        buffer = ctypes.create_string_buffer(unique_id, 128)
        return cls(_check(capi.dsrt_comm_create_nccl(ctypes.addressof(buffer), int(rank), int(world_size),
                                                     int(device))))

    @property
    def rank(self):
        return capi.dsrt_comm_rank(self.handle)

    @property
    def world_size(self):
        return capi.dsrt_comm_world_size(self.handle)

    def barrier(self):
        _check(capi.dsrt_comm_barrier(self.handle))


# ---------------------------------------------------------------------------------------------
# Engine and tensors


class StepResult:
    __slots__ = ("global_step", "boundary", "overflow", "grad_norm", "lr", "loss_scale")

    def __init__(self, fields):
        self.global_step = fields["global_step"]
        self.boundary = bool(fields["boundary"])
        self.overflow = bool(fields["overflow"])
        self.grad_norm = fields["grad_norm"]
        self.lr = fields["lr"]
        self.loss_scale = fields["loss_scale"]

    def __repr__(self):
        return "StepResult(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


class _CopyPool:
    """Spare buffers for Tensor.acquire's private copies (ZeRO-3 on the CPU), by size. A copy whose
    last view is gone comes back here and the next acquire of a tensor as large takes it: a fresh
    allocation of a large tensor is new pages, which the copy into it would fault in and zero again
    on every acquire. Holds at most twice the largest copy taken so far; beyond that a copy is freed."""

    def __init__(self):
        self._spares = {}  # nbytes -> arrays
        self._bytes = 0
        self._limit = 0

    def take(self, nbytes):
        self._limit = max(self._limit, 2 * nbytes)
        spares = self._spares.get(nbytes)
        if spares:
            self._bytes -= nbytes
            return spares.pop()
        import numpy
        return numpy.empty(nbytes, dtype=numpy.uint8)

    def give(self, array):
        if self._bytes + array.nbytes <= self._limit:
            self._spares.setdefault(array.nbytes, []).append(array)
            self._bytes += array.nbytes


class _PrivateCopy:
    """One acquire bracket's copy of a gathered tensor, referenced by the bracket and by its views
    (and so by every array and tensor made from them): once the last of them is gone, nothing reads
    the buffer any more and it goes back to its pool."""

    __slots__ = ("array", "_pool", "__weakref__")

    def __init__(self, array, pool):
        self.array = array
        self._pool = pool

    def __del__(self):
        try:
            self._pool.give(self.array)
        except Exception:
            pass  # interpreter shutdown


class Tensor:
    """A parameter registered with an engine (owned by it; valid while the engine is open).

    `with tensor as view:` acquires the working copy (gathered under ZeRO-3) and releases it on
    exit; close() releases every acquire this object still holds (idempotent)."""

    def __init__(self, engine, handle):
        self._engine = engine
        self._handle = handle
        self._held = 0  # acquires made through this object and not yet released
        self._private = None  # ZeRO-3 on the CPU: this bracket's own copy of the gathered tensor
        # The last bracket's copy (a weak reference) and the engine's shard generation it was made
        # at, for _acquire(share_last=True).
        self._last = None
        self._last_generation = -1
        self.name = capi.dsrt_tensor_name(handle)
        self.shape = capi.dsrt_py_tensor_shape(handle)
        self.numel = capi.dsrt_tensor_numel(handle)

    @property
    def handle(self):
        self._engine.handle  # raises once the engine is closed
        return self._handle

    def acquire(self):
        """The full working copy (gathered under ZeRO-3) until release().

        Under ZeRO-3 on the CPU the view is this bracket's own copy of the gathered tensor (shared
        by nested acquires): the engine reuses its gather buffers after release, and a NumPy array
        kept past release() must not alias the next tensor gathered there. Writes to it are not
        written back (as with DeepSpeed's gathered parameters; use write_fp32)."""
        return self._acquire(False)

    def _acquire(self, share_last):
        """acquire(); share_last (the torch front): while a view of the previous bracket's copy is
        still alive (autograd saved the forward's weight for the backward) and no build, step,
        write_fp32 or checkpoint load may have changed the shards since, share that copy (the values
        this gather returns, unless written through a view) instead of copying again. With ZeRO++
        quantized weights it always copies: a qwZ gather (hpZ's inside the group) need not return
        the forward's values bit for bit."""
        address, dtype = _check(capi.dsrt_tensor_acquire(self.handle))
        self._held += 1
        device = self._engine.device
        if not (self._engine._gathers and device[0] == capi.DSRT_DEVICE_CPU):
            return BufferView(address, dtype, self.shape, self._engine, device)
        if self._private is None:
            engine = self._engine
            last = self._last() if self._last is not None else None
            if (share_last and last is not None and self._last_generation == engine._generation
                    and engine._share_copies):
                self._private = last
            else:
                private = engine._copies.take(self.numel * _DTYPE_SIZES[dtype])
                ctypes.memmove(private.ctypes.data, address, private.size)
                self._private = _PrivateCopy(private, engine._copies)
                self._last = weakref.ref(self._private)
                self._last_generation = engine._generation
        view = BufferView(self._private.array.ctypes.data, dtype, self.shape, self._engine, device)
        view._private = self._private  # the copy lives as long as any view of it
        return view

    def release(self):
        _check(capi.dsrt_tensor_release(self.handle))
        self._held = max(0, self._held - 1)
        if self._held == 0:
            self._private = None

    def gathered(self):
        """with tensor.gathered() as view: the working copy, released on exit (same as `with tensor`)."""
        return self

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    def close(self):
        """Release what this object acquired and still holds; nothing once the engine is closed."""
        if self._engine.closed:
            self._held = 0
            return
        while self._held:
            self.release()

    def grad(self):
        """This micro-step's gradient buffer: add d(loss * loss_scale)/d(param) into it."""
        address, dtype = _check(capi.dsrt_tensor_grad(self.handle))
        return BufferView(address, dtype, self.shape, self._engine, self._engine.device)

    def grad_ready(self):
        _check(capi.dsrt_tensor_grad_ready(self.handle))

    @property
    def group(self):
        """The parameter group this tensor belongs to (0 unless set before build)."""
        return capi.dsrt_tensor_group(self.handle)

    @group.setter
    def group(self, index):
        _check(capi.dsrt_tensor_set_group(self.handle, int(index)))

    def read_fp32(self):
        """The full fp32 master value as a NumPy array (collective under ZeRO)."""
        import numpy
        out = numpy.empty(self.shape, dtype=numpy.float32)
        _check(capi.dsrt_tensor_read_fp32(self.handle, _address_of(out), out.size))
        return out

    def write_fp32(self, values):
        array = _float32_array(values, self.numel)
        self._engine._generation += 1  # before the call: a failed write may have written some shards
        _check(capi.dsrt_tensor_write_fp32(self.handle, _address_of(array), array.size))

    def __repr__(self):
        return "Tensor(%r, shape=%r)" % (self.name, self.shape)


class Engine(_Handle):
    """Owns the model states. Engine(config, comm=None); add_param(...); build(); step()."""

    _destroy = staticmethod(capi.dsrt_engine_destroy)
    _live_views = 0
    _deferred = None  # the C handle, while close() waits for live views to go

    def __init__(self, config, comm=None, device=None):
        """device: where this engine's working copies and gradients live -- "cpu", "cuda" (GPU
        local_rank % visible GPUs) or "cuda:N"; None: DSRT_DEVICE, else a visible GPU, else the CPU."""
        if not isinstance(config, Config):
            config = Config(config)
        options = None
        if device is not None:
            text = str(device)
            if text == "cpu":
                options = (capi.DSRT_DEVICE_CPU, 0)
            elif text == "cuda":
                options = (capi.DSRT_DEVICE_CUDA, -1)
            elif text.startswith("cuda:") and text[5:].isdigit():
                options = (capi.DSRT_DEVICE_CUDA, int(text[5:]))
            else:
                raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                           "device is %r; use \"cpu\", \"cuda\" or \"cuda:N\"" % (device,))
        super().__init__(_check(capi.dsrt_engine_create_with_options(config.handle, comm.handle if comm else None,
                                                                     options)))
        self._comm = comm
        # ZeRO-3 gathers tensors into buffers it reuses after release (see Tensor.acquire).
        try:
            self._gathers = config.get_number("zero_optimization.stage") == 3
        except ConfigError:
            self._gathers = True  # a stage not readable as a number: copy, which is safe at any stage
        self._copies = _CopyPool()  # Tensor.acquire's private copies, reused once no view is left
        # Bumped by every call that may rewrite shards (build, step, write_fp32, load_checkpoint): a
        # private copy made at an older generation is never shared by a later acquire (_acquire).
        self._generation = 0
        zero = config.to_dict().get("zero_optimization") or {}
        self._share_copies = not (zero.get("zero_quantized_weights") or zero.get("zero_quantized_nontrainable_weights"))
        self.tensors = {}
        self._device = None

    def add_param(self, name, shape=None, init=None, frozen=False):
        """Register a parameter by shape, or by an initial value (anything NumPy can read);
        frozen=True registers it frozen (dsrt_engine_add_frozen_param)."""
        address = None
        keep = None
        if init is not None:
            keep = _float32_array(init)
            if shape is None:
                shape = keep.shape
            address = _address_of(keep)
        if shape is None:
            raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT, "add_param(%r): give shape or init" % name)
        shape = tuple(int(s) for s in shape)
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        if keep is not None and keep.size != _prod(shape):
            raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                       "add_param(%r): init has %d values, shape %r needs %d"
                                       % (name, keep.size, shape, _prod(shape)))
        add = capi.dsrt_engine_add_frozen_param if frozen else capi.dsrt_engine_add_param
        handle = _check(add(self.handle, name, ctypes.addressof(dims), len(shape), address))
        tensor = Tensor(self, handle)
        self.tensors[name] = tensor
        return tensor

    def add_frozen_param(self, name, shape=None, init=None):
        """Register a frozen parameter (a working copy only: no gradient, master or optimizer
        state), by shape or by an initial value, as add_param."""
        return self.add_param(name, shape, init, frozen=True)

    def build(self):
        self._generation += 1
        _check(capi.dsrt_engine_build(self.handle))

    @property
    def device(self):
        if self._device is None:
            self._device = _check(capi.dsrt_engine_device(self.handle))
        return self._device

    def step(self):
        self._generation += 1
        return StepResult(_check(capi.dsrt_engine_step(self.handle)))

    def end_backward(self):
        """The host's backward of this micro-step is complete: dsrt reduces the micro-step's
        gradients now (what step() would otherwise do first), so step() only runs the boundary.
        Optional and collective; a repeat before the next gradient is a no-op, and a gradient
        after it begins a new micro-step of the same window."""
        _check(capi.dsrt_engine_end_backward(self.handle))

    # -- parameter groups and host-driven hyperparameters --------------------------------------

    def add_group(self, **hyper):
        """A new parameter group (before build) starting as the config's optimizer section, with
        the given hyperparameters (lr=..., weight_decay=..., beta1=..., ...); returns its index."""
        index = _check(capi.dsrt_engine_add_group(self.handle))
        for name, value in hyper.items():
            self.set_group_hyper(index, name, value)
        return index

    @property
    def num_groups(self):
        return capi.dsrt_engine_num_groups(self.handle)

    def set_group_hyper(self, group, name, value):
        """Set one hyperparameter of a group ("lr", "weight_decay", "beta1", "beta2", "eps",
        "momentum", "dampening", "nesterov", "max_coeff", "min_coeff"): before build or between
        accumulation windows."""
        _check(capi.dsrt_engine_set_group_hyper(self.handle, int(group), name, float(value)))

    def get_group_hyper(self, group, name):
        return _check(capi.dsrt_engine_get_group_hyper(self.handle, int(group), name))

    def group_lr(self, group):
        """The lr the group used at the last boundary step (before the first: the one it will use)."""
        return _check(capi.dsrt_engine_group_lr(self.handle, int(group)))

    # -- host-driven accumulation boundaries ---------------------------------------------------

    def set_gradient_accumulation_boundary(self, is_boundary):
        """True / False: the micro-step the next step() ends closes / does not close the window
        (until changed); None: count gradient_accumulation_steps again (DeepSpeed's default)."""
        mode = -1 if is_boundary is None else (1 if is_boundary else 0)
        _check(capi.dsrt_engine_set_accumulation_boundary(self.handle, mode))

    def set_scale_wrt_gas(self, enabled):
        """False: do not divide the accumulated gradient by gradient_accumulation_steps (the host
        scaled its loss); changed only between windows."""
        _check(capi.dsrt_engine_set_scale_wrt_gas(self.handle, 1 if enabled else 0))

    @property
    def loss_scale(self):
        return _check(capi.dsrt_engine_loss_scale(self.handle))

    @property
    def global_step(self):
        return _check(capi.dsrt_engine_global_step(self.handle))

    @property
    def lr(self):
        return _check(capi.dsrt_engine_get_lr(self.handle))

    def memory(self):
        """Bytes this rank holds per state, as (device, host, nvme) tuples."""
        return _check(capi.dsrt_engine_memory(self.handle))

    @property
    def client_state(self):
        return _check(capi.dsrt_engine_client_state(self.handle))

    @client_state.setter
    def client_state(self, blob):
        # bytes(12345) would be 12,345 zero bytes: only bytes-like objects are client state.
        if isinstance(blob, (str, int, float)) or blob is None:
            raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                       "client_state takes bytes-like data (bytes, bytearray, memoryview), not %s"
                                       % type(blob).__name__)
        try:
            data = bytes(memoryview(blob))
        except TypeError:
            raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                       "client_state takes bytes-like data (bytes, bytearray, memoryview), not %s"
                                       % type(blob).__name__) from None
        _check(capi.dsrt_engine_set_client_state(self.handle, data))

    def save_checkpoint(self, directory, tag=None):
        _check(capi.dsrt_engine_save_checkpoint(self.handle, os.fspath(directory), tag))

    def load_checkpoint(self, directory, tag=None):
        self._generation += 1
        _check(capi.dsrt_engine_load_checkpoint(self.handle, os.fspath(directory), tag))

    def save_16bit_model(self, path):
        _check(capi.dsrt_engine_save_16bit_model(self.handle, os.fspath(path)))

    def report_loss(self, loss):
        """This micro-step's loss (unscaled), for the monitors' train_loss and the progress line."""
        _check(capi.dsrt_engine_report_loss(self.handle, float(loss)))

    def report_host_time(self, phase, seconds):
        """Seconds of this micro-step's forward (phase capi.DSRT_HOST_FORWARD) or backward."""
        _check(capi.dsrt_engine_report_host_time(self.handle, int(phase), float(seconds)))

    def events(self):
        """DeepSpeed's monitor events of the last step, [(name, value, step)] ([] off a boundary)."""
        text = _check(capi.dsrt_engine_events(self.handle))
        events = []
        for line in text.splitlines():
            name, value, step = line.rsplit(",", 2)
            events.append((name, float(value), int(step)))
        return events

    @property
    def closed(self):
        return self._handle is None

    @property
    def live_views(self):
        """How many BufferViews of this engine's memory are alive (each also counts for the
        memoryviews, NumPy arrays and DLPack tensors made from it)."""
        return self._live_views

    def _track_view(self, view):
        self._live_views += 1
        finalizer = weakref.finalize(view, self._view_gone)
        finalizer.atexit = False

    def _view_gone(self):
        self._live_views -= 1
        if self._live_views == 0 and self._deferred is not None:
            handle, self._deferred = self._deferred, None
            capi.dsrt_engine_destroy(handle)

    def close(self):
        """Close the engine: every later call raises StateError. While views of its memory are
        alive (BufferViews, and the memoryviews, arrays and tensors made from them) the memory is
        not freed under them: the C engine is destroyed when the last view is gone (like SQLite's
        close_v2). Idempotent."""
        handle, self._handle = self._handle, None
        self.tensors = {}
        if handle is None:
            return
        if self._live_views > 0:
            self._deferred = handle
        else:
            capi.dsrt_engine_destroy(handle)


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------------------------------------
# Checkpoints (offline)


class Checkpoint(_Handle):
    """Read a checkpoint without an engine: names(), shape(name), read(name), export_safetensors()."""

    _destroy = staticmethod(capi.dsrt_checkpoint_close)

    def __init__(self, directory, tag=None):
        super().__init__(_check(capi.dsrt_checkpoint_open(os.fspath(directory), tag)))

    def names(self):
        count = capi.dsrt_checkpoint_num_tensors(self.handle)
        return [capi.dsrt_checkpoint_tensor_name(self.handle, i) for i in range(count)]

    def shape(self, name):
        dims = (ctypes.c_int64 * 8)()
        ndim = _check(capi.dsrt_checkpoint_tensor_shape(self.handle, name, ctypes.addressof(dims)))
        return tuple(dims[i] for i in range(ndim))

    def read(self, name):
        import numpy
        out = numpy.empty(self.shape(name), dtype=numpy.float32)
        _check(capi.dsrt_checkpoint_read_tensor_fp32(self.handle, name, _address_of(out), out.size))
        return out

    def export_safetensors(self, path, dtype=F32):
        if isinstance(dtype, str):
            names = {"f32": F32, "fp32": F32, "float32": F32, "bf16": BF16, "bfloat16": BF16,
                     "f16": F16, "fp16": F16, "float16": F16}
            if dtype not in names:
                raise InvalidArgumentError(capi.DSRT_ERR_INVALID_ARGUMENT,
                                           "export_safetensors: dtype %r is not one of %s" % (dtype, ", ".join(names)))
            dtype = names[dtype]
        _check(capi.dsrt_checkpoint_export_safetensors(self.handle, os.fspath(path), dtype))
