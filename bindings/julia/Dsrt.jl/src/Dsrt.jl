"""
    Dsrt

Julia interface to dsrt, a training-memory runtime configured by DeepSpeed JSON: it owns a
model's parameters, gradients and optimizer states, partitions them across ranks (ZeRO stages
0-3), offloads, steps and checkpoints them. Julia computes forward and backward.

Handles (`Config`, `Comm`, `Engine`, `Checkpoint`) are mutable structs with finalizers; `close`
frees one early and is idempotent. Every failure throws a `DsrtError` carrying the status code
and the library's message. Host buffers are exposed as `Array` views without copies inside
`acquire(f, tensor)` and `grad!(f, tensor)` blocks; their dims are the C shape reversed
(row-major storage seen column-major), as with NumPy arrays in Julia.
"""
module Dsrt

# The library is located when the module loads (DSRT_LIB / DSRT_DIR may differ between runs), so
# the module is not precompiled with a path baked in.
__precompile__(false)

include("LibDsrt.jl")
using .LibDsrt
const L = LibDsrt

export Config, Comm, Engine, Tensor, Checkpoint, DsrtError, StepResult, MemoryStats
export add_param!, add_frozen_param!, build!, step!, end_backward!, loss_scale, global_step, lr, tensors, memory, acquire, grad!,
       read_fp32, write_fp32!, save_checkpoint, load_checkpoint!, save_16bit_model, set_client_state!,
       client_state, tensor_names, tensor_shape, read_tensor, export_safetensors, rank, world_size,
       barrier, set_number!, set_string!, set_bool!, set_hidden_size!, set_world_size!, get_number,
       get_string, to_json, unresolved, warnings, numel, name, has_feature, add_group!, num_groups,
       set_group!, group, set_group_hyper!, group_hyper, group_lr, set_gradient_accumulation_boundary!,
       set_scale_wrt_gas!

# ---- errors: the one place statuses are checked ---------------------------------------------------
"""A failed dsrt call: `code` (DSRT_ERR_*), the C function, and the library's detailed message."""
struct DsrtError <: Exception
    code::Int32
    func::String
    message::String
end

status_string(code::Integer) = unsafe_string(L.dsrt_status_string(Int32(code)))

function Base.showerror(io::IO, e::DsrtError)
    print(io, "DsrtError: ", e.func, ": ", status_string(e.code), " (status ", e.code, ")")
    isempty(e.message) || print(io, ": ", e.message)
end

# Kept out of line so the fast path of `check` stays small.
@noinline throw_dsrt_error(status, func) =
    throw(DsrtError(Int32(status), String(func), unsafe_string(L.dsrt_last_error_message())))

@inline function check(status, func::Symbol)
    status == L.DSRT_OK || throw_dsrt_error(status, func)
    return nothing
end

binding_error(code, func, msg) = throw(DsrtError(Int32(code), String(func), msg))

function nul_free(s::AbstractString, func)
    occursin('\0', s) && binding_error(L.DSRT_ERR_INVALID_ARGUMENT, func, "$(repr(s)) contains a NUL byte")
    return String(s)
end

# A string the library allocated: copied, then freed with dsrt_free.
function take_string(p::Ptr{Cchar})
    p == C_NULL && return ""
    s = unsafe_string(p)
    L.dsrt_free(p)
    return s
end

nonempty_lines(s) = filter(!isempty, split(s, '\n'))

version() = L.dsrt_version_number()
version_string() = unsafe_string(L.dsrt_version_string())
has_feature(name::AbstractString) = !occursin('\0', name) && L.dsrt_has_feature(name) == 1

"""Throws unless the loaded library has the major version these bindings were written for."""
function check_version()
    v = version()
    v ÷ 10000 == L.DSRT_VERSION_MAJOR ||
        binding_error(L.DSRT_ERR_UNSUPPORTED, :dsrt_version_number,
                      "libdsrt $(version_string()) is loaded but Dsrt.jl needs major version $(L.DSRT_VERSION_MAJOR)")
    return nothing
end

