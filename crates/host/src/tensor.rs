//! Buffer descriptions shared by every operation: logits, the draft-logits
//! cache, per-slot tables and token outputs, each with its shape checks.
//! All stride arithmetic is in `usize` with overflow checks, so a bad shape
//! becomes a typed error, never a wrapped index.

use crate::error::{Error, Result};
use crate::memory::Memory;
use half::{bf16, f16};
pub use specdec_core::dtype::DType;

/// Largest supported vocabulary (keeps device index arithmetic in `u32`).
pub const MAX_VOCAB: usize = 1 << 30;

/// `dtype()`, `len()` and `is_empty()` for an enum of one buffer per dtype
/// (`$len` is the `Memory` length function of its buffer kind).
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

/// Logits elements, by dtype.
pub enum LogitsData<'a, M: Memory> {
    F32(M::Ref<'a, f32>),
    BF16(M::Ref<'a, bf16>),
    F16(M::Ref<'a, f16>),
}

by_dtype!(LogitsData, len);

/// `[rows, >= vocab]` logits with an arbitrary row stride (0 broadcasts one
/// row) and last stride 1. Ids `vocab..` of a row are never read.
pub struct Logits<'a, M: Memory> {
    pub data: LogitsData<'a, M>,
    pub rows: usize,
    pub vocab: usize,
    /// Elements between consecutive rows.
    pub row_stride: usize,
}

impl<M: Memory> Logits<'_, M> {
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

/// Draft-cache elements, by dtype.
pub enum CacheData<'a, M: Memory> {
    F32(M::Mut<'a, f32>),
    BF16(M::Mut<'a, bf16>),
    F16(M::Mut<'a, f16>),
}

by_dtype!(CacheData, len_mut);

/// The draft-logits cache that `gumbel_sample` writes: raw (pre-temperature)
/// logits laid out as `shape` says.
pub struct DraftCache<'a, M: Memory> {
    pub data: CacheData<'a, M>,
    pub shape: CacheShape,
}

impl<M: Memory> DraftCache<'_, M> {
    pub(crate) fn check(&self, vocab: usize, num_slots: usize) -> Result<()> {
        self.shape.check(self.data.len(), vocab, num_slots)
    }
}

/// The shape of a draft-logits cache `[slots, k, width]`: element `(s, c, x)`
/// lives at `s*stride0 + c*stride1 + x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    pub slots: usize,
    pub k: usize,
    pub width: usize,
    pub stride0: usize,
    pub stride1: usize,
}

