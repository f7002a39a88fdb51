//! Tensors: handles to the parameters an engine owns, and views of their host buffers.
use std::os::raw::c_void;
use std::ptr::{self, NonNull};

use crate::engine::{DeviceType, Engine};
use crate::error::{check, Error, Result};
use crate::strings::borrowed_string;
use dsrt_sys as sys;

/// Element type of a working copy or gradient buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
    Other(u32),
}

impl Dtype {
    pub(crate) fn from_raw(d: sys::dsrt_dtype) -> Dtype {
        match d {
            sys::DSRT_F32 => Dtype::F32,
            sys::DSRT_F16 => Dtype::F16,
            sys::DSRT_BF16 => Dtype::BF16,
            other => Dtype::Other(other),
        }
    }
    pub fn to_raw(self) -> sys::dsrt_dtype {
        match self {
            Dtype::F32 => sys::DSRT_F32,
            Dtype::F16 => sys::DSRT_F16,
            Dtype::BF16 => sys::DSRT_BF16,
            Dtype::Other(d) => d,
        }
    }
    /// Bytes per element (None for an unknown dtype).
    pub fn size(self) -> Option<usize> {
        match self {
            Dtype::F32 => Some(4),
            Dtype::F16 | Dtype::BF16 => Some(2),
            Dtype::Other(_) => None,
        }
    }
}

/// A parameter registered with an engine. The handle is owned by the engine; the lifetime ties
/// it to the engine, so it cannot outlive it. Cheap to copy.
#[derive(Clone, Copy)]
pub struct Tensor<'e> {
    raw: NonNull<sys::dsrt_tensor>,
    engine: &'e Engine,
}

impl<'e> Tensor<'e> {
    pub(crate) fn new(raw: NonNull<sys::dsrt_tensor>, engine: &'e Engine) -> Tensor<'e> {
        Tensor { raw, engine }
    }

    fn key(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    pub fn name(&self) -> String {
        unsafe { borrowed_string(sys::dsrt_tensor_name(self.raw.as_ptr())) }.unwrap_or_default()
    }

    pub fn ndim(&self) -> usize {
        unsafe { sys::dsrt_tensor_ndim(self.raw.as_ptr()) }.max(0) as usize
    }

    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut shape = vec![0i64; self.ndim()];
        check(unsafe { sys::dsrt_tensor_shape(self.raw.as_ptr(), shape.as_mut_ptr()) }, "dsrt_tensor_shape")?;
        Ok(shape)
    }

    pub fn numel(&self) -> usize {
        unsafe { sys::dsrt_tensor_numel(self.raw.as_ptr()) }.max(0) as usize
    }

    /// The parameter group this tensor belongs to (0 unless set before build).
    pub fn group(&self) -> i32 {
        unsafe { sys::dsrt_tensor_group(self.raw.as_ptr()) }
    }

    /// Put the tensor in a parameter group (before build).
    pub fn set_group(&self, group: i32) -> Result<()> {
        check(unsafe { sys::dsrt_tensor_set_group(self.raw.as_ptr(), group) }, "dsrt_tensor_set_group")
    }

    /// The full fp32 master value, gathered (collective under ZeRO: every rank calls it).
    pub fn read_fp32(&self) -> Result<Vec<f32>> {
        let mut v = vec![0f32; self.numel()];
        self.read_fp32_into(&mut v)?;
        Ok(v)
    }

    pub fn read_fp32_into(&self, out: &mut [f32]) -> Result<()> {
        check(unsafe { sys::dsrt_tensor_read_fp32(self.raw.as_ptr(), out.as_mut_ptr(), out.len() as u64) },
              "dsrt_tensor_read_fp32")
    }

    /// Overwrites master and working copy (collective; every rank passes the same full value).
    pub fn write_fp32(&self, src: &[f32]) -> Result<()> {
        if self.engine.has_views_on(self.key()) {
            return Err(Error::new(sys::DSRT_ERR_STATE, "dsrt_tensor_write_fp32",
                format!("tensor '{}' has an open view; drop it before writing", self.name())));
        }
        check(unsafe { sys::dsrt_tensor_write_fp32(self.raw.as_ptr(), src.as_ptr(), src.len() as u64) },
              "dsrt_tensor_write_fp32")
    }

    fn on_host(&self) -> bool {
        matches!(self.engine.device().map(|d| d.kind), Ok(DeviceType::Cpu))
    }

    /// The full working copy (gathered under ZeRO-3), released when the view is dropped.
    pub fn acquire(&self) -> Result<Data<'e>> {
        let (mut data, mut dtype) = (ptr::null_mut(), 0);
        check(unsafe { sys::dsrt_tensor_acquire(self.raw.as_ptr(), &mut data, &mut dtype) }, "dsrt_tensor_acquire")?;
        self.engine.open_data_view(self.key());
        Ok(Data { tensor: *self, ptr: data, dtype: Dtype::from_raw(dtype), len: self.numel(), host: self.on_host() })
    }

