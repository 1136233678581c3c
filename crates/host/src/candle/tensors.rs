//! From candle tensors to a call's buffers: each tensor's storage locked for
//! the call, its dtype, shape and strides checked against what the call takes,
//! and its elements handed out as host slices ([`Host`]) or `cudarc` views of
//! the tensor's own `CudaSlice` ([`Device`], feature `candle-cuda`): no copies.

use crate::error::{Error, Result};
use crate::memory::{Host, Memory};
use crate::strided::Strided;
use crate::tensor::{DraftLogitsShape, Values, ValuesMut};
use candle_core::{CpuStorage, DType, Layout, Storage, StorageRef, Tensor, WithDType};
use half::{bf16, f16};
use std::borrow::Cow;
use std::ops::Range;

/// An element type a call reads from a tensor: candle's, and on CUDA one it
/// keeps in a `CudaSlice`.
#[cfg(feature = "candle-cuda")]
pub(super) trait Num:
    WithDType + candle_core::cuda::CudaDType + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits
{
}
#[cfg(feature = "candle-cuda")]
impl<T: WithDType + candle_core::cuda::CudaDType + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> Num
    for T
{
}
#[cfg(not(feature = "candle-cuda"))]
pub(super) trait Num: WithDType {}
#[cfg(not(feature = "candle-cuda"))]
impl<T: WithDType> Num for T {}

/// One input tensor, its storage read-locked for the call.
pub(super) struct Locked<'t> {
    what: &'static str,
    guard: StorageRef<'t>,
    layout: &'t Layout,
    dtype: DType,
}

impl<'t> Locked<'t> {
    /// Locks `tensor` for reading. Checked first: it lives on `device`.
    pub(super) fn new(what: &'static str, tensor: &'t Tensor, device: &candle_core::Device) -> Result<Self> {
        if !tensor.device().same_device(device) {
            return Err(Error::TensorDevice {
                what,
                expected: format!("{:?}", device.location()),
                got: format!("{:?}", tensor.device().location()),
            });
        }
        let (guard, layout) = tensor.storage_and_layout();
        Ok(Locked { what, guard, layout, dtype: tensor.dtype() })
    }

    /// The address of the storage: equal for tensors that share memory.
    pub(super) fn storage_addr(&self) -> usize {
        std::ptr::from_ref::<Storage>(&self.guard).addr()
    }

    pub(super) fn what(&self) -> &'static str {
        self.what
    }

    fn expect_dtype(&self, expected: &[DType]) -> Result<()> {
        if expected.contains(&self.dtype) {
            Ok(())
        } else {
            let expected = expected.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(" or ");
            Err(Error::TensorDType { what: self.what, expected, got: self.dtype.as_str() })
        }
    }

    /// A 1-D tensor of `dtype` with unit stride: its elements' range in the storage.
    pub(super) fn vector(&self, dtype: DType) -> Result<Range<usize>> {
        self.expect_dtype(&[dtype])?;
        let n = with_strided(self.what, self.layout, |s| s.vector())?;
        let start = self.layout.start_offset();
        Ok(start..start + n)
    }

    /// A `[rows, cols]` matrix of logits with unit last stride: its range in
    /// the storage (from its first element to past its last), rows, cols and row stride.
    pub(super) fn matrix(&self) -> Result<(Range<usize>, usize, usize, usize)> {
        self.expect_dtype(&[DType::F32, DType::BF16, DType::F16])?;
        let ((rows, cols, row_stride), extent) =
            with_strided(self.what, self.layout, |s| Ok((s.matrix()?, s.extent()?)))?;
        let start = self.layout.start_offset();
        Ok((start..start + extent, rows, cols, row_stride))
    }

    /// The logits elements in `at`, by dtype.
    pub(super) fn values<M: Place>(&self, at: Range<usize>) -> Result<Values<'_, M>> {
        Ok(match self.dtype {
            DType::F32 => Values::F32(M::read::<f32>(self, at)?),
            DType::BF16 => Values::BF16(M::read::<bf16>(self, at)?),
            DType::F16 => Values::F16(M::read::<f16>(self, at)?),
            _ => unreachable!("checked by matrix()"),
        })
    }
}

