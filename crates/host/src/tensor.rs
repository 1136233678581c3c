//! Buffer descriptions shared by every operation: logits, the draft logits,
//! token outputs, each with its shape checks; and the two conversions that
//! let a call take host slices and `cudarc` buffers alike ([`View`],
//! [`ViewMut`]). All stride arithmetic is in `usize` with overflow checks, so
//! a bad shape becomes a typed error, never a wrapped index.

use crate::error::{Error, Result};
use crate::memory::{Device, Host, Memory};
use crate::params::Filters;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop};
use half::{bf16, f16};
pub use specdec_core::dtype::DType;

/// Largest supported vocabulary (keeps device index arithmetic in `u32`).
pub const MAX_VOCAB: usize = 1 << 30;

mod sealed {
    pub trait Sealed {}
}

/// A buffer a call reads: `&[T]`, `&Vec<T>` or `&[T; N]` in host memory,
/// `CudaView<T>` or `&CudaSlice<T>` on the device.
pub trait View<'a>: sealed::Sealed {
    type Memory: Memory;
    type Elem: 'a;
    #[doc(hidden)]
    fn view(self) -> <Self::Memory as Memory>::Ref<'a, Self::Elem>;
}

/// A buffer a call writes: `&mut [T]`, `&mut Vec<T>` or `&mut [T; N]` in host
/// memory, `CudaViewMut<T>` or `&mut CudaSlice<T>` on the device.
pub trait ViewMut<'a>: sealed::Sealed {
    type Memory: Memory;
    type Elem: 'a;
    #[doc(hidden)]
    fn view_mut(self) -> <Self::Memory as Memory>::Mut<'a, Self::Elem>;
}

macro_rules! views {
    ($($buf:ty => $memory:ty, |$b:ident| $view:expr;)*) => {$(
        impl<'a, T: 'a> sealed::Sealed for $buf {}
        impl<'a, T: 'a> View<'a> for $buf {
            type Memory = $memory;
            type Elem = T;
            fn view(self) -> <$memory as Memory>::Ref<'a, T> {
                let $b = self;
                $view
            }
        }
    )*};
}

macro_rules! views_mut {
    ($($buf:ty => $memory:ty, |$b:ident| $view:expr;)*) => {$(
        impl<'a, T: 'a> sealed::Sealed for $buf {}
        impl<'a, T: 'a> ViewMut<'a> for $buf {
            type Memory = $memory;
            type Elem = T;
            fn view_mut(self) -> <$memory as Memory>::Mut<'a, T> {
                let $b = self;
                $view
            }
        }
    )*};
}

views! {
    &'a [T] => Host, |b| b;
    &'a Vec<T> => Host, |b| b;
    CudaView<'a, T> => Device, |b| b;
    &'a CudaSlice<T> => Device, |b| b.as_view();
}

views_mut! {
    &'a mut [T] => Host, |b| b;
    &'a mut Vec<T> => Host, |b| b;
    CudaViewMut<'a, T> => Device, |b| b;
    &'a mut CudaSlice<T> => Device, |b| b.as_view_mut();
}

impl<'a, T: 'a, const N: usize> sealed::Sealed for &'a [T; N] {}
impl<'a, T: 'a, const N: usize> View<'a> for &'a [T; N] {
    type Memory = Host;
    type Elem = T;
    fn view(self) -> &'a [T] {
        self
    }
}

impl<'a, T: 'a, const N: usize> sealed::Sealed for &'a mut [T; N] {}
impl<'a, T: 'a, const N: usize> ViewMut<'a> for &'a mut [T; N] {
    type Memory = Host;
    type Elem = T;
    fn view_mut(self) -> &'a mut [T] {
        self
    }
}

