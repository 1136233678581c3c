//! Pass 1 of `rejection_sample` (SPEC §4, the statistics): each block
//! reduces one chunk of one row to a [`Stats`] (a greedy request's argmax;
//! a sampling request's log-sum-exps of the scaled target and draft logits,
//! and their overlap where the kernel keeps it); a row's last block to
//! arrive combines the row's chunks into its first entry with all its
//! threads ([`combine_chunks`]), and the request's last row to arrive runs
//! the decision (`super::accept::decide`) over the request's rows, an entry
//! a row ([`row_stats`]).

use super::accept::decide;
use super::threshold::{entry, filter_scratch};
use super::sharded::send_record;
use super::{Request, draft_row, sharded, sharded_pass, target_row};
use crate::block::{Reduce, block_reduce, warp_best, warp_fold};
use core::mem::offset_of;
use crate::fold::{fold_greedy, push_kept, push_overlap, push_run_sum, pushed_max};
use crate::threshold::{load_filter, mask, pools};
use crate::walk_sum::{WalkSum, block_sums};
use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, any_nan, for_each_quad, for_each_run, widen};
use crate::row::chunk_range;
use crate::shared;
use specdec_core::argmax::{ArgMax, floor_key, floor_value};
use specdec_core::layout::{BLOCK_THREADS, FilterTables, RejectionParams};
use specdec_core::exp_sum::{self, ExpSum};
use specdec_core::logspace::{Lse, centre, recentre};
use specdec_core::sample::Sampler;
use specdec_core::scratch::{Pooled, Stats};
use specdec_core::status::{INVALID_FILTER, NAN_LOGITS};

/// The kinds of row, by what their [`Stats`] hold: a greedy request's
/// argmax (and, in a call whose passes write the processed
/// log-probabilities, its target's log-sum-exp at `T = 1`); a sampling
/// request's log-sum-exps (of the target, and of the draft where there is
/// one); with the overlap too, a draft row with draft logits in a kernel
/// that keeps it.
pub(super) const GREEDY_ROW: u32 = 0;
pub(super) const SAMPLED_ROW: u32 = 1;
pub(super) const OVERLAP_ROW: u32 = 2;
pub(super) const GREEDY_LSE_ROW: u32 = 3;

/// A row's [`Stats`] less its sums' groups: the sums' maxima, the argmax,
/// the flags and the overlap, what pass 1's block reduction and the
/// decision's first gather combine. Scalars, which stay in registers, where
/// a whole `Stats` (two `ExpSum`s) was copied through local memory.
#[derive(Clone, Copy)]
pub struct Head {
    target_max: f32,
    draft_max: f32,
    pub(super) best: ArgMax,
    pub(super) flags: u32,
    pub(super) overlap: f32,
}

impl Head {
    pub(super) const IDENTITY: Head =
        Head { target_max: f32::NEG_INFINITY, draft_max: f32::NEG_INFINITY, best: ArgMax::IDENTITY, flags: 0, overlap: 0.0 };

    /// The record these make with the sums `target` and `draft` (of these maxima).
    #[inline(always)]
    fn with_sums(self, target: ExpSum, draft: ExpSum) -> Stats {
        Stats { target, draft, best: self.best, flags: self.flags, overlap: self.overlap }
    }
}

/// [`Head`]s of rows of kind `KIND` as a reduction value: each kind combines
/// and shuffles only its own fields (the others keep the first operand's).
/// Pass 1's block reductions and the decision's gathers run once, cold, at
/// a small batch, where the call waits on each combine: a row kind must not
/// pay for fields it never reads, such as the overlap's exponentials in a
/// greedy row (benches/results/2026-12-01-nvidia-h200-overlap-ab.md). The
/// sums' groups are reduced apart: pass 1's from the walk sums in shared
/// memory (`walk_sum::block_sums`), the decision's a group at a time
/// (`walk_sum::gather_sum`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct Row<const KIND: u32>(pub(super) Head);

