"""ZeRO-3 in the PyTorch front: parameters are empty outside the forward and backward of the
modules that use them. Module forward pre/post hooks acquire (gather) and release them, an
autograd function gathers a module's parameters again before its backward, and each module's
_parameters dict is replaced by one that gathers a released parameter when another module reads
it during its forward (DeepSpeed's ZeROOrderedDict), registering it as that module's external
parameter from then on."""

import collections
import inspect
import weakref

import torch

# torch 2.1 added always_call to register_forward_hook: run the hook even when forward raises.
_ALWAYS_CALL = ({"always_call": True}
                if "always_call" in inspect.signature(torch.nn.Module.register_forward_hook).parameters else {})


class _PreBackward(torch.autograd.Function):
    """Identity on a module's outputs whose backward first gathers the module's parameters."""

    @staticmethod
    def forward(ctx, engine, module, *outputs):
        ctx.engine = engine
        ctx.module = module
        return outputs[0] if len(outputs) == 1 else outputs

    @staticmethod
    def backward(ctx, *grads):
        ctx.engine._gather_module(ctx.module, for_backward=True)
        return (None, None) + grads


class _PostBackward(torch.autograd.Function):
    """Identity on a module's inputs whose backward, which runs once the module's own backward is
    done, releases the frozen parameters gathered for that backward."""

    @staticmethod
    def forward(ctx, engine, module, *inputs):
        ctx.engine = engine
        ctx.module = module
        return inputs[0] if len(inputs) == 1 else inputs

    @staticmethod
    def backward(ctx, *grads):
        ctx.engine._release_after_backward(ctx.module)
        return (None, None) + grads


def _route_tensors(function, front, module, structure):
    """structure with every tensor in it replaced by its output of one
    function.apply(front, module, *tensors) call, or None when it holds no tensor."""
    found = []
    _visit_tensors(structure, found.append)
    if not found:
        return None
    wrapped = function.apply(front, module, *found)
    wrapped = iter(wrapped if isinstance(wrapped, tuple) else (wrapped,))
    return _visit_tensors(structure, lambda _tensor: next(wrapped))


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


class _ZeroParamDict(collections.OrderedDict):
    """A module's _parameters: reading a released parameter while some module's forward runs
    gathers it for that module (DeepSpeed's ZeROOrderedDict). The front is held weakly, so the
    model can be copied or outlive the engine."""

    def __init__(self, front, *args):
        super().__init__(*args)
        self._front = weakref.ref(front)

    def __getitem__(self, key):
        param = super().__getitem__(key)
        front = self._front()
        if param is not None and front is not None and front._fwd_stack and front._is_released(param):
            front._gather_external(param)
        return param

    def __reduce__(self):
        # Pickles (and deep copies) as the plain dict torch made: the front does not travel.
        return (collections.OrderedDict, (list(super().items()),))


