//! The combine of a sharded `gumbel_sample` (`docs/VOCAB_PARALLEL.md` §6
//! step 5): after the exchange, every rank holds every rank's message
//! (`specdec_core::shard`), and `gumbel_combine` folds each row's results by
//! the argmax rule into the call's outputs, as the unsharded call's row's
//! last block writes them.
//!
//! One launch, grid `(⌈rows / BLOCK_THREADS⌉)`, `layout::BLOCK_THREADS`
//! threads, no shared memory: thread `t` of block `b` combines row
//! `b·BLOCK_THREADS + t`. The ranks' results arrive in rank order and
//! combine by a total order, so the token is the unsharded call's. A row
//! whose ranks disagree (a failed rank, calls or shards that do not fit
//! together, different inputs read for the row: `shard::Header::fits`,
//! `shard::row_digest`) gets token `-1` and `status::INVALID_SHARD`.

use crate::gpu;
use crate::row::write_token;
use specdec_core::argmax::ArgMax;
use specdec_core::kernel_symbol;
use specdec_core::layout::{BLOCK_THREADS, GumbelCombineParams};
use specdec_core::shard::{self, Header};
use specdec_core::status::{INVALID, INVALID_SHARD};

/// `gumbel_sample`'s combine of a sharded call (`names::GUMBEL_COMBINE`; see module docs).
///
/// # Safety
/// Launched by the host's checked launcher as the module docs say, after
/// the exchange: `recv` holds `ranks >= 1` messages of `rows` rows; the
/// outputs hold `rows` entries.
#[unsafe(export_name = kernel_symbol!(GUMBEL_COMBINE, f32, f32))]
pub unsafe extern "ptx-kernel" fn gumbel_combine(p: GumbelCombineParams) {
    let (ranks, bytes) = (p.ranks as usize, shard::message_bytes(p.rows as usize));
    // SAFETY: rank q < ranks: its message is inside `recv` (caller).
    let message = |q: usize| p.recv + (q * bytes) as u64;
    let header = |q: usize| unsafe { *(message(q) as *const Header) };
    // Each thread checks its ranks' headers, and the block learns whether all fit.
    let mut unfit = false;
    let mut r = gpu::thread_idx_x() as usize;
    while r < ranks {
        unfit |= !Header::fits(ranks, header, r);
        r += BLOCK_THREADS as usize;
    }
    // SAFETY: every thread of the block reaches this barrier (nothing returned before it).
    let unfit = unsafe { gpu::sync_threads_or(unfit) };
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
