//! The engine: owns the model states of a training run.
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::raw::c_void;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::comm::Comm;
use crate::config::Config;
use crate::error::{check, Error, Result};
use crate::strings::{c_path, c_string};
use crate::tensor::Tensor;
use dsrt_sys as sys;

/// Where working copies and gradient buffers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    Cpu,
    Cuda,
    Other(i32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub kind: DeviceType,
    pub index: i32,
}

/// What one call of [`Engine::step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepResult {
    /// Optimizer steps so far, skipped ones included (DeepSpeed's global_steps).
    pub global_step: i64,
    /// This call was an accumulation boundary (the optimizer ran or was skipped).
    pub boundary: bool,
    /// The step was skipped because of inf/nan gradients.
    pub overflow: bool,
    /// Global L2 norm of the unscaled, averaged gradients, before clipping.
    pub grad_norm: f64,
    /// The learning rate this step used.
    pub lr: f64,
    /// The loss scale in force after this step.
    pub loss_scale: f64,
}

/// Bytes this rank holds for each state, indexed by [`Location`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    pub working_params: [u64; 3],
    pub gradients: [u64; 3],
    pub master_params: [u64; 3],
    pub optimizer_states: [u64; 3],
    pub buffers: [u64; 3],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Device = 0,
    Host = 1,
    Nvme = 2,
}

impl MemoryStats {
    /// All states at one location.
    pub fn total(&self, at: Location) -> u64 {
        let i = at as usize;
        self.working_params[i] + self.gradients[i] + self.master_params[i] + self.optimizer_states[i] + self.buffers[i]
    }
}

/// Which host-memory views of tensors are open, so that no call that rewrites those buffers
/// (step, load, write) runs while a Rust slice points into them.
#[derive(Default)]
pub(crate) struct Views {
    data: HashMap<usize, usize>,
    grads: HashSet<usize>,
}

impl Views {
    fn open(&self) -> usize {
        self.data.values().sum::<usize>() + self.grads.len()
    }
}

/// A dsrt engine. `Send` (it may move to another thread) but not `Sync`: the C rules allow one
/// thread at a time per engine. Tensors borrow the engine, so it cannot be dropped while one is in use.
pub struct Engine {
    raw: NonNull<sys::dsrt_engine>,
    pub(crate) views: RefCell<Views>,
}

unsafe impl Send for Engine {}

impl Engine {
    /// Creates an engine from a config (copied) and a communicator (None: a world of one). The
    /// engine keeps its own reference to the communicator.
    pub fn new(config: &Config, comm: Option<&Comm>) -> Result<Engine> {
        let mut out = ptr::null_mut();
        let comm_ptr = comm.map_or(ptr::null_mut(), Comm::as_ptr);
        check(unsafe { sys::dsrt_engine_create(config.as_ptr(), comm_ptr, &mut out) }, "dsrt_engine_create")?;
        Ok(Engine { raw: NonNull::new(out).expect("dsrt_engine_create returned OK and NULL"), views: Default::default() })
    }

    /// An engine on the device the host names, whatever DSRT_DEVICE says: `Device { kind:
    /// DeviceType::Cpu, .. }`, or `DeviceType::Cuda` with a CUDA ordinal (-1: local rank % GPUs).
    pub fn new_on(config: &Config, comm: Option<&Comm>, device: Device) -> Result<Engine> {
        const F: &str = "dsrt_engine_create_with_options";
        let mut options = sys::dsrt_engine_options::default();
        match device.kind {
            DeviceType::Cpu => options.device_type = sys::DSRT_DEVICE_CPU as i32,
            DeviceType::Cuda => {
                options.device_type = sys::DSRT_DEVICE_CUDA as i32;
                options.device_index = device.index;
            }
            DeviceType::Other(kind) => options.device_type = kind,
        }
        let mut out = ptr::null_mut();
        let comm_ptr = comm.map_or(ptr::null_mut(), Comm::as_ptr);
        check(unsafe { sys::dsrt_engine_create_with_options(config.as_ptr(), comm_ptr, &options, &mut out) }, F)?;
        Ok(Engine { raw: NonNull::new(out).expect("dsrt_engine_create_with_options returned OK and NULL"),
                    views: Default::default() })
    }