# ---- handles --------------------------------------------------------------------------------------------
# Each wrapper owns one handle. The finalizer and close() share `_free!`, which never throws
# (finalizers must not) and sets the handle to C_NULL so a second close is a no-op.
# Used only inside this module, so the whole expansion is escaped (names resolve in Dsrt).
macro handle_type(T, C, destroy)
    closed_message = "this $(T) is closed"
    type_name = string(T)
    return esc(quote
        mutable struct $T
            handle::Ptr{$C}
            function $T(h::Ptr{$C})
                obj = new(h)
                finalizer(_free!, obj)
                return obj
            end
        end
        function _free!(obj::$T)
            h = obj.handle
            obj.handle = C_NULL
            if h != C_NULL
                try
                    $destroy(h)
                catch
                end
            end
            return nothing
        end
        Base.close(obj::$T) = _free!(obj)
        Base.isopen(obj::$T) = obj.handle != C_NULL
        function Base.unsafe_convert(::Type{Ptr{$C}}, obj::$T)
            obj.handle == C_NULL && binding_error(L.DSRT_ERR_STATE, $type_name, $closed_message)
            return obj.handle
        end
    end)
end

@handle_type Config L.dsrt_config L.dsrt_config_destroy
@handle_type Comm L.dsrt_comm L.dsrt_comm_destroy
@handle_type Engine L.dsrt_engine L.dsrt_engine_destroy
@handle_type Checkpoint L.dsrt_checkpoint L.dsrt_checkpoint_close

# ---- config ---------------------------------------------------------------------------------------------
"""    Config(json::AbstractString)  — parse DeepSpeed JSON text (comments, trailing commas accepted)."""
function Config(json::AbstractString)
    out = Ref{Ptr{L.dsrt_config}}(C_NULL)
    check(L.dsrt_config_parse(nul_free(json, :dsrt_config_parse), out), :dsrt_config_parse)
    return Config(out[])
end

"""    Config(; file)  — read and parse a DeepSpeed JSON file."""
function Config(; file::AbstractString)
    out = Ref{Ptr{L.dsrt_config}}(C_NULL)
    check(L.dsrt_config_load(nul_free(file, :dsrt_config_load), out), :dsrt_config_load)
    return Config(out[])
end

set_number!(c::Config, key::AbstractString, v::Real) =
    check(L.dsrt_config_set_number(c, nul_free(key, :dsrt_config_set_number), Float64(v)), :dsrt_config_set_number)
set_string!(c::Config, key::AbstractString, v::AbstractString) =
    check(L.dsrt_config_set_string(c, nul_free(key, :dsrt_config_set_string), nul_free(v, :dsrt_config_set_string)),
          :dsrt_config_set_string)
set_bool!(c::Config, key::AbstractString, v::Bool) =
    check(L.dsrt_config_set_bool(c, nul_free(key, :dsrt_config_set_bool), Cint(v)), :dsrt_config_set_bool)
set_hidden_size!(c::Config, h::Integer) =
    check(L.dsrt_config_set_hidden_size(c, Int64(h)), :dsrt_config_set_hidden_size)
set_world_size!(c::Config, w::Integer) =
    check(L.dsrt_config_set_world_size(c, Int32(w)), :dsrt_config_set_world_size)

function get_number(c::Config, key::AbstractString)
    out = Ref{Float64}(0)
    check(L.dsrt_config_get_number(c, nul_free(key, :dsrt_config_get_number), out), :dsrt_config_get_number)
    return out[]
end

function get_string(c::Config, key::AbstractString)
    out = Ref{Ptr{Cchar}}(C_NULL)
    check(L.dsrt_config_get_string(c, nul_free(key, :dsrt_config_get_string), out), :dsrt_config_get_string)
    return take_string(out[])
end

function to_json(c::Config)
    out = Ref{Ptr{Cchar}}(C_NULL)
    check(L.dsrt_config_to_json(c, out), :dsrt_config_to_json)
    return take_string(out[])
end

function unresolved(c::Config)
    out = Ref{Ptr{Cchar}}(C_NULL)
    check(L.dsrt_config_unresolved(c, out), :dsrt_config_unresolved)
    return nonempty_lines(take_string(out[]))
end

function warnings(c::Config)
    out = Ref{Ptr{Cchar}}(C_NULL)
    check(L.dsrt_config_warnings(c, out), :dsrt_config_warnings)
    return nonempty_lines(take_string(out[]))
