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
(gather) and release them, as DeepSpeed does. Frozen floating-point parameters (requires_grad=False)
become dsrt's frozen tensors: a working copy only, partitioned and gathered like the others under
ZeRO-3 (see DsrtEngine).
"""

import contextlib
import json
import os

import torch

from . import _auto, _core, _groups_front, _monitors
from ._checkpoint_front import CheckpointMixin
from ._model_state import ModelStateMixin
from ._core import Comm, Config, Engine
from ._zero3 import Zero3Mixin
from .facades import _OptimizerFacade, _SchedulerFacade

_TORCH_DTYPES = {_core.F32: torch.float32, _core.F16: torch.float16, _core.BF16: torch.bfloat16}


# torch 2.1 added Tensor.register_post_accumulate_grad_hook; older versions hook the AccumulateGrad node.
_HAS_POST_ACCUMULATE_GRAD_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


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


class DsrtEngine(Zero3Mixin, CheckpointMixin, ModelStateMixin, torch.nn.Module):
    """The engine DeepSpeed's initialize() returns, backed by dsrt.

    Trainable parameters (requires_grad, and in model_parameters when given) are registered with
    dsrt: param.data becomes a view of dsrt's working copy (empty outside use under ZeRO-3).
    The other floating-point parameters are registered as frozen tensors (a working copy only, no
    gradient, master or optimizer state; partitioned under ZeRO-3 and gathered around the forward
    and backward of their modules like trainable ones). Non-floating parameters stay with the
    front. Buffers (a rotary inv_freq, batch norm statistics) keep their dtype, as under DeepSpeed."""

    def __init__(self, model, model_parameters, config, comm, optimizer=None):
        super().__init__()
        self.module = model
        self._comm = comm
        self._config = config
        self._monitors = _monitors.HostMonitors(config, comm.rank if comm else 0)  # before any allocation
        with _engine_device_of(model):
            self._engine = Engine(config, comm)
        self._timed = bool(config.get_number("wall_clock_breakdown"))
        self.stage = int(config.get_number("zero_optimization.stage"))
        self.gradient_accumulation_steps_ = int(config.get_number("gradient_accumulation_steps"))
        # Parameter groups: model_parameters dicts or the client optimizer's param_groups (_groups_front).
        if model_parameters is not None and not isinstance(model_parameters, (list, tuple)):
            model_parameters = list(model_parameters)  # a generator is read twice below
        groups = _groups_front.groups_of(model_parameters, optimizer)
        wanted = None
        group_of = {}
        if groups is not None:
            for g, group in enumerate(groups):
                for p in group["params"]:
                    group_of.setdefault(id(p), g)
            wanted = set(group_of)
            for _ in range(len(groups) - 1):
                self._engine.add_group()
        elif model_parameters is not None:
            wanted = {id(p) for p in model_parameters}
        self._params = []  # (dsrt Tensor, param) of the trained parameters
        self._frozen = []  # (name, param) of non-floating parameters, kept by the front
        self._frozen_params = []  # (dsrt Tensor, param) of frozen floating-point parameters
        seen = set()
        for name, param in model.named_parameters():
            if id(param) in seen:
                continue
            seen.add(id(param))
            if not param.requires_grad or (wanted is not None and id(param) not in wanted):
                if param.is_floating_point():
                    init = param.detach().to(torch.float32).contiguous().cpu().numpy()
                    self._frozen_params.append(
                        (self._engine.add_frozen_param(name, shape=tuple(param.shape), init=init), param))
                else:
                    self._frozen.append((name, param))
                continue
            init = param.detach().to(torch.float32).contiguous().cpu().numpy()
            tensor = self._engine.add_param(name, shape=tuple(param.shape), init=init)
            if group_of.get(id(param), 0):
                tensor.group = group_of[id(param)]
            self._params.append((tensor, param))
        kind = config.get_string("optimizer.type").lower() if _has_optimizer(config) else "adamw"
        scheduled = _has_section(config, "scheduler")
        if groups is None:
            groups = [{"params": [p for _, p in self._params]}]
        self._groups = _groups_front.GroupSync(self._engine, kind, groups, scheduled)
        self._groups.push(initial=True)
        self._engine.build()
        # Every value the optimizer uses is shown (live) in param_groups, the config's included.
        for g, group in enumerate(groups):
            for key in _groups_front._KEYS.get(kind, ("lr", "weight_decay")):
                if key in group:
                    continue
                if key == "betas":
                    group[key] = (self._engine.get_group_hyper(g, "beta1"), self._engine.get_group_hyper(g, "beta2"))
                elif key == "nesterov":
                    group[key] = bool(self._engine.get_group_hyper(g, "nesterov"))
                else:
                    group[key] = self._engine.get_group_hyper(g, key)
        self._groups.adopt()
        if scheduled:
            self._groups.write_schedule()
        self._client_scheduler = None
        self._source_optimizer = optimizer
        self._host_boundary = None
        self._scale_wrt_gas = True
        self.dtype = torch.bfloat16 if _enabled(config, "bf16") else torch.float16 if _enabled(
            config, "fp16") else torch.float32
        self._by_param = {id(p): t for t, p in self._params + self._frozen_params}
        self._micro_steps = 0
        self._last_boundary = None
        self._optimizer_facade = None
        self._hooks = []
        for index, (tensor, param) in enumerate(self._params):
            # Before torch 2.1 the hook sits on the gradient accumulator, which records the
            # parameter's shape when it is created and which torch drops when .data changes dtype:
            # take the working dtype first, then create it while the parameter is still whole.
            param.data = param.data.to(self.dtype)
            self._install_grad_hook(tensor, param)
            if self.stage == 3:
                param.data = torch.empty(0, dtype=self.dtype, device=self.device)
                # DeepSpeed's ZeRO-3 attributes, which scripts and libraries read.
                param.ds_numel, param.ds_shape, param.ds_id = tensor.numel, torch.Size(tensor.shape), index
            else:
                param.data = tensor.acquire().torch()
        for index, (tensor, param) in enumerate(self._frozen_params, start=len(self._params)):
            if self.stage == 3:
                param.data = torch.empty(0, dtype=self.dtype, device=self.device)
                param.ds_numel, param.ds_shape, param.ds_id = tensor.numel, torch.Size(tensor.shape), index
            else:
                param.data = tensor.acquire().torch()
        # data_types.buffer_dtype (DeepSpeed 0.19): unset, buffers keep the dtype they were loaded in.
        buffer_dtype = _buffer_dtype(config)
        if buffer_dtype is not None:
            for _, buffer in model.named_buffers():
                if buffer.is_floating_point():
                    buffer.data = buffer.data.to(buffer_dtype)
        self._init_zero3(model)

    # --- gradients -------------------------------------------------------------------------

    def _install_grad_hook(self, tensor, param):
        def take_grad():
            grad = param.grad
            if grad is None:
                return
            self._groups.begin_window()  # param_groups as the host's code left them
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

    # --- the DeepSpeed engine surface ------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        cast = lambda x: x.to(self.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        held, depth = dict(self._gathered), len(self._fwd_stack)
        try:
            with _monitors.timed(self._engine, _core.capi.DSRT_HOST_FORWARD, self._timed):
                return self.module(*[cast(x) for x in inputs], **{k: cast(v) for k, v in kwargs.items()})
        except BaseException:
            # Before torch 2.1 forward hooks do not run when forward raises: release what the
            # failed forward gathered, so the next forward and step start clean.
            del self._fwd_stack[depth:]
            self._release_to(held)
            raise

    def backward(self, loss, retain_graph=False, scale_wrt_gas=True):
        """Backward of loss * loss_scale; gradients flow into dsrt as autograd produces them.
        Returns the loss divided by gradient_accumulation_steps, as DeepSpeed does. With
        scale_wrt_gas=False (the host divided its loss itself) dsrt does not divide the window's
        gradient by gradient_accumulation_steps; it may change only between windows. Several
        backward calls per step() call accumulate into the same window. When autograd returns,
        dsrt reduces the micro-step's gradients (dsrt_engine_end_backward), as DeepSpeed's backward
        ends with its gradient reduction, so step() only runs the optimizer; a host that calls
        loss.backward() itself leaves that to step()."""
        if not self._groups.window_open:
            self._engine.set_scale_wrt_gas(scale_wrt_gas)
        elif bool(scale_wrt_gas) != self._scale_wrt_gas:
            raise _core.StateError(_core.capi.DSRT_ERR_STATE,
                                   "backward(scale_wrt_gas=%s) inside an accumulation window that began with %s; "
                                   "keep it the same for every micro-step of a window" % (scale_wrt_gas,
                                                                                          self._scale_wrt_gas))
        self._scale_wrt_gas = bool(scale_wrt_gas)
        self._groups.begin_window()
        scale = self._engine.loss_scale
        self._engine.report_loss(loss.detach().float().mean().item())  # the monitors' train_loss
        with _monitors.timed(self._engine, _core.capi.DSRT_HOST_BACKWARD, self._timed):
            (loss.float() * scale).backward(retain_graph=retain_graph)
            # The micro-step's last buckets reduced here, not in step(). Under ZeRO-3 the
            # parameters autograd never reached stay gathered until step() releases them, as before.
            self._engine.end_backward()
        return loss.detach() / self.gradient_accumulation_steps_ if scale_wrt_gas else loss.detach()

    def set_gradient_accumulation_boundary(self, is_boundary):
        """DeepSpeed's call: whether the micro-step the next step() ends closes the accumulation
        window (True / False, kept until changed). The host then decides every window's length."""
        self._engine.set_gradient_accumulation_boundary(bool(is_boundary))
        self._host_boundary = bool(is_boundary)

    def step(self):
        """After every micro-step; the optimizer runs at the gradient-accumulation boundary."""
        self.last_step = self._engine.step()
        if self.last_step.boundary:
            self._last_boundary = self.last_step
            if self._monitors.enabled:
                self._monitors.write(self._engine.events())
            self._groups.after_boundary()
            # A client LR scheduler steps after every applied optimizer step, as in DeepSpeed's
            # engine; the lr it writes reaches dsrt before the next window's first gradient.
            if not self.last_step.overflow:
                # Count the step on the optimizers a torch scheduler watches (torch warns when a
                # scheduler steps before its optimizer ever did).
                for opt in (self._source_optimizer, self._optimizer_facade):
                    if opt is not None and hasattr(opt, "_step_count"):
                        opt._step_count += 1
                if self._client_scheduler is not None:
                    self._client_scheduler.step()
        self._micro_steps += 1
        if self.stage == 3:
            self._release_to({})  # parameters gathered for a backward that never reached them
        return self.last_step

    def is_gradient_accumulation_boundary(self):
        """True when the next engine.step() ends an accumulation window (the host's word once it
        called set_gradient_accumulation_boundary)."""
        if self._host_boundary is not None:
            return self._host_boundary
        return (self._micro_steps + 1) % self.gradient_accumulation_steps_ == 0

    @property
    def global_steps(self):
        return self._engine.global_step

    @property
    def loss_scale(self):
        return self._engine.loss_scale

    def get_lr(self):
        """The lr of every parameter group, as DeepSpeed's get_lr."""
        return [float(group["lr"]) for group in self._groups.param_groups]

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
        """The full fp32 master value of a parameter as a torch tensor (gathered under any stage);
        for a frozen parameter, its working value in fp32."""
        tensor = self._engine.tensors.get(name)
        if tensor is None:
            for frozen_name, param in self._frozen:
                if frozen_name == name:
                    return param.detach().to("cpu", torch.float32)
            raise _core.InvalidArgumentError(_core.capi.DSRT_ERR_INVALID_ARGUMENT,
                                             "no parameter named %r (names: %s)" % (name, ", ".join(self._engine.tensors)))
        return torch.from_numpy(tensor.read_fp32())

    def save_16bit_model(self, save_dir, save_filename="model.safetensors"):
        os.makedirs(save_dir, exist_ok=True)
        self._engine.save_16bit_model(os.path.join(save_dir, save_filename))
        return True

    def memory(self):
        return self._engine.memory()

    def close(self):
        """Free dsrt's memory and hand the model back as a plain torch model: each trained
        parameter's .data becomes a copy of its current working value (gathered under ZeRO-3; in
        the working dtype, 16-bit under fp16/bf16), hooks are removed, and module(x) runs without
        dsrt. Idempotent; the engine's own methods raise StateError afterwards. Tensors still
        viewing dsrt's memory (saved for a backward, held by the caller) keep it alive until they go."""
        if self._engine.closed:
            return
        self._monitors.close()
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self.stage == 3:
            self._release_to({})
            self._uninstall_zero3()
        for tensor, param in self._params:
            if self.stage == 3:
                with tensor as view:
                    param.data = view.torch().clone()
            else:
                param.data = param.data.clone()
            for attr in ("_dsrt_front", "_dsrt_accumulator", "ds_numel", "ds_shape", "ds_id"):
                if attr in param.__dict__:
                    delattr(param, attr)
        self._by_param = {}
        self._engine.close()