/// The draft logits a `gumbel_sample` call writes, `[slots, k, width]` with
/// unit last stride, inside the in-place op that holds their storage.
pub(super) struct CacheLayout {
    pub at: Range<usize>,
    pub shape: DraftLogitsShape,
}

impl CacheLayout {
    pub(super) fn of(tensor: &Tensor) -> Result<Self> {
        const WHAT: &str = "draft logits";
        let dtype = tensor.dtype();
        if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) {
            return Err(Error::TensorDType { what: WHAT, expected: "f32 or bf16 or f16".into(), got: dtype.as_str() });
        }
        let (shape, extent) = with_strided(WHAT, tensor.layout(), |s| Ok((s.draft_logits()?, s.extent()?)))?;
        let start = tensor.layout().start_offset();
        Ok(CacheLayout { at: start..start + extent, shape })
    }
}

/// The storage of the draft logits a call writes.
pub(super) enum CacheMut<'c> {
    Cpu(&'c mut CpuStorage),
    #[cfg(feature = "candle-cuda")]
    Cuda(&'c mut candle_core::CudaStorage),
}

/// Where a call's buffers live, seen from candle: how a locked tensor's
/// elements become that memory's views, and how outputs are made.
pub(super) trait Place: Memory + Sized {
    /// An output the call writes, then handed to the caller as a tensor.
    type Buf<T: Num>;

    fn read<'a, T: Num>(tensor: &'a Locked<'_>, at: Range<usize>) -> Result<Self::Ref<'a, T>>;
    /// An `i64` tensor's elements read as the `u64` the call takes (same bits).
    fn read_u64<'a>(tensor: &'a Locked<'_>, at: Range<usize>) -> Result<Self::Ref<'a, u64>>;
    fn cache<'a>(cache: &'a mut CacheMut<'_>, layout: &CacheLayout) -> Result<ValuesMut<'a, Self>>;
    fn alloc<T: Num>(device: &candle_core::Device, len: usize) -> Result<Self::Buf<T>>;
    fn buf_mut<T: Num>(buf: &mut Self::Buf<T>) -> Self::Mut<'_, T>;
    fn into_tensor<T: Num>(buf: Self::Buf<T>, dims: &[usize], device: &candle_core::Device) -> Result<Tensor>;
}

fn host_range<'a, T>(data: &'a [T], what: &'static str, at: Range<usize>) -> Result<&'a [T]> {
    let (needed, len) = (at.end, data.len());
    data.get(at).ok_or(Error::BufferTooSmall { what, needed, len })
}

impl Place for Host {
    type Buf<T: Num> = Vec<T>;

    fn read<'a, T: Num>(tensor: &'a Locked<'_>, at: Range<usize>) -> Result<&'a [T]> {
        match &*tensor.guard {
            Storage::Cpu(s) => host_range(s.as_slice::<T>()?, tensor.what, at),
            _ => Err(not_in(tensor.what, "host")),
        }
    }

    fn read_u64<'a>(tensor: &'a Locked<'_>, at: Range<usize>) -> Result<&'a [u64]> {
        let signed = Self::read::<i64>(tensor, at)?;
        // SAFETY: i64 and u64 have one size and alignment, and every bit pattern is valid in both.
        Ok(unsafe { std::slice::from_raw_parts(signed.as_ptr().cast::<u64>(), signed.len()) })
    }

    fn cache<'a>(cache: &'a mut CacheMut<'_>, layout: &CacheLayout) -> Result<ValuesMut<'a, Host>> {
        const WHAT: &str = "draft logits";
        #[allow(clippy::infallible_destructuring_match, reason = "refutable with feature candle-cuda")]
        let storage = match cache {
            CacheMut::Cpu(storage) => storage,
            #[cfg(feature = "candle-cuda")]
            CacheMut::Cuda(_) => return Err(not_in(WHAT, "host")),
        };
        let at = layout.at.clone();
        let err = |len| Error::BufferTooSmall { what: WHAT, needed: layout.at.end, len };
        Ok(match storage {
            CpuStorage::F32(v) => {
                let len = v.len();
                ValuesMut::F32(v.get_mut(at).ok_or_else(|| err(len))?)
            }
            CpuStorage::BF16(v) => {
                let len = v.len();
                ValuesMut::BF16(v.get_mut(at).ok_or_else(|| err(len))?)
            }
            CpuStorage::F16(v) => {
                let len = v.len();
                ValuesMut::F16(v.get_mut(at).ok_or_else(|| err(len))?)
            }
            _ => unreachable!("CacheLayout::of checked the dtype"),
        })
    }

    fn alloc<T: Num>(_: &candle_core::Device, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::from_f64(0.0); len])
    }

    fn buf_mut<T: Num>(buf: &mut Vec<T>) -> &mut [T] {
        buf
    }

    fn into_tensor<T: Num>(buf: Vec<T>, dims: &[usize], device: &candle_core::Device) -> Result<Tensor> {
        Ok(Tensor::from_vec(buf, dims, device)?)
    }
}