end

# ---- communicator ---------------------------------------------------------------------------------------
"""    Comm(kind = :env)  — `:env`: the world this process was launched into; `:local`: one rank."""
function Comm(kind::Symbol = :env)
    out = Ref{Ptr{L.dsrt_comm}}(C_NULL)
    if kind === :local
        check(L.dsrt_comm_create_local(out), :dsrt_comm_create_local)
    elseif kind === :env
        check(L.dsrt_comm_create_from_env(out), :dsrt_comm_create_from_env)
    else
        binding_error(L.DSRT_ERR_INVALID_ARGUMENT, :Comm, "kind must be :env or :local, not $(repr(kind))")
    end
    return Comm(out[])
end

"""    Comm(id::Vector{UInt8}, rank, world_size, device)  — join an NCCL world."""
function Comm(id::Vector{UInt8}, rank::Integer, world_size::Integer, device::Integer)
    length(id) == 128 || binding_error(L.DSRT_ERR_INVALID_ARGUMENT, :dsrt_comm_create_nccl, "the NCCL id has 128 bytes")
    out = Ref{Ptr{L.dsrt_comm}}(C_NULL)
    GC.@preserve id check(L.dsrt_comm_create_nccl(pointer(id), Int32(rank), Int32(world_size), Int32(device), out),
                          :dsrt_comm_create_nccl)
    return Comm(out[])
end

function nccl_unique_id()
    id = zeros(UInt8, 128)
    GC.@preserve id check(L.dsrt_nccl_unique_id(pointer(id)), :dsrt_nccl_unique_id)
    return id
end

rank(c::Comm) = Int(L.dsrt_comm_rank(c))
world_size(c::Comm) = Int(L.dsrt_comm_world_size(c))
barrier(c::Comm) = check(L.dsrt_comm_barrier(c), :dsrt_comm_barrier)

# ---- engine ---------------------------------------------------------------------------------------------
"""What one `step!` did (DeepSpeed's engine.step())."""
struct StepResult
    global_step::Int64
    boundary::Bool
    overflow::Bool
    grad_norm::Float64
    lr::Float64
    loss_scale::Float64
end

"""Bytes this rank holds per state; index each tuple by location + 1 (device, host, NVMe)."""
struct MemoryStats
    working_params::NTuple{3,UInt64}
    gradients::NTuple{3,UInt64}
    master_params::NTuple{3,UInt64}
    optimizer_states::NTuple{3,UInt64}
    buffers::NTuple{3,UInt64}
end

"""    Engine(config; comm = nothing, device = nothing)  — the config is copied; the engine keeps
the comm alive. `device` names where the states live, whatever DSRT_DEVICE says: `:cpu`, `:cuda`
(GPU local rank % visible GPUs) or `(:cuda, ordinal)`; `nothing`: DSRT_DEVICE, else automatic."""
function Engine(config::Config; comm::Union{Comm,Nothing} = nothing, device = nothing)
    out = Ref{Ptr{L.dsrt_engine}}(C_NULL)
    cptr = comm === nothing ? Ptr{L.dsrt_comm}(C_NULL) : Base.unsafe_convert(Ptr{L.dsrt_comm}, comm)
    if device === nothing
        GC.@preserve comm check(L.dsrt_engine_create(config, cptr, out), :dsrt_engine_create)
    else
        kind, index = device === :cpu ? (L.DSRT_DEVICE_CPU, 0) : device === :cuda ? (L.DSRT_DEVICE_CUDA, -1) :
                      (device isa Tuple && device[1] === :cuda) ? (L.DSRT_DEVICE_CUDA, Int(device[2])) :
                      binding_error(L.DSRT_ERR_INVALID_ARGUMENT, :Engine, "device must be :cpu, :cuda or (:cuda, n)")
        opts = Ref(L.dsrt_engine_options(UInt64(sizeof(L.dsrt_engine_options)), Int32(kind), Int32(index)))
        GC.@preserve comm check(L.dsrt_engine_create_with_options(config, cptr, opts, out),
                                :dsrt_engine_create_with_options)
    end
    return Engine(out[])
end

"""A parameter owned by an engine; holds the engine, so the engine outlives it."""
struct Tensor
    engine::Engine
    handle::Ptr{L.dsrt_tensor}