/// An element type of logits and draft logits: `f32`, `half::bf16`,
/// `half::f16`. The one path from a typed buffer to a call's dtype: the
/// constructors ([`Logits::new`], [`DraftLogits::new`], [`DraftLogitsMut::new`])
/// take any of them, the backends read [`Values::dtype`].
pub trait Element: sealed::Sealed + DeviceRepr + Copy + 'static {
    const DTYPE: DType;
    #[doc(hidden)]
    fn values<'a, M: Memory>(data: M::Ref<'a, Self>) -> Values<'a, M>;
    #[doc(hidden)]
    fn values_mut<'a, M: Memory>(data: M::Mut<'a, Self>) -> ValuesMut<'a, M>;
}

/// A token id type of the outputs: `i32` or `i64`.
pub trait TokenId: sealed::Sealed + DeviceRepr + Copy + 'static {
    #[doc(hidden)]
    fn tokens<'a, M: Memory>(data: M::Mut<'a, Self>) -> Tokens<'a, M>;
}

macro_rules! elements {
    ($($t:ty => $variant:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn values<'a, M: Memory>(data: M::Ref<'a, Self>) -> Values<'a, M> {
                Values::$variant(data)
            }
            fn values_mut<'a, M: Memory>(data: M::Mut<'a, Self>) -> ValuesMut<'a, M> {
                ValuesMut::$variant(data)
            }
        }
    )*};
}
elements!(f32 => F32, bf16 => BF16, f16 => F16);

macro_rules! token_ids {
    ($($t:ty => $variant:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl TokenId for $t {
            fn tokens<'a, M: Memory>(data: M::Mut<'a, Self>) -> Tokens<'a, M> {
                Tokens::$variant(data)
            }
        }
    )*};
}
token_ids!(i32 => I32, i64 => I64);

/// Logits or draft-logits elements, by dtype (what an [`Element`] buffer
/// becomes inside a call).
pub enum Values<'a, M: Memory> {
    F32(M::Ref<'a, f32>),
    BF16(M::Ref<'a, bf16>),
    F16(M::Ref<'a, f16>),
}

/// Writable draft-logits elements, by dtype.
pub enum ValuesMut<'a, M: Memory> {
    F32(M::Mut<'a, f32>),
    BF16(M::Mut<'a, bf16>),
    F16(M::Mut<'a, f16>),
}

/// The elements of a dtype-tagged buffer, one `match` per question asked of
/// it: its dtype, its length, its device pointer.
macro_rules! by_dtype {
    ($name:ident, $len:ident) => {
        impl<M: Memory> $name<'_, M> {
            pub fn dtype(&self) -> DType {
                match self {
                    Self::F32(_) => DType::F32,
                    Self::BF16(_) => DType::BF16,
                    Self::F16(_) => DType::F16,
                }
            }

            pub fn len(&self) -> usize {
                match self {
                    Self::F32(b) => M::$len(b),
                    Self::BF16(b) => M::$len(b),
                    Self::F16(b) => M::$len(b),
                }
            }

            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }
        }
    };
}
by_dtype!(Values, len);
by_dtype!(ValuesMut, len_mut);

impl Values<'_, Device> {
    /// The device address, and the guard that records cudarc's read event
    /// (where it tracks events) when dropped after the launch.
    pub(crate) fn device_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        match self {
            Self::F32(b) => b.device_ptr(stream),
            Self::BF16(b) => b.device_ptr(stream),
            Self::F16(b) => b.device_ptr(stream),
        }
    }
}

impl ValuesMut<'_, Device> {
    /// As [`Values::device_ptr`], recording a write.
    pub(crate) fn device_ptr_mut<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        match self {
            Self::F32(b) => b.device_ptr_mut(stream),
            Self::BF16(b) => b.device_ptr_mut(stream),
            Self::F16(b) => b.device_ptr_mut(stream),
        }
    }
}

/// `[rows, >= vocab]` logits with a row stride (0 broadcasts one row; by
/// default `vocab`, dense rows) and last stride 1. Ids `vocab..` of a row are
/// never read.
pub struct Logits<'a, M: Memory> {
    pub data: Values<'a, M>,
    pub rows: usize,
    pub vocab: usize,
    /// Elements between consecutive rows.
    pub row_stride: usize,
}