def _buffer_dtype(config):
    try:
        name = config.get_string("data_types.buffer_dtype")
    except _core.ConfigError:  # not given: DeepSpeed's default None
        return None
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _enabled(config, section):
    return _flag(config, section + ".enabled")


def _config_from(args, config, config_params, optimizer):
    source = config if config is not None else config_params
    if source is None and args is not None:
        source = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if source is None:
        raise _core.ConfigError(_core.capi.DSRT_ERR_CONFIG,
                                "dsrt.initialize needs a config: config=path or dict (or args.deepspeed_config)")
    if optimizer is None or isinstance(source, Config):
        return source if isinstance(source, Config) else Config(source)
    # A torch optimizer stands for the config's "optimizer" section when it has none.
    if not isinstance(source, dict):
        with open(os.fspath(source)) as f:
            source = json.load(f)
    if "optimizer" not in source:
        source = dict(source, optimizer=_optimizer_section(optimizer))
    return Config(source)


def _optimizer_section(optimizer):
    """The config section a torch optimizer stands for (its type, and param_groups[0]'s values as
    the defaults); dsrt steps it itself, one dsrt group per param group (_groups_front)."""
    kinds = {torch.optim.AdamW: ("AdamW", {}), torch.optim.Adam: ("Adam", {"adam_w_mode": False}),
             torch.optim.SGD: ("SGD", {}), torch.optim.Adagrad: ("Adagrad", {})}
    kind = kinds.get(type(optimizer))
    if kind is None:
        raise _core.UnsupportedError(
            _core.capi.DSRT_ERR_UNSUPPORTED,
            "dsrt steps its own optimizers: it takes a torch.optim.Adam, AdamW, SGD or Adagrad as the "
            "description of one, not %s; describe it in the config's \"optimizer\" section instead"
            % type(optimizer).__name__)
    for index, group in enumerate(optimizer.param_groups):
        _groups_front.dsrt_values(kind[0].lower(), group, index)  # refuses amsgrad, maximize, ...
    group = optimizer.param_groups[0]
    params = dict(kind[1], **{k: v for k, v in _groups_front.dsrt_values(kind[0].lower(), group, 0).items()
                               if k not in ("beta1", "beta2", "nesterov")})
    if "betas" in group:
        params["betas"] = [float(b) for b in group["betas"]]
    if "nesterov" in group:
        params["nesterov"] = bool(group["nesterov"])
    if kind[0] == "Adagrad":
        params["initial_accumulator_value"] = float(group.get("initial_accumulator_value", 0.0))
    return {"type": kind[0], "params": params}


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
    """DeepSpeed's initialize: returns (engine, optimizer, dataloader, lr_scheduler).

    "auto" config values are resolved from args (TrainingArguments' names), the optimizer, the
    training data and model.config (see dsrt._auto). optimizer may be a torch.optim.Adam or AdamW:
    it describes the optimizer dsrt runs (its param_groups[0] fills the config's "optimizer"
    section, or that section's "auto" values); dsrt steps its own."""
    if model is None:
        raise _core.InvalidArgumentError(_core.capi.DSRT_ERR_INVALID_ARGUMENT, "dsrt.initialize needs model=")
    if isinstance(optimizer, _OptimizerFacade):
        optimizer = None
    if optimizer is not None:
        _optimizer_section(optimizer)  # refuses what dsrt cannot run
    cfg = _config_from(args, config, config_params, optimizer)
    if lr_scheduler is not None and _has_section(cfg, "scheduler"):
        raise _core.ConfigError(_core.capi.DSRT_ERR_CONFIG,
                                "a torch lr_scheduler was passed and the config has a \"scheduler\" section; both "
                                "would drive the learning rate -- remove one of them")
    if comm is None:
        comm = _default_comm()
    drop_last = _flag(cfg, "dataloader_drop_last")
    _auto.resolve(cfg, model, comm.world_size, args=args, optimizer=optimizer, training_data=training_data,
                  drop_last=drop_last)
    if (optimizer is None and lr_scheduler is not None and not callable(lr_scheduler)
            and getattr(lr_scheduler, "optimizer", None) is not None):
        optimizer = lr_scheduler.optimizer  # the scheduler writes that optimizer's param_groups
    engine = DsrtEngine(model, model_parameters, cfg, comm, optimizer=optimizer)
    for _, param in engine._params:
        param._dsrt_front = engine
    dataloader = None
    if training_data is not None:
        sampler = torch.utils.data.distributed.DistributedSampler(
            training_data, num_replicas=comm.world_size, rank=comm.rank, shuffle=True)
        dataloader = torch.utils.data.DataLoader(
            training_data, batch_size=int(cfg.get_number("train_micro_batch_size_per_gpu")), sampler=sampler,
            collate_fn=collate_fn, drop_last=drop_last)
    engine._optimizer_facade = _OptimizerFacade(engine)
    scheduler = _SchedulerFacade(engine)
    if lr_scheduler is not None:
        # A scheduler instance, or DeepSpeed's callable form that builds one on the optimizer returned.
        if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            lr_scheduler = lr_scheduler(engine._optimizer_facade)
        engine._client_scheduler = scheduler = lr_scheduler
        if (getattr(lr_scheduler, "optimizer", None) is not None
                and lr_scheduler.optimizer.param_groups is not engine._groups.param_groups):
            raise _core.InvalidArgumentError(
                _core.capi.DSRT_ERR_INVALID_ARGUMENT,
                "lr_scheduler drives an optimizer whose param_groups dsrt does not follow; build it on the client "
                "optimizer passed as optimizer= (or on the optimizer initialize returns)")
    return engine, engine._optimizer_facade, dataloader, scheduler


def _has_section(config, section):
    return section in config.to_dict()


def _has_optimizer(config):
    return _has_section(config, "optimizer")


def _flag(config, key):
    try:
        return bool(config.get_number(key))
    except _core.Error:
        value = config.to_dict()
        for part in key.split("."):
            value = value.get(part, {}) if isinstance(value, dict) else {}
        return value is True
