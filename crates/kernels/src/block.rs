//! Block- and warp-level reductions, reusable by every kernel.
//!
//! A reduction value implements [`Reduce`]: an identity, an associative and
//! commutative combine, and a warp shuffle. [`Partial`] (best candidate plus
//! status flags) is the one the samplers use; its order is total, so the
//! result does not depend on which thread held which element.

use crate::gpu::{self, WARP};
use specdec_core::argmax::{ArgMax, floor_key, floor_value};
use specdec_core::layout::{REDUCE_SHARED_BYTES, SHARED_BYTES, WARPS};

/// A value that warps and blocks can reduce.
pub trait Reduce: Copy {
    const IDENTITY: Self;
    fn combine(self, other: Self) -> Self;
    /// The value of lane `lane ^ lane_mask`.
    ///
    /// # Safety
    /// All 32 lanes of the warp must be active and call this together.
    unsafe fn shfl_bfly(self, lane_mask: u32) -> Self;

    /// The values of the warp's 32 lanes reduced, in every lane: by default
    /// [`warp_combine`], a butterfly of `combine`; a type whose `combine` is
    /// a long chain may reduce in fewer dependent steps.
    ///
    /// # Safety
    /// All 32 lanes of the warp must be active and call this together.
    #[inline(always)]
    unsafe fn warp_all(self) -> Self {
        // SAFETY: forwarded.
        unsafe { warp_combine(self) }
    }
}

/// A best candidate and the flags seen along the way.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Partial {
    pub best: ArgMax,
    pub flags: u32,
    _pad: u32,
}

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
    unsafe fn shfl_bfly(self, lane_mask: u32) -> Self {
        // SAFETY: the caller guarantees a full, converged warp.
        unsafe {
            Partial::new(
                ArgMax {
                    value: gpu::shfl_bfly_f32(self.best.value, lane_mask),
                    index: gpu::shfl_bfly_u32(self.best.index, lane_mask),
                },
                gpu::shfl_bfly_u32(self.flags, lane_mask),
            )
        }
    }

    #[inline(always)]
    unsafe fn warp_all(self) -> Self {
        // SAFETY (both): the caller guarantees a full, converged warp.
        unsafe { Partial::new(warp_best(self.best), gpu::warp_or_u32(self.flags)) }
    }
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
pub unsafe fn warp_fold<T: Copy>(v: T, shfl: unsafe fn(T, u32) -> T, op: impl Fn(T, T) -> T) -> T {
    // SAFETY: forwarded.
    unsafe { fold_from(WARP / 2, v, shfl, op) }
}

/// [`warp_fold`] from butterfly distance `lane_mask` (a power of two, at
/// most 16) down to 1.
///
/// # Safety
/// As for [`warp_fold`].
#[inline(always)]
unsafe fn fold_from<T: Copy>(mut lane_mask: u32, mut v: T, shfl: unsafe fn(T, u32) -> T, op: impl Fn(T, T) -> T) -> T {
    while lane_mask > 0 {
        // SAFETY: the caller guarantees a full, converged warp.
        v = op(v, unsafe { shfl(v, lane_mask) });
        lane_mask /= 2;
    }
    v
}

/// The default [`Reduce::warp_all`]: a butterfly of `combine` across the 32
/// lanes of a warp; every lane gets the result.
///
/// A loop the compilers cannot unroll (its bound is [`gpu::opaque`]): these
/// reductions run once per block, cold at a small batch, where each line
/// of code is fetched from memory, and the unrolled steps of a [`Stats`]
/// reduction were copied three times per pass-1 kernel (rolled, small
/// verifies measured faster: benches/results/2026-12-02-design-measurements.md).
/// The noise loops' per-batch [`warp_fold`] stays unrolled.
///
/// [`Stats`]: crate::rejection::Stats
///
/// # Safety
/// All 32 lanes of the warp must be active and call this together.
#[inline(always)]
pub unsafe fn warp_combine<T: Reduce>(v: T) -> T {
    // SAFETY: forwarded.
    unsafe { fold_from(gpu::opaque(WARP / 2), v, T::shfl_bfly, T::combine) }
}

/// Shared memory [`block_reduce`] needs for `T`, in bytes (the launcher requests
/// the largest over the kernel's reductions).
pub const fn block_reduce_shared_bytes<T>() -> u32 {
    WARPS * core::mem::size_of::<T>() as u32
}

/// Reduces across a block of `layout::BLOCK_THREADS` threads; the result is
/// valid in thread 0 (other threads hold partial results).
///
/// # Safety
/// The block has exactly `layout::BLOCK_THREADS` threads, all of which call
/// this together (it contains barriers), and at least
/// [`block_reduce_shared_bytes::<T>`] of dynamic shared memory were requested.
#[inline(always)]
pub unsafe fn block_reduce<T: Reduce>(v: T) -> T {
    let tid = gpu::thread_idx_x();
    let (warp, lane) = (tid / WARP, tid % WARP);
    // SAFETY: all threads of the block are here (caller), so every warp is full.
    let v = unsafe { v.warp_all() };
    // SAFETY: the launch requested enough shared memory (caller).
    let shared = unsafe { gpu::dynamic_shared::<T>() };
    if lane == 0 {
        // SAFETY: warp < WARPS, inside the requested shared memory.
        unsafe { shared.add(warp as usize).write(v) };
    }
    // SAFETY: block-uniform barrier (all threads call block_reduce).
    unsafe { gpu::sync_threads() };
    let mut out = v;
    if warp == 0 {
        // SAFETY: lane < WARPS reads a slot written before the barrier.
        let mine = if lane < WARPS { unsafe { shared.add(lane as usize).read() } } else { T::IDENTITY };
        // SAFETY: warp 0 is full and converged here.
        out = unsafe { mine.warp_all() };
    }
    // Keep the slots until warp 0 has read them, so the next reduction in the
    // same kernel may reuse the memory.
    // SAFETY: block-uniform barrier.
    unsafe { gpu::sync_threads() };
    out
}

/// The block's state after the reduction slots of the launch's dynamic
/// shared memory (`layout::SHARED_BYTES`): pass 1's request, or a shared
/// loop's batch counter.
///
/// # Safety
/// A launch with `SHARED_BYTES` of dynamic shared memory; one use at a time.
#[inline(always)]
pub unsafe fn block_state<T>() -> *mut T {
    const { assert!(core::mem::size_of::<T>() as u32 <= SHARED_BYTES - REDUCE_SHARED_BYTES) };
    const { assert!(core::mem::align_of::<T>() <= 8) };
    // SAFETY: inside the launch's dynamic shared memory (caller); 8-aligned.
    unsafe { gpu::dynamic_shared::<u8>().add(REDUCE_SHARED_BYTES as usize) as *mut T }
}
