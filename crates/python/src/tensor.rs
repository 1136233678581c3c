//! DLPack tensors as a call's buffers: each argument imported through its
//! `__dlpack__` (on the call's stream, so its producer orders its writes
//! before the call), its dtype, shape and strides checked against what the
//! call takes, and its elements handed out as host slices ([`Host`]) or
//! `cudarc` views of the producer's own memory ([`Device`]): no copies.

use crate::raise;
use crate::stream::Target;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use pyo3_dlpack::PyTensor;
use specdec::{Device, DraftLogitsShape, Error, Host, Memory, Result, Strided, Values, ValuesMut};
use std::mem::ManuallyDrop;
use std::ops::Range;

/// DLPack's device types the calls take (`DLDeviceType`).
const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;

/// An element dtype, by DLPack's type code and width.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DType {
    F32,
    BF16,
    F16,
    I32,
    I64,
    Other(&'static str),
}

impl DType {
    fn of(t: &PyTensor) -> DType {
        let d = t.dtype();
        match (d.code, d.bits, d.lanes) {
            (2, 32, 1) => DType::F32,
            (4, 16, 1) => DType::BF16,
            (2, 16, 1) => DType::F16,
            (0, 32, 1) => DType::I32,
            (0, 64, 1) => DType::I64,
            (2, 64, 1) => DType::Other("float64"),
            (0, 8, 1) => DType::Other("int8"),
            (0, 16, 1) => DType::Other("int16"),
            (1, 8, 1) => DType::Other("uint8"),
            (1, 32, 1) => DType::Other("uint32"),
            (1, 64, 1) => DType::Other("uint64"),
            (6, _, _) => DType::Other("bool"),
            _ => DType::Other("another dtype"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Other(name) => name,
        }
    }
}

/// The logits dtypes.
const FLOATS: &[DType] = &[DType::F32, DType::BF16, DType::F16];

/// One argument of a call: the producer's tensor, held (and its memory with
/// it) until the call returns.
pub struct Arg {
    pub what: &'static str,
    tensor: PyTensor,
    dtype: DType,
    dims: Vec<usize>,
    /// In elements (DLPack leaves them out for a row-major tensor).
    strides: Vec<i64>,
    /// On CUDA: the tensor's bytes as a `CudaSlice` that never frees them.
    device: Option<Borrowed>,
}

/// The producer's device memory as a `CudaSlice`, handed back (not freed) on drop.
struct Borrowed(ManuallyDrop<CudaSlice<u8>>);

impl Drop for Borrowed {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `leak` releases cudarc's handles but not the memory.
        unsafe { ManuallyDrop::take(&mut self.0) }.leak();
    }
}

impl Arg {
    /// Imports `obj` (anything with `__dlpack__` and `__dlpack_device__`)
    /// for a call on `target`. A CUDA tensor is asked for on the call's stream.
    pub fn import(what: &'static str, obj: &Bound<'_, PyAny>, target: &Target) -> PyResult<Arg> {
        Self::import_as(what, obj, target, false)
    }

    /// [`Arg::import`] of a tensor the call writes: asked for without a copy.
    pub fn import_written(what: &'static str, obj: &Bound<'_, PyAny>, target: &Target) -> PyResult<Arg> {
        Self::import_as(what, obj, target, true)
    }

