//! The launch's dynamic shared memory, typed ([`Shared`]): one slot per warp
//! for the block's reductions and the decision's rows, then one record for
//! the whole block. Every launch requests `layout::SHARED_BYTES`, its size
//! (asserted), and each accessor asserts that its type fits its region.

use crate::block::{ExactSum, Partial};
use crate::gpu;
use crate::load::Walk;
use crate::rejection::{Head, Mass, Request, RowDecision};
use core::mem::{align_of, size_of};
use specdec_core::exp_sum::GROUPS;
use specdec_core::layout::{BLOCK_THREADS, SHARED_BYTES, WALK_SHARED_BYTES, WARPS};
use specdec_core::sample::Resampled;

/// The dynamic shared memory of every launch.
#[repr(C)]
pub struct Shared {
    pub warps: WarpSlots,
    pub block: BlockRecord,
}

/// One value per warp; one use at a time, barriers between.
#[repr(C)]
pub union WarpSlots {
    /// `gumbel_sample`'s block reduction ([`crate::block::block_reduce`]).
    pub partials: [Partial; WARPS as usize],
    /// Pass 1's block reduction (its `Row`s are `Head`s).
    pub heads: [Head; WARPS as usize],
    /// Pass 2's block reduction (its `Candidates` are `Resampled`).
    pub candidates: [Resampled; WARPS as usize],
    /// Pass 1's exact sums (`LSE(S)` of a pooled row).
    pub sums: [ExactSum; WARPS as usize],
    /// Block verification's residual masses.
    pub masses: [Mass; WARPS as usize],
    /// The decision's per-warp rows.
    pub decisions: [RowDecision; WARPS as usize],
}

/// One record for the whole block.
#[repr(C)]
pub union BlockRecord {
    /// Pass 1's request, kept for the decision.
    pub request: Request,
    /// A shared walk's state ([`crate::load::for_each_quad_shared`]).
    pub walk: Walk,
}

const _: () = assert!(size_of::<Shared>() as u32 == SHARED_BYTES);

/// The dynamic shared memory of the kernels that sum by runs (pass 1 of
/// `rejection_sample`, `logprobs_lse`): [`Shared`], then each thread's
/// walk sums (`crate::walk_sum`) of two distributions.
#[repr(C)]
pub struct WalkShared {
    pub base: Shared,
    pub walk_sums: [[[u128; BLOCK_THREADS as usize]; GROUPS]; 2],
}

const _: () = assert!(size_of::<WalkShared>() as u32 == WALK_SHARED_BYTES);

/// Group row `g` of walk sums `which`: its `BLOCK_THREADS` columns' entries.
///
/// # Safety
/// As for [`walk_sums`]; `g < GROUPS`.
#[inline(always)]
pub unsafe fn walk_sum_row(which: usize, g: usize) -> *mut u128 {
    // SAFETY: inside the launch's dynamic shared memory (caller).
    unsafe {
        let all = &raw mut (*gpu::dynamic_shared::<WalkShared>()).walk_sums;
        (all as *mut u128).add((which * GROUPS + g) * BLOCK_THREADS as usize)
    }
}

/// This thread's column of walk sums `which` (`0` or `1`: pass 1's target
/// and draft, `logprobs_lse`'s raw and processed): group
/// `j`'s at `.add(j · BLOCK_THREADS)`.
///
/// # Safety
/// The launch requested `layout::WALK_SHARED_BYTES`; `which < 2`.
#[inline(always)]
pub unsafe fn walk_sums(which: usize) -> *mut u128 {
    // SAFETY: inside the launch's dynamic shared memory (caller).
    unsafe {
        let all = &raw mut (*gpu::dynamic_shared::<WalkShared>()).walk_sums;
        (all as *mut u128).add(which * GROUPS * BLOCK_THREADS as usize + gpu::thread_idx_x() as usize)
    }
}

/// The launch's dynamic shared memory.
///
/// # Safety
/// The launch requested `layout::SHARED_BYTES` of it; accesses are
/// synchronised with `gpu::sync_threads`.
#[inline(always)]
unsafe fn shared() -> *mut Shared {
    // SAFETY: forwarded.
    unsafe { gpu::dynamic_shared::<Shared>() }
}

/// The per-warp slots as `T`s, `T` one of [`WarpSlots`]' (or a transparent
/// wrapper of one): slot `w` is `warp_slots::<T>().add(w)`.
///
/// # Safety
/// As for [`shared`]; no other use of the slots meanwhile.
#[inline(always)]
pub unsafe fn warp_slots<T>() -> *mut T {
    const { assert!(WARPS as usize * size_of::<T>() <= size_of::<WarpSlots>()) };
    const { assert!(align_of::<T>() <= align_of::<WarpSlots>()) };
    // SAFETY: inside the launch's dynamic shared memory (caller).
    unsafe { (&raw mut (*shared()).warps).cast() }
}

/// The decision's per-warp rows: row `w` is `decisions().add(w)`.
///
/// # Safety
/// As for [`warp_slots`].
#[inline(always)]
pub unsafe fn decisions() -> *mut RowDecision {
    // SAFETY: inside the launch's dynamic shared memory (caller).
    unsafe { (&raw mut (*shared()).warps.decisions).cast() }
}

/// Where pass 1 keeps its block's request for the decision.
///
/// # Safety
/// As for [`shared`]; the block record's one use in the launch.
#[inline(always)]
pub unsafe fn request() -> *mut Request {
    // SAFETY: inside the launch's dynamic shared memory (caller).
    unsafe { &raw mut (*shared()).block.request }
}

/// A shared walk's state.
///
/// # Safety
/// As for [`shared`]; no other use of the block record meanwhile.
#[inline(always)]
pub unsafe fn walk() -> *mut Walk {
    // SAFETY: inside the launch's dynamic shared memory (caller).
    unsafe { &raw mut (*shared()).block.walk }
}