impl CacheShape {
    /// Checks the shape against the vocabulary, the slot count and the
    /// buffer length: too narrow, too few slots, overlapping rows, or strides
    /// that overrun the buffer.
    pub(crate) fn check(&self, len: usize, vocab: usize, num_slots: usize) -> Result<()> {
        if self.width < vocab {
            return Err(Error::CacheTooNarrow { cache_width: self.width, vocab });
        }
        if self.slots < num_slots {
            return Err(Error::CacheSlots { cache_slots: self.slots, num_slots });
        }
        if self.k == 0 {
            return Err(Error::ColumnOutOfRange { row: None, column: 0, k: 0 });
        }
        if self.overlaps() {
            return Err(Error::CacheOverlap {
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
            check_extent("draft cache", needed, len)?;
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
        // A cache of no slots is judged as one of one slot.
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

/// The most `(slot, column)` rows an interleaved cache layout may have: its
/// rows are listed and sorted to prove them disjoint.
pub const MAX_LISTED_ROWS: usize = 1 << 16;

/// Read-only draft logits (the cache `gumbel_sample` filled), for verification.
pub struct DraftLogits<'a, M: Memory> {
    pub data: LogitsData<'a, M>,
    pub shape: CacheShape,
}

/// Which cache column each row writes.
pub enum Column<'a, M: Memory> {
    /// One column for every row (checked on the host).
    All(usize),
    /// One column per row (`i32 [rows]`; checked where it lives).
    PerRow(M::Ref<'a, i32>),
}

/// Per-slot sampling parameters, indexed by a row's slot.
pub struct SlotTable<'a, M: Memory> {
    /// `T` per slot: `0` greedy, `> 0` sampling; negative/NaN/inf invalid.
    pub temperature: M::Ref<'a, f32>,
    pub seed: M::Ref<'a, u64>,
}

impl<M: Memory> SlotTable<'_, M> {
    /// The number of slots.
    pub(crate) fn check(&self) -> Result<usize> {
        let n = M::len(&self.temperature);
        check_len("seed table", n, M::len(&self.seed))?;
        Ok(n)
    }
}

/// Token outputs, `i32` or `i64`.
pub enum Tokens<'a, M: Memory> {
    I32(M::Mut<'a, i32>),
    I64(M::Mut<'a, i64>),
}

impl<M: Memory> Tokens<'_, M> {
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

pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got { Ok(()) } else { Err(Error::LengthMismatch { what, expected, got }) }
}

fn check_extent(what: &'static str, needed: usize, len: usize) -> Result<()> {
    if needed <= len { Ok(()) } else { Err(Error::BufferTooSmall { what, needed, len }) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Host;

    fn cache(buf: &mut [f32], slots: usize, k: usize, width: usize, s0: usize, s1: usize) -> DraftCache<'_, Host> {
        DraftCache { data: CacheData::F32(buf), shape: CacheShape { slots, k, width, stride0: s0, stride1: s1 } }
    }

    #[test]
    fn cache_layouts() {
        let mut buf = vec![0f32; 4 * 3 * 1032];
        // Dense and padded layouts pass; transposed too.
        assert!(cache(&mut buf, 4, 3, 1031, 3 * 1031, 1031).check(1031, 4).is_ok());
        assert!(cache(&mut buf, 4, 3, 1031, 3 * 1032, 1032).check(1031, 4).is_ok());
        assert!(cache(&mut buf, 4, 3, 1031, 1031, 4 * 1031).check(1031, 4).is_ok());
        // Narrower than V.
        let e = cache(&mut buf, 4, 3, 1030, 3 * 1030, 1030).check(1031, 4).unwrap_err();
        assert!(e.to_string().contains("narrower"), "{e}");
        // Interleaved but disjoint rows are fine: [2, 3, 1] with strides (3, 2).
        let mut small = [0f32; 8];
        assert!(cache(&mut small, 2, 3, 1, 3, 2).check(1, 2).is_ok());
        assert!(matches!(cache(&mut small, 2, 3, 2, 3, 2).check(1, 2), Err(Error::CacheOverlap { .. })));
        // Overlapping columns, overrunning strides, too few slots.
        assert!(matches!(cache(&mut buf, 4, 3, 1031, 3 * 1031, 1000).check(1031, 4), Err(Error::CacheOverlap { .. })));
        assert!(matches!(cache(&mut buf, 4, 3, 1031, 4000, 1031).check(1031, 4), Err(Error::BufferTooSmall { .. })));
        assert!(matches!(cache(&mut buf, 2, 3, 1031, 3 * 1031, 1031).check(1031, 4), Err(Error::CacheSlots { .. })));
        // Strides that overflow usize are an error, not a wrap.
        assert!(cache(&mut buf, 4, 3, 1031, usize::MAX / 2, 1031).check(1031, 4).is_err());
    }

    #[test]
    fn logits_extent() {
        let buf = [0f32; 10];
        let l = |rows, vocab, row_stride| Logits::<Host> { data: LogitsData::F32(&buf[..]), rows, vocab, row_stride };
        assert!(l(2, 5, 5).check().is_ok());
        assert!(l(100, 10, 0).check().is_ok()); // broadcast row
        assert!(matches!(l(3, 5, 5).check(), Err(Error::BufferTooSmall { needed: 15, len: 10, .. })));
        assert!(matches!(l(1, 0, 0).check(), Err(Error::InvalidVocab { .. })));
        assert!(l(3, 5, usize::MAX).check().is_err());
    }
}