    fn import_as(what: &'static str, obj: &Bound<'_, PyAny>, target: &Target, written: bool) -> PyResult<Arg> {
        let py = obj.py();
        let (kind, ordinal): (i32, i32) =
            obj.call_method0("__dlpack_device__").and_then(|d| d.extract()).map_err(|_| {
                raise(Error::TensorDevice { what, expected: target.describe(), got: "no DLPack device".into() })
            })?;
        let here = match (kind, target) {
            (DL_CPU, Target::Host) => true,
            (DL_CUDA, Target::Cuda { ordinal: o, .. }) => ordinal == *o,
            _ => false,
        };
        if !here {
            let got = match kind {
                DL_CPU => "cpu".to_string(),
                DL_CUDA => format!("cuda:{ordinal}"),
                other => format!("DLPack device type {other}"),
            };
            return Err(raise(Error::TensorDevice { what, expected: target.describe(), got }));
        }
        let kwargs = PyDict::new(py);
        if let Target::Cuda { dlpack_stream, .. } = target {
            kwargs.set_item("stream", dlpack_stream)?;
        }
        let versioned = kwargs.copy()?;
        versioned.set_item("max_version", (1, 0))?;
        let unshared = versioned.copy()?;
        // A written tensor must be the producer's own memory, never a copy of it.
        unshared.set_item("copy", false)?;
        // Older producers take fewer arguments: DLPack 1.0 added max_version, 2023's array API copy.
        let mut attempts = if written { vec![unshared, versioned, kwargs] } else { vec![versioned, kwargs] };
        let capsule = loop {
            let args = attempts.remove(0);
            match obj.call_method("__dlpack__", (), Some(&args)) {
                Ok(c) => break c,
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) && !attempts.is_empty() => {}
                Err(e) => return Err(e),
            }
        };
        let tensor = PyTensor::from_capsule(capsule.cast::<PyCapsule>()?)?;
        let device = tensor.device();
        if (device.device_type as i32, device.device_id) != (kind, ordinal) && !(kind == DL_CPU && device.is_cpu()) {
            let got = format!("DLPack device ({}, {}) in its capsule", device.device_type as i32, device.device_id);
            return Err(raise(Error::TensorDevice { what, expected: target.describe(), got }));
        }
        if tensor.shape().iter().any(|&d| d < 0) {
            let got = tensor.shape().iter().map(|&d| d.max(0) as usize).collect();
            return Err(raise(Error::TensorShape { what, expected: "non-negative dimensions", got }));
        }
        let dtype = DType::of(&tensor);
        let dims: Vec<usize> = tensor.shape().iter().map(|&d| d as usize).collect();
        let strides = match tensor.strides() {
            Some(s) => s.to_vec(),
            None => {
                let mut strides = vec![1i64; dims.len()];
                for i in (0..dims.len().saturating_sub(1)).rev() {
                    strides[i] = strides[i + 1] * dims[i + 1] as i64;
                }
                strides
            }
        };
        let mut arg = Arg { what, tensor, dtype, dims, strides, device: None };
        if let Target::Cuda { stream, .. } = target {
            let bytes = arg.extent().map_err(raise)? * arg.tensor.itemsize();
            // SAFETY: the producer's allocation holds the tensor's `bytes` from its data
            // pointer and outlives `arg`; `Borrowed` never frees it.
            let slice = unsafe { stream.upgrade_device_ptr::<u8>(arg.tensor.data_ptr() as u64, bytes) };
            arg.device = Some(Borrowed(ManuallyDrop::new(slice)));
        }
        Ok(arg)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The last dimension's length (1 for a scalar).
    pub fn last_dim(&self) -> usize {
        self.dims.last().copied().unwrap_or(1)
    }

    /// Its dims and strides, for the library's layout checks.
    pub fn strided(&self) -> Strided<'_> {
        Strided { what: self.what, dims: &self.dims, strides: &self.strides }
    }

    /// Elements from the first to past the last one the shape and strides
    /// reach, whose bytes fit memory too.
    fn extent(&self) -> Result<usize> {
        let s = self.strided();
        let n = s.extent()?;
        n.checked_mul(self.tensor.itemsize())
            .map(|_| n)
            .ok_or_else(|| s.layout_error("its shape and strides reach past any memory"))
    }

    /// The bytes the tensor spans in its memory: overlapping spans share memory.
    pub fn span(&self) -> Result<Range<usize>> {
        let start = self.tensor.data_ptr() as usize;
        Ok(start..start + self.extent()? * self.tensor.itemsize())
    }

    pub fn expect_dtype(&self, expected: &[DType]) -> Result<()> {
        if expected.contains(&self.dtype) {
            return Ok(());
        }
        let expected = expected.iter().map(|d| d.name()).collect::<Vec<_>>().join(" or ");
        Err(Error::TensorDType { what: self.what, expected, got: self.dtype.name() })
    }

    /// A vector `[n]` of one of `dtypes` with unit stride: `n`.
    pub fn vector(&self, dtypes: &[DType]) -> Result<usize> {
        self.expect_dtype(dtypes)?;
        self.strided().vector()
    }

    /// A row-major, contiguous tensor of one of `dtypes`.
    pub fn dense(&self, dtypes: &[DType]) -> Result<()> {
        self.expect_dtype(dtypes)?;
        self.strided().dense()
    }

    /// A `[rows, vocab]` matrix of logits with unit last stride: rows, vocab, row stride.
    pub fn matrix(&self) -> Result<(usize, usize, usize)> {
        self.expect_dtype(FLOATS)?;
        self.strided().matrix()
    }

    /// Draft logits `[slots, k, width]` with unit last stride.
    pub fn cache(&self) -> Result<DraftLogitsShape> {
        self.expect_dtype(FLOATS)?;
        self.strided().draft_logits()
    }

    /// The logits elements, by dtype.
    pub fn values<M: Place>(&self) -> Result<Values<'_, M>> {
        Ok(match self.dtype {
            DType::F32 => Values::F32(M::read(self)?),
            DType::BF16 => Values::BF16(M::read(self)?),
            DType::F16 => Values::F16(M::read(self)?),
            _ => return Err(self.expect_dtype(FLOATS).expect_err("not a float dtype")),
        })
    }

    /// The draft-logits elements a call writes, by dtype.
    pub fn values_mut<M: Place>(&mut self) -> Result<ValuesMut<'_, M>> {
        Ok(match self.dtype {
            DType::F32 => ValuesMut::F32(M::write(self)?),
            DType::BF16 => ValuesMut::BF16(M::write(self)?),
            DType::F16 => ValuesMut::F16(M::write(self)?),
            _ => return Err(self.expect_dtype(FLOATS).expect_err("not a float dtype")),
        })
    }
}