impl<'a, M: Memory> Logits<'a, M> {
    /// Dense `[rows, vocab]` logits of any [`Element`] type, in host or
    /// device memory: `Logits::new(&data, rows, vocab)`.
    pub fn new<B>(data: B, rows: usize, vocab: usize) -> Self
    where
        B: View<'a, Memory = M>,
        B::Elem: Element,
    {
        Logits { data: B::Elem::values(data.view()), rows, vocab, row_stride: vocab }
    }

    /// The same logits with `row_stride` elements between rows.
    #[must_use]
    pub fn with_row_stride(self, row_stride: usize) -> Self {
        Logits { row_stride, ..self }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.vocab == 0 || self.vocab > MAX_VOCAB {
            return Err(Error::InvalidVocab { vocab: self.vocab, max: MAX_VOCAB });
        }
        if self.rows > 0 {
            let needed = (self.rows - 1)
                .checked_mul(self.row_stride)
                .and_then(|o| o.checked_add(self.vocab))
                .unwrap_or(usize::MAX);
            check_extent("logits", needed, self.data.len())?;
        }
        Ok(())
    }
}

/// The draft logits (SPEC: the draft-logits cache) that `gumbel_sample`
/// writes in drafting mode and `rejection_sample` reads as the draft
/// distribution, read-only: raw (pre-temperature) logits laid out as `shape` says.
pub struct DraftLogits<'a, M: Memory> {
    pub data: Values<'a, M>,
    pub shape: DraftLogitsShape,
    /// The filters each slot's drafts were sampled with (none: unfiltered),
    /// which `rejection_sample` applies to the stored rows to reproduce the
    /// draft distribution exactly (SPEC §7.3).
    pub filters: Filters<'a, M>,
}

impl<'a, M: Memory> DraftLogits<'a, M> {
    /// `data` of any [`Element`] type, laid out as `shape`.
    pub fn new<B>(data: B, shape: DraftLogitsShape) -> Self
    where
        B: View<'a, Memory = M>,
        B::Elem: Element,
    {
        DraftLogits { data: B::Elem::values(data.view()), shape, filters: Filters::none() }
    }

    /// The same draft logits, sampled with `filters` per slot (what the
    /// drafter's `gumbel_sample` had in its [`SamplingParams`](crate::SamplingParams)).
    #[must_use]
    pub fn with_filters(self, filters: Filters<'a, M>) -> Self {
        DraftLogits { filters, ..self }
    }
}

/// The draft logits, writable: what `gumbel_sample` stores each row's raw
/// logits into.
pub struct DraftLogitsMut<'a, M: Memory> {
    pub data: ValuesMut<'a, M>,
    pub shape: DraftLogitsShape,
}

impl<'a, M: Memory> DraftLogitsMut<'a, M> {
    /// `data` of any [`Element`] type, laid out as `shape`.
    pub fn new<B>(data: B, shape: DraftLogitsShape) -> Self
    where
        B: ViewMut<'a, Memory = M>,
        B::Elem: Element,
    {
        DraftLogitsMut { data: B::Elem::values_mut(data.view_mut()), shape }
    }
}

/// The shape of the draft logits `[slots, k, width]`: element `(s, c, x)`
/// lives at `s*stride0 + c*stride1 + x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftLogitsShape {
    pub slots: usize,
    pub k: usize,
    pub width: usize,
    pub stride0: usize,
    pub stride1: usize,
}

impl DraftLogitsShape {
    /// Dense `[slots, k, width]`.
    pub fn dense(slots: usize, k: usize, width: usize) -> Self {
        DraftLogitsShape { slots, k, width, stride0: k * width, stride1: width }
    }

