"""A DeepSpeed-shaped PyTorch front over the dsrt engine.

    engine, optimizer, dataloader, lr_scheduler = dsrt.initialize(model=model,
        model_parameters=model.parameters(), config="ds_config.json")
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()

dsrt owns the states: every parameter's .data becomes a zero-copy view of dsrt's working copy
(16-bit under fp16/bf16), each gradient is copied into dsrt's buffer and signalled ready as soon
as autograd has accumulated it (so reduction overlaps the rest of backward), and under ZeRO-3
parameters are empty outside the forward/backward of their module: module hooks acquire
(gather) and release them, as DeepSpeed does.
"""

import contextlib
import inspect
import os
import pickle
import warnings

import torch

from . import _core
from ._core import Comm, Config, Engine
from .facades import _OptimizerFacade, _SchedulerFacade

_TORCH_DTYPES = {_core.F32: torch.float32, _core.F16: torch.float16, _core.BF16: torch.bfloat16}

# What the HF Trainer / Accelerate put in for "auto" when the host gives no other value.
_AUTO_DEFAULTS = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "fp16.enabled": False,
    "bf16.enabled": False,
    "zero_optimization.stage": 0,
    "zero_optimization.offload_optimizer.device": "none",
    "zero_optimization.offload_param.device": "none",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": True,
    "optimizer.params.lr": 5e-5,
    "optimizer.params.weight_decay": 0.0,
    "optimizer.params.eps": 1e-8,
    "optimizer.params.betas": [0.9, 0.999],
    "optimizer.params.betas.0": 0.9,
    "optimizer.params.betas.1": 0.999,
    "scheduler.params.warmup_min_lr": 0.0,
    "scheduler.params.warmup_num_steps": 1,  # the Trainer gives 0 (no warmup); WarmupLR needs >= 1
}


def _resolve_auto(config, model, world_size, training_data):
    """Resolve "auto" values the way Accelerate and the HF Trainer do, from the model and defaults."""
    hidden = None
    model_config = getattr(model, "config", None)
    if model_config is not None:
        hidden = getattr(model_config, "hidden_size", None) or getattr(model_config, "d_model", None)
    pending = config.unresolved()
    if hidden and any(k.endswith(("reduce_bucket_size", "stage3_prefetch_bucket_size",
                                  "stage3_param_persistence_threshold")) for k in pending):
        config.set_hidden_size(int(hidden))
    pending = config.unresolved()
    lr = None
    for key in pending:
        if key == "scheduler.params.warmup_max_lr":
            continue  # follows the optimizer's lr, resolved below
        if key in _AUTO_DEFAULTS:
            config.set(key, _AUTO_DEFAULTS[key])
    try:
        lr = config.get_number("optimizer.params.lr")
    except _core.ConfigError:
        lr = None
    if "scheduler.params.warmup_max_lr" in config.unresolved() and lr is not None:
        config.set("scheduler.params.warmup_max_lr", lr)
    if "train_batch_size" in config.unresolved():
        micro = config.get_number("train_micro_batch_size_per_gpu")
        try:
            gas = config.get_number("gradient_accumulation_steps")
        except _core.ConfigError:
            gas = 1  # not given: DeepSpeed's default
        config.set("train_batch_size", micro * gas * world_size)
    config.set_world_size(world_size)
    left = config.unresolved()
    if left:
        raise _core.ConfigError(_core.capi.DSRT_ERR_CONFIG,
                                "dsrt.initialize could not resolve these \"auto\" values: %s; set them in the "
                                "config or with config_params" % ", ".join(left))


# torch 2.1 added Tensor.register_post_accumulate_grad_hook; older versions hook the AccumulateGrad node.
_HAS_POST_ACCUMULATE_GRAD_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
# torch 2.1 added always_call to register_forward_hook: run the hook even when forward raises.
_ALWAYS_CALL = ({"always_call": True}
                if "always_call" in inspect.signature(torch.nn.Module.register_forward_hook).parameters else {})