/// Where a call's buffers live, seen from DLPack: how an argument's
/// elements (from its first to its last) become that memory's views. The
/// element type is the caller's to pick, after the dtype check.
pub trait Place: Memory + Sized {
    fn read<T>(arg: &Arg) -> Result<Self::Ref<'_, T>>;
    fn write<T>(arg: &mut Arg) -> Result<Self::Mut<'_, T>>;
}

impl Arg {
    /// The element count, checked against `T` and the data pointer's alignment.
    fn elements<T>(&self) -> Result<usize> {
        assert_eq!(std::mem::size_of::<T>(), self.tensor.itemsize(), "the caller checked the dtype");
        if !(self.tensor.data_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(self.strided().layout_error("its data is not aligned to its element size"));
        }
        self.extent()
    }

    fn host_ptr<T>(&self, len: usize) -> *mut T {
        // A tensor of no elements may have a null pointer, which a slice may not.
        if len == 0 { std::ptr::NonNull::dangling().as_ptr() } else { self.tensor.data_ptr().cast() }
    }
}

impl Place for Host {
    fn read<T>(arg: &Arg) -> Result<&[T]> {
        let len = arg.elements::<T>()?;
        // SAFETY: the producer's host memory holds `len` aligned elements of T's size and
        // lives while `arg` holds its capsule; any bit pattern is valid for the call's types.
        Ok(unsafe { std::slice::from_raw_parts(arg.host_ptr::<T>(len), len) })
    }

    fn write<T>(arg: &mut Arg) -> Result<&mut [T]> {
        let len = arg.elements::<T>()?;
        // SAFETY: as `read`, and the call's check that no written argument shares memory
        // with another makes this the only reference to these elements.
        Ok(unsafe { std::slice::from_raw_parts_mut(arg.host_ptr::<T>(len), len) })
    }
}

impl Place for Device {
    fn read<T>(arg: &Arg) -> Result<CudaView<'_, T>> {
        let len = arg.elements::<T>()?;
        let slice = arg.device.as_ref().expect("a CUDA argument has its slice");
        // SAFETY: the slice spans exactly `len` elements of T's size.
        Ok(unsafe { slice.0.transmute::<T>(len) }.expect("the slice spans the elements"))
    }

    fn write<T>(arg: &mut Arg) -> Result<CudaViewMut<'_, T>> {
        let len = arg.elements::<T>()?;
        let slice = arg.device.as_mut().expect("a CUDA argument has its slice");
        // SAFETY: as `read`.
        Ok(unsafe { slice.0.transmute_mut::<T>(len) }.expect("the slice spans the elements"))
    }
}

/// The written arguments are writable, and their memory shares no byte with
/// any other argument's.
pub fn check_written(written: &[&Arg], read: &[&Arg]) -> Result<()> {
    for (i, w) in written.iter().enumerate() {
        if w.tensor.is_read_only() {
            return Err(Error::TensorReadOnly { what: w.what });
        }
        let span = w.span()?;
        let others = written.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, a)| a).chain(read);
        for other in others {
            let o = other.span()?;
            if !span.is_empty() && !o.is_empty() && span.start < o.end && o.start < span.end {
                return Err(Error::TensorAliased { what: w.what, other: other.what });
            }
        }
    }
    Ok(())
}