    /// This micro-step's gradient buffer. Add the gradient of (loss * loss_scale) into it, then
    /// call [`Grad::ready`]. Dropping the view without `ready` leaves the tensor's gradient
    /// unsignalled (it counts as zero). One gradient view per tensor at a time.
    pub fn grad(&self) -> Result<Grad<'e>> {
        if !self.engine.open_grad_view(self.key()) {
            return Err(Error::new(sys::DSRT_ERR_STATE, "dsrt_tensor_grad",
                format!("the gradient of '{}' is already lent out; drop that view first", self.name())));
        }
        let (mut data, mut dtype) = (ptr::null_mut(), 0);
        let status = unsafe { sys::dsrt_tensor_grad(self.raw.as_ptr(), &mut data, &mut dtype) };
        if let Err(e) = check(status, "dsrt_tensor_grad") {
            self.engine.close_grad_view(self.key());
            return Err(e);
        }
        Ok(Grad { tensor: *self, ptr: data, dtype: Dtype::from_raw(dtype), len: self.numel(), host: self.on_host() })
    }

    pub fn as_ptr(&self) -> *mut sys::dsrt_tensor {
        self.raw.as_ptr()
    }
}

impl std::fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, shape {:?})", self.name(), self.shape().unwrap_or_default())
    }
}

/// An acquired working copy. Host slices are available when the engine's device is the CPU.
pub struct Data<'e> {
    tensor: Tensor<'e>,
    ptr: *mut c_void,
    dtype: Dtype,
    len: usize,
    host: bool,
}

impl Data<'_> {
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The values, without a copy (fp32 working copies in host memory only).
    pub fn as_f32(&self) -> Option<&[f32]> {
        (self.host && self.dtype == Dtype::F32 && !self.ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(self.ptr as *const f32, self.len) })
    }
    /// The raw 16-bit values (fp16 or bf16 bits) in host memory.
    pub fn as_u16(&self) -> Option<&[u16]> {
        (self.host && matches!(self.dtype, Dtype::F16 | Dtype::BF16) && !self.ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(self.ptr as *const u16, self.len) })
    }
    /// The device pointer (e.g. for a CUDA kernel); valid while this view lives.
    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }
    /// Ends the bracket now, reporting an error (dropping the view releases and ignores errors).
    pub fn release(self) -> Result<()> {
        let t = self.tensor;
        std::mem::forget(self);
        t.engine.close_data_view(t.key());
        check(unsafe { sys::dsrt_tensor_release(t.as_ptr()) }, "dsrt_tensor_release")
    }
}

impl Drop for Data<'_> {
    fn drop(&mut self) {
        self.tensor.engine.close_data_view(self.tensor.key());
        // A failed release is recorded in dsrt_last_error_message; Drop cannot report it.
        let _ = unsafe { sys::dsrt_tensor_release(self.tensor.as_ptr()) };
    }
}

/// A lent gradient buffer. Host slices are available when the engine's device is the CPU.
pub struct Grad<'e> {
    tensor: Tensor<'e>,
    ptr: *mut c_void,
    dtype: Dtype,
    len: usize,
    host: bool,
}

impl Grad<'_> {
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_f32_mut(&mut self) -> Option<&mut [f32]> {
        (self.host && self.dtype == Dtype::F32 && !self.ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut f32, self.len) })
    }
    /// The raw 16-bit gradient (fp16 or bf16 bits) in host memory.
    pub fn as_u16_mut(&mut self) -> Option<&mut [u16]> {
        (self.host && matches!(self.dtype, Dtype::F16 | Dtype::BF16) && !self.ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u16, self.len) })
    }
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.ptr
    }
    /// Signals the gradient complete for this micro-step (dsrt_tensor_grad_ready) and ends the view.
    pub fn ready(self) -> Result<()> {
        let t = self.tensor;
        drop(self);
        check(unsafe { sys::dsrt_tensor_grad_ready(t.as_ptr()) }, "dsrt_tensor_grad_ready")
    }
}

impl Drop for Grad<'_> {
    fn drop(&mut self) {
        self.tensor.engine.close_grad_view(self.tensor.key());
    }
}