    /// Registers a parameter: `init` is the full fp32 value (row-major, identical on every rank),
    /// or None for zeros.
    pub fn add_param(&self, name: &str, shape: &[i64], init: Option<&[f32]>) -> Result<Tensor<'_>> {
        self.register(name, shape, init, false)
    }

    /// Registers a frozen parameter (dsrt_engine_add_frozen_param): a working copy only, with no
    /// gradient, fp32 master or optimizer state; partitioned at ZeRO-3 and gathered by acquire.
    /// Its `grad` and `grad_ready` return `DSRT_ERR_STATE`.
    pub fn add_frozen_param(&self, name: &str, shape: &[i64], init: Option<&[f32]>) -> Result<Tensor<'_>> {
        self.register(name, shape, init, true)
    }

    fn register(&self, name: &str, shape: &[i64], init: Option<&[f32]>, frozen: bool) -> Result<Tensor<'_>> {
        let what: &str = if frozen { "dsrt_engine_add_frozen_param" } else { "dsrt_engine_add_param" };
        let n = c_string(name, what)?;
        if let Some(init) = init {
            let numel: i64 = shape.iter().product();
            if shape.iter().any(|&d| d <= 0) || init.len() as i64 != numel {
                return Err(Error::new(sys::DSRT_ERR_INVALID_ARGUMENT, what,
                    format!("'{name}': init has {} values but shape {shape:?} has {numel}", init.len())));
            }
        }
        let mut out = ptr::null_mut();
        let init_ptr = init.map_or(ptr::null(), <[f32]>::as_ptr);
        let add = if frozen { sys::dsrt_engine_add_frozen_param } else { sys::dsrt_engine_add_param };
        check(unsafe { add(self.raw.as_ptr(), n.as_ptr(), shape.as_ptr(), shape.len() as i32, init_ptr, &mut out) }, what)?;
        Ok(Tensor::new(NonNull::new(out).expect("dsrt_engine_add_param returned OK and NULL"), self))
    }

    /// After the last add_param: partitions, allocates and places every state.
    pub fn build(&self) -> Result<()> {
        check(unsafe { sys::dsrt_engine_build(self.raw.as_ptr()) }, "dsrt_engine_build")
    }

    /// The CUDA stream (a cudaStream_t) the host computes on. Call before build.
    ///
    /// # Safety
    /// `stream` must be a valid CUDA stream that outlives the engine (or null).
    pub unsafe fn set_stream(&self, stream: *mut c_void) -> Result<()> {
        check(sys::dsrt_engine_set_stream(self.raw.as_ptr(), stream), "dsrt_engine_set_stream")
    }

    pub fn device(&self) -> Result<Device> {
        let (mut kind, mut index) = (0i32, 0i32);
        check(unsafe { sys::dsrt_engine_device(self.raw.as_ptr(), &mut kind, &mut index) }, "dsrt_engine_device")?;
        let kind = match kind as u32 {
            sys::DSRT_DEVICE_CPU => DeviceType::Cpu,
            sys::DSRT_DEVICE_CUDA => DeviceType::Cuda,
            _ => DeviceType::Other(kind),
        };
        Ok(Device { kind, index })
    }

    /// The factor the host multiplies its loss by before backward (1.0 without fp16).
    pub fn loss_scale(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::dsrt_engine_loss_scale(self.raw.as_ptr(), &mut v) }, "dsrt_engine_loss_scale")?;
        Ok(v)
    }

    fn require_no_views(&self, function: &'static str) -> Result<()> {
        let open = self.views.borrow().open();
        if open > 0 {
            return Err(Error::new(sys::DSRT_ERR_STATE, function,
                format!("{open} tensor view(s) (acquire/grad) are still open; drop them first, since this call \
                         rewrites the buffers they point into")));
        }
        Ok(())
    }

    /// Called after every micro-step (like DeepSpeed's engine.step()); the optimizer runs at the
    /// accumulation boundary. Fails with `State` while tensor views are open.
    pub fn step(&self) -> Result<StepResult> {
        self.require_no_views("dsrt_engine_step")?;
        let mut r = sys::dsrt_step_result::default();
        check(unsafe { sys::dsrt_engine_step(self.raw.as_ptr(), &mut r) }, "dsrt_engine_step")?;
        Ok(StepResult {
            global_step: r.global_step,
            boundary: r.boundary != 0,
            overflow: r.overflow != 0,
            grad_norm: r.grad_norm,
            lr: r.lr,
            loss_scale: r.loss_scale,
        })
    }

    /// The host's backward of this micro-step is complete: dsrt reduces the micro-step's
    /// gradients now (what `step()` would otherwise do first), so `step()` only runs the boundary.
    /// Optional, collective, a no-op when repeated before the next gradient; a later `grad`
    /// begins a new micro-step of the same window. Fails with `State` while tensor views are open
    /// (the gradient buffers they point into go back to dsrt).
    pub fn end_backward(&self) -> Result<()> {
        self.require_no_views("dsrt_engine_end_backward")?;
        check(unsafe { sys::dsrt_engine_end_backward(self.raw.as_ptr()) }, "dsrt_engine_end_backward")
    }

    pub fn global_step(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::dsrt_engine_global_step(self.raw.as_ptr(), &mut v) }, "dsrt_engine_global_step")?;
        Ok(v)
    }

    pub fn lr(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::dsrt_engine_get_lr(self.raw.as_ptr(), &mut v) }, "dsrt_engine_get_lr")?;
        Ok(v)
    }

    /// Add a parameter group (before build); its values start as the config's optimizer
    /// section. Returns its index (1, 2, ...).
    pub fn add_group(&self) -> Result<i32> {
        let mut g = 0i32;
        check(unsafe { sys::dsrt_engine_add_group(self.raw.as_ptr(), &mut g) }, "dsrt_engine_add_group")?;
        Ok(g)
    }

    /// 1 + the groups added.
    pub fn num_groups(&self) -> usize {
        unsafe { sys::dsrt_engine_num_groups(self.raw.as_ptr()) }.max(0) as usize
    }

    /// Set one hyperparameter of a group ("lr", "weight_decay", "beta1", "beta2", "eps",
    /// "momentum", "dampening", "nesterov", "max_coeff", "min_coeff"): before build or between
    /// accumulation windows. The value is used from the next boundary step on.
    pub fn set_group_hyper(&self, group: i32, name: &str, value: f64) -> Result<()> {
        let name = c_string(name, "dsrt_engine_set_group_hyper")?;
        check(unsafe { sys::dsrt_engine_set_group_hyper(self.raw.as_ptr(), group, name.as_ptr(), value) },
              "dsrt_engine_set_group_hyper")
    }

    /// The value of a group's hyperparameter in force for the next boundary step.
    pub fn group_hyper(&self, group: i32, name: &str) -> Result<f64> {
        let name = c_string(name, "dsrt_engine_get_group_hyper")?;
        let mut v = 0.0;
        check(unsafe { sys::dsrt_engine_get_group_hyper(self.raw.as_ptr(), group, name.as_ptr(), &mut v) },
              "dsrt_engine_get_group_hyper")?;
        Ok(v)
    }

    /// The lr the group used at the last boundary step (before the first: the one it will use).
    pub fn group_lr(&self, group: i32) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::dsrt_engine_group_lr(self.raw.as_ptr(), group, &mut v) }, "dsrt_engine_group_lr")?;
        Ok(v)
    }

    /// `Some(true)`: the micro-step the next `step()` ends closes the accumulation window;
    /// `Some(false)`: it does not (until changed); `None`: count gradient_accumulation_steps.
    pub fn set_gradient_accumulation_boundary(&self, is_boundary: Option<bool>) -> Result<()> {
        let mode = match is_boundary { None => -1, Some(true) => 1, Some(false) => 0 };
        check(unsafe { sys::dsrt_engine_set_accumulation_boundary(self.raw.as_ptr(), mode) },
              "dsrt_engine_set_accumulation_boundary")
    }

    /// `false`: do not divide the accumulated gradient by gradient_accumulation_steps (the host
    /// scaled its loss). Changed only between windows.
    pub fn set_scale_wrt_gas(&self, enabled: bool) -> Result<()> {
        check(unsafe { sys::dsrt_engine_set_scale_wrt_gas(self.raw.as_ptr(), enabled as i32) },
              "dsrt_engine_set_scale_wrt_gas")
    }

    pub fn num_tensors(&self) -> usize {
        unsafe { sys::dsrt_engine_num_tensors(self.raw.as_ptr()) }.max(0) as usize
    }

    /// The i-th registered tensor (registration order).
    pub fn tensor(&self, index: usize) -> Option<Tensor<'_>> {
        NonNull::new(unsafe { sys::dsrt_engine_tensor(self.raw.as_ptr(), index as i64) }).map(|t| Tensor::new(t, self))
    }

    pub fn tensors(&self) -> Vec<Tensor<'_>> {
        (0..self.num_tensors()).filter_map(|i| self.tensor(i)).collect()
    }

    /// Bytes this rank holds per state and location.
    pub fn memory(&self) -> Result<MemoryStats> {
        let mut m = sys::dsrt_memory_stats::default();
        check(unsafe { sys::dsrt_engine_memory(self.raw.as_ptr(), &mut m) }, "dsrt_engine_memory")?;
        Ok(MemoryStats {
            working_params: m.working_params,
            gradients: m.gradients,
            master_params: m.master_params,
            optimizer_states: m.optimizer_states,
            buffers: m.buffers,
        })
    }

    /// Bytes stored with the next checkpoint (like DeepSpeed's client_state).
    pub fn set_client_state(&self, data: &[u8]) -> Result<()> {
        check(unsafe { sys::dsrt_engine_set_client_state(self.raw.as_ptr(), data.as_ptr().cast(), data.len() as u64) },
              "dsrt_engine_set_client_state")
    }

    /// The client state restored by the last load (or set last); empty when none.
    pub fn client_state(&self) -> Result<Vec<u8>> {
        let (mut data, mut size) = (ptr::null(), 0u64);
        check(unsafe { sys::dsrt_engine_client_state(self.raw.as_ptr(), &mut data, &mut size) }, "dsrt_engine_client_state")?;
        if data.is_null() || size == 0 {
            return Ok(Vec::new());
        }
        Ok(unsafe { std::slice::from_raw_parts(data as *const u8, size as usize) }.to_vec())
    }

    /// Saves a checkpoint (collective). `tag` None gives "global_step<N>".
    pub fn save_checkpoint(&self, dir: impl AsRef<Path>, tag: Option<&str>) -> Result<()> {
        const F: &str = "dsrt_engine_save_checkpoint";
        let d = c_path(dir.as_ref(), F)?;
        let t = tag.map(|t| c_string(t, F)).transpose()?;
        check(unsafe { sys::dsrt_engine_save_checkpoint(self.raw.as_ptr(), d.as_ptr(), t.as_ref().map_or(ptr::null(), |t| t.as_ptr())) }, F)
    }

    /// Loads a checkpoint (collective) into this built engine. `tag` None reads dir/latest.
    pub fn load_checkpoint(&self, dir: impl AsRef<Path>, tag: Option<&str>) -> Result<()> {
        const F: &str = "dsrt_engine_load_checkpoint";
        self.require_no_views(F)?;
        let d = c_path(dir.as_ref(), F)?;
        let t = tag.map(|t| c_string(t, F)).transpose()?;
        check(unsafe { sys::dsrt_engine_load_checkpoint(self.raw.as_ptr(), d.as_ptr(), t.as_ref().map_or(ptr::null(), |t| t.as_ptr())) }, F)
    }

    /// Writes the gathered 16-bit weights as one safetensors file (collective; rank 0 writes).
    pub fn save_16bit_model(&self, path: impl AsRef<Path>) -> Result<()> {
        const F: &str = "dsrt_engine_save_16bit_model";
        let p = c_path(path.as_ref(), F)?;
        check(unsafe { sys::dsrt_engine_save_16bit_model(self.raw.as_ptr(), p.as_ptr()) }, F)
    }

    pub fn as_ptr(&self) -> *mut sys::dsrt_engine {
        self.raw.as_ptr()
    }

    pub(crate) fn open_data_view(&self, t: usize) {
        *self.views.borrow_mut().data.entry(t).or_insert(0) += 1;
    }

    pub(crate) fn close_data_view(&self, t: usize) {
        let mut v = self.views.borrow_mut();
        if let Some(n) = v.data.get_mut(&t) {
            *n -= 1;
            if *n == 0 {
                v.data.remove(&t);
            }
        }
    }

    /// Marks the gradient buffer of `t` as lent out; false if it already is.
    pub(crate) fn open_grad_view(&self, t: usize) -> bool {
        self.views.borrow_mut().grads.insert(t)
    }

    pub(crate) fn close_grad_view(&self, t: usize) {
        self.views.borrow_mut().grads.remove(&t);
    }

    pub(crate) fn has_views_on(&self, t: usize) -> bool {
        let v = self.views.borrow();
        v.data.contains_key(&t) || v.grads.contains(&t)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        unsafe { sys::dsrt_engine_destroy(self.raw.as_ptr()) }
    }
}