    /// Checks the shape against the vocabulary, the slot count and the
    /// buffer length: too narrow, too few slots, overlapping rows, or strides
    /// that overrun the buffer.
    pub(crate) fn check(&self, len: usize, vocab: usize, num_slots: usize) -> Result<()> {
        if self.width < vocab {
            return Err(Error::DraftLogitsTooNarrow { width: self.width, vocab });
        }
        if self.slots < num_slots {
            return Err(Error::DraftLogitsSlots { draft_slots: self.slots, num_slots });
        }
        if self.k == 0 {
            return Err(Error::ColumnOutOfRange { row: None, column: 0, k: 0 });
        }
        if self.overlaps() {
            return Err(Error::DraftLogitsOverlap {
                slots: self.slots,
                k: self.k,
                width: self.width,
                stride0: self.stride0,
                stride1: self.stride1,
            });
        }
        if self.slots > 0 {
            let needed = (self.slots - 1)
                .checked_mul(self.stride0)
                .and_then(|a| (self.k - 1).checked_mul(self.stride1).and_then(|b| a.checked_add(b)))
                .and_then(|o| o.checked_add(self.width))
                .unwrap_or(usize::MAX);
            check_extent("draft logits", needed, len)?;
        }
        Ok(())
    }

    /// Whether two `(slot, column)` rows of `width` elements share memory.
    /// The common layouts (dense, padded, transposed) nest: ordered by stride,
    /// each dimension steps past everything the smaller ones span, which is
    /// checked in O(1). Other layouts may interleave without sharing memory,
    /// so their row starts are sorted and compared (up to
    /// [`MAX_LISTED_ROWS`] rows; larger interleaved layouts count as overlapping).
    fn overlaps(&self) -> bool {
        // An array, not a Vec: a call on the GPU allocates nothing on the host either.
        let mut dims = [(self.stride1, self.k), (self.stride0, self.slots.max(1))];
        dims.sort();
        let mut span = self.width;
        let nested = dims.iter().filter(|&&(_, n)| n > 1).all(|&(stride, n)| {
            let fits = stride >= span;
            span = (n - 1).checked_mul(stride).and_then(|s| s.checked_add(span)).unwrap_or(usize::MAX);
            fits && span != usize::MAX
        });
        if nested {
            return false;
        }
        // Draft logits of no slots are judged as of one slot.
        let slots = self.slots.max(1);
        let Some(rows) = slots.checked_mul(self.k).filter(|&n| n <= MAX_LISTED_ROWS) else { return true };
        let mut starts = Vec::with_capacity(rows);
        for s in 0..slots {
            for c in 0..self.k {
                match s
                    .checked_mul(self.stride0)
                    .and_then(|a| c.checked_mul(self.stride1).and_then(|b| a.checked_add(b)))
                {
                    Some(o) => starts.push(o),
                    None => return true,
                }
            }
        }
        starts.sort_unstable();
        starts.windows(2).any(|w| w[1] - w[0] < self.width)
    }
}

/// The most `(slot, column)` rows an interleaved draft-logits layout may
/// have: its rows are listed and sorted to prove them disjoint.
pub const MAX_LISTED_ROWS: usize = 1 << 16;

/// Which draft-logits column each row of `gumbel_sample` writes.
pub enum Column<'a, M: Memory> {
    /// One column for every row (checked on the host).
    All(usize),
    /// One column per row (`i32 [rows]`; checked where it lives).
    PerRow(M::Ref<'a, i32>),
}

impl<'a, M: Memory> Column<'a, M> {
    /// One column per row, from `i32 [rows]` in host or device memory.
    pub fn per_row<B: View<'a, Memory = M, Elem = i32>>(columns: B) -> Self {
        Column::PerRow(columns.view())
    }
}