end

function Base.unsafe_convert(::Type{Ptr{L.dsrt_tensor}}, t::Tensor)
    isopen(t.engine) || binding_error(L.DSRT_ERR_STATE, :Tensor, "the engine of this tensor is closed")
    return t.handle
end

"""
    add_param!(engine, name, shape; init = nothing) -> Tensor

`shape` is the C (row-major) shape; `init` holds prod(shape) Float32 values in row-major order
(a Julia array of dims reverse(shape) has exactly that layout), the same on every rank.
"""
function add_param!(e::Engine, name::AbstractString, shape; init::Union{AbstractArray{Float32},Nothing} = nothing)
    dims = Int64[d for d in shape]
    if init !== nothing && length(init) != prod(dims)
        binding_error(L.DSRT_ERR_INVALID_ARGUMENT, :dsrt_engine_add_param,
                      "'$name': init has $(length(init)) values but shape $(Tuple(dims)) has $(prod(dims))")
    end
    values = init === nothing ? nothing : Array{Float32}(init)
    out = Ref{Ptr{L.dsrt_tensor}}(C_NULL)
    GC.@preserve dims values begin
        iptr = values === nothing ? Ptr{Float32}(C_NULL) : pointer(values)
        check(L.dsrt_engine_add_param(e, nul_free(name, :dsrt_engine_add_param), pointer(dims), Int32(length(dims)),
                                      iptr, out), :dsrt_engine_add_param)
    end
    return Tensor(e, out[])
end

"""
    add_frozen_param!(engine, name, shape; init = nothing) -> Tensor

A frozen parameter (dsrt_engine_add_frozen_param): a working copy only, with no gradient, fp32
master or optimizer state; partitioned at ZeRO-3 and gathered by acquire. Arguments as add_param!;
grad! on it throws a DsrtError (DSRT_ERR_STATE) naming it.
"""
function add_frozen_param!(e::Engine, name::AbstractString, shape; init::Union{AbstractArray{Float32},Nothing} = nothing)
    dims = Int64[d for d in shape]
    if init !== nothing && length(init) != prod(dims)
        binding_error(L.DSRT_ERR_INVALID_ARGUMENT, :dsrt_engine_add_frozen_param,
                      "'$name': init has $(length(init)) values but shape $(Tuple(dims)) has $(prod(dims))")
    end
    values = init === nothing ? nothing : Array{Float32}(init)
    out = Ref{Ptr{L.dsrt_tensor}}(C_NULL)
    GC.@preserve dims values begin
        iptr = values === nothing ? Ptr{Float32}(C_NULL) : pointer(values)
        check(L.dsrt_engine_add_frozen_param(e, nul_free(name, :dsrt_engine_add_frozen_param), pointer(dims),
                                             Int32(length(dims)), iptr, out), :dsrt_engine_add_frozen_param)
    end
    return Tensor(e, out[])
end

build!(e::Engine) = check(L.dsrt_engine_build(e), :dsrt_engine_build)

"""CUDA stream (a cudaStream_t as Ptr{Cvoid}) the host computes on; before build!."""
set_stream!(e::Engine, stream::Ptr{Cvoid}) = check(L.dsrt_engine_set_stream(e, stream), :dsrt_engine_set_stream)

function device(e::Engine)
    kind, index = Ref{Int32}(0), Ref{Int32}(0)
    check(L.dsrt_engine_device(e, kind, index), :dsrt_engine_device)
    return (kind[] == L.DSRT_DEVICE_CPU ? :cpu : kind[] == L.DSRT_DEVICE_CUDA ? :cuda : Symbol("device", kind[]), Int(index[]))
end

function loss_scale(e::Engine)
    out = Ref{Float64}(0)
    check(L.dsrt_engine_loss_scale(e, out), :dsrt_engine_loss_scale)
    return out[]
end

function step!(e::Engine)
    r = Ref(L.dsrt_step_result(UInt64(sizeof(L.dsrt_step_result)), 0, 0, 0, 0.0, 0.0, 0.0))
    check(L.dsrt_engine_step(e, r), :dsrt_engine_step)
    x = r[]
    return StepResult(x.global_step, x.boundary != 0, x.overflow != 0, x.grad_norm, x.lr, x.loss_scale)
