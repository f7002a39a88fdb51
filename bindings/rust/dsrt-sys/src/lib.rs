//! Raw declarations of libdsrt's C interface, written by hand from `include/dsrt.h` (the
//! authoritative description; read it for every function's contract). `tests/header_matches.rs`
//! parses the header and fails if any function, argument type, constant or struct field here
//! drifts from it. Use the `dsrt` crate for a safe API.
#![allow(non_camel_case_types)]
use std::marker::{PhantomData, PhantomPinned};
use std::os::raw::{c_char, c_int, c_void};

// --- version --------------------------------------------------------------------------------
pub const DSRT_VERSION_MAJOR: i32 = 0;
pub const DSRT_VERSION_MINOR: i32 = 1;
pub const DSRT_VERSION_PATCH: i32 = 0;
pub const DSRT_VERSION_NUMBER: i32 = DSRT_VERSION_MAJOR * 10000 + DSRT_VERSION_MINOR * 100 + DSRT_VERSION_PATCH;
pub const DSRT_VERSION_STRING: &str = "0.1.0";

// --- status codes (fixed forever, new ones appended) ------------------------------------------
pub type dsrt_status = i32;
pub const DSRT_OK: dsrt_status = 0;
pub const DSRT_ERR_INVALID_ARGUMENT: dsrt_status = 1;
pub const DSRT_ERR_CONFIG: dsrt_status = 2;
pub const DSRT_ERR_STATE: dsrt_status = 3;
pub const DSRT_ERR_OUT_OF_MEMORY: dsrt_status = 4;
pub const DSRT_ERR_IO: dsrt_status = 5;
pub const DSRT_ERR_COMM: dsrt_status = 6;
pub const DSRT_ERR_DEVICE: dsrt_status = 7;
pub const DSRT_ERR_CHECKPOINT: dsrt_status = 8;
pub const DSRT_ERR_UNSUPPORTED: dsrt_status = 9;
pub const DSRT_ERR_INTERNAL: dsrt_status = 10;

// --- logging --------------------------------------------------------------------------------
pub const DSRT_LOG_ERROR: i32 = 0;
pub const DSRT_LOG_WARN: i32 = 1;
pub const DSRT_LOG_INFO: i32 = 2;
pub const DSRT_LOG_DEBUG: i32 = 3;
pub type dsrt_log_fn = Option<unsafe extern "C" fn(level: i32, msg: *const c_char, user: *mut c_void)>;

// --- monitors -------------------------------------------------------------------------------
pub const DSRT_HOST_FORWARD: i32 = 0;
pub const DSRT_HOST_BACKWARD: i32 = 1;

// --- enums (C enums are 32-bit ints; kept as integers so an unknown value is never UB) --------
pub type dsrt_dtype = u32;
pub const DSRT_F32: dsrt_dtype = 0;
pub const DSRT_F16: dsrt_dtype = 1;
pub const DSRT_BF16: dsrt_dtype = 2;

pub type dsrt_device_type = u32;
pub const DSRT_DEVICE_CPU: dsrt_device_type = 0;
pub const DSRT_DEVICE_CUDA: dsrt_device_type = 1;

pub type dsrt_location = u32;
pub const DSRT_LOC_DEVICE: dsrt_location = 0;
pub const DSRT_LOC_HOST: dsrt_location = 1;
pub const DSRT_LOC_NVME: dsrt_location = 2;
pub const DSRT_NUM_LOCATIONS: usize = 3;

// --- opaque handles -------------------------------------------------------------------------
macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    )*};
}
opaque!(dsrt_config, dsrt_comm, dsrt_engine, dsrt_tensor, dsrt_checkpoint);

// --- structs (struct_size first, append-only) -----------------------------------------------
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dsrt_step_result {
    pub struct_size: u64,
    pub global_step: i64,
    pub boundary: i32,
    pub overflow: i32,
    pub grad_norm: f64,
    pub lr: f64,
    pub loss_scale: f64,
}

/// Engine options (dsrt_engine_create_with_options).
pub const DSRT_DEVICE_DEFAULT: i32 = -1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct dsrt_engine_options {
    pub struct_size: u64,
    pub device_type: i32,
    pub device_index: i32,
}

