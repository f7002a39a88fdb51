# Generated from include/dsrt.h by scripts/gen-bindings.sh (scripts/gen-julia-capi.py).
# Do not edit: change the header and regenerate. `make test` fails when this file differs
# from what the header generates. Included by LibDsrt.jl, which defines `libdsrt`.

const DSRT_VERSION_MAJOR = 0
const DSRT_VERSION_MINOR = 1
const DSRT_VERSION_PATCH = 0
const DSRT_VERSION_NUMBER = 100
const DSRT_VERSION_STRING = "0.1.0"
const DSRT_OK = 0
const DSRT_ERR_INVALID_ARGUMENT = 1
const DSRT_ERR_CONFIG = 2
const DSRT_ERR_STATE = 3
const DSRT_ERR_OUT_OF_MEMORY = 4
const DSRT_ERR_IO = 5
const DSRT_ERR_COMM = 6
const DSRT_ERR_DEVICE = 7
const DSRT_ERR_CHECKPOINT = 8
const DSRT_ERR_UNSUPPORTED = 9
const DSRT_ERR_INTERNAL = 10
const DSRT_LOG_ERROR = 0
const DSRT_LOG_WARN = 1
const DSRT_LOG_INFO = 2
const DSRT_LOG_DEBUG = 3
const DSRT_NUM_LOCATIONS = 3
# DSRT_STEP_RESULT_INIT: a C initializer, not generated (construct the struct in Julia)
# DSRT_MEMORY_STATS_INIT: a C initializer, not generated (construct the struct in Julia)
const DSRT_HOST_FORWARD = 0
const DSRT_HOST_BACKWARD = 1
const DSRT_DEVICE_DEFAULT = -1
dsrt_version_number() = ccall((:dsrt_version_number, libdsrt), Int32, ())
dsrt_version_string() = ccall((:dsrt_version_string, libdsrt), Ptr{Cchar}, ())
const dsrt_status = Int32
dsrt_status_string(status) = ccall((:dsrt_status_string, libdsrt), Ptr{Cchar}, (dsrt_status,), status)
dsrt_last_error_message() = ccall((:dsrt_last_error_message, libdsrt), Ptr{Cchar}, ())
dsrt_free(ptr) = ccall((:dsrt_free, libdsrt), Cvoid, (Ptr{Cvoid},), ptr)
dsrt_has_feature(name) = ccall((:dsrt_has_feature, libdsrt), Int32, (Cstring,), name)
const dsrt_log_fn = Ptr{Cvoid}
dsrt_set_log_callback(fn, user) = ccall((:dsrt_set_log_callback, libdsrt), Cvoid, (dsrt_log_fn, Ptr{Cvoid}), fn, user)
const dsrt_dtype = Cuint
const DSRT_F32 = dsrt_dtype(0)
const DSRT_F16 = dsrt_dtype(1)
const DSRT_BF16 = dsrt_dtype(2)
const dsrt_device_type = Cuint
const DSRT_DEVICE_CPU = dsrt_device_type(0)
const DSRT_DEVICE_CUDA = dsrt_device_type(1)
const dsrt_location = Cuint
const DSRT_LOC_DEVICE = dsrt_location(0)
const DSRT_LOC_HOST = dsrt_location(1)
const DSRT_LOC_NVME = dsrt_location(2)
mutable struct dsrt_config end  # opaque handle
mutable struct dsrt_comm end  # opaque handle
mutable struct dsrt_engine end  # opaque handle
mutable struct dsrt_tensor end  # opaque handle
mutable struct dsrt_checkpoint end  # opaque handle
dsrt_config_parse(json, out) = ccall((:dsrt_config_parse, libdsrt), dsrt_status, (Cstring, Ptr{Ptr{dsrt_config}}), json, out)
dsrt_config_load(path, out) = ccall((:dsrt_config_load, libdsrt), dsrt_status, (Cstring, Ptr{Ptr{dsrt_config}}), path, out)
dsrt_config_set_number(config, key_path, value) = ccall((:dsrt_config_set_number, libdsrt), dsrt_status, (Ptr{dsrt_config}, Cstring, Float64), config, key_path, value)
dsrt_config_set_string(config, key_path, value) = ccall((:dsrt_config_set_string, libdsrt), dsrt_status, (Ptr{dsrt_config}, Cstring, Cstring), config, key_path, value)
dsrt_config_set_bool(config, key_path, value) = ccall((:dsrt_config_set_bool, libdsrt), dsrt_status, (Ptr{dsrt_config}, Cstring, Cint), config, key_path, value)
dsrt_config_set_hidden_size(config, hidden_size) = ccall((:dsrt_config_set_hidden_size, libdsrt), dsrt_status, (Ptr{dsrt_config}, Int64), config, hidden_size)
dsrt_config_set_world_size(config, world_size) = ccall((:dsrt_config_set_world_size, libdsrt), dsrt_status, (Ptr{dsrt_config}, Int32), config, world_size)
dsrt_config_get_number(config, key_path, out) = ccall((:dsrt_config_get_number, libdsrt), dsrt_status, (Ptr{dsrt_config}, Cstring, Ptr{Float64}), config, key_path, out)
dsrt_config_get_string(config, key_path, out) = ccall((:dsrt_config_get_string, libdsrt), dsrt_status, (Ptr{dsrt_config}, Cstring, Ptr{Ptr{Cchar}}), config, key_path, out)
dsrt_config_to_json(config, out) = ccall((:dsrt_config_to_json, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{Ptr{Cchar}}), config, out)
dsrt_config_unresolved(config, out) = ccall((:dsrt_config_unresolved, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{Ptr{Cchar}}), config, out)
dsrt_config_warnings(config, out) = ccall((:dsrt_config_warnings, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{Ptr{Cchar}}), config, out)
dsrt_config_destroy(config) = ccall((:dsrt_config_destroy, libdsrt), Cvoid, (Ptr{dsrt_config},), config)
dsrt_comm_create_local(out) = ccall((:dsrt_comm_create_local, libdsrt), dsrt_status, (Ptr{Ptr{dsrt_comm}},), out)
dsrt_comm_create_from_env(out) = ccall((:dsrt_comm_create_from_env, libdsrt), dsrt_status, (Ptr{Ptr{dsrt_comm}},), out)
dsrt_nccl_unique_id(out128) = ccall((:dsrt_nccl_unique_id, libdsrt), dsrt_status, (Ptr{Cvoid},), out128)
dsrt_comm_create_nccl(id128, rank, world_size, device, out) = ccall((:dsrt_comm_create_nccl, libdsrt), dsrt_status, (Ptr{Cvoid}, Int32, Int32, Int32, Ptr{Ptr{dsrt_comm}}), id128, rank, world_size, device, out)
dsrt_comm_rank(comm) = ccall((:dsrt_comm_rank, libdsrt), Int32, (Ptr{dsrt_comm},), comm)
dsrt_comm_world_size(comm) = ccall((:dsrt_comm_world_size, libdsrt), Int32, (Ptr{dsrt_comm},), comm)
dsrt_comm_barrier(comm) = ccall((:dsrt_comm_barrier, libdsrt), dsrt_status, (Ptr{dsrt_comm},), comm)
dsrt_comm_destroy(comm) = ccall((:dsrt_comm_destroy, libdsrt), Cvoid, (Ptr{dsrt_comm},), comm)
dsrt_engine_create(config, comm, out) = ccall((:dsrt_engine_create, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{dsrt_comm}, Ptr{Ptr{dsrt_engine}}), config, comm, out)
dsrt_engine_add_param(engine, name, shape, ndim, init, out) = ccall((:dsrt_engine_add_param, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Cstring, Ptr{Int64}, Int32, Ptr{Float32}, Ptr{Ptr{dsrt_tensor}}), engine, name, shape, ndim, init, out)
dsrt_engine_add_frozen_param(engine, name, shape, ndim, init, out) = ccall((:dsrt_engine_add_frozen_param, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Cstring, Ptr{Int64}, Int32, Ptr{Float32}, Ptr{Ptr{dsrt_tensor}}), engine, name, shape, ndim, init, out)
dsrt_engine_build(engine) = ccall((:dsrt_engine_build, libdsrt), dsrt_status, (Ptr{dsrt_engine},), engine)
dsrt_engine_set_stream(engine, cuda_stream) = ccall((:dsrt_engine_set_stream, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Cvoid}), engine, cuda_stream)
dsrt_engine_device(engine, device_type, device_index) = ccall((:dsrt_engine_device, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Int32}, Ptr{Int32}), engine, device_type, device_index)
dsrt_tensor_acquire(tensor, data, dtype) = ccall((:dsrt_tensor_acquire, libdsrt), dsrt_status, (Ptr{dsrt_tensor}, Ptr{Ptr{Cvoid}}, Ptr{dsrt_dtype}), tensor, data, dtype)
dsrt_tensor_release(tensor) = ccall((:dsrt_tensor_release, libdsrt), dsrt_status, (Ptr{dsrt_tensor},), tensor)
dsrt_tensor_grad(tensor, grad, dtype) = ccall((:dsrt_tensor_grad, libdsrt), dsrt_status, (Ptr{dsrt_tensor}, Ptr{Ptr{Cvoid}}, Ptr{dsrt_dtype}), tensor, grad, dtype)
dsrt_tensor_grad_ready(tensor) = ccall((:dsrt_tensor_grad_ready, libdsrt), dsrt_status, (Ptr{dsrt_tensor},), tensor)
dsrt_engine_loss_scale(engine, out) = ccall((:dsrt_engine_loss_scale, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Float64}), engine, out)