class _PreBackward(torch.autograd.Function):
    """Identity on a module's outputs whose backward first gathers the module's parameters (ZeRO-3)."""

    @staticmethod
    def forward(ctx, engine, module, *outputs):
        ctx.engine = engine
        ctx.module = module
        return outputs[0] if len(outputs) == 1 else outputs

    @staticmethod
    def backward(ctx, *grads):
        ctx.engine._gather_module(ctx.module, for_backward=True)
        return (None, None) + grads


def _visit_tensors(value, fn):
    """Call fn on every tensor that needs a gradient in value (a tensor or tuples, lists and dicts of
    them), in a fixed order, and return value with each replaced by what fn returned. Dicts are
    updated in place, as DeepSpeed does: a ModelOutput cannot be rebuilt from its items."""
    if isinstance(value, torch.Tensor):
        if not value.requires_grad:
            return value
        result = fn(value)
        return value if result is None else result
    if isinstance(value, (tuple, list)):
        items = [_visit_tensors(v, fn) for v in value]
        if all(new is old for new, old in zip(items, value)):
            return value  # nothing replaced: keep the caller's object
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        for key in list(value.keys()):
            item = value[key]
            new = _visit_tensors(item, fn)
            if new is not item:
                value[key] = new
        return value
    return value


@contextlib.contextmanager
def _engine_device_of(model):
    """dsrt's working copies become param.data, so the engine must live where the model computes:
    on the CPU for a CPU model even where a GPU is visible, on the model's GPU otherwise. The choice
    is passed as DSRT_DEVICE while the engine is created (an explicit DSRT_DEVICE wins)."""
    if "DSRT_DEVICE" in os.environ:
        yield
        return
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    os.environ["DSRT_DEVICE"] = "cpu" if device.type == "cpu" else "cuda:%d" % (
        device.index if device.index is not None else torch.cuda.current_device())
    try:
        yield
    finally:
        del os.environ["DSRT_DEVICE"]


