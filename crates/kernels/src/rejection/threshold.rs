//! The thresholds of a `rejection_sample` call with filters (SPEC §7.3), run
//! before the filtered pass 1: the blocks of entry `which·requests·(K+1) +
//! r·(K+1) + i` write the `τ` of row `i` of request `r` into `thresholds` —
//! the target row's for `which = 0` (its `p'`), the draft row's for
//! `which = 1` (the `q'` its draft was drawn from, by the slot's draft
//! filters), each from the row's own values by
//! `crate::threshold::chunk_threshold`.

use super::{Request, draft_row, sharded, target_row};
use crate::gpu;
use crate::load::Load;
use crate::threshold::{chunk_threshold, filter_words as words, load_filter, search_round};
use specdec_core::filter::Filter;
use specdec_core::layout::RejectionParams;
use specdec_core::scratch::FilterScratch;
use specdec_core::shard::{self, MAX_TOP_K};

/// The entry of row `i` of request `r` (`which`: 0 target, 1 draft) in
/// `thresholds`.
#[inline(always)]
pub(super) fn entry(p: &RejectionParams, r: u32, i: u32, which: u32) -> usize {
    let pairs = p.requests as usize * (p.max_drafts as usize + 1);
    which as usize * pairs + r as usize * (p.max_drafts as usize + 1) + i as usize
}

/// Threshold entry `e`'s `(which, pair, r, i)`, as [`entry`] numbers them
/// (`pair = r·(K+1) + i`); `None` past the call's entries.
#[inline(always)]
pub(super) fn entry_at(p: &RejectionParams, e: u32) -> Option<(u32, u32, u32, u32)> {
    let k1 = (p.max_drafts + 1).max(1);
    let pairs = (p.requests * k1).max(1);
    let (which, pair) = (e / pairs, e % pairs);
    let (r, i) = (pair / k1, pair % k1);
    (which <= 1 && r < p.requests).then_some((which, pair, r, i))
}

/// The [`FilterScratch`] entry of row `i` of request `r` (`which`, as
/// [`entry`]); past the workspace's scratch where `threshold_chunks = 1`
/// (none is allocated then: not to be read).
#[inline(always)]
pub(super) fn filter_scratch(p: &RejectionParams, r: u32, i: u32, which: u32) -> *mut FilterScratch {
    (p.filter_scratch as *mut FilterScratch).wrapping_add(entry(p, r, i, which))
}

/// The threshold kernel (see module docs), block `(e, c)`: chunk `c` of
/// threshold entry `e` (`which · requests·(K+1) + r·(K+1) + i`, as
/// [`entry`]), its `τ` written by the row's last block
/// (`crate::threshold::chunk_threshold`), or by block 0 where it needs no
/// read (the value [`row_filter`] gives; pass 1 flags a NaN). With
/// `SHARDED` (a sharded call's), the rank's own top-k threshold of its ids,
/// and the row's `shard::TopList` in the rank's message. With
/// `SEARCH`, the search kernel: a round of the top-p search of the rows the
/// threshold kernel left to all their blocks
/// (`crate::threshold::search_round`), the `τ` written by the last round.
///
/// # Safety
/// Launched by the host's checked launcher, grid `(2·requests·(K+1),
/// threshold_chunks)`, with `layout::THRESHOLD_SHARED_BYTES` of shared memory
/// (with `SEARCH`, after the threshold kernel, once a round).
#[inline(always)]
pub(super) unsafe fn thresholds<T: Load, D: Load, const SEARCH: bool, const SHARDED: bool>(p: &RejectionParams) {
    let (e, c) = (gpu::block_idx_x(), gpu::block_idx_y());
    let Some((which, pair, r, i)) = entry_at(p, e).filter(|_| c < p.threshold_chunks) else {
        return; // whole block
    };
    // SAFETY: r < requests.
    let req = unsafe { Request::load(p, r) };
    let at = entry(p, r, i, which);
    // SAFETY: a request of the call, i <= max_drafts.
    let active = unsafe { row_filter(p, &req, i, which) };
    let sampler = req.sampler(0);
    let scratch = filter_scratch(p, r, i, which);
    let split = (p.threshold_chunk, c, p.threshold_chunks);
    // A rank of a sharded call finds its own top-k list of the row, whose
    // ranks' lists the merge kernel's filter then runs on (`super::sharded`).
    let (ids, list) = if SHARDED {
        (p.shard.vocab, shard::list_at(p.send, sharded::pairs(p) as usize, which as usize, pair as usize))
    } else {
        (p.vocab, core::ptr::null_mut())
    };
    let active = active.map(|f| if SHARDED { Filter { top_k: f.top_k, ..Filter::OFF } } else { f });
    // SAFETY (both): every thread of the block is here (block-uniform
    // branches), and each block of the entry once; a valid request's rows.
    let tau = match active {
        Err(tau) => (c == 0 && !SEARCH).then_some(tau),
        Ok(f) if which == 0 => unsafe {
            let value = |v: f32| sampler.scaled(v);
            let row = target_row::<T>(p, req.row0 + i);
            if SEARCH {
                search_round(row, p.vocab, value, scratch, split)
            } else {
                chunk_threshold(row, (p.vocab, ids), value, f, scratch, split, (p.threshold_search != 0, list))
            }
        },
        Ok(f) => unsafe {
            // i < n_r <= max_drafts (the match above).
            let value = |v: f32| sampler.scaled(v);
            let row = draft_row::<D>(p, req.slot.slot, i);
            if SEARCH {
                search_round(row, p.vocab, value, scratch, split)
            } else {
                chunk_threshold(row, (p.vocab, ids), value, f, scratch, split, (p.threshold_search != 0, list))
            }
        },
    };
    if let Some(tau) = tau
        && gpu::thread_idx_x() == 0
    {
        // SAFETY: thresholds holds 2·requests·(K+1) entries (workspace, host-sized).
        unsafe { (p.thresholds as *mut f32).add(at).write(tau) };
    }
}