end

"""The host's backward of this micro-step is complete: dsrt reduces the micro-step's gradients
now (what `step!` would otherwise do first), so `step!` only runs the boundary. Optional and
collective; a no-op when repeated before the next gradient."""
end_backward!(e::Engine) = check(L.dsrt_engine_end_backward(e), :dsrt_engine_end_backward)

function global_step(e::Engine)
    out = Ref{Int64}(0)
    check(L.dsrt_engine_global_step(e, out), :dsrt_engine_global_step)
    return out[]
end

function lr(e::Engine)
    out = Ref{Float64}(0)
    check(L.dsrt_engine_get_lr(e, out), :dsrt_engine_get_lr)
    return out[]
end

# ---- parameter groups and host-driven hyperparameters / boundaries --------------------------------
"""Add a parameter group (before build) with the config's optimizer values, then the given ones
(`add_group!(e; lr=1e-3, weight_decay=0.0)`); returns its index (1, 2, ...)."""
function add_group!(e::Engine; hyper...)
    out = Ref{Int32}(0)
    check(L.dsrt_engine_add_group(e, out), :dsrt_engine_add_group)
    for (name, value) in hyper
        set_group_hyper!(e, out[], String(name), value)
    end
    return Int(out[])
end

num_groups(e::Engine) = Int(L.dsrt_engine_num_groups(e))

"""Put a tensor in a parameter group (before build)."""
set_group!(t::Tensor, g::Integer) = check(L.dsrt_tensor_set_group(t, Int32(g)), :dsrt_tensor_set_group)
group(t::Tensor) = Int(L.dsrt_tensor_group(t))

"""Set one hyperparameter of a group ("lr", "weight_decay", "beta1", "beta2", "eps", "momentum",
"dampening", "nesterov", "max_coeff", "min_coeff"): before build or between accumulation windows."""
set_group_hyper!(e::Engine, group::Integer, name::AbstractString, value::Real) =
    check(L.dsrt_engine_set_group_hyper(e, Int32(group), name, Float64(value)), :dsrt_engine_set_group_hyper)

function group_hyper(e::Engine, group::Integer, name::AbstractString)
    out = Ref{Float64}(0)
    check(L.dsrt_engine_get_group_hyper(e, Int32(group), name, out), :dsrt_engine_get_group_hyper)
    return out[]
end

"""The lr a group used at the last boundary step (before the first: the one it will use)."""
function group_lr(e::Engine, group::Integer)
    out = Ref{Float64}(0)
    check(L.dsrt_engine_group_lr(e, Int32(group), out), :dsrt_engine_group_lr)
    return out[]
end

"""`true` / `false`: the micro-step the next `step!` ends closes / does not close the window
(until changed); `nothing`: count gradient_accumulation_steps (DeepSpeed's default)."""
set_gradient_accumulation_boundary!(e::Engine, is_boundary::Union{Bool,Nothing}) =
    check(L.dsrt_engine_set_accumulation_boundary(e, Int32(is_boundary === nothing ? -1 : is_boundary ? 1 : 0)),
          :dsrt_engine_set_accumulation_boundary)

"""`false`: do not divide the accumulated gradient by gradient_accumulation_steps (the host scaled its loss)."""
set_scale_wrt_gas!(e::Engine, enabled::Bool) =
    check(L.dsrt_engine_set_scale_wrt_gas(e, Int32(enabled ? 1 : 0)), :dsrt_engine_set_scale_wrt_gas)

function tensors(e::Engine)
    n = L.dsrt_engine_num_tensors(e)
    return [Tensor(e, L.dsrt_engine_tensor(e, Int64(i))) for i in 0:n-1]
end

function memory(e::Engine)
    z = ntuple(_ -> UInt64(0), 3)
    r = Ref(L.dsrt_memory_stats(UInt64(sizeof(L.dsrt_memory_stats)), z, z, z, z, z))
    check(L.dsrt_engine_memory(e, r), :dsrt_engine_memory)
    m = r[]
    return MemoryStats(m.working_params, m.gradients, m.master_params, m.optimizer_states, m.buffers)
end