class DsrtEngine(torch.nn.Module):
    """The engine DeepSpeed's initialize() returns, backed by dsrt."""

    def __init__(self, model, model_parameters, config, comm):
        super().__init__()
        self.module = model
        self._comm = comm
        self._config = config
        with _engine_device_of(model):
            self._engine = Engine(config, comm)
        self.stage = int(config.get_number("zero_optimization.stage"))
        self.gradient_accumulation_steps_ = int(config.get_number("gradient_accumulation_steps"))
        wanted = None
        if model_parameters is not None:
            wanted = {id(p) for p in model_parameters}
        self._params = []
        seen = set()
        for name, param in model.named_parameters():
            if id(param) in seen or not param.requires_grad:
                continue
            if wanted is not None and id(param) not in wanted:
                continue
            seen.add(id(param))
            init = param.detach().to(torch.float32).contiguous().cpu().numpy()
            tensor = self._engine.add_param(name, shape=tuple(param.shape), init=init)
            self._params.append((tensor, param))
        self._engine.build()
        self.dtype = _TORCH_DTYPES[self._params[0][0].acquire().dtype] if self._params else torch.float32
        if self._params:
            self._params[0][0].release()
        self._by_param = {id(p): t for t, p in self._params}
        self._micro_steps = 0
        self._last_boundary = None
        self._gathered = {}  # id(param) -> count of acquires held by this front
        self._hooks = []
        for tensor, param in self._params:
            # Before torch 2.1 the hook sits on the gradient accumulator, which records the
            # parameter's shape when it is created and which torch drops when .data changes dtype:
            # take the working dtype first, then create it while the parameter is still whole.
            param.data = param.data.to(self.dtype)
            self._install_grad_hook(tensor, param)
            if self.stage == 3:
                param.data = torch.empty(0, dtype=self.dtype)
            else:
                param.data = tensor.acquire().torch()
        for buffer_name, buffer in model.named_buffers():
            if buffer.is_floating_point():
                buffer.data = buffer.data.to(self.dtype)
        self._external = {}  # id(module) -> parameters it reads outside their own module's forward
        if self.stage == 3:
            for module in model.modules():
                # MultiheadAttention reads out_proj's weight itself, never calling out_proj.forward.
                if isinstance(module, torch.nn.MultiheadAttention):
                    for param in module.out_proj.parameters(recurse=False):
                        self.register_external_parameter(module, param)
            for module in model.modules():
                if any(True for _ in module.parameters(recurse=False)) or id(module) in self._external:
                    self._hook_module(module)

    # --- gradients -------------------------------------------------------------------------

    def _install_grad_hook(self, tensor, param):
        def take_grad():
            grad = param.grad
            if grad is None:
                return
            view = tensor.grad().torch()
            view.add_(grad.to(view.dtype))
            param.grad = None
            tensor.grad_ready()
            if self.stage == 3:
                self._release_param(param)

        if _HAS_POST_ACCUMULATE_GRAD_HOOK:
            # torch >= 2.1: the hook lives on the parameter itself and runs once autograd has
            # accumulated its whole gradient for this backward, whatever .data is swapped for.
            self._hooks.append(param.register_post_accumulate_grad_hook(lambda _param: take_grad()))
            return
        # torch 1.13 and 2.0: hook the parameter's AccumulateGrad node, which runs at the same point.
        # torch holds that node weakly: keep it alive so the hook stays attached.
        with torch.enable_grad():
            accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
        self._hooks.append(accumulator.register_hook(lambda *_: take_grad()))
        param._dsrt_accumulator = accumulator

    # --- ZeRO-3 gathering ------------------------------------------------------------------

    def _acquire_param(self, param):
        tensor = self._by_param.get(id(param))
        if tensor is None:
            return
        count = self._gathered.get(id(param), 0)
        if count == 0:
            param.data = tensor.acquire().torch()
        self._gathered[id(param)] = count + 1

    def _release_param(self, param):
        tensor = self._by_param.get(id(param))
        count = self._gathered.get(id(param), 0)
        if tensor is None or count == 0:
            return
        if count == 1:
            param.data = torch.empty(0, dtype=self.dtype)
            tensor.release()
            del self._gathered[id(param)]
        else:
            self._gathered[id(param)] = count - 1

    def register_external_parameter(self, module, param):
        """Under ZeRO-3, gather param whenever module runs (a parameter it reads that belongs to
        another module, like DeepSpeed's deepspeed.zero.register_external_parameter)."""
        self._external.setdefault(id(module), [])
        if all(p is not param for p in self._external[id(module)]):
            self._external[id(module)].append(param)

    def _module_params(self, module):
        return list(module.parameters(recurse=False)) + self._external.get(id(module), [])

    def _gather_module(self, module, for_backward=False):
        for param in self._module_params(module):
            if for_backward and self._gathered.get(id(param), 0) > 0:
                continue
            self._acquire_param(param)

    def _hook_module(self, module):
        # Called positionally or with keywords only, a module's hooks see its positional inputs
        # (possibly none): gathering does not need them. On torch >= 2.1 the release also runs when
        # forward raises, so an exception does not leave parameters gathered.
        self._hooks.append(module.register_forward_pre_hook(self._pre_forward))
        self._hooks.append(module.register_forward_hook(self._post_forward, **_ALWAYS_CALL))

    def _pre_forward(self, module, inputs):
        self._gather_module(module)

    def _post_forward(self, module, inputs, output):
        params = self._module_params(module)
        needs_backward = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        for param in params:
            self._release_param(param)
        if not needs_backward:
            return output
        # Route every output tensor that needs a gradient through one _PreBackward, so the
        # module's parameters are gathered again before its backward: outputs may be a tensor or
        # tuples, lists and dicts of them (namedtuples, Hugging Face ModelOutput dicts).
        found = []
        _visit_tensors(output, found.append)
        if not found:
            return output
        wrapped = _PreBackward.apply(self, module, *found)
        wrapped = iter(wrapped if isinstance(wrapped, tuple) else (wrapped,))
        return _visit_tensors(output, lambda _tensor: next(wrapped))

    # --- the DeepSpeed engine surface ------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        cast = lambda x: x.to(self.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        return self.module(*[cast(x) for x in inputs], **{k: cast(v) for k, v in kwargs.items()})

    def backward(self, loss, retain_graph=False):
        """Backward of loss * loss_scale; gradients flow into dsrt as autograd produces them."""
        scale = self._engine.loss_scale
        (loss.float() * scale).backward(retain_graph=retain_graph)

    def step(self):
        """After every micro-step; the optimizer runs at the gradient-accumulation boundary."""
        self.last_step = self._engine.step()
        if self.last_step.boundary:
            self._last_boundary = self.last_step
        self._micro_steps += 1
        if self.stage == 3:
            # parameters gathered for a backward that never reached them (unused outputs)
            for tensor, param in self._params:
                while self._gathered.get(id(param), 0):
                    self._release_param(param)
        return self.last_step

    def is_gradient_accumulation_boundary(self):
        """True when the next engine.step() ends an accumulation window."""
        return (self._micro_steps + 1) % self.gradient_accumulation_steps_ == 0

    @property
    def global_steps(self):
        return self._engine.global_step

    @property
    def loss_scale(self):
        return self._engine.loss_scale

    def get_lr(self):
        return [self._engine.lr]

    @property
    def world_size(self):
        return self._comm.world_size if self._comm else 1

    @property
    def global_rank(self):
        return self._comm.rank if self._comm else 0

    @property
    def local_rank(self):
        for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
            if name in os.environ:
                return int(os.environ[name])
        return 0

    @property
    def device(self):
        """Where the working copies (param.data) live: move inputs here."""
        kind, index = self._engine.device
        return torch.device("cuda", index) if kind == _core.capi.DSRT_DEVICE_CUDA else torch.device("cpu")

    def zero_grad(self):
        # Gradients live in dsrt's buffers; param.grad is only a transit the hooks empty.
        for _, param in self._params:
            param.grad = None

    def gradient_accumulation_steps(self):
        return self.gradient_accumulation_steps_

    def train_micro_batch_size_per_gpu(self):
        return int(self._config.get_number("train_micro_batch_size_per_gpu"))

    def train_batch_size(self):
        return int(self._config.get_number("train_batch_size"))

    def zero_optimization_stage(self):
        return self.stage

    def fp16_enabled(self):
        return self.dtype == torch.float16

    def bfloat16_enabled(self):
        return self.dtype == torch.bfloat16

    def get_global_grad_norm(self):
        """The gradient norm of the last boundary (before clipping), None before the first."""
        return self._last_boundary.grad_norm if self._last_boundary is not None else None

    def was_step_applied(self):
        """Whether the last boundary ran the optimizer (False when it was skipped on overflow)."""
        return self._last_boundary is not None and not self._last_boundary.overflow

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def get_fp32_param(self, name):
        """The full fp32 master value of a parameter as a torch tensor (gathered under any stage)."""
        tensor = self._engine.tensors.get(name)
        if tensor is None:
            raise _core.InvalidArgumentError(_core.capi.DSRT_ERR_INVALID_ARGUMENT,
                                             "no parameter named %r (names: %s)" % (name, ", ".join(self._engine.tensors)))
        return torch.from_numpy(tensor.read_fp32())

    def save_checkpoint(self, save_dir, tag=None, client_state=None):
        self._engine.client_state = pickle.dumps(client_state or {})
        self._engine.save_checkpoint(save_dir, tag)
        return True

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
        if load_module_only:
            return self._load_weights(load_dir, tag, load_module_strict)
        if not (load_optimizer_states and load_lr_scheduler_states):
            raise _core.UnsupportedError(
                _core.capi.DSRT_ERR_UNSUPPORTED,
                "load_checkpoint(load_optimizer_states=%s, load_lr_scheduler_states=%s): dsrt restores the "
                "optimizer states, schedule and counters together; pass load_module_only=True to load the "
                "weights alone" % (load_optimizer_states, load_lr_scheduler_states))
        self._engine.load_checkpoint(load_dir, tag)
        blob = self._engine.client_state
        client_state = pickle.loads(blob) if blob else {}
        return load_dir, client_state

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
        tag_dir = tag
        if tag_dir is None:
            with open(os.path.join(load_dir, "latest")) as f:
                tag_dir = f.read().strip()
        client_path = os.path.join(load_dir, tag_dir, "client_state.bin")
        client_state = {}
        if os.path.isfile(client_path) and os.path.getsize(client_path) > 0:
            with open(client_path, "rb") as f:
                client_state = pickle.loads(f.read())
        return load_dir, client_state

    def save_16bit_model(self, save_dir, save_filename="model.safetensors"):
        os.makedirs(save_dir, exist_ok=True)
        self._engine.save_16bit_model(os.path.join(save_dir, save_filename))
        return True

    def memory(self):
        return self._engine.memory()

    def close(self):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._engine.close()