#[cfg(feature = "candle-cuda")]
mod cuda {
    use super::*;
    use crate::memory::Device;
    use candle_core::cuda::CudaStorageSlice;
    use candle_core::op::BackpropOp;
    use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, sys};

    impl Place for Device {
        type Buf<T: Num> = CudaSlice<T>;

        fn read<'a, T: Num>(tensor: &'a Locked<'_>, at: Range<usize>) -> Result<CudaView<'a, T>> {
            match &*tensor.guard {
                Storage::Cuda(s) => {
                    let slice = s.as_cuda_slice::<T>()?;
                    let (needed, len) = (at.end, slice.len());
                    slice.try_slice(at).ok_or(Error::BufferTooSmall { what: tensor.what, needed, len })
                }
                _ => Err(not_in(tensor.what, "CUDA")),
            }
        }

        fn read_u64<'a>(tensor: &'a Locked<'_>, at: Range<usize>) -> Result<CudaView<'a, u64>> {
            let signed = Self::read::<i64>(tensor, at)?;
            let len = signed.len();
            // SAFETY: as on the host: same size, every bit pattern valid; `len` elements fit.
            Ok(unsafe { signed.transmute::<u64>(len) }.expect("same element size"))
        }

        fn cache<'a>(cache: &'a mut CacheMut<'_>, layout: &CacheLayout) -> Result<ValuesMut<'a, Device>> {
            const WHAT: &str = "draft logits";
            let CacheMut::Cuda(storage) = cache else { return Err(not_in(WHAT, "CUDA")) };
            fn range<T>(slice: &mut CudaSlice<T>, at: Range<usize>) -> Result<CudaViewMut<'_, T>> {
                let (needed, len) = (at.end, slice.len());
                slice.try_slice_mut(at).ok_or(Error::BufferTooSmall { what: WHAT, needed, len })
            }
            let at = layout.at.clone();
            Ok(match &mut storage.slice {
                CudaStorageSlice::F32(s) => ValuesMut::F32(range(s, at)?),
                CudaStorageSlice::BF16(s) => ValuesMut::BF16(range(s, at)?),
                CudaStorageSlice::F16(s) => ValuesMut::F16(range(s, at)?),
                _ => unreachable!("CacheLayout::of checked the dtype"),
            })
        }

        fn alloc<T: Num>(device: &candle_core::Device, len: usize) -> Result<CudaSlice<T>> {
            Ok(device.as_cuda_device()?.cuda_stream().alloc_zeros::<T>(len)?)
        }

        fn buf_mut<T: Num>(buf: &mut CudaSlice<T>) -> CudaViewMut<'_, T> {
            buf.as_view_mut()
        }

        fn into_tensor<T: Num>(buf: CudaSlice<T>, dims: &[usize], device: &candle_core::Device) -> Result<Tensor> {
            let storage = candle_core::CudaStorage::wrap_cuda_slice(buf, device.as_cuda_device()?.clone());
            Ok(Tensor::from_storage(Storage::Cuda(storage), dims, BackpropOp::none(), false))
        }
    }

    /// The low 32 bits of each element of the contiguous `i64 [n]` tensor
    /// `wide`, as a new `i32 [n]` tensor: one 2-D copy (rows of 4 bytes, 8
    /// apart in the source), ordered on the device's stream.
    pub(super) fn low_words(wide: &Tensor, n: usize, device: &candle_core::CudaDevice) -> Result<Tensor> {
        let stream = device.cuda_stream();
        let mut narrow = stream.alloc_zeros::<i32>(n)?;
        if n > 0 {
            let (storage, layout) = wide.storage_and_layout();
            let Storage::Cuda(storage) = &*storage else { return Err(not_in("an i64 tensor", "CUDA")) };
            let wide = storage.as_cuda_slice::<i64>()?.slice(layout.start_offset()..layout.start_offset() + n);
            let (src, _read) = wide.device_ptr(&stream);
            let (dst, _write) = narrow.device_ptr_mut(&stream);
            let copy = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: src,
                srcArray: std::ptr::null_mut(),
                srcPitch: std::mem::size_of::<i64>(),
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: dst,
                dstArray: std::ptr::null_mut(),
                dstPitch: std::mem::size_of::<i32>(),
                WidthInBytes: std::mem::size_of::<i32>(),
                Height: n,
            };
            // SAFETY: both buffers hold n elements (the copy reads bytes 0..4 of each i64,
            // its low word on a little-endian GPU) and live past the copy, which the
            // stream orders before any later use of either.
            unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }.result()?;
        }
        let storage = candle_core::CudaStorage::wrap_cuda_slice(narrow, device.clone());
        Ok(Tensor::from_storage(Storage::Cuda(storage), n, BackpropOp::none(), false))
    }
}

