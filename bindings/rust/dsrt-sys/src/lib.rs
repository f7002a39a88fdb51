//! Raw declarations of libdsrt's C interface. They are generated from `include/dsrt.h` (the
//! authoritative description; read it for every function's contract) by Debian's `bindgen`:
//! `scripts/gen-bindings.sh` writes `src/bindings.rs`, which is committed so building this crate
//! needs no bindgen, and `make test` fails when it differs from what the header generates. Use the
//! `dsrt` crate for a safe API.
//!
//! Spellings follow bindgen: `#define` constants are `i32` (`DSRT_VERSION_STRING` is the
//! NUL-terminated bytes), enum types are `c_uint` aliases with their constants, handles are
//! opaque structs used only behind pointers.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

include!("bindings.rs");

// Defaults as the header gives them: struct_size set to the struct's size and every other field
// zero (DSRT_STEP_RESULT_INIT, DSRT_MEMORY_STATS_INIT), the options' automatic device. bindgen
// does not translate C initializers, so these are written here.
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

impl Default for dsrt_memory_stats {
    fn default() -> Self {
        const N: usize = DSRT_NUM_LOCATIONS as usize;
        dsrt_memory_stats {
            struct_size: std::mem::size_of::<dsrt_memory_stats>() as u64,
            working_params: [0; N],
            gradients: [0; N],
            master_params: [0; N],
            optimizer_states: [0; N],
            buffers: [0; N],
        }
    }
}