function set_client_state!(e::Engine, data::Vector{UInt8})
    GC.@preserve data check(L.dsrt_engine_set_client_state(e, pointer(data), UInt64(length(data))),
                            :dsrt_engine_set_client_state)
end

function client_state(e::Engine)
    data, size = Ref{Ptr{Cvoid}}(C_NULL), Ref{UInt64}(0)
    check(L.dsrt_engine_client_state(e, data, size), :dsrt_engine_client_state)
    (data[] == C_NULL || size[] == 0) && return UInt8[]
    return copy(unsafe_wrap(Array, Ptr{UInt8}(data[]), Int(size[])))
end

opt_cstring(tag::Nothing, func) = Ptr{Cchar}(C_NULL)
opt_cstring(tag::AbstractString, func) = nul_free(tag, func)

save_checkpoint(e::Engine, dir::AbstractString; tag = nothing) =
    check(L.dsrt_engine_save_checkpoint(e, nul_free(dir, :dsrt_engine_save_checkpoint),
                                        opt_cstring(tag, :dsrt_engine_save_checkpoint)), :dsrt_engine_save_checkpoint)
load_checkpoint!(e::Engine, dir::AbstractString; tag = nothing) =
    check(L.dsrt_engine_load_checkpoint(e, nul_free(dir, :dsrt_engine_load_checkpoint),
                                        opt_cstring(tag, :dsrt_engine_load_checkpoint)), :dsrt_engine_load_checkpoint)
save_16bit_model(e::Engine, path::AbstractString) =
    check(L.dsrt_engine_save_16bit_model(e, nul_free(path, :dsrt_engine_save_16bit_model)), :dsrt_engine_save_16bit_model)

# ---- tensors --------------------------------------------------------------------------------------------
name(t::Tensor) = unsafe_string(L.dsrt_tensor_name(t))
numel(t::Tensor) = Int(L.dsrt_tensor_numel(t))

"""The C (row-major) shape as a tuple."""
function Base.size(t::Tensor)
    n = L.dsrt_tensor_ndim(t)
    out = zeros(Int64, max(n, 0))
    GC.@preserve out check(L.dsrt_tensor_shape(t, pointer(out)), :dsrt_tensor_shape)
    return Tuple(Int.(out))
end

"""The full fp32 master value (gathered; collective under ZeRO), row-major as a Vector."""
function read_fp32(t::Tensor)
    out = Vector{Float32}(undef, numel(t))
    GC.@preserve out check(L.dsrt_tensor_read_fp32(t, pointer(out), UInt64(length(out))), :dsrt_tensor_read_fp32)
    return out
end

function write_fp32!(t::Tensor, v::AbstractArray{Float32})
    src = Array{Float32}(v)
    GC.@preserve src check(L.dsrt_tensor_write_fp32(t, pointer(src), UInt64(length(src))), :dsrt_tensor_write_fp32)
end

eltype_of(dtype) = dtype == L.DSRT_F32 ? Float32 : dtype == L.DSRT_F16 ? Float16 : dtype == L.DSRT_BF16 ? UInt16 :
    binding_error(L.DSRT_ERR_UNSUPPORTED, :dtype, "dtype $dtype is unknown to this version of Dsrt.jl")

function host_view(t::Tensor, p::Ptr{Cvoid}, dtype)
    first(device(t.engine)) === :cpu ||
        binding_error(L.DSRT_ERR_UNSUPPORTED, :host_view, "the engine's buffers are on a GPU; use the raw pointer")
    return unsafe_wrap(Array, Ptr{eltype_of(dtype)}(p), reverse(size(t)); own = false)
end

"""
    acquire(f, tensor)

Calls `f(array)` with the working copy as an Array view (no copy; dims reversed; Float32,
Float16, or UInt16 bits for bf16), gathered under ZeRO-3, and releases it afterwards. The view
must not be used after `f` returns.
"""
function acquire(f, t::Tensor)
    p, dtype = Ref{Ptr{Cvoid}}(C_NULL), Ref{L.dsrt_dtype}(0)
    check(L.dsrt_tensor_acquire(t, p, dtype), :dsrt_tensor_acquire)
    try
        return f(host_view(t, p[], dtype[]))
    finally
        L.dsrt_tensor_release(t)
    end
end

