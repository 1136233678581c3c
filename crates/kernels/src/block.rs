//! Block- and warp-level reductions, reusable by every kernel.
//!
//! The reduced value is a [`Partial`]: the best candidate under the total order
//! of [`ArgMax::combine`] plus the OR of status flags seen. Because the order is
//! total, the result does not depend on which thread held which element.

use crate::gpu::{self, WARP};
use specdec_core::argmax::ArgMax;
use specdec_core::layout::WARPS;


/// A reduction value: the best candidate and the flags seen along the way.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Partial {
    pub best: ArgMax,
    pub flags: u32,
    _pad: u32,
}

impl Partial {
    pub const IDENTITY: Partial = Partial { best: ArgMax::IDENTITY, flags: 0, _pad: 0 };

    #[inline(always)]
    pub fn new(best: ArgMax, flags: u32) -> Self {
        Partial { best, flags, _pad: 0 }
    }

    #[inline(always)]
    pub fn combine(self, other: Partial) -> Partial {
        Partial::new(self.best.combine(other.best), self.flags | other.flags)
    }
}

/// Shared memory [`block_reduce`] needs, in bytes (the launcher requests it).
pub const BLOCK_REDUCE_SHARED_BYTES: u32 = WARPS * core::mem::size_of::<Partial>() as u32;

/// Reduces across the 32 lanes of a warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp must be active and call this together.
#[inline(always)]
pub unsafe fn warp_reduce(mut p: Partial) -> Partial {
    let mut lane_mask = WARP / 2;
    while lane_mask > 0 {
        // SAFETY: the caller guarantees a full, converged warp.
        let other = unsafe {
            Partial::new(
                ArgMax {
                    value: gpu::shfl_bfly_f32(p.best.value, lane_mask),
                    index: gpu::shfl_bfly_u32(p.best.index, lane_mask),
                },
                gpu::shfl_bfly_u32(p.flags, lane_mask),
            )
        };
        p = p.combine(other);
        lane_mask /= 2;
    }
    p
}

/// Reduces across a block of `layout::BLOCK_THREADS` threads; the result is valid in
/// thread 0 (other threads get partial results).
///
/// # Safety
/// The block has exactly `layout::BLOCK_THREADS` threads, all of which call this
/// together (it contains barriers), and at least
/// [`BLOCK_REDUCE_SHARED_BYTES`] of dynamic shared memory were requested.
#[inline(always)]
pub unsafe fn block_reduce(p: Partial) -> Partial {
    let tid = gpu::thread_idx_x();
    let (warp, lane) = (tid / WARP, tid % WARP);
    // SAFETY: all threads of the block are here (caller), so every warp is full.
    let p = unsafe { warp_reduce(p) };
    // SAFETY: the launch requested BLOCK_REDUCE_SHARED_BYTES (caller).
    let shared = unsafe { gpu::dynamic_shared::<Partial>() };
    if lane == 0 {
        // SAFETY: warp < WARPS, inside the requested shared memory.
        unsafe { shared.add(warp as usize).write(p) };
    }
    // SAFETY: block-uniform barrier (all threads call block_reduce).
    unsafe { gpu::sync_threads() };
    let mut out = p;
    if warp == 0 {
        let mine = if lane < WARPS {
            // SAFETY: lane < WARPS, written before the barrier.
            unsafe { shared.add(lane as usize).read() }
        } else {
            Partial::IDENTITY
        };
        // SAFETY: warp 0 is full and converged here.
        out = unsafe { warp_reduce(mine) };
    }
    // Keep the shared slots alive until warp 0 has read them, so a second
    // reduction in the same kernel may reuse them.
    // SAFETY: block-uniform barrier.
    unsafe { gpu::sync_threads() };
    out
}