/// The larger of two maxima (never NaN), the first where they are equal.
#[inline(always)]
fn higher(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

impl<const KIND: u32> Reduce for Row<KIND> {
    const IDENTITY: Row<KIND> = Row(Head::IDENTITY);

    #[inline(always)]
    fn combine(self, o: Row<KIND>) -> Row<KIND> {
        let (a, b) = (self.0, o.0);
        let mut out = Head { flags: a.flags | b.flags, ..a };
        if KIND == GREEDY_ROW || KIND == GREEDY_LSE_ROW {
            out.best = a.best.combine(b.best);
            if KIND == GREEDY_ROW {
                return Row(out);
            }
        }
        (out.target_max, out.draft_max) = (higher(a.target_max, b.target_max), higher(a.draft_max, b.draft_max));
        if KIND == OVERLAP_ROW {
            let to = centre(out.target_max, out.draft_max);
            let part = |s: Head| recentre(s.overlap, centre(s.target_max, s.draft_max), to, gpu::fast_exp);
            out.overlap = part(a) + part(b);
        }
        Row(out)
    }

    /// A sampling row's head: the maxima by `redux.sync`, the overlap
    /// rescaled to the warp's centre once and added by a butterfly (pass 1's
    /// block reductions and the decision's gathers, at a small batch a chain
    /// the call waits on, where a butterfly of `combine` would rescale it on
    /// every level).
    #[inline(always)]
    unsafe fn warp_all(self) -> Row<KIND> {
        if KIND == GREEDY_ROW {
            // SAFETY (both): the caller guarantees a full, converged warp.
            let (best, flags) = unsafe { (warp_best(self.0.best), gpu::warp_or_u32(self.0.flags)) };
            return Row(Head { best, flags, ..self.0 });
        }
        let s = self.0;
        // SAFETY (all): the caller guarantees a full, converged warp.
        // Maxima are never NaN (the pushes skip NaN), as `floor_key` needs.
        let max = |m: f32| floor_value(unsafe { gpu::warp_max_i32(floor_key(m)) });
        let (target_max, draft_max) = (max(s.target_max), max(s.draft_max));
        let overlap = if KIND == OVERLAP_ROW {
            let to = centre(target_max, draft_max);
            let mine = recentre(s.overlap, centre(s.target_max, s.draft_max), to, gpu::fast_exp);
            unsafe { warp_fold(mine, gpu::shfl_bfly_f32, |a, b| a + b) }
        } else {
            s.overlap
        };
        let flags = unsafe { gpu::warp_or_u32(s.flags) };
        let best = if KIND == GREEDY_LSE_ROW { unsafe { warp_best(s.best) } } else { s.best };
        Row(Head { target_max, draft_max, best, flags, overlap })
    }
}

/// [`stats`]'s `RULES` for the kept sets of a filtered call's requests:
/// the run rule over the masked rows, for the requests [`kept_rule`] leaves
/// to it (and every request of an unfiltered call);
pub(super) const RUN_RULE: u32 = 1;
/// a term a kept value, for those it gives it;
pub(super) const KEPT_RULE: u32 = 2;
/// both, each request by its own. A launch of one rule returns from the
/// blocks of the other's requests: a filtered pass 1 at 3 blocks per SM is
/// two launches, a kernel of each, as one holding both loops spills.
pub(super) const BOTH_RULES: u32 = RUN_RULE | KEPT_RULE;

/// Whether pass 1 sums request `req`'s kept sets a term a kept value (the
/// CPU's rule, REFERENCE §7.4): a sampling request whose filters (the
/// target's, or with draft logits the draft's) may pool its rows
/// (`threshold::pools`), so that its `LSE(S)` is the same bits pooled or
/// read; else (min-p or top-p alone, never pooled) by the run rule over its
/// masked rows, a fraction of the work an id.
///
/// # Safety
/// `req` is a request of the call (`Request::load`).
#[inline(always)]
unsafe fn kept_rule(p: &RejectionParams, req: &Request) -> bool {
    let slot = req.slot.slot;
    if !req.slot.is_valid() || slot < 0 || req.slot.greedy() {
        return false;
    }
    let ids = if sharded(p) { p.shard.vocab } else { p.vocab } as usize;
    // SAFETY: 0 <= slot < num_slots (a valid request).
    let pools_in = |t: &FilterTables| unsafe { load_filter(t, slot as usize) }.is_some_and(|f| pools(f, ids));
    pools_in(&p.filters) || (p.draft_logits != 0 && pools_in(&p.draft_filters))
}

/// Pass 1 (see module docs), its loops reading `Q` quads a batch, keeping
/// the overlap of draft rows with draft logits if `OVERLAP`, over the rows
/// masked to their kept sets if `FILTERED`, for the requests of its
/// `RULES` ([`RUN_RULE`], [`KEPT_RULE`]).
///
/// # Safety
/// Launched by the host's checked launcher (with `FILTERED`, after the
/// threshold kernel on the same stream; a launch of each rule where
/// `RULES` is one).
#[inline(always)]
pub(super) unsafe fn stats<
    T: Load,
    D: Load,
    const Q: u32,
    const OVERLAP: bool,
    const FILTERED: bool,
    const PROCESSED: bool,
    const RULES: u32,
>(
    p: &RejectionParams,
) {
    let (pair, c, tid) = (gpu::block_idx_x(), gpu::block_idx_y(), gpu::thread_idx_x());
    let k1 = p.max_drafts + 1;
    let k1 = k1.max(1); // max_drafts < u32::MAX (host-checked); keeps the panic path out
    let (r, i) = (pair / k1, pair % k1);
    if r >= p.requests || c >= p.chunks {
        return;
    }
    // SAFETY: r < requests.
    let req = unsafe { Request::load(p, r) };
    // Block-uniform: a launch of one rule leaves the other's requests to a launch of the other.
    // SAFETY: a request of the call.
    let kept = FILTERED && unsafe { kept_rule(p, &req) };
    if RULES & if kept { KEPT_RULE } else { RUN_RULE } == 0 {
        return;
    }
    if tid == 0 {
        // Kept for the decision, which would otherwise load it again, two
        // round trips (it is not kept in registers through the streaming loop).
        // SAFETY: the launch has layout::SHARED_BYTES; read after the barrier below.
        unsafe { shared::request().write(req) };
    }
    // Block-uniform; the decision never reads the entries of other blocks.
    let valid = req.slot.is_valid() && i <= req.drafts;
    if valid {
        // SAFETY: every thread of the block is here; i <= n_r of a valid request.
        let acc = unsafe { row_chunk_stats::<T, D, Q, OVERLAP, FILTERED, PROCESSED>(p, &req, (r, i, c), kept) };
        if tid == 0 {
            // SAFETY: stats holds requests·(K+1)·chunks entries (workspace, host-sized).
            unsafe { (p.stats as *mut Stats).add(pair as usize * p.chunks as usize + c as usize).write(acc) };
        }
    }
    // The kind's greediness is the request's: every block of it counts alike.
    let kind = row_kind::<OVERLAP, PROCESSED>(p, &req, i);
    let sharded = sharded_pass::<PROCESSED>(p);
    if entries_left(p, kind, sharded) < p.chunks {
        // Warp 0 counts the block into its row; the row's last block goes on.
        // SAFETY: all of warp 0, after thread 0 published; row_counters holds
        // rows >= requests·(K+1) entries and the row's chunks each arrive once.
        let last = tid < WARP && unsafe { last_block::arrive((p.row_counters as *mut u32).add(pair as usize), p.chunks) };
        // SAFETY: every thread of the block is here (the early return above is block-uniform).
        if !unsafe { gpu::sync_threads_or(last) } {
            return;
        }
        // Warp 0 fenced after the count; the other warps read the row's entries too.
        gpu::fence_device();
        if valid && kind == GREEDY_ROW {
            // A sharded call's greedy row: its argmax and flags, by warp 0.
            if tid < WARP {
                // SAFETY: the row's entries, all published; warp 0 whole and converged.
                unsafe {
                    let entries = (p.stats as *mut Stats).add(pair as usize * p.chunks as usize);
                    let head = greedy_head(entries, p.chunks);
                    if tid == 0 {
                        (&raw mut (*entries).best).write(head.best);
                        (&raw mut (*entries).flags).write(head.flags);
                    }
                }
            }
        } else if valid {
            // SAFETY: the whole block, after every block of the row published.
            unsafe { combine_chunks(p, kind, pair) };
        }
    }
    if sharded {
        // The decision is the decide kernel's, after the exchange: this
        // rank's record of the row goes into its message.
        if tid == 0 {
            // SAFETY: thread 0 wrote or combined the row's first entry above
            // (where `valid`) and wrote the request before the block's
            // barriers; pair < requests·(K+1).
            unsafe { send_record::<T, D>(p, pair, valid) };
        }
        return;
    }
    // Warp 0 counts the row (or, for a row whose entries stay, the block) in;
    // the request's last one decides with all its warps.
    // SAFETY: all of warp 0, after thread 0 published; counters holds
    // `requests` entries and the request's K+1 rows each arrive once an entry left.
    let arrivals = k1 * entries_left(p, kind, false);
    let last = tid < WARP && unsafe { last_block::arrive((p.counters as *mut u32).add(r as usize), arrivals) };
    // SAFETY: every thread of the block is here (the early return above is block-uniform).
    if unsafe { gpu::sync_threads_or(last) } {
        // Warp 0 fenced after the count in `arrive`; the other warps read the
        // request's statistics too.
        gpu::fence_device();
        // SAFETY: the whole block, after every row of request `r` published
        // and thread 0 wrote the request (before the barriers above).
        unsafe { decide::<T, D, OVERLAP, FILTERED, PROCESSED>(p, r) };
    }
}

/// The kind of row `i` of `req` ([`Row`]) in a kernel keeping overlaps if
/// `OVERLAP`, writing the processed log-probabilities if `PROCESSED`.
#[inline(always)]
pub(super) fn row_kind<const OVERLAP: bool, const PROCESSED: bool>(p: &RejectionParams, req: &Request, i: u32) -> u32 {
    if req.slot.greedy() {
        if PROCESSED { GREEDY_LSE_ROW } else { GREEDY_ROW }
    } else if OVERLAP && p.draft_logits != 0 && i < req.drafts {
        OVERLAP_ROW
    } else {
        SAMPLED_ROW
    }
}

/// Chunk `c` of row `i` of `req` (request `r`), reduced over the block
/// (valid in thread 0), `Q` quads a batch; with `FILTERED`, a sampling
/// row's sums over its kept sets (the target's and the draft's: a term a
/// kept value where `kept` ([`kept_rule`]: [`walk_filtered`],
/// [`push_pool`]), else by runs of the masked rows) and a row of bad
/// filter values flagged.
///
/// # Safety
/// Called by every thread of the block; `req` is valid and `i <= n_r`.
#[inline(always)]
unsafe fn row_chunk_stats<
    T: Load,
    D: Load,
    const Q: u32,
    const OVERLAP: bool,
    const FILTERED: bool,
    const PROCESSED: bool,
>(
    p: &RejectionParams,
    req: &Request,
    (r, i, c): (u32, u32, u32),
    kept: bool,
) -> Stats {
    let (start, end) = chunk_range(p.vocab, p.chunk, c);
    // SAFETY: row0 + i < offsets[r+1] <= rows.
    let target = unsafe { target_row::<T>(p, req.row0 + i) };
    let greedy = req.slot.greedy();
    let draft = if !greedy && p.draft_logits != 0 && i < req.drafts {
        // SAFETY: valid non-padding slot (greedy covers -1), i < n_r <= max_drafts.
        unsafe { draft_row::<D>(p, req.slot.slot, i) }
    } else {
        core::ptr::null()
    };
    let sampler = req.sampler(0);
    let mut acc = Head::IDENTITY;
    let mut nan = false;
    // SAFETY: the launch has layout::WALK_SHARED_BYTES; each thread its own
    // columns, read back into `acc` before the block's reduction.
    let (mut walk_t, mut walk_q) = unsafe { (WalkSum::new(shared::walk_sums(0)), WalkSum::new(shared::walk_sums(1))) };
    let (tau_t, tau_q) = if FILTERED {
        // SAFETY: thresholds holds both entries of every row (the threshold kernel wrote them).
        unsafe { thresholds(p, r, i) }
    } else {
        (f32::NEG_INFINITY, f32::NEG_INFINITY)
    };
    if tau_t.is_nan() {
        acc.flags |= INVALID_FILTER;
    }
    // Two loops, as in `gumbel_sample`: the greedy one keeps twice the loads
    // in flight (pipelined), in the registers the other spends on its sums.
    // SAFETY (both): the rows hold >= vocab >= end elements; start % 4 == 0.
    if greedy && PROCESSED {
        // Also the row's log-sum-exp at T = 1, for the processed
        // log-probabilities the passes write: by runs, as the sampling rows' sums.
        (acc.best, walk_t) = unsafe { greedy_sum_chunk::<T>(target, &sampler, (start, end), &mut nan, walk_t) };
        acc.target_max = walk_t.max();
    } else if greedy {
        acc.best = unsafe { greedy_chunk::<T, Q>(target, &sampler, (start, end), &mut nan) };
    } else if let Some(pooled_t) = if FILTERED && kept { unsafe { pooled(p, r, i, 0, tau_t) } } else { None } {
        // The target's kept set is in its pool: no read of the target row,
        // and of the draft's only where its own kept set is not pooled;
        // chunk 0 sums the pooled values.
        let pooled_q = if draft.is_null() { None } else { unsafe { pooled(p, r, i, 1, tau_q) } };
        if !draft.is_null() && pooled_q.is_none() {
            // SAFETY: the draft row holds >= vocab >= end elements; start % 4 == 0.
            // NaN draft logits are skipped, not flagged: the row's flag is the target's.
            walk_q = unsafe { walk_filtered(draft, (start, end), &sampler, tau_q, walk_q) }.0;
        }
        if c == 0 {
            // SAFETY (both): the pools' records as `pooled` returned them.
            walk_t = unsafe { push_pool(p, r, i, 0, (tau_t, pooled_t), walk_t) };
            if let Some(pooled_q) = pooled_q {
                walk_q = unsafe { push_pool(p, r, i, 1, (tau_q, pooled_q), walk_q) };
            }
        }
        (acc.target_max, acc.draft_max) = (walk_t.max(), walk_q.max());
        // SAFETY (both): every thread of the block is here (caller); the
        // walk sums are this thread's.
        let [target, draft] = unsafe { block_sums([walk_t, walk_q]) };
        return unsafe { block_reduce(Row::<SAMPLED_ROW>(acc)).0 }.with_sums(target, draft);
    } else if FILTERED && kept {
        // The rows one after the other: a run of each live at once made the kernel spill.
        // SAFETY (both): the rows hold >= vocab >= end elements; start is a multiple of TILE, so of RUN.
        let (target, target_nan) = unsafe { walk_filtered(target, (start, end), &sampler, tau_t, walk_t) };
        (walk_t, nan) = (target, target_nan);
        if !draft.is_null() {
            // NaN draft logits are skipped, not flagged: the row's flag is the target's.
            walk_q = unsafe { walk_filtered(draft, (start, end), &sampler, tau_q, walk_q) }.0;
        }
        (acc.target_max, acc.draft_max) = (walk_t.max(), walk_q.max());
    } else {
        // SAFETY: the rows hold >= vocab >= end elements; start is a multiple of TILE, so of RUN.
        unsafe {
            for_each_run(
                target,
                draft,
                start,
                end,
                gpu::thread_idx_x(),
                #[inline(always)]
                |_x, t, q, n| {
                    // The valid lanes of quad `j` of the run.
                    let nj = |j: usize| n.saturating_sub(4 * j as u32).min(4);
                    // Each run widened where it is pushed, so that the
                    // target's is dead before the draft's is formed.
                    let mut t: [[f32; 4]; 4] = core::array::from_fn(|j| widen(t[j]));
                    if FILTERED {
                        for j in 0..4 {
                            // The mask turns a kept set's NaN into -inf: flagged here.
                            nan |= any_nan(t[j], nj(j));
                            t[j] = mask(t[j], tau_t, &sampler);
                        }
                    }
                    let draft_run = || -> [[f32; 4]; 4] {
                        core::array::from_fn(|j| {
                            let q = widen(q[j]);
                            if FILTERED { mask(q, tau_q, &sampler) } else { q }
                        })
                    };
                    if !draft.is_null() && OVERLAP {
                        let q = draft_run();
                        // The overlap at the maxima the pushes below reach
                        // (checked after them), first, while both runs are live.
                        let before = centre(walk_t.max(), walk_q.max());
                        let run_max = |m: f32, v: &[[f32; 4]; 4]| {
                            let mut m = m;
                            for j in 0..4 {
                                m = pushed_max(m, v[j], nj(j), &sampler);
                            }
                            m
                        };
                        let after = 0.5 * run_max(walk_t.max(), &t) + 0.5 * run_max(walk_q.max(), &q);
                        let mut overlap = acc.overlap;
                        let mut from = before;
                        for j in 0..4 {
                            overlap = push_overlap(overlap, from, after, t[j], q[j], nj(j), &sampler);
                            from = after;
                        }
                        let (target, target_nan) = push_run_sum(walk_t, t, n, &sampler);
                        walk_q = push_run_sum(walk_q, q, n, &sampler).0;
                        acc.overlap = if centre(target.max(), walk_q.max()) == after { overlap } else { f32::NAN };
                        walk_t = target;
                        nan |= target_nan;
                        return;
                    }
                    let (target, target_nan) = push_run_sum(walk_t, t, n, &sampler);
                    walk_t = target;
                    nan |= target_nan;
                    if !draft.is_null() {
                        // NaN draft logits are skipped, not flagged: the row's flag is the target's.
                        walk_q = push_run_sum(walk_q, draft_run(), n, &sampler).0;
                    }
                },
            )
        };
        (acc.target_max, acc.draft_max) = (walk_t.max(), walk_q.max());
    }
    if nan {
        acc.flags |= NAN_LOGITS;
    }
    // SAFETY (all): all threads of the block reach this reduction (caller),
    // and the kind is block-uniform.
    // The walk sums reduced first: the block reduction then keeps their maxima alone.
    unsafe {
        let kind = row_kind::<OVERLAP, PROCESSED>(p, req, i);
        if kind == GREEDY_ROW {
            return block_reduce(Row::<GREEDY_ROW>(acc)).0.with_sums(ExpSum::EMPTY, ExpSum::EMPTY);
        }
        let [target, draft] = block_sums([walk_t, walk_q]);
        let head = match kind {
            GREEDY_LSE_ROW => block_reduce(Row::<GREEDY_LSE_ROW>(acc)).0,
            OVERLAP_ROW => block_reduce(Row::<OVERLAP_ROW>(acc)).0,
            _ => block_reduce(Row::<SAMPLED_ROW>(acc)).0,
        };
        head.with_sums(target, draft)
    }
}

/// A greedy row's chunk `start .. end` walked by this thread, `Q` quads a
/// batch, pipelined, by its request's `sampler` (`T = 0`): its argmax; NaN
/// values raise `nan`.
///
/// # Safety
/// `target` holds >= vocab >= end elements; start % 4 == 0.
#[inline(always)]
unsafe fn greedy_chunk<T: Load, const Q: u32>(
    target: *const T,
    sampler: &Sampler,
    (start, end): (u32, u32),
    nan: &mut bool,
) -> ArgMax {
    let mut best = ArgMax::IDENTITY;
    let none: *const T = core::ptr::null();
    // SAFETY: forwarded (caller).
    unsafe {
        for_each_quad::<true, Q, _, _>(
            target,
            none,
            start,
            end,
            gpu::thread_idx_x(),
            #[inline(always)]
            |x, t, _, n| best = fold_greedy(sampler, best, x, widen(t), n, nan),
        )
    };
    best
}

/// [`greedy_chunk`] by runs, also pushing each run into `sum`: the row's
/// log-sum-exp at `T = 1` (a greedy request's scale is 1), for the
/// processed log-probabilities.
///
/// # Safety
/// `target` holds >= vocab >= end elements; start % RUN == 0.
#[inline(always)]
unsafe fn greedy_sum_chunk<T: Load>(
    target: *const T,
    sampler: &Sampler,
    (start, end): (u32, u32),
    nan: &mut bool,
    mut sum: WalkSum,
) -> (ArgMax, WalkSum) {
    let mut best = ArgMax::IDENTITY;
    let none: *const T = core::ptr::null();
    // SAFETY: forwarded (caller).
    unsafe {
        for_each_run(
            target,
            none,
            start,
            end,
            gpu::thread_idx_x(),
            #[inline(always)]
            |x, t, _, n| {
                let t: [[f32; 4]; 4] = core::array::from_fn(|j| widen(t[j]));
                for (j, quad) in t.iter().enumerate() {
                    let nj = n.saturating_sub(4 * j as u32).min(4);
                    if nj > 0 {
                        // Increasing ids within the thread, as `fold_greedy` needs.
                        best = fold_greedy(sampler, best, x + 4 * j as u32, *quad, nj, nan);
                    }
                }
                sum = push_run_sum(sum, t, n, sampler).0;
            },
        )
    };
    (best, sum)
}

/// What the decision reads of a row: its sums' log-sum-exps, argmax, flags
/// and overlap.
pub(super) struct RowStats {
    pub(super) lse_t: Lse,
    pub(super) lse_q: Lse,
    pub(super) best: ArgMax,
    pub(super) flags: u32,
    pub(super) overlap: f32,
}

/// Row `i` of request `r` (a row of `kind`), in every lane: a greedy row's
/// argmax and flags alone, its entries combined by the warp in one pass
/// over their 16-byte tails; another row's from its first entry (where its
/// chunks were combined), each sum turned into its log-sum-exp as it
/// arrives, so that one `ExpSum` at a time is live.
///
/// # Safety
/// Pass 1 wrote the entry (`i <= n_r` of a valid request) before the
/// request's last row arrived; all 32 lanes call this together.
#[inline(always)]
pub(super) unsafe fn row_stats(p: &RejectionParams, r: u32, i: u32, kind: u32, sharded: bool) -> RowStats {
    // SAFETY (all): the row's entry, published before the decision (caller);
    // 16-byte aligned. Relaxed at device scope, as in `last_block::gather`.
    unsafe {
        let entry = row_entries(p, r, i);
        let head = if kind == GREEDY_ROW { greedy_head(entry, entries_left(p, kind, sharded)) } else { tail_head(entry) };
        let lse = |field: usize| {
            if kind == GREEDY_ROW {
                Lse::EMPTY
            } else {
                gpu::load_relaxed((entry as *const u8).add(field) as *const ExpSum).to_lse()
            }
        };
        RowStats {
            lse_t: lse(offset_of!(Stats, target)),
            lse_q: lse(offset_of!(Stats, draft)),
            best: head.best,
            flags: head.flags,
            overlap: head.overlap,
        }
    }
}

/// The [`Head`] of the entry at `entry` without its sums' maxima (`-inf`,
/// for a caller that needs none or sets them): its best, flags and overlap
/// read as one 16-byte piece.
///
/// # Safety
/// `entry` is a published entry (relaxed load, as in `last_block::gather`).
#[inline(always)]
pub(super) unsafe fn tail_head(entry: *const Stats) -> Head {
    const {
        let best = offset_of!(Stats, best);
        assert!(best % 16 == 0 && offset_of!(Stats, flags) == best + 8 && offset_of!(Stats, overlap) == best + 12)
    };
    // SAFETY: inside the entry, 16-byte aligned (caller).
    let tail: [u32; 4] = unsafe { gpu::load_relaxed((entry as *const u8).add(offset_of!(Stats, best)) as *const [u32; 4]) };
    Head {
        target_max: f32::NEG_INFINITY,
        draft_max: f32::NEG_INFINITY,
        best: ArgMax { value: f32::from_bits(tail[0]), index: tail[1] },
        flags: tail[2],
        overlap: f32::from_bits(tail[3]),
    }
}

/// Pair `pair`'s row, of `kind` (a row with sums), its `p.chunks` entries
/// combined by the whole block into the first: a thread an entry (one
/// round trip), the heads by [`block_reduce`], the sums by
/// `walk_sum::block_sums`. The decision then reads an entry a row, where
/// its warp would loop over the row's entries, a round trip an iteration
/// (benches/results/2026-12-05-nvidia-h100-run-sums-small-batch.md).
///
/// # Safety
/// Every thread of the block calls this together, launched with
/// `layout::WALK_SHARED_BYTES`, after every block of the row published its
/// entry (fenced); the row is of a valid request, `i <= n_r`.
#[inline(always)]
unsafe fn combine_chunks(p: &RejectionParams, kind: u32, pair: u32) {
    // SAFETY (all): stats holds requests·(K+1)·chunks entries; forwarded.
    unsafe {
        let entries = (p.stats as *mut Stats).add(pair as usize * p.chunks as usize);
        match kind {
            GREEDY_LSE_ROW => combine::<GREEDY_LSE_ROW>(entries, p.chunks),
            OVERLAP_ROW => combine::<OVERLAP_ROW>(entries, p.chunks),
            _ => combine::<SAMPLED_ROW>(entries, p.chunks),
        }
    }
}

/// [`combine_chunks`] for rows of `KIND`: the `n` entries at `entries`
/// combined into the first.
///
/// # Safety
/// As for [`combine_chunks`]; `KIND` is the row's (block-uniform).
#[inline(always)]
unsafe fn combine<const KIND: u32>(entries: *mut Stats, n: u32) {
    let tid = gpu::thread_idx_x();
    // SAFETY (both): c < n, a published entry (caller); its pieces 16-byte
    // aligned. Relaxed at device scope, as in `last_block::gather`.
    let piece = |c: u32, field: usize| unsafe { (entries.add(c as usize) as *const u8).add(field) };
    let sum = |c: u32, field: usize| unsafe { gpu::load_relaxed(piece(c, field) as *const ExpSum) };
    // The heads and the target's sums, then the draft's: one sum in flight
    // at a time (registers).
    let (mut head, mut target, mut draft) = (Row::<KIND>::IDENTITY, ExpSum::EMPTY, ExpSum::EMPTY);
    let mut c = tid;
    while c < n {
        let t = sum(c, offset_of!(Stats, target));
        // SAFETY: as above.
        let draft_max = f32::from_bits(unsafe { gpu::load_relaxed(piece(c, offset_of!(Stats, draft) + exp_sum::HEAD_OFFSET) as *const [u32; 4]) }[0]);
        // SAFETY: as above.
        let h = unsafe { tail_head(entries.add(c as usize)) };
        head = head.combine(Row(Head { target_max: t.max(), draft_max, ..h }));
        target.combine(&t);
        c += BLOCK_THREADS;
    }
    c = tid;
    while c < n {
        draft.combine(&sum(c, offset_of!(Stats, draft)));
        c += BLOCK_THREADS;
    }
    // SAFETY (all): every thread of the block is here (caller), the kind
    // block-uniform; the walk sums' columns are free after the walk's
    // `block_sums` (its last barrier).
    unsafe {
        let head = block_reduce(head).0;
        let [target, draft] = block_sums([WalkSum::holding(shared::walk_sums(0), target), WalkSum::holding(shared::walk_sums(1), draft)]);
        if tid == 0 {
            // Every thread read its entries before the reductions' barriers.
            entries.write(head.with_sums(target, draft));
        }
    }
}

/// The thresholds of row `i` of request `r`: the target's and the draft's `τ`.
///
/// # Safety
/// The threshold kernel of this call wrote them (`r < requests`, `i <= max_drafts`).
#[inline(always)]
pub(super) unsafe fn thresholds(p: &RejectionParams, r: u32, i: u32) -> (f32, f32) {
    let at = p.thresholds as *const f32;
    // SAFETY: both entries lie in the 2·requests·(K+1) of the region (caller).
    unsafe { (*at.add(entry(p, r, i, 0)), *at.add(entry(p, r, i, 1))) }
}

/// The threshold kernel's [`Pooled`] record of row `i` of request `r`
/// (`which`: 0 target, 1 draft) where the row's pool holds all of its kept
/// set: a row filtered to `tau` (a value) by a threshold kernel of several
/// blocks a row, whose last block found it so.
///
/// # Safety
/// The threshold kernel of this call ran (`r < requests`, `i <= max_drafts`).
#[inline(always)]
unsafe fn pooled(p: &RejectionParams, r: u32, i: u32, which: u32, tau: f32) -> Option<Pooled> {
    // `-inf`: kept whole; NaN: bad filter values (neither searched); `+inf`:
    // a point mass on the row's `+inf`s; one block a row: no pool, and
    // scratch for none.
    if p.threshold_chunks <= 1 || !(tau > f32::NEG_INFINITY) || tau == f32::INFINITY {
        return None;
    }
    // SAFETY: a filtered row's entry, inside the workspace's scratch where
    // threshold_chunks > 1; its last block wrote the record in the threshold kernel.
    let pooled = unsafe { (&raw const (*filter_scratch(p, r, i, which)).pooled).read() };
    (pooled.count != Pooled::NONE.count).then_some(pooled)
}

/// `sum` with the values of row `i` of request `r` (`which`, as for
/// [`pooled`]) in its kept set `{y >= tau}`, from its pool (`pooled`, which
/// holds all of them), this thread's share, a term a value
/// ([`WalkSum::with`], as [`walk_filtered`] sums a kept set it reads).
///
/// # Safety
/// `pooled` is the row's, as [`pooled`] returned it.
#[inline(always)]
unsafe fn push_pool(p: &RejectionParams, r: u32, i: u32, which: u32, (tau, pooled): (f32, Pooled), mut sum: WalkSum) -> WalkSum {
    // SAFETY: as in `pooled`; `pooled.count <= POOL` values were written by
    // the threshold kernel, an earlier launch.
    let pool = unsafe { &raw const (*filter_scratch(p, r, i, which)).pool } as *const f32;
    let mut j = gpu::thread_idx_x();
    while j < pooled.count {
        // SAFETY: j < count <= POOL.
        let y = unsafe { *pool.add(j as usize) };
        if y >= tau {
            sum = sum.with(y);
        }
        j += BLOCK_THREADS;
    }
    sum
}

/// `sum` with ids `start .. end` of a row of kept set `{scaled >= tau}`
/// walked by this thread, a run at a time: by [`push_kept`] where the row
/// is filtered (`tau > -inf`), by the run rule where it is kept whole, as
/// in the unfiltered kernels; and whether the ids hold a NaN.
///
/// # Safety
/// `row` holds >= `end` elements; `start` is a multiple of RUN.
#[inline(always)]
unsafe fn walk_filtered<L: Load>(row: *const L, (start, end): (u32, u32), sampler: &Sampler, tau: f32, mut sum: WalkSum) -> (WalkSum, bool) {
    let mut nan = false;
    let none: *const L = core::ptr::null();
    // SAFETY: forwarded (caller).
    unsafe {
        for_each_run(
            row,
            none,
            start,
            end,
            gpu::thread_idx_x(),
            #[inline(always)]
            |_x, v, _, n| {
                let v: [[f32; 4]; 4] = core::array::from_fn(|j| widen(v[j]));
                // A kept set holds no NaN: flagged here.
                for j in 0..4 {
                    nan |= any_nan(v[j], n.saturating_sub(4 * j as u32).min(4));
                }
                sum = if tau > f32::NEG_INFINITY { push_kept(sum, v, n, sampler, tau) } else { push_run_sum(sum, v, n, sampler).0 };
            },
        )
    };
    (sum, nan)
}

/// The first of the `chunks` [`Stats`] entries of row `i` of request `r`,
/// where its chunks are combined ([`combine_chunks`]).
///
/// # Safety
/// `r < requests`, `i <= max_drafts`: inside the stats region.
#[inline(always)]
unsafe fn row_entries(p: &RejectionParams, r: u32, i: u32) -> *const Stats {
    let first = (r as usize * (p.max_drafts as usize + 1) + i as usize) * p.chunks as usize;
    // SAFETY: first < requests·(K+1)·chunks (caller).
    unsafe { (p.stats as *const Stats).add(first) }
}

/// The flags of row `i` of request `r` alone (see [`row_stats`]), in every lane.
///
/// # Safety
/// As for [`row_stats`].
#[inline(always)]
pub(super) unsafe fn row_flags(p: &RejectionParams, r: u32, i: u32, kind: u32, sharded: bool) -> u32 {
    let entries = unsafe { row_entries(p, r, i) };
    let mut flags = 0;
    let mut c = gpu::thread_idx_x() % WARP;
    while c < entries_left(p, kind, sharded) {
        // SAFETY: c < the row's entries left, each published (caller).
        flags |= unsafe { tail_head(entries.add(c as usize)) }.flags;
        c += WARP;
    }
    // SAFETY: a full, converged warp (caller).
    unsafe { warp_fold(flags, gpu::shfl_bfly_u32, |a, b| a | b) }
}

/// The entries a row of `kind` leaves for the decision: one where its last
/// block combined its chunks ([`combine_chunks`]), its `chunks` for a greedy
/// row of an unsharded call, whose decision reads only their 16-byte tails,
/// in one pass, where a second level of arrival would cost it more
/// (benches/results/2026-12-05-nvidia-h100-run-sums-small-batch.md §5);
/// one a row in a `sharded` call, the ranks' records combined.
#[inline(always)]
fn entries_left(p: &RejectionParams, kind: u32, sharded: bool) -> u32 {
    if kind == GREEDY_ROW && !sharded { p.chunks } else { 1 }
}

/// The argmax and flags of a greedy row's `n` entries at `entries`, combined
/// by the warp, in every lane.
///
/// # Safety
/// As for [`row_stats`].
#[inline(always)]
unsafe fn greedy_head(entries: *const Stats, n: u32) -> Head {
    let mut acc = Row::<GREEDY_ROW>::IDENTITY;
    let mut c = gpu::thread_idx_x() % WARP;
    while c < n {
        // SAFETY: c < n, a published entry (caller).
        acc = acc.combine(Row(unsafe { tail_head(entries.add(c as usize)) }));
        c += WARP;
    }
    // SAFETY: a full, converged warp (caller).
    unsafe { acc.warp_all() }.0
}