struct dsrt_step_result
    struct_size::UInt64
    global_step::Int64
    boundary::Int32
    overflow::Int32
    grad_norm::Float64
    lr::Float64
    loss_scale::Float64
end
@assert(sizeof(dsrt_step_result) == 48 && [fieldoffset(dsrt_step_result, i) for i in 1:fieldcount(dsrt_step_result)] == [0, 8, 16, 20, 24, 32, 40],
        "dsrt_step_result: the C layout (size 48, offsets 0, 8, 16, 20, 24, 32, 40) differs on this platform")

dsrt_engine_step(engine, out) = ccall((:dsrt_engine_step, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{dsrt_step_result}), engine, out)
dsrt_engine_end_backward(engine) = ccall((:dsrt_engine_end_backward, libdsrt), dsrt_status, (Ptr{dsrt_engine},), engine)
dsrt_engine_global_step(engine, out) = ccall((:dsrt_engine_global_step, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Int64}), engine, out)
dsrt_engine_get_lr(engine, out) = ccall((:dsrt_engine_get_lr, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Float64}), engine, out)
dsrt_tensor_read_fp32(tensor, out, count) = ccall((:dsrt_tensor_read_fp32, libdsrt), dsrt_status, (Ptr{dsrt_tensor}, Ptr{Float32}, UInt64), tensor, out, count)
dsrt_tensor_write_fp32(tensor, src, count) = ccall((:dsrt_tensor_write_fp32, libdsrt), dsrt_status, (Ptr{dsrt_tensor}, Ptr{Float32}, UInt64), tensor, src, count)
dsrt_tensor_name(tensor) = ccall((:dsrt_tensor_name, libdsrt), Ptr{Cchar}, (Ptr{dsrt_tensor},), tensor)
dsrt_tensor_ndim(tensor) = ccall((:dsrt_tensor_ndim, libdsrt), Int32, (Ptr{dsrt_tensor},), tensor)
dsrt_tensor_shape(tensor, out) = ccall((:dsrt_tensor_shape, libdsrt), dsrt_status, (Ptr{dsrt_tensor}, Ptr{Int64}), tensor, out)
dsrt_tensor_numel(tensor) = ccall((:dsrt_tensor_numel, libdsrt), Int64, (Ptr{dsrt_tensor},), tensor)
dsrt_engine_num_tensors(engine) = ccall((:dsrt_engine_num_tensors, libdsrt), Int64, (Ptr{dsrt_engine},), engine)
dsrt_engine_tensor(engine, index) = ccall((:dsrt_engine_tensor, libdsrt), Ptr{dsrt_tensor}, (Ptr{dsrt_engine}, Int64), engine, index)