class Zero3Mixin:
    """The ZeRO-3 half of DsrtEngine: expects _by_param (id(param) -> dsrt Tensor), dtype, device."""

    def _init_zero3(self, model):
        self._gathered = {}  # id(param) -> count of acquires held by this front
        self._external = {}  # id(module) -> parameters it reads outside their own module's forward
        self._fwd_stack = []  # modules whose forward is running, innermost last
        self._param_dicts = []  # (module, the _parameters object it had before)
        self._hooked = set()  # id() of the modules with gathering hooks
        self._frozen_for_backward = {}  # id(module) -> frozen parameters gathered for its backward
        if self.stage != 3:
            return
        for module in model.modules():
            # MultiheadAttention reads out_proj's weight itself, never calling out_proj.forward.
            if isinstance(module, torch.nn.MultiheadAttention):
                for param in module.out_proj.parameters(recurse=False):
                    self.register_external_parameter(module, param)
        for module in model.modules():
            self._hook_module(module)
            if module._parameters:
                self._param_dicts.append((module, module._parameters))
                module._parameters = _ZeroParamDict(self, module._parameters)

    def _uninstall_zero3(self):
        for module, original in self._param_dicts:
            restored = type(original)()
            restored.update(dict.items(module._parameters))
            module._parameters = restored
        self._param_dicts = []
        self._fwd_stack = []

    def _empty(self):
        return torch.empty(0, dtype=self.dtype, device=self.device)

    def _is_released(self, param):
        return id(param) in self._by_param and self._gathered.get(id(param), 0) == 0

    def _acquire_param(self, param, for_backward=False):
        tensor = self._by_param.get(id(param))
        if tensor is None or self.stage != 3:
            return  # below ZeRO-3 param.data is the working copy all along
        count = self._gathered.get(id(param), 0)
        if count == 0:
            # The backward's gather shares the forward's copy while autograd still holds it (the
            # same values: no step or write comes between; nothing writes a parameter there).
            param.data = tensor._acquire(for_backward).torch()
        self._gathered[id(param)] = count + 1

    def _release_param(self, param):
        tensor = self._by_param.get(id(param))
        count = self._gathered.get(id(param), 0)
        if tensor is None or count == 0 or self.stage != 3:
            return
        if count == 1:
            param.data = self._empty()
            tensor.release()
            del self._gathered[id(param)]
        else:
            self._gathered[id(param)] = count - 1

    def _release_to(self, held):
        """Release acquires until each parameter holds what `held` (id -> count) says."""
        for _, param in self._params + self._frozen_params:
            while self._gathered.get(id(param), 0) > held.get(id(param), 0):
                self._release_param(param)

    def register_external_parameter(self, module, param):
        """Under ZeRO-3, gather param whenever module runs (a parameter it reads that belongs to
        another module, like DeepSpeed's deepspeed.zero.register_external_parameter)."""
        self._external.setdefault(id(module), [])
        if all(p is not param for p in self._external[id(module)]):
            self._external[id(module)].append(param)

    def _gather_external(self, param):
        """A released parameter was read inside the forward of the innermost running module: gather
        it now and for that module's later forwards and backward; its post-forward releases it."""
        module = self._fwd_stack[-1]
        self.register_external_parameter(module, param)
        self._acquire_param(param)

    def _module_params(self, module):
        return list(module.parameters(recurse=False)) + self._external.get(id(module), [])

    def _gather_module(self, module, for_backward=False):
        for param in self._module_params(module):
            if for_backward and self._gathered.get(id(param), 0) > 0:
                continue
            self._acquire_param(param, for_backward)
            if for_backward and not param.requires_grad and id(param) in self._by_param:
                # A frozen parameter has no gradient hook to release it: the module's inputs do.
                self._frozen_for_backward.setdefault(id(module), []).append(param)

    def _release_after_backward(self, module):
        for param in self._frozen_for_backward.pop(id(module), []):
            self._release_param(param)

    def _hook_module(self, module):
        if id(module) in self._hooked:
            return
        self._hooked.add(id(module))
        # Called positionally or with keywords only, a module's hooks see its positional inputs
        # (possibly none): gathering does not need them. On torch >= 2.1 the release also runs when
        # forward raises; before, DsrtEngine.forward releases what a failed forward left.
        self._hooks.append(module.register_forward_pre_hook(self._pre_forward))
        self._hooks.append(module.register_forward_hook(self._post_forward, **_ALWAYS_CALL))

    def _pre_forward(self, module, inputs):
        self._gather_module(module)
        self._fwd_stack.append(module)
        if not torch.is_grad_enabled() or not any(
                not p.requires_grad and id(p) in self._by_param for p in self._module_params(module)):
            return None
        # A module with frozen parameters: its backward may need them gathered again (for the
        # gradient of its inputs); route the inputs through _PostBackward to release them after.
        return _route_tensors(_PostBackward, self, module, inputs)

    def _post_forward(self, module, inputs, output):
        for i in range(len(self._fwd_stack) - 1, -1, -1):
            if self._fwd_stack[i] is module:
                del self._fwd_stack[i]
                break
        params = self._module_params(module)
        # Frozen parameters are gathered for the backward too: autograd may have saved them to
        # compute the gradient of the module's inputs.
        needs_backward = torch.is_grad_enabled() and any(p.requires_grad or id(p) in self._by_param for p in params)
        for param in params:
            self._release_param(param)
        if not needs_backward:
            return output
        # Route every output tensor that needs a gradient through one _PreBackward, so the
        # module's parameters are gathered again before its backward: outputs may be a tensor or
        # tuples, lists and dicts of them (namedtuples, Hugging Face ModelOutput dicts).
        routed = _route_tensors(_PreBackward, self, module, output)
        return output if routed is None else routed