"""
    grad!(f, tensor)

Calls `f(array)` with this micro-step's gradient buffer (add the gradient of loss * loss_scale
into it), then signals it ready. If `f` throws, the gradient is not signalled (it counts as zero).
"""
function grad!(f, t::Tensor)
    p, dtype = Ref{Ptr{Cvoid}}(C_NULL), Ref{L.dsrt_dtype}(0)
    check(L.dsrt_tensor_grad(t, p, dtype), :dsrt_tensor_grad)
    result = f(host_view(t, p[], dtype[]))
    check(L.dsrt_tensor_grad_ready(t), :dsrt_tensor_grad_ready)
    return result
end

# ---- offline checkpoints ------------------------------------------------------------------------------
"""    Checkpoint(dir; tag = nothing)  — open a checkpoint without an engine (tag nothing: latest)."""
function Checkpoint(dir::AbstractString; tag = nothing)
    out = Ref{Ptr{L.dsrt_checkpoint}}(C_NULL)
    check(L.dsrt_checkpoint_open(nul_free(dir, :dsrt_checkpoint_open), opt_cstring(tag, :dsrt_checkpoint_open), out),
          :dsrt_checkpoint_open)
    return Checkpoint(out[])
end

function tensor_names(c::Checkpoint)
    n = L.dsrt_checkpoint_num_tensors(c)
    return [unsafe_string(L.dsrt_checkpoint_tensor_name(c, Int64(i))) for i in 0:n-1]
end

function tensor_shape(c::Checkpoint, name::AbstractString)
    shape, ndim = zeros(Int64, 8), Ref{Int32}(0)
    GC.@preserve shape check(L.dsrt_checkpoint_tensor_shape(c, nul_free(name, :dsrt_checkpoint_tensor_shape),
                                                            pointer(shape), ndim), :dsrt_checkpoint_tensor_shape)
    return Tuple(Int.(shape[1:clamp(ndim[], 0, 8)]))
end

function read_tensor(c::Checkpoint, name::AbstractString)
    out = Vector{Float32}(undef, prod(tensor_shape(c, name)))
    GC.@preserve out check(L.dsrt_checkpoint_read_tensor_fp32(c, nul_free(name, :dsrt_checkpoint_read_tensor_fp32),
                                                              pointer(out), UInt64(length(out))),
                           :dsrt_checkpoint_read_tensor_fp32)
    return out
end

const DTYPES = Dict(:f32 => L.DSRT_F32, :f16 => L.DSRT_F16, :bf16 => L.DSRT_BF16)

function export_safetensors(c::Checkpoint, path::AbstractString; dtype::Symbol = :f32)
    haskey(DTYPES, dtype) || binding_error(L.DSRT_ERR_INVALID_ARGUMENT, :dsrt_checkpoint_export_safetensors,
                                           "dtype must be :f32, :f16 or :bf16")
    check(L.dsrt_checkpoint_export_safetensors(c, nul_free(path, :dsrt_checkpoint_export_safetensors),
                                               L.dsrt_dtype(DTYPES[dtype])), :dsrt_checkpoint_export_safetensors)
end

# ---- logging --------------------------------------------------------------------------------------------
const LOG_HANDLER = Ref{Any}(nothing)

function _log_trampoline(level::Int32, msg::Ptr{Cchar}, user::Ptr{Cvoid})::Cvoid
    handler = LOG_HANDLER[]
    if handler !== nothing && msg != C_NULL
        try
            handler(Int(level), unsafe_string(msg))
        catch
        end
    end
    return nothing
end

"""
    set_log_callback(f)  /  set_log_callback(nothing)

Routes dsrt's log messages to `f(level, message)` (process-wide). dsrt may call it from its own
threads, where Julia code must not allocate or yield: use it only in single-threaded runs, or
keep the default (stderr) otherwise.
"""
function set_log_callback(f)
    LOG_HANDLER[] = f
    if f === nothing
        L.dsrt_set_log_callback(C_NULL, C_NULL)
    else
        cb = @cfunction(_log_trampoline, Cvoid, (Int32, Ptr{Cchar}, Ptr{Cvoid}))
        L.dsrt_set_log_callback(cb, C_NULL)
    end
    return nothing
end

end # module Dsrt