/// Token outputs, `i32` or `i64`.
pub enum Tokens<'a, M: Memory> {
    I32(M::Mut<'a, i32>),
    I64(M::Mut<'a, i64>),
}

impl<'a, M: Memory> Tokens<'a, M> {
    /// A token output of any [`TokenId`] type, in host or device memory.
    pub fn new<B>(data: B) -> Self
    where
        B: ViewMut<'a, Memory = M>,
        B::Elem: TokenId,
    {
        B::Elem::tokens(data.view_mut())
    }

    pub fn len(&self) -> usize {
        match self {
            Self::I32(b) => M::len_mut(b),
            Self::I64(b) => M::len_mut(b),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Tokens<'_, Device> {
    /// The device address, whether the ids are 64-bit, and the guard that
    /// records cudarc's write event when dropped after the launch.
    pub(crate) fn device_ptr_mut<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, bool, SyncOnDrop<'s>) {
        match self {
            Self::I32(b) => {
                let (ptr, guard) = b.device_ptr_mut(stream);
                (ptr, false, guard)
            }
            Self::I64(b) => {
                let (ptr, guard) = b.device_ptr_mut(stream);
                (ptr, true, guard)
            }
        }
    }
}

pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got { Ok(()) } else { Err(Error::LengthMismatch { what, expected, got }) }
}

fn check_extent(what: &'static str, needed: usize, len: usize) -> Result<()> {
    if needed <= len { Ok(()) } else { Err(Error::BufferTooSmall { what, needed, len }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(slots: usize, k: usize, width: usize, stride0: usize, stride1: usize) -> DraftLogitsShape {
        DraftLogitsShape { slots, k, width, stride0, stride1 }
    }

    #[test]
    fn draft_layouts() {
        let len = 4 * 3 * 1032;
        // Dense and padded layouts pass; transposed too.
        assert!(DraftLogitsShape::dense(4, 3, 1031).check(len, 1031, 4).is_ok());
        assert!(shape(4, 3, 1031, 3 * 1032, 1032).check(len, 1031, 4).is_ok());
        assert!(shape(4, 3, 1031, 1031, 4 * 1031).check(len, 1031, 4).is_ok());
        // Narrower than V.
        let e = shape(4, 3, 1030, 3 * 1030, 1030).check(len, 1031, 4).unwrap_err();
        assert!(e.to_string().contains("narrower"), "{e}");
        // Interleaved but disjoint rows are fine: [2, 3, 1] with strides (3, 2).
        assert!(shape(2, 3, 1, 3, 2).check(8, 1, 2).is_ok());
        assert!(matches!(shape(2, 3, 2, 3, 2).check(8, 1, 2), Err(Error::DraftLogitsOverlap { .. })));
        // Overlapping columns, overrunning strides, too few slots.
        assert!(matches!(shape(4, 3, 1031, 3 * 1031, 1000).check(len, 1031, 4), Err(Error::DraftLogitsOverlap { .. })));
        assert!(matches!(shape(4, 3, 1031, 4000, 1031).check(len, 1031, 4), Err(Error::BufferTooSmall { .. })));
        assert!(matches!(DraftLogitsShape::dense(2, 3, 1031).check(len, 1031, 4), Err(Error::DraftLogitsSlots { .. })));
        // Strides that overflow usize are an error, not a wrap.
        assert!(shape(4, 3, 1031, usize::MAX / 2, 1031).check(len, 1031, 4).is_err());
    }

    #[test]
    fn logits_extent() {
        let buf = [0f32; 10];
        let l = |rows, vocab, row_stride| Logits::<Host>::new(&buf, rows, vocab).with_row_stride(row_stride);
        assert!(l(2, 5, 5).check().is_ok());
        assert!(l(100, 10, 0).check().is_ok()); // broadcast row
        assert!(matches!(l(3, 5, 5).check(), Err(Error::BufferTooSmall { needed: 15, len: 10, .. })));
        assert!(matches!(l(1, 0, 0).check(), Err(Error::InvalidVocab { .. })));
        assert!(l(3, 5, usize::MAX).check().is_err());
        assert_eq!(Logits::new(&buf, 2, 5).row_stride, 5);
        assert_eq!(Logits::new(&[half::bf16::ZERO; 4], 2, 2).data.dtype(), DType::BF16);
    }
}
