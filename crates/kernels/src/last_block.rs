//! "Last block done": the blocks of a group (the chunks of one row, the rows
//! of one request) each publish a partial result, and the block that finishes
//! last combines them. One launch instead of a second, one-warp pass: at small
//! batch a launch and a dependent round trip through memory are most of the
//! time; at large batch a group is one block and nothing is counted.
//!
//! Each group has a `u32` counter in the workspace, zero between launches: the
//! last block resets it, so graph replays and later calls start from zero.

use crate::block::Reduce;
use crate::gpu::{self, WARP};

/// Counts this block's arrival at `counter` and says, in every lane of warp
/// 0, whether it was the last of `blocks`. Lane 0 fences between its own
/// earlier writes (this block's partial) and the increment; in the last block
/// every lane fences after it, so each may read any partial of the group (the
/// pattern of CUDA's `threadFenceReduction` sample).
///
/// # Safety
/// Called by all 32 lanes of warp 0 together, after lane 0 published this
/// block's partial; `counter` is the group's counter, valid device memory
/// that only this function touches; exactly `blocks` blocks arrive per launch.
#[inline(always)]
pub unsafe fn arrive(counter: *mut u32, blocks: u32) -> bool {
    let lane = gpu::thread_idx_x() % WARP;
    let mut last = 0;
    if lane == 0 {
        gpu::fence_device();
        // SAFETY: the caller guarantees the counter.
        if unsafe { gpu::atomic_inc(counter) } == blocks - 1 {
            // Every other block of the group has arrived: none touches it again.
            // SAFETY: as above.
            unsafe { gpu::atomic_store(counter, 0) };
            last = 1;
        }
    }
    // SAFETY: all 32 lanes are here together (caller).
    let last = unsafe { gpu::shfl_idx_u32(last, 0) } != 0;
    if last {
        gpu::fence_device();
    }
    last
}

/// Warp 0 of block `c` of a group of `blocks` with the block's result
/// `mine`: publishes it as `partials[c]` and returns, in every lane of the
/// group's last block, all `blocks` partials combined (`None` elsewhere). A
/// group of one block returns `mine` and touches no memory.
///
/// # Safety
/// Called by all 32 lanes of warp 0 together, once per block of the group;
/// `partials` holds `blocks` entries and `counter` is the group's counter
/// (as for [`arrive`]); `c < blocks`.
#[inline(always)]
pub unsafe fn combine<T: Reduce>(partials: *mut T, c: u32, blocks: u32, counter: *mut u32, mine: T) -> Option<T> {
    if blocks == 1 {
        return Some(mine);
    }
    let lane = gpu::thread_idx_x() % WARP;
    if lane == 0 {
        // SAFETY: c < blocks (caller).
        unsafe { partials.add(c as usize).write(mine) };
    }
    // SAFETY: all of warp 0, after lane 0 published (caller: the group's counter).
    if !unsafe { arrive(counter, blocks) } {
        return None;
    }
    // SAFETY: every partial was published (arrive); the whole warp is here.
    Some(unsafe { gather(partials, blocks) })
}

/// The `n` results at `partials`, published by other blocks of this launch,
/// combined by a whole warp; every lane gets the result. Lane `l` reads
/// entries `l, l + 32, …`, several loads in flight before it combines any
/// (eight of up to 16 bytes, two of up to 64, else one: registers in the
/// decision of pass 1 are scarce): at a small batch each round trip to memory is a large
/// part of the call, and a group of up to 256 (64) entries then costs one
/// (one row's 149 chunks, at V = 151,936).
///
/// # Safety
/// All 32 lanes call this together; `partials` is 16-byte aligned and holds
/// `n` entries of plain data, a multiple of 16 bytes each, each published
/// before (fenced, as [`arrive`] does).
#[inline(always)]
pub unsafe fn gather<T: Reduce>(partials: *const T, n: u32) -> T {
    let small = const { core::mem::size_of::<T>() <= 16 };
    let medium = const { core::mem::size_of::<T>() <= 64 };
    let lane = gpu::thread_idx_x() % WARP;
    let mut acc = T::IDENTITY;
    let mut base = 0;
    while base < n {
        let get = |k: u32| {
            let j = base + k * WARP + lane;
            // SAFETY: j < n (caller: aligned plain data). Relaxed at device
            // scope: read from L2, never from a stale L1 line.
            if j < n { unsafe { gpu::load_relaxed(partials.add(j as usize)) } } else { T::IDENTITY }
        };
        if small {
            let (a, b, c, d) = (get(0), get(1), get(2), get(3));
            let (e, f, g, h) = (get(4), get(5), get(6), get(7));
            acc = acc.combine(a.combine(b).combine(c.combine(d)).combine(e.combine(f).combine(g.combine(h))));
            base += 8 * WARP;
        } else if medium {
            let (a, b) = (get(0), get(1));
            acc = acc.combine(a.combine(b));
            base += 2 * WARP;
        } else {
            acc = acc.combine(get(0));
            base += WARP;
        }
    }
    // SAFETY: the whole warp is here (uniform loop bounds).
    unsafe { acc.warp_all() }
}
