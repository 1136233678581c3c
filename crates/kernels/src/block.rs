//! Block- and warp-level reductions, reusable by every kernel.
//!
//! A reduction value implements [`Reduce`]: an identity, an associative and
//! commutative combine, and its warp-wide reduction. [`Partial`] (best candidate plus
//! status flags) is the one the samplers use; its order is total, so the
//! result does not depend on which thread held which element.

use crate::gpu::{self, WARP};
use crate::shared;
use specdec_core::argmax::{ArgMax, floor_key, floor_value};
use specdec_core::layout::WARPS;

/// A value that warps and blocks can reduce.
pub trait Reduce: Copy {
    const IDENTITY: Self;
    fn combine(self, other: Self) -> Self;

    /// The values of the warp's 32 lanes reduced by `combine`, in every
    /// lane. Each type reduces its own fields in the fewest dependent steps
    /// it can (`redux.sync` for maxima and flags, where a butterfly of
    /// `combine` takes five rounds of shuffles and compares).
    ///
    /// # Safety
    /// All 32 lanes of the warp must be active and call this together.
    unsafe fn warp_all(self) -> Self;
}

/// A best candidate and the flags seen along the way.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Partial {
    pub best: ArgMax,
    pub flags: u32,
    _pad: u32,
}

// One scratch region holds these and the resample's candidates (the host sizes it).
const _: () = assert!(core::mem::size_of::<Partial>() == specdec_core::scratch::PARTIAL_BYTES);

impl Partial {
    #[inline(always)]
    pub fn new(best: ArgMax, flags: u32) -> Self {
        Partial { best, flags, _pad: 0 }
    }
}

impl Reduce for Partial {
    const IDENTITY: Partial = Partial { best: ArgMax::IDENTITY, flags: 0, _pad: 0 };

    #[inline(always)]
    fn combine(self, other: Partial) -> Partial {
        Partial::new(self.best.combine(other.best), self.flags | other.flags)
    }

    #[inline(always)]
    unsafe fn warp_all(self) -> Self {
        // SAFETY (both): the caller guarantees a full, converged warp.
        unsafe { Partial::new(warp_best(self.best), gpu::warp_or_u32(self.flags)) }
    }
}

/// A `u64` sum, exact in any order (integer adds, wrapping only past
/// `u64`), as two words: the warp slots hold 4-byte-aligned values.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ExactSum {
    lo: u32,
    hi: u32,
}

impl ExactSum {
    #[inline(always)]
    pub fn new(v: u64) -> ExactSum {
        ExactSum { lo: v as u32, hi: (v >> 32) as u32 }
    }

    #[inline(always)]
    pub fn get(self) -> u64 {
        (self.hi as u64) << 32 | self.lo as u64
    }
}

impl Reduce for ExactSum {
    const IDENTITY: ExactSum = ExactSum { lo: 0, hi: 0 };

    #[inline(always)]
    fn combine(self, other: ExactSum) -> ExactSum {
        ExactSum::new(self.get().wrapping_add(other.get()))
    }

    #[inline(always)]
    unsafe fn warp_all(self) -> Self {
        // SAFETY (both): the caller guarantees a full, converged warp.
        let shfl = |v: ExactSum, m: u32| unsafe {
            ExactSum { lo: gpu::shfl_bfly_u32(v.lo, m), hi: gpu::shfl_bfly_u32(v.hi, m) }
        };
        unsafe { warp_fold(self, shfl, ExactSum::combine) }
    }
}

/// The sum of the warp's 32 `u128`s (which must not overflow), in every
/// lane: a butterfly of their four 32-bit words, added as `u128`s.
///
/// # Safety
/// All 32 lanes of the warp must be active and call this together.
#[inline(always)]
pub unsafe fn warp_sum_u128(mut sum: u128) -> u128 {
    // A shift, not an array of masks: an array's iterator stays in local memory.
    for k in 0..5 {
        let lane_mask = (WARP / 2) >> k;
        // SAFETY: the caller guarantees a full, converged warp.
        let word = |i: u32| u128::from(unsafe { gpu::shfl_bfly_u32((sum >> (32 * i)) as u32, lane_mask) }) << (32 * i);
        sum += word(0) | word(1) | word(2) | word(3);
    }
    sum
}

/// The best of the warp's 32 candidates by [`ArgMax::combine`]'s order, in
/// every lane: the largest value by one `redux.sync` on its order key
/// ([`floor_key`]; values are never NaN), then the smallest index among the
/// lanes whose value equals it, by another. Where a butterfly of `combine`
/// takes five rounds of two shuffles and a compare. (Of equal values `-0`
/// and `+0` the result keeps `+0`; an index that ties both is the same.)
///
/// # Safety
/// All 32 lanes of the warp must be active and call this together.
#[inline(always)]
pub unsafe fn warp_best(a: ArgMax) -> ArgMax {
    // SAFETY (both): the caller guarantees a full, converged warp.
    let value = floor_value(unsafe { gpu::warp_max_i32(floor_key(a.value)) });
    let index = unsafe { gpu::warp_min_u32(if a.value == value { a.index } else { u32::MAX }) };
    ArgMax { value, index }
}

/// `op` (associative and commutative) of `v` across the 32 lanes of a warp,
/// by butterfly shuffles (`shfl(v, lane_mask)`); every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp must be active and call this together.
#[inline(always)]
pub unsafe fn warp_fold<T: Copy>(mut v: T, shfl: unsafe fn(T, u32) -> T, op: impl Fn(T, T) -> T) -> T {
    let mut lane_mask = WARP / 2;
    while lane_mask > 0 {
        // SAFETY: the caller guarantees a full, converged warp.
        v = op(v, unsafe { shfl(v, lane_mask) });
        lane_mask /= 2;
    }
    v
}

/// Reduces across a block of `layout::BLOCK_THREADS` threads; the result is
/// valid in thread 0 (other threads hold partial results).
///
/// # Safety
/// The block has exactly `layout::BLOCK_THREADS` threads, all of which call
/// this together (it contains barriers), the launch requested
/// `layout::SHARED_BYTES` of dynamic shared memory, and `T` is one of
/// [`shared::WarpSlots`]' types.
#[inline(always)]
pub unsafe fn block_reduce<T: Reduce>(v: T) -> T {
    let tid = gpu::thread_idx_x();
    let (warp, lane) = (tid / WARP, tid % WARP);
    // SAFETY: all threads of the block are here (caller), so every warp is full.
    let v = unsafe { v.warp_all() };
    // SAFETY: the launch requested the shared memory (caller).
    let slots = unsafe { shared::warp_slots::<T>() };
    if lane == 0 {
        // SAFETY: warp < WARPS, inside the requested shared memory.
        unsafe { slots.add(warp as usize).write(v) };
    }
    // SAFETY: block-uniform barrier (all threads call block_reduce).
    unsafe { gpu::sync_threads() };
    let mut out = v;
    if warp == 0 {
        // SAFETY: lane < WARPS reads a slot written before the barrier.
        let mine = if lane < WARPS { unsafe { slots.add(lane as usize).read() } } else { T::IDENTITY };
        // SAFETY: warp 0 is full and converged here.
        out = unsafe { mine.warp_all() };
    }
    // Keep the slots until warp 0 has read them, so the next reduction in the
    // same kernel may reuse the memory.
    // SAFETY: block-uniform barrier.
    unsafe { gpu::sync_threads() };
    out
}