struct dsrt_memory_stats
    struct_size::UInt64
    working_params::NTuple{3,UInt64}
    gradients::NTuple{3,UInt64}
    master_params::NTuple{3,UInt64}
    optimizer_states::NTuple{3,UInt64}
    buffers::NTuple{3,UInt64}
end
@assert(sizeof(dsrt_memory_stats) == 128 && [fieldoffset(dsrt_memory_stats, i) for i in 1:fieldcount(dsrt_memory_stats)] == [0, 8, 32, 56, 80, 104],
        "dsrt_memory_stats: the C layout (size 128, offsets 0, 8, 32, 56, 80, 104) differs on this platform")

dsrt_engine_memory(engine, out) = ccall((:dsrt_engine_memory, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{dsrt_memory_stats}), engine, out)
dsrt_engine_report_loss(engine, loss) = ccall((:dsrt_engine_report_loss, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Float64), engine, loss)
dsrt_engine_report_host_time(engine, phase, seconds) = ccall((:dsrt_engine_report_host_time, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Int32, Float64), engine, phase, seconds)
dsrt_engine_events(engine, out) = ccall((:dsrt_engine_events, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Ptr{Cchar}}), engine, out)
dsrt_engine_add_group(engine, out) = ccall((:dsrt_engine_add_group, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Int32}), engine, out)
dsrt_engine_num_groups(engine) = ccall((:dsrt_engine_num_groups, libdsrt), Int32, (Ptr{dsrt_engine},), engine)
dsrt_tensor_set_group(tensor, group) = ccall((:dsrt_tensor_set_group, libdsrt), dsrt_status, (Ptr{dsrt_tensor}, Int32), tensor, group)
dsrt_tensor_group(tensor) = ccall((:dsrt_tensor_group, libdsrt), Int32, (Ptr{dsrt_tensor},), tensor)
dsrt_engine_set_group_hyper(engine, group, name, value) = ccall((:dsrt_engine_set_group_hyper, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Int32, Cstring, Float64), engine, group, name, value)
dsrt_engine_get_group_hyper(engine, group, name, out) = ccall((:dsrt_engine_get_group_hyper, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Int32, Cstring, Ptr{Float64}), engine, group, name, out)
dsrt_engine_group_lr(engine, group, out) = ccall((:dsrt_engine_group_lr, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Int32, Ptr{Float64}), engine, group, out)
dsrt_engine_set_accumulation_boundary(engine, is_boundary) = ccall((:dsrt_engine_set_accumulation_boundary, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Int32), engine, is_boundary)
dsrt_engine_set_scale_wrt_gas(engine, enabled) = ccall((:dsrt_engine_set_scale_wrt_gas, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Int32), engine, enabled)