/// An integer input as the `i32` the core API reads: an `i32` tensor as it
/// is; an `i64` vector (candle's index dtype, and the only integer dtype
/// candle's CUDA kernels compute with) clamped to the `i32` range, so that a
/// value out of it stays out of range for the call's checks, then narrowed
/// into a new `i32` tensor: on the host by conversion, on CUDA by a strided
/// device copy of each element's low word, on the stream.
pub(super) fn ints<'t>(what: &'static str, tensor: &'t Tensor) -> Result<Cow<'t, Tensor>> {
    if tensor.dtype() != DType::I64 {
        return Ok(Cow::Borrowed(tensor));
    }
    let &[n] = tensor.dims() else {
        return Err(Error::TensorShape { what, expected: "a vector [n]", got: tensor.dims().to_vec() });
    };
    let clamped = tensor.clamp(i64::from(i32::MIN), i64::from(i32::MAX))?.contiguous()?;
    let narrowed = match tensor.device() {
        candle_core::Device::Cpu => {
            let values: Vec<i32> = clamped.to_vec1::<i64>()?.into_iter().map(|v| v as i32).collect();
            Tensor::from_vec(values, n, tensor.device())?
        }
        #[cfg(feature = "candle-cuda")]
        candle_core::Device::Cuda(device) => cuda::low_words(&clamped, n, device)?,
        other => return Err(not_in(what, if other.is_cuda() { "CUDA" } else { "host" })),
    };
    Ok(Cow::Owned(narrowed))
}

/// `check` of a candle layout, its strides signed as the library's checks take them.
fn with_strided<T>(what: &'static str, layout: &Layout, check: impl FnOnce(&Strided<'_>) -> Result<T>) -> Result<T> {
    let strides: Vec<i64> = layout.stride().iter().map(|&s| s as i64).collect();
    check(&Strided { what, dims: layout.dims(), strides: &strides })
}

fn not_in(what: &'static str, memory: &'static str) -> Error {
    Error::TensorDevice { what, expected: memory.into(), got: "another device".into() }
}