def _config_from(args, config, config_params):
    source = config if config is not None else config_params
    if source is None and args is not None:
        source = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if source is None:
        raise _core.ConfigError(_core.capi.DSRT_ERR_CONFIG,
                                "dsrt.initialize needs a config: config=path or dict (or args.deepspeed_config)")
    if isinstance(source, Config):
        return source
    return Config(source)


def _default_comm():
    """The world this process trains in. Under an initialized torch.distributed on GPUs, with a build
    of dsrt that has NCCL, the ranks join over NCCL with a unique id shared through torch.distributed
    (torchrun's usual setup); otherwise the launcher's world (MPI under mpirun/srun, TCP under
    torchrun on CPU hosts, or one rank)."""
    import torch.distributed as dist
    if (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
            and torch.cuda.is_available() and _core.has_feature("nccl")):
        shared = [Comm.nccl_unique_id() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        return Comm.nccl(shared[0], dist.get_rank(), dist.get_world_size(), torch.cuda.current_device())
    return Comm.from_env()


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, mpu=None, dist_init_required=None, collate_fn=None, config=None,
               config_params=None, comm=None):
    """DeepSpeed's initialize: returns (engine, optimizer, dataloader, lr_scheduler)."""
    if model is None:
        raise _core.InvalidArgumentError(_core.capi.DSRT_ERR_INVALID_ARGUMENT, "dsrt.initialize needs model=")
    if optimizer is not None and not isinstance(optimizer, _OptimizerFacade):
        raise _core.UnsupportedError(_core.capi.DSRT_ERR_UNSUPPORTED,
                                     "dsrt steps its own optimizers: describe it in the config's \"optimizer\" "
                                     "section instead of passing a torch optimizer")
    if lr_scheduler is not None:
        raise _core.UnsupportedError(_core.capi.DSRT_ERR_UNSUPPORTED,
                                     "dsrt runs DeepSpeed's schedules: describe it in the config's \"scheduler\" "
                                     "section instead of passing a torch scheduler")
    cfg = _config_from(args, config, config_params)
    if comm is None:
        comm = _default_comm()
    _resolve_auto(cfg, model, comm.world_size, training_data)
    engine = DsrtEngine(model, model_parameters, cfg, comm)
    for _, param in engine._params:
        param._dsrt_front = engine
    dataloader = None
    if training_data is not None:
        sampler = torch.utils.data.distributed.DistributedSampler(
            training_data, num_replicas=comm.world_size, rank=comm.rank, shuffle=True)
        dataloader = torch.utils.data.DataLoader(
            training_data, batch_size=int(cfg.get_number("train_micro_batch_size_per_gpu")), sampler=sampler,
            collate_fn=collate_fn)
    return engine, _OptimizerFacade(engine), dataloader, _SchedulerFacade(engine)