/// The filter of row `i` of `req` (`which`: 0 target, 1 draft), or the `τ`
/// of a row that is not filtered: `-inf` where it is kept whole (an invalid
/// request, which pass 1 flags; a greedy one; a row past the request's;
/// filters off; no draft logits), NaN in the target entry where the slot's
/// filter values, or its draft filters' with draft logits, are bad (SPEC
/// §5, checked for greedy slots too, as the CPU twin does) or, in a sharded
/// call, a sampling request's filter without a top-k of at most
/// `shard::MAX_TOP_K` (REFERENCE §9).
///
/// # Safety
/// `req` is a request of the call (`Request::load`), `i <= max_drafts`.
#[inline(always)]
pub(super) unsafe fn row_filter(p: &RejectionParams, req: &Request, i: u32, which: u32) -> Result<Filter, f32> {
    let slot = req.slot.slot;
    if !req.slot.is_valid() || slot < 0 || i > req.drafts {
        return Err(f32::NEG_INFINITY);
    }
    let vocab = if sharded(p) { p.shard.vocab } else { p.vocab } as usize;
    // A filter a sharded call cannot send: on, without a top-k in its lists.
    let unsent = |f: Filter| sharded(p) && !f.is_off(vocab) && !(f.has_top_k(vocab) && f.top_k <= MAX_TOP_K);
    // SAFETY (both): 0 <= slot < num_slots (a valid request).
    let target = unsafe { load_filter(&p.filters, slot as usize) };
    let draft = if p.draft_logits != 0 { unsafe { load_filter(&p.draft_filters, slot as usize) } } else { Some(Filter::OFF) };
    match (which, target, draft) {
        (_, None, _) | (_, _, None) => Err(f32::NAN),
        _ if req.slot.greedy() => Err(f32::NEG_INFINITY),
        (_, Some(t), Some(d)) if unsent(t) || unsent(d) => Err(f32::NAN),
        (0, Some(f), _) if !f.is_off(vocab) => Ok(f),
        (1, _, Some(f)) if i < req.drafts && p.draft_logits != 0 && !f.is_off(vocab) => Ok(f),
        _ => Err(f32::NEG_INFINITY),
    }
}

/// Slot `slot`'s filter values as stored, as words
/// (`crate::threshold::filter_words`): the target's, then the draft
/// logits', what a sharded call's ranks must read alike (`shard::pair_digest`).
///
/// # Safety
/// `slot < num_slots`, each given table's length (host-checked).
#[inline(always)]
pub(super) unsafe fn filter_words(p: &RejectionParams, slot: usize) -> [u32; 6] {
    // SAFETY (both): forwarded.
    let ([a, b, c], [d, e, f]) = unsafe { (words(&p.filters, slot), words(&p.draft_filters, slot)) };
    [a, b, c, d, e, f]
}