impl Default for dsrt_engine_options {
    fn default() -> Self {
        dsrt_engine_options {
            struct_size: std::mem::size_of::<dsrt_engine_options>() as u64,
            device_type: DSRT_DEVICE_DEFAULT,
            device_index: -1,
        }
    }
}

impl Default for dsrt_step_result {
    fn default() -> Self {
        dsrt_step_result {
            struct_size: std::mem::size_of::<dsrt_step_result>() as u64,
            global_step: 0,
            boundary: 0,
            overflow: 0,
            grad_norm: 0.0,
            lr: 0.0,
            loss_scale: 0.0,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct dsrt_memory_stats {
    pub struct_size: u64,
    pub working_params: [u64; DSRT_NUM_LOCATIONS],
    pub gradients: [u64; DSRT_NUM_LOCATIONS],
    pub master_params: [u64; DSRT_NUM_LOCATIONS],
    pub optimizer_states: [u64; DSRT_NUM_LOCATIONS],
    pub buffers: [u64; DSRT_NUM_LOCATIONS],
}

impl Default for dsrt_memory_stats {
    fn default() -> Self {
        dsrt_memory_stats {
            struct_size: std::mem::size_of::<dsrt_memory_stats>() as u64,
            working_params: [0; DSRT_NUM_LOCATIONS],
            gradients: [0; DSRT_NUM_LOCATIONS],
            master_params: [0; DSRT_NUM_LOCATIONS],
            optimizer_states: [0; DSRT_NUM_LOCATIONS],
            buffers: [0; DSRT_NUM_LOCATIONS],
        }
    }
}

// --- functions, in header order ---------------------------------------------------------------
extern "C" {
    pub fn dsrt_version_number() -> i32;
    pub fn dsrt_version_string() -> *const c_char;

    pub fn dsrt_status_string(status: dsrt_status) -> *const c_char;
    pub fn dsrt_last_error_message() -> *const c_char;
    pub fn dsrt_free(ptr: *mut c_void);
    pub fn dsrt_has_feature(name: *const c_char) -> i32;

    pub fn dsrt_set_log_callback(fn_: dsrt_log_fn, user: *mut c_void);

    pub fn dsrt_config_parse(json: *const c_char, out: *mut *mut dsrt_config) -> dsrt_status;
    pub fn dsrt_config_load(path: *const c_char, out: *mut *mut dsrt_config) -> dsrt_status;
    pub fn dsrt_config_set_number(config: *mut dsrt_config, key_path: *const c_char, value: f64) -> dsrt_status;
    pub fn dsrt_config_set_string(config: *mut dsrt_config, key_path: *const c_char, value: *const c_char) -> dsrt_status;
    pub fn dsrt_config_set_bool(config: *mut dsrt_config, key_path: *const c_char, value: c_int) -> dsrt_status;
    pub fn dsrt_config_set_hidden_size(config: *mut dsrt_config, hidden_size: i64) -> dsrt_status;
    pub fn dsrt_config_set_world_size(config: *mut dsrt_config, world_size: i32) -> dsrt_status;
    pub fn dsrt_config_get_number(config: *const dsrt_config, key_path: *const c_char, out: *mut f64) -> dsrt_status;
    pub fn dsrt_config_get_string(config: *const dsrt_config, key_path: *const c_char, out: *mut *mut c_char) -> dsrt_status;
    pub fn dsrt_config_to_json(config: *const dsrt_config, out: *mut *mut c_char) -> dsrt_status;
    pub fn dsrt_config_unresolved(config: *const dsrt_config, out: *mut *mut c_char) -> dsrt_status;
    pub fn dsrt_config_warnings(config: *const dsrt_config, out: *mut *mut c_char) -> dsrt_status;
    pub fn dsrt_config_destroy(config: *mut dsrt_config);

    pub fn dsrt_comm_create_local(out: *mut *mut dsrt_comm) -> dsrt_status;
    pub fn dsrt_comm_create_from_env(out: *mut *mut dsrt_comm) -> dsrt_status;
    pub fn dsrt_nccl_unique_id(out128: *mut c_void) -> dsrt_status;
    pub fn dsrt_comm_create_nccl(id128: *const c_void, rank: i32, world_size: i32, device: i32,
                                 out: *mut *mut dsrt_comm) -> dsrt_status;
    pub fn dsrt_comm_rank(comm: *const dsrt_comm) -> i32;
    pub fn dsrt_comm_world_size(comm: *const dsrt_comm) -> i32;
    pub fn dsrt_comm_barrier(comm: *mut dsrt_comm) -> dsrt_status;
    pub fn dsrt_comm_destroy(comm: *mut dsrt_comm);

    pub fn dsrt_engine_create(config: *const dsrt_config, comm: *mut dsrt_comm, out: *mut *mut dsrt_engine) -> dsrt_status;
    pub fn dsrt_engine_add_param(engine: *mut dsrt_engine, name: *const c_char, shape: *const i64, ndim: i32,
                                 init: *const f32, out: *mut *mut dsrt_tensor) -> dsrt_status;
    pub fn dsrt_engine_add_frozen_param(engine: *mut dsrt_engine, name: *const c_char, shape: *const i64, ndim: i32,
                                        init: *const f32, out: *mut *mut dsrt_tensor) -> dsrt_status;
    pub fn dsrt_engine_build(engine: *mut dsrt_engine) -> dsrt_status;
    pub fn dsrt_engine_set_stream(engine: *mut dsrt_engine, cuda_stream: *mut c_void) -> dsrt_status;
    pub fn dsrt_engine_device(engine: *const dsrt_engine, device_type: *mut i32, device_index: *mut i32) -> dsrt_status;
    pub fn dsrt_tensor_acquire(tensor: *mut dsrt_tensor, data: *mut *mut c_void, dtype: *mut dsrt_dtype) -> dsrt_status;
    pub fn dsrt_tensor_release(tensor: *mut dsrt_tensor) -> dsrt_status;
    pub fn dsrt_tensor_grad(tensor: *mut dsrt_tensor, grad: *mut *mut c_void, dtype: *mut dsrt_dtype) -> dsrt_status;
    pub fn dsrt_tensor_grad_ready(tensor: *mut dsrt_tensor) -> dsrt_status;
    pub fn dsrt_engine_loss_scale(engine: *const dsrt_engine, out: *mut f64) -> dsrt_status;
    pub fn dsrt_engine_step(engine: *mut dsrt_engine, out: *mut dsrt_step_result) -> dsrt_status;
    pub fn dsrt_engine_global_step(engine: *const dsrt_engine, out: *mut i64) -> dsrt_status;
    pub fn dsrt_engine_get_lr(engine: *const dsrt_engine, out: *mut f64) -> dsrt_status;
    pub fn dsrt_tensor_read_fp32(tensor: *mut dsrt_tensor, out: *mut f32, count: u64) -> dsrt_status;
    pub fn dsrt_tensor_write_fp32(tensor: *mut dsrt_tensor, src: *const f32, count: u64) -> dsrt_status;
    pub fn dsrt_tensor_name(tensor: *const dsrt_tensor) -> *const c_char;
    pub fn dsrt_tensor_ndim(tensor: *const dsrt_tensor) -> i32;
    pub fn dsrt_tensor_shape(tensor: *const dsrt_tensor, out: *mut i64) -> dsrt_status;
    pub fn dsrt_tensor_numel(tensor: *const dsrt_tensor) -> i64;
    pub fn dsrt_engine_num_tensors(engine: *const dsrt_engine) -> i64;
    pub fn dsrt_engine_tensor(engine: *mut dsrt_engine, index: i64) -> *mut dsrt_tensor;
    pub fn dsrt_engine_memory(engine: *const dsrt_engine, out: *mut dsrt_memory_stats) -> dsrt_status;
    pub fn dsrt_engine_report_loss(engine: *mut dsrt_engine, loss: f64) -> dsrt_status;
    pub fn dsrt_engine_report_host_time(engine: *mut dsrt_engine, phase: i32, seconds: f64) -> dsrt_status;
    pub fn dsrt_engine_events(engine: *const dsrt_engine, out: *mut *mut c_char) -> dsrt_status;

    pub fn dsrt_engine_set_client_state(engine: *mut dsrt_engine, data: *const c_void, size: u64) -> dsrt_status;
    pub fn dsrt_engine_client_state(engine: *const dsrt_engine, data: *mut *const c_void, size: *mut u64) -> dsrt_status;
    pub fn dsrt_engine_save_checkpoint(engine: *mut dsrt_engine, dir: *const c_char, tag: *const c_char) -> dsrt_status;
    pub fn dsrt_engine_load_checkpoint(engine: *mut dsrt_engine, dir: *const c_char, tag: *const c_char) -> dsrt_status;
    pub fn dsrt_engine_save_16bit_model(engine: *mut dsrt_engine, path: *const c_char) -> dsrt_status;
    pub fn dsrt_checkpoint_open(dir: *const c_char, tag: *const c_char, out: *mut *mut dsrt_checkpoint) -> dsrt_status;
    pub fn dsrt_checkpoint_num_tensors(ckpt: *const dsrt_checkpoint) -> i64;
    pub fn dsrt_checkpoint_tensor_name(ckpt: *const dsrt_checkpoint, index: i64) -> *const c_char;
    pub fn dsrt_checkpoint_tensor_shape(ckpt: *const dsrt_checkpoint, name: *const c_char, shape: *mut i64,
                                        ndim: *mut i32) -> dsrt_status;
    pub fn dsrt_checkpoint_read_tensor_fp32(ckpt: *mut dsrt_checkpoint, name: *const c_char, out: *mut f32,
                                            count: u64) -> dsrt_status;
    pub fn dsrt_checkpoint_export_safetensors(ckpt: *mut dsrt_checkpoint, path: *const c_char,
                                              dtype: dsrt_dtype) -> dsrt_status;
    pub fn dsrt_checkpoint_close(ckpt: *mut dsrt_checkpoint);

    pub fn dsrt_config_check(config: *const dsrt_config, world_size: i32) -> dsrt_status;
    pub fn dsrt_config_unsupported(config: *const dsrt_config, out: *mut *mut c_char) -> dsrt_status;
    pub fn dsrt_config_resolve_hint(config: *const dsrt_config, key_path: *const c_char,
                                    out: *mut *mut c_char) -> dsrt_status;
    pub fn dsrt_config_to_deepspeed_json(config: *const dsrt_config, json: *mut *mut c_char,
                                         dsrt_only: *mut *mut c_char) -> dsrt_status;

    pub fn dsrt_engine_destroy(engine: *mut dsrt_engine);

    pub fn dsrt_engine_create_with_options(config: *const dsrt_config, comm: *mut dsrt_comm,
                                           options: *const dsrt_engine_options,
                                           out: *mut *mut dsrt_engine) -> dsrt_status;
    pub fn dsrt_engine_add_group(engine: *mut dsrt_engine, out: *mut i32) -> dsrt_status;
    pub fn dsrt_engine_num_groups(engine: *const dsrt_engine) -> i32;
    pub fn dsrt_tensor_set_group(tensor: *mut dsrt_tensor, group: i32) -> dsrt_status;
    pub fn dsrt_tensor_group(tensor: *const dsrt_tensor) -> i32;
    pub fn dsrt_engine_set_group_hyper(engine: *mut dsrt_engine, group: i32, name: *const c_char,
                                       value: f64) -> dsrt_status;
    pub fn dsrt_engine_get_group_hyper(engine: *const dsrt_engine, group: i32, name: *const c_char,
                                       out: *mut f64) -> dsrt_status;
    pub fn dsrt_engine_group_lr(engine: *const dsrt_engine, group: i32, out: *mut f64) -> dsrt_status;
    pub fn dsrt_engine_set_accumulation_boundary(engine: *mut dsrt_engine, is_boundary: i32) -> dsrt_status;
    pub fn dsrt_engine_set_scale_wrt_gas(engine: *mut dsrt_engine, enabled: i32) -> dsrt_status;
}
