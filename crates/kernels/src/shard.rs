//! Sharded calls on the device (`docs/VOCAB_PARALLEL.md` §6 step 5): after
//! an exchange, every rank holds every rank's message (`specdec_core::shard`).
//! Every combine first asks whether the ranks' messages fit together
//! ([`block_unfit`], [`warp_unfit`]); `gumbel_combine` then folds each row's
//! results by the argmax rule into the call's outputs, as the unsharded
//! call's row's last block writes them.
//!
//! `gumbel_combine`: one launch, grid `(⌈rows / BLOCK_THREADS⌉)`,
//! `layout::BLOCK_THREADS` threads, no shared memory: thread `t` of block `b`
//! combines row `b·BLOCK_THREADS + t`. The ranks' results arrive in rank
//! order and combine by a total order, so the token is the unsharded call's.
//! A row whose ranks disagree (a failed rank, calls or shards that do not
//! fit together, different inputs read for the row: `shard::Header::fits`,
//! `shard::row_digest`) gets token `-1` and `status::INVALID_SHARD`.

use crate::gpu;
use crate::row::write_token;
use specdec_core::argmax::ArgMax;
use specdec_core::kernel_symbol;
use specdec_core::layout::{BLOCK_THREADS, GumbelCombineParams};
use specdec_core::shard::{self, Header};
use specdec_core::status::{INVALID, INVALID_SHARD};

/// Whether some of the `ranks` messages of `len` bytes at `recv` do not fit
/// together (`Header::fits`), the whole block's answer.
///
/// # Safety
/// Every thread of the block calls it (a barrier); `recv` holds `ranks`
/// messages of `len` bytes, each beginning with its `Header`.
#[inline(always)]
pub unsafe fn block_unfit(recv: u64, len: usize, ranks: u32) -> bool {
    // SAFETY: as the caller promises.
    unsafe { gpu::sync_threads_or(any_unfit(recv, len, ranks, gpu::thread_idx_x(), BLOCK_THREADS)) }
}

/// [`block_unfit`], a warp's answer.
///
/// # Safety
/// All 32 lanes of the warp call it together; `recv` as for [`block_unfit`].
#[inline(always)]
pub unsafe fn warp_unfit(recv: u64, len: usize, ranks: u32) -> bool {
    let lane = gpu::thread_idx_x() % gpu::WARP;
    // SAFETY: as the caller promises.
    unsafe { gpu::warp_or_u32(any_unfit(recv, len, ranks, lane, gpu::WARP) as u32) != 0 }
}

/// Whether one of the ranks `first, first + step, ..` below `ranks` does not fit.
///
/// # Safety
/// As for [`block_unfit`]'s `recv`.
#[inline(always)]
unsafe fn any_unfit(recv: u64, len: usize, ranks: u32, first: u32, step: u32) -> bool {
    // SAFETY: rank q < ranks: its message is inside `recv` (caller).
    let header = |q: usize| unsafe { *((recv + (q * len) as u64) as *const Header) };
    let mut unfit = false;
    let mut q = first;
    while q < ranks {
        unfit |= !Header::fits(ranks as usize, header, q as usize);
        q += step;
    }
    unfit
}

/// `gumbel_sample`'s combine of a sharded call (`names::GUMBEL_COMBINE`; see module docs).
///
/// # Safety
/// Launched by the host's checked launcher as the module docs say, after
/// the exchange: `recv` holds `ranks >= 1` messages of `rows` rows, each as
/// long as `GumbelCombineParams` says; the outputs hold `rows` entries.
#[unsafe(export_name = kernel_symbol!(GUMBEL_COMBINE, f32, f32))]
pub unsafe extern "ptx-kernel" fn gumbel_combine(p: GumbelCombineParams) {
    let bytes = shard::last_round_bytes(shard::message_bytes(p.rows as usize), p.logprob_rounds);
    let ranks = p.ranks as usize;
    // SAFETY: rank q < ranks: its message is inside `recv` (caller).
    let message = |q: usize| p.recv + (q * bytes) as u64;
    // SAFETY: every thread of the block is here (nothing returned before it); `recv` (caller).
    let unfit = unsafe { block_unfit(p.recv, bytes, p.ranks) };
    let row = (gpu::block_idx_x() * BLOCK_THREADS + gpu::thread_idx_x()) as usize;
    if row >= p.rows as usize {
        return;
    }
    // SAFETY (the loads): row < rows, and every message holds `rows` rows.
    let first = unsafe { *shard::row_at(message(0), row) };
    let (mut best, mut flags) = (ArgMax::IDENTITY, if unfit { INVALID_SHARD } else { 0 });
    for q in 0..ranks {
        let theirs = unsafe { *shard::row_at(message(q), row) };
        best = best.combine(theirs.best);
        flags |= theirs.flags;
        if theirs.digest != first.digest {
            flags |= INVALID_SHARD;
        }
    }
    let token = if flags & INVALID != 0 { -1 } else { best.index as i64 };
    // SAFETY: the outputs hold `rows` entries (caller); status one u32.
    unsafe {
        write_token(p.tokens, p.tokens_i64, row, token);
        if p.row_status != 0 {
            (p.row_status as *mut u32).add(row).write(flags);
        }
        if flags != 0 {
            gpu::atomic_or(p.status as *mut u32, flags);
        }
    }
}