struct dsrt_engine_options
    struct_size::UInt64
    device_type::Int32
    device_index::Int32
end
@assert(sizeof(dsrt_engine_options) == 16 && [fieldoffset(dsrt_engine_options, i) for i in 1:fieldcount(dsrt_engine_options)] == [0, 8, 12],
        "dsrt_engine_options: the C layout (size 16, offsets 0, 8, 12) differs on this platform")

dsrt_engine_create_with_options(config, comm, options, out) = ccall((:dsrt_engine_create_with_options, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{dsrt_comm}, Ptr{dsrt_engine_options}, Ptr{Ptr{dsrt_engine}}), config, comm, options, out)
dsrt_engine_set_client_state(engine, data, size) = ccall((:dsrt_engine_set_client_state, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Cvoid}, UInt64), engine, data, size)
dsrt_engine_client_state(engine, data, size) = ccall((:dsrt_engine_client_state, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Ptr{Ptr{Cvoid}}, Ptr{UInt64}), engine, data, size)
dsrt_engine_save_checkpoint(engine, dir, tag) = ccall((:dsrt_engine_save_checkpoint, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Cstring, Cstring), engine, dir, tag)
dsrt_engine_load_checkpoint(engine, dir, tag) = ccall((:dsrt_engine_load_checkpoint, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Cstring, Cstring), engine, dir, tag)
dsrt_engine_save_16bit_model(engine, path) = ccall((:dsrt_engine_save_16bit_model, libdsrt), dsrt_status, (Ptr{dsrt_engine}, Cstring), engine, path)
dsrt_checkpoint_open(dir, tag, out) = ccall((:dsrt_checkpoint_open, libdsrt), dsrt_status, (Cstring, Cstring, Ptr{Ptr{dsrt_checkpoint}}), dir, tag, out)
dsrt_checkpoint_num_tensors(ckpt) = ccall((:dsrt_checkpoint_num_tensors, libdsrt), Int64, (Ptr{dsrt_checkpoint},), ckpt)
dsrt_checkpoint_tensor_name(ckpt, index) = ccall((:dsrt_checkpoint_tensor_name, libdsrt), Ptr{Cchar}, (Ptr{dsrt_checkpoint}, Int64), ckpt, index)
dsrt_checkpoint_tensor_shape(ckpt, name, shape, ndim) = ccall((:dsrt_checkpoint_tensor_shape, libdsrt), dsrt_status, (Ptr{dsrt_checkpoint}, Cstring, Ptr{Int64}, Ptr{Int32}), ckpt, name, shape, ndim)
dsrt_checkpoint_read_tensor_fp32(ckpt, name, out, count) = ccall((:dsrt_checkpoint_read_tensor_fp32, libdsrt), dsrt_status, (Ptr{dsrt_checkpoint}, Cstring, Ptr{Float32}, UInt64), ckpt, name, out, count)
dsrt_checkpoint_export_safetensors(ckpt, path, dtype) = ccall((:dsrt_checkpoint_export_safetensors, libdsrt), dsrt_status, (Ptr{dsrt_checkpoint}, Cstring, dsrt_dtype), ckpt, path, dtype)
dsrt_checkpoint_close(ckpt) = ccall((:dsrt_checkpoint_close, libdsrt), Cvoid, (Ptr{dsrt_checkpoint},), ckpt)
dsrt_config_check(config, world_size) = ccall((:dsrt_config_check, libdsrt), dsrt_status, (Ptr{dsrt_config}, Int32), config, world_size)
dsrt_config_unsupported(config, out) = ccall((:dsrt_config_unsupported, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{Ptr{Cchar}}), config, out)
dsrt_config_resolve_hint(config, key_path, out) = ccall((:dsrt_config_resolve_hint, libdsrt), dsrt_status, (Ptr{dsrt_config}, Cstring, Ptr{Ptr{Cchar}}), config, key_path, out)
dsrt_config_to_deepspeed_json(config, json, dsrt_only) = ccall((:dsrt_config_to_deepspeed_json, libdsrt), dsrt_status, (Ptr{dsrt_config}, Ptr{Ptr{Cchar}}, Ptr{Ptr{Cchar}}), config, json, dsrt_only)
dsrt_engine_destroy(engine) = ccall((:dsrt_engine_destroy, libdsrt), Cvoid, (Ptr{dsrt_engine},), engine)
