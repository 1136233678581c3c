//! `rejection_sample` (SPEC §4): verify each request's drafts against the
//! target, softmax-free, in two launches that never materialise a
//! probability and write nothing of size rows × V.
//!
//! 1. `rejection_stats_{target}_{cache}` (or, for chunks of a few tiles,
//!    its twin reading one quad a batch, `rejection_stats_small_…`, less
//!    than half the code): grid `(requests·(K+1), chunks)`.
//!    Block `(r·(K+1) + i, c)` reads chunk `c` of request `r`'s row `i` (if
//!    `i <= n_r`): greedy requests reduce the target argmax; sampling requests
//!    the target's (max, Σexp) of `t/T`, and for draft rows the draft's, from
//!    cache column `i` of the request's slot (and, in the small twin, the
//!    two rows' overlap, which bounds the residual's mass from below). One
//!    [`Stats`] per block. The
//!    request's last block ([`last_block`]) then decides: each warp takes
//!    rows `w, w + 8, …` (each row's chunks combined by the warp into
//!    log-sum-exps), checks their draft ids, reports their flags and finds
//!    the first that stops the walk (a rejection, a placeholder, or the bonus
//!    row), as rows decide independently; the first over all warps is `j`.
//!    Warp 0 writes the accepted drafts, `-1` padding, the counts, and a
//!    [`Job`] saying what token `j` must be sampled from (or `-1`s, for a
//!    request with a bad draft id), with all pass 2 needs of the request.
//! 2. `rejection_resample_{target}_{cache}`: grid `(requests,
//!    resample_chunks)`, each block `resample_chunk` ids (split for `requests`
//!    rows, so a small batch still spreads over the GPU); for a grid of more
//!    than one wave, its twin in 64 registers, `rejection_resample_lean_…`,
//!    and for chunks of a few tiles, one walking a quad a batch,
//!    `rejection_resample_small_…`.
//!    Gumbel-max over row `j` of the job's distribution: the target `p`
//!    (bonus row, placeholder), `p` without the draft (one-hot drafts), or the
//!    residual `log(p − q) = a + ln(1 − e^(c−a))` (draft logits), with `p`
//!    itself folded beside it under the same noise as the fallback for a
//!    residual that rounding left empty. Both candidates start from floors
//!    the decision seeded below their log-mass ([`floors`]), so a block rules
//!    ids out from its first quad (at one request, a block walks one quad a
//!    thread, and cold floors let every id through to its logarithms). The
//!    request's last block combines the chunks and writes token `j` if they
//!    reached their floors (`Resampled::certified`); otherwise, with
//!    probability `exp(−e^FLOOR_MARGIN)`, it folds the whole row again unseeded.
//!
//! Resampled and bonus tokens use the target stream of their row, so a request
//! with no drafts gets exactly `gumbel_sample`'s token for its bonus row.

use crate::block::{Reduce, block_reduce, block_state, warp_best, warp_fold};
use crate::fold::{block_floor, fold_greedy, push_overlap, push_scaled, pushed_max};
use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, Walk, for_each_quad, for_each_quad_shared, widen};
use crate::row::SlotState;
use core::cell::Cell;
use specdec_core::argmax::{ArgMax, Floored, floor_key, floor_value};
use specdec_core::dtype::{Bf16, F16};
use specdec_core::layout::RejectionParams;
use specdec_core::layout::{REDUCE_SHARED_BYTES, WARPS};
use specdec_core::logspace::{Lse, centre, ln_residual, recentre, residual_mass_bound};
use specdec_core::rng::{Stream, random_u32};
use specdec_core::sample::{Resampled, Sampler, accepts};
use specdec_core::status::{INVALID, INVALID_DRAFT, INVALID_OFFSETS, NAN_LOGITS};

/// Pass-1 result of one chunk of one row. Which fields a row uses depends on
/// its kind ([`Row`]), and only those are combined.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Stats {
    pub target: Lse,
    pub draft: Lse,
    pub best: ArgMax,
    pub flags: u32,
    /// The target's and draft's overlap (`specdec_core::logspace::centre`),
    /// for the resample's residual floor ([`floors`]).
    pub overlap: f32,
}

impl Stats {
    const IDENTITY: Stats =
        Stats { target: Lse::EMPTY, draft: Lse::EMPTY, best: ArgMax::IDENTITY, flags: 0, overlap: 0.0 };
}

/// The kinds of row, by what their [`Stats`] hold: a greedy request's
/// argmax; a sampling request's log-sum-exps (of the target, and of the
/// draft where there is one); with the overlap too, a draft row with
/// draft logits in a kernel that keeps it.
const GREEDY_ROW: u32 = 0;
const SAMPLED_ROW: u32 = 1;
const OVERLAP_ROW: u32 = 2;

/// [`Stats`] of rows of kind `KIND` as a reduction value: each kind combines
/// and shuffles only its own fields (the others keep the first operand's).
/// Pass 1's block reductions and the decision's gathers run once, cold, at
/// a small batch, where the call waits on each combine: a row kind must not
/// pay for fields it never reads, such as the overlap's exponentials in a
/// greedy row (benches/results/2026-12-01-nvidia-h200-overlap-ab.md).
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Row<const KIND: u32>(Stats);

impl<const KIND: u32> Reduce for Row<KIND> {
    const IDENTITY: Row<KIND> = Row(Stats::IDENTITY);

    #[inline(always)]
    fn combine(self, o: Row<KIND>) -> Row<KIND> {
        let (a, b) = (self.0, o.0);
        let mut out = Stats { flags: a.flags | b.flags, ..a };
        if KIND == GREEDY_ROW {
            out.best = a.best.combine(b.best);
            return Row(out);
        }
        out.target = a.target.combine_with(b.target, gpu::fast_exp);
        out.draft = a.draft.combine_with(b.draft, gpu::fast_exp);
        if KIND == OVERLAP_ROW {
            let to = centre(out.target, out.draft);
            let part = |s: Stats| recentre(s.overlap, centre(s.target, s.draft), to, gpu::fast_exp);
            out.overlap = part(a) + part(b);
        }
        Row(out)
    }

    #[inline(always)]
    unsafe fn shfl_bfly(self, m: u32) -> Row<KIND> {
        let s = self.0;
        // SAFETY (all): the caller guarantees a full, converged warp.
        let f = |x: f32| unsafe { gpu::shfl_bfly_f32(x, m) };
        let lse = |l: Lse| Lse { max: f(l.max), sum: f(l.sum) };
        let mut out = Stats { flags: unsafe { gpu::shfl_bfly_u32(s.flags, m) }, ..s };
        if KIND == GREEDY_ROW {
            out.best = ArgMax { value: f(s.best.value), index: unsafe { gpu::shfl_bfly_u32(s.best.index, m) } };
            return Row(out);
        }
        (out.target, out.draft) = (lse(s.target), lse(s.draft));
        if KIND == OVERLAP_ROW {
            out.overlap = f(s.overlap);
        }
        Row(out)
    }

    /// A sampling row's statistics in two phases: the warp's maxima first
    /// (one `redux.sync` each, on their order keys), then each lane's sums
    /// rescaled to them once and added by a butterfly, where a butterfly of
    /// `combine` spends two to four exponentials on every level, one after
    /// another (pass 1's block reductions and the decision's gathers, at a
    /// small batch a chain the call waits on). The same sums in another
    /// order, and the same special cases as `Lse::combine_with` (an empty
    /// warp, a point mass at `+inf`: `Lse::share`).
    #[inline(always)]
    unsafe fn warp_all(self) -> Row<KIND> {
        if KIND == GREEDY_ROW {
            // SAFETY (both): the caller guarantees a full, converged warp.
            let (best, flags) = unsafe { (warp_best(self.0.best), gpu::warp_or_u32(self.0.flags)) };
            return Row(Stats { best, flags, ..self.0 });
        }
        let s = self.0;
        // SAFETY (all): the caller guarantees a full, converged warp. Maxima
        // are never NaN (the pushes skip NaN), as `floor_key` needs.
        let max = |m: f32| floor_value(unsafe { gpu::warp_max_i32(floor_key(m)) });
        let (mt, md) = (max(s.target.max), max(s.draft.max));
        // The combined statistics' centre: only their maxima count.
        let to = centre(Lse { max: mt, ..Lse::EMPTY }, Lse { max: md, ..Lse::EMPTY });
        let overlap = if KIND == OVERLAP_ROW { recentre(s.overlap, centre(s.target, s.draft), to, gpu::fast_exp) } else { 0.0 };
        // The three sums in one butterfly, rolled as `warp_combine` is (code
        // run once per block, cold at a small batch).
        let mut sums = (s.target.share(mt, gpu::fast_exp), s.draft.share(md, gpu::fast_exp), overlap);
        let mut lane_mask = gpu::opaque(WARP / 2);
        while lane_mask > 0 {
            let f = |x: f32| unsafe { x + gpu::shfl_bfly_f32(x, lane_mask) };
            sums = (f(sums.0), f(sums.1), if KIND == OVERLAP_ROW { f(sums.2) } else { sums.2 });
            lane_mask /= 2;
        }
        let flags = unsafe { gpu::warp_or_u32(s.flags) };
        Row(Stats {
            target: Lse { max: mt, sum: sums.0 },
            draft: Lse { max: md, sum: sums.1 },
            best: s.best,
            flags,
            overlap: if KIND == OVERLAP_ROW { sums.2 } else { s.overlap },
        })
    }
}

/// What the final token of a request is sampled from.
pub const JOB_NONE: u32 = 0;
pub const JOB_TARGET: u32 = 1;
pub const JOB_ONE_HOT: u32 = 2;
pub const JOB_RESIDUAL: u32 = 3;

/// The decision's result for pass 2: sample token `column` of the request
/// from `row`, with everything pass 2 needs of the request (its slot,
/// temperature, seed and the row's position), so that its blocks wait for
/// one load before they stream, and the floors its two candidates start
/// from (see [`floors`]).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Job {
    pub mode: u32,
    pub row: u32,
    pub column: u32,
    pub draft: u32,
    pub slot: i32,
    pub temperature: f32,
    pub lse_t: f32,
    pub lse_q: f32,
    /// Seeds of the residual's and the target's floors.
    pub floors: (f32, f32),
    pub seed: u64,
    pub pos: u64,
}

const NO_JOB: Job = Job {
    mode: JOB_NONE,
    row: 0,
    column: 0,
    draft: 0,
    slot: 0,
    temperature: 0.0,
    lse_t: 0.0,
    lse_q: 0.0,
    floors: (0.0, 0.0),
    seed: 0,
    pos: 0,
};

/// A request's rows and slot, checked where they live.
#[derive(Clone, Copy)]
struct Request {
    slot: SlotState,
    row0: u32,
    drafts: u32,
}

impl Request {
    /// # Safety
    /// `r < p.requests`; `p` was built from checked buffers.
    #[inline(always)]
    unsafe fn load(p: &RejectionParams, r: u32) -> Request {
        // SAFETY: offsets holds requests + 1 elements, slots `requests` (host-checked).
        let (o0, o1, slot) = unsafe {
            let offsets = p.offsets as *const i32;
            (*offsets.add(r as usize), *offsets.add(r as usize + 1), *(p.slots as *const i32).add(r as usize))
        };
        // SAFETY: the tables hold num_slots elements.
        let mut slot = unsafe { SlotState::load(slot, p.temperature as *const f32, p.seed as *const u64, p.num_slots) };
        let ok = o0 >= 0 && o1 > o0 && o1 as u32 <= p.rows && ((o1 - o0 - 1) as u32) <= p.max_drafts;
        if !ok {
            slot.flags |= INVALID_OFFSETS;
            return Request { slot, row0: 0, drafts: 0 };
        }
        Request { slot, row0: o0 as u32, drafts: (o1 - o0 - 1) as u32 }
    }

    #[inline(always)]
    fn sampler(&self, pos: u64) -> Sampler {
        Sampler::new(self.slot.temperature, self.slot.seed, pos, Stream::Target)
    }
}

/// Row `row` of the target logits.
///
/// # Safety
/// `row < p.rows`.
#[inline(always)]
unsafe fn target_row<T>(p: &RejectionParams, row: u32) -> *const T {
    // SAFETY: the host checked (rows − 1)·row_stride + vocab against the buffer.
    unsafe { (p.target as *const T).add(row as usize * p.row_stride as usize) }
}

/// Cache column `column` of `slot` (the draft logits of draft `column`).
///
/// # Safety
/// `p.cache != 0`, `0 <= slot < num_slots`, `column < max_drafts`.
#[inline(always)]
unsafe fn cache_row<C>(p: &RejectionParams, slot: i32, column: u32) -> *const C {
    let offset = slot as usize * p.cache_stride0 as usize + column as usize * p.cache_stride1 as usize;
    // SAFETY: the host checked the cache covers num_slots × max_drafts rows of >= vocab.
    unsafe { (p.cache as *const C).add(offset) }
}

/// Chunk `c` of the vocabulary, chunks being `chunk` ids.
#[inline(always)]
fn chunk_range(p: &RejectionParams, chunk: u32, c: u32) -> (u32, u32) {
    let start = c * chunk;
    (start, if p.vocab - start < chunk { p.vocab } else { start + chunk })
}

/// Pass 1 (see module docs), its loops reading `Q` quads a batch, keeping
/// the overlap of draft rows with draft logits if `OVERLAP`.
///
/// # Safety
/// Launched by the host's checked launcher.
#[inline(always)]
unsafe fn stats<T: Load, C: Load, const Q: u32, const OVERLAP: bool>(p: &RejectionParams) {
    let (pair, c, tid) = (gpu::block_idx_x(), gpu::block_idx_y(), gpu::thread_idx_x());
    let k1 = p.max_drafts + 1;
    let k1 = k1.max(1); // max_drafts < u32::MAX (host-checked); keeps the panic path out
    let (r, i) = (pair / k1, pair % k1);
    if r >= p.requests || c >= p.chunks {
        return;
    }
    // SAFETY: r < requests.
    let req = unsafe { Request::load(p, r) };
    if tid == 0 {
        // Kept for the decision, which would otherwise load it again, two
        // round trips (it is not kept in registers through the streaming loop).
        // SAFETY: the launch has layout::SHARED_BYTES; read after the barrier below.
        unsafe { shared_request().write(req) };
    }
    // Block-uniform; the decision never reads the entries of other blocks.
    if req.slot.is_valid() && i <= req.drafts {
        // SAFETY: every thread of the block is here; i <= n_r of a valid request.
        let acc = unsafe { row_chunk_stats::<T, C, Q, OVERLAP>(p, &req, i, c) };
        if tid == 0 {
            // SAFETY: stats holds requests·(K+1)·chunks entries (workspace, host-sized).
            unsafe { (p.stats as *mut Stats).add(pair as usize * p.chunks as usize + c as usize).write(acc) };
        }
    }
    // Warp 0 counts the block in; the request's last block decides with all its warps.
    // SAFETY: all of warp 0, after thread 0 published; counters holds
    // `requests` entries and the request's (K+1)·chunks blocks each arrive once.
    let last = tid < WARP && unsafe { last_block::arrive((p.counters as *mut u32).add(r as usize), k1 * p.chunks) };
    // SAFETY: every thread of the block is here (the early return above is block-uniform).
    if unsafe { gpu::sync_threads_or(last) } {
        // Warp 0 fenced after the count in `arrive`; the other warps read the
        // request's statistics too.
        gpu::fence_device();
        // SAFETY: the whole block, after every block of request `r` published
        // and thread 0 wrote the request (before the barrier above).
        unsafe { decide::<T, C, OVERLAP>(p, r) };
    }
}

/// The kind of row `i` of `req` ([`Row`]) in a kernel keeping overlaps if `OVERLAP`.
#[inline(always)]
fn row_kind<const OVERLAP: bool>(p: &RejectionParams, req: &Request, i: u32) -> u32 {
    if req.slot.greedy() {
        GREEDY_ROW
    } else if OVERLAP && p.cache != 0 && i < req.drafts {
        OVERLAP_ROW
    } else {
        SAMPLED_ROW
    }
}

/// Chunk `c` of row `i` of `req`, reduced over the block (valid in thread 0),
/// `Q` quads a batch.
///
/// # Safety
/// Called by every thread of the block; `req` is valid and `i <= n_r`.
#[inline(always)]
unsafe fn row_chunk_stats<T: Load, C: Load, const Q: u32, const OVERLAP: bool>(
    p: &RejectionParams,
    req: &Request,
    i: u32,
    c: u32,
) -> Stats {
    let (start, end) = chunk_range(p, p.chunk, c);
    // SAFETY: row0 + i < offsets[r+1] <= rows.
    let target = unsafe { target_row::<T>(p, req.row0 + i) };
    let greedy = req.slot.greedy();
    let draft = if !greedy && p.cache != 0 && i < req.drafts {
        // SAFETY: valid non-padding slot (greedy covers -1), i < n_r <= max_drafts.
        unsafe { cache_row::<C>(p, req.slot.slot, i) }
    } else {
        core::ptr::null()
    };
    let sampler = req.sampler(0);
    let mut acc = Stats::IDENTITY;
    let mut nan = false;
    // Two loops, as in `gumbel_sample`: the greedy one keeps twice the loads
    // in flight (pipelined), in the registers the other spends on its sums.
    // SAFETY (both): the rows hold >= vocab >= end elements; start % 4 == 0.
    if greedy {
        let none: *const C = core::ptr::null();
        unsafe {
            for_each_quad::<true, Q, _, _>(
                target,
                none,
                start,
                end,
                gpu::thread_idx_x(),
                #[inline(always)]
                |x, t, _, n| acc.best = fold_greedy(&sampler, acc.best, x, widen(t), n, &mut nan),
                || {},
            )
        };
    } else {
        unsafe {
            for_each_quad::<false, Q, _, _>(
                target,
                draft,
                start,
                end,
                gpu::thread_idx_x(),
                #[inline(always)]
                |x, t, q, n| {
                    let (t, q) = (widen(t), widen(q));
                    let (target, target_nan) = push_scaled(acc.target, t, n, &sampler);
                    if !draft.is_null() && !OVERLAP {
                        // NaN draft logits are skipped, not flagged: the row's flag is the target's.
                        acc.draft = push_scaled(acc.draft, q, n, &sampler).0;
                    } else if !draft.is_null() {
                        // The overlap at the maxima the pushes reach (checked
                        // after them), its terms computed while both quads are live.
                        let before = centre(acc.target, acc.draft);
                        let after =
                            0.5 * pushed_max(acc.target, t, n, &sampler) + 0.5 * pushed_max(acc.draft, q, n, &sampler);
                        let overlap = push_overlap(acc.overlap, before, after, t, q, n, &sampler);
                        acc.draft = push_scaled(acc.draft, q, n, &sampler).0;
                        acc.overlap = if centre(target, acc.draft) == after { overlap } else { f32::NAN };
                    }
                    acc.target = target;
                    nan |= target_nan;
                },
                || {},
            )
        };
    }
    if nan {
        acc.flags |= NAN_LOGITS;
    }
    // SAFETY (all): all threads of the block reach this reduction (caller),
    // and the kind is block-uniform.
    unsafe {
        match row_kind::<OVERLAP>(p, req, i) {
            GREEDY_ROW => block_reduce(Row::<GREEDY_ROW>(acc)).0,
            OVERLAP_ROW => block_reduce(Row::<OVERLAP_ROW>(acc)).0,
            _ => block_reduce(Row::<SAMPLED_ROW>(acc)).0,
        }
    }
}

/// Row `i` of request `r`, a row of `kind`, its chunks combined by the whole
/// warp (lane `l` takes chunks `l, l+32, …`); every lane gets the result.
///
/// # Safety
/// Pass 1 wrote these entries (`i <= n_r` of a valid request); all 32 lanes
/// call this together.
#[inline(always)]
unsafe fn row_stats(p: &RejectionParams, r: u32, i: u32, kind: u32) -> Stats {
    // SAFETY: the row's `chunks` entries, published by pass 1's blocks before
    // the request's last block was counted in; a full, converged warp
    // (caller); `Row` is `Stats`, transparent.
    unsafe {
        let entries = row_entries(p, r, i);
        match kind {
            GREEDY_ROW => last_block::gather(entries as *const Row<GREEDY_ROW>, p.chunks).0,
            OVERLAP_ROW => last_block::gather(entries as *const Row<OVERLAP_ROW>, p.chunks).0,
            _ => last_block::gather(entries as *const Row<SAMPLED_ROW>, p.chunks).0,
        }
    }
}

/// The first of the `chunks` [`Stats`] entries of row `i` of request `r`.
///
/// # Safety
/// `r < requests`, `i <= max_drafts`: inside the stats region.
#[inline(always)]
unsafe fn row_entries(p: &RejectionParams, r: u32, i: u32) -> *const Stats {
    let first = (r as usize * (p.max_drafts as usize + 1) + i as usize) * p.chunks as usize;
    // SAFETY: first < requests·(K+1)·chunks (caller).
    unsafe { (p.stats as *const Stats).add(first) }
}

/// The flags of row `i` of request `r` alone (see [`row_stats`]): the
/// decision's code runs in one block of the launch, fetched cold, so a
/// second full combine of the row would cost it time.
///
/// # Safety
/// As for [`row_stats`].
#[inline(always)]
unsafe fn row_flags(p: &RejectionParams, r: u32, i: u32) -> u32 {
    // SAFETY: as for `row_stats`.
    let entries = unsafe { row_entries(p, r, i) };
    let mut flags = 0;
    let mut c = gpu::thread_idx_x() % WARP;
    while c < p.chunks {
        // SAFETY: c < chunks: the row's entry, published (caller). Volatile: as in `gather`.
        flags |= unsafe { core::ptr::addr_of!((*entries.add(c as usize)).flags).read_volatile() };
        c += WARP;
    }
    // SAFETY: a full, converged warp (caller).
    unsafe { warp_fold(flags, gpu::shfl_bfly_u32, |a, b| a | b) }
}

/// Writes one token of request `r`.
///
/// # Safety
/// `r < requests`, `i <= max_drafts`.
#[inline(always)]
unsafe fn write_token(p: &RejectionParams, r: u32, i: u32, token: i64) {
    let at = r as usize * (p.max_drafts as usize + 1) + i as usize;
    // SAFETY: tokens holds requests·(K+1) elements of the flagged width.
    unsafe {
        if p.tokens_i64 != 0 {
            (p.tokens as *mut i64).add(at).write(token);
        } else {
            (p.tokens as *mut i32).add(at).write(token as i32);
        }
    }
}

/// One warp's part of a request's decision: the first of its rows that stops
/// the walk (a rejection, a placeholder, or the bonus row), and the flags of
/// all its rows. Passed through shared memory to warp 0.
#[derive(Clone, Copy)]
#[repr(C)]
struct RowDecision {
    /// The row, or `u32::MAX` if none of the warp's rows stops.
    row: u32,
    /// Its draft id (`-1` for a placeholder or the bonus row).
    draft: i32,
    best: u32,
    lse_t: f32,
    lse_q: f32,
    /// The log of a lower bound on a rejected draft's residual mass (see [`stops`]).
    log_excess: f32,
    flags: u32,
    pos: u64,
}

/// A warp's decision when none of its rows stops.
#[inline(always)]
const fn mine_none() -> RowDecision {
    RowDecision { row: u32::MAX, draft: -1, best: 0, lse_t: 0.0, lse_q: 0.0, log_excess: 0.0, flags: 0, pos: 0 }
}

// Decisions live in the reduction slots of the launch's dynamic shared memory.
const _: () = assert!(core::mem::size_of::<RowDecision>() as u32 * WARPS <= REDUCE_SHARED_BYTES);
const _: () = assert!(crate::block::block_reduce_shared_bytes::<Stats>() <= REDUCE_SHARED_BYTES);

/// Where pass 1 keeps its block's request for the decision.
///
/// # Safety
/// A launch with `layout::SHARED_BYTES` of dynamic shared memory.
#[inline(always)]
unsafe fn shared_request() -> *mut Request {
    // SAFETY: forwarded; pass 1 uses the block state for nothing else.
    unsafe { block_state::<Request>() }
}

/// The decision of request `r` (see module docs), by the request's last
/// block. Every row's acceptance depends on that row alone, so warp `w`
/// decides rows `w, w + WARPS, …` and keeps the first that stops; warp 0
/// then takes the first over all warps as `j`. Control flow is uniform
/// within each warp (every lane computes the same decisions), so the
/// warp-wide reductions inside are safe.
///
/// At a small batch this is the tail of the call, every dependent round trip
/// to memory in it a visible part of the time: the request comes from shared
/// memory, and a row's statistics, draft id and position are read together,
/// its draft id checked there (rows are only written once the whole request
/// is known to be valid).
///
/// # Safety
/// Every thread of the block calls this together (it contains a barrier),
/// after every block of request `r < requests` published its statistics and
/// thread 0 wrote the request to [`shared_request`] before a barrier.
#[inline(always)]
unsafe fn decide<T: Load, C: Load, const OVERLAP: bool>(p: &RejectionParams, r: u32) {
    // SAFETY: written by thread 0 before the barrier (caller).
    let req = &unsafe { shared_request().read() };
    let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
    let k1 = p.max_drafts + 1;
    let n = req.drafts;
    let greedy = req.slot.greedy();

    // This warp's rows, in order: their flags (NaN logits, bad draft ids) and the first that stops.
    let mut mine = mine_none();
    let mut i = warp;
    while req.slot.is_valid() && i <= n {
        let at = (req.row0 + i) as usize;
        // SAFETY: at < rows; drafts and pos hold rows elements.
        let (d, pos) =
            unsafe { (if i < n { *(p.drafts as *const i32).add(at) } else { -1 }, *(p.pos as *const u64).add(at)) };
        let kind = row_kind::<OVERLAP>(p, req, i);
        // SAFETY: i <= n_r of a valid request; the warp is converged (uniform loop).
        let st = unsafe { row_stats(p, r, i, kind) };
        let bad = d < -1 || (d >= 0 && d as u32 >= p.vocab);
        mine.flags |= st.flags | if bad { INVALID_DRAFT } else { 0 };
        if mine.row == u32::MAX && !bad {
            // What the row's decision needs of its statistics, and nothing more kept live.
            let mut row = RowDecision {
                row: i,
                draft: d,
                best: st.best.index,
                lse_t: st.target.value(),
                lse_q: st.draft.value(),
                log_excess: f32::NEG_INFINITY,
                flags: 0,
                pos,
            };
            let mass = if kind == OVERLAP_ROW {
                residual_mass_bound(st.target, st.draft, st.overlap, gpu::fast_rsqrt)
            } else {
                f32::NAN
            };
            // SAFETY: i <= n_r of a valid request; d is -1 or in 0..V.
            if i == n || unsafe { stops::<T, C>(p, req, &mut row, mass) } {
                mine = RowDecision { flags: mine.flags, ..row };
            }
        }
        i += WARPS;
    }
    // SAFETY: the decisions fit the launch's dynamic shared memory (asserted
    // above); the barrier before `decide` ended the block's earlier use of it.
    let shared = unsafe { gpu::dynamic_shared::<RowDecision>() };
    if lane == 0 {
        // SAFETY: warp < WARPS.
        unsafe { shared.add(warp as usize).write(mine) };
    }
    // SAFETY: every thread of the block is here (caller).
    unsafe { gpu::sync_threads() };
    // Every warp learns `j` and the request's flags.
    // SAFETY: lane < WARPS reads a decision written before the barrier.
    let own = if lane < WARPS { unsafe { shared.add(lane as usize).read() } } else { mine_none() };
    // SAFETY: the warp is full and converged here.
    let (j, rows_flags) = unsafe {
        (warp_fold(own.row, gpu::shfl_bfly_u32, u32::min), warp_fold(own.flags, gpu::shfl_bfly_u32, |a, b| a | b))
    };
    let flags = req.slot.flags | rows_flags;
    if flags & INVALID != 0 {
        if warp == 0 {
            // SAFETY: warp 0, converged; r < requests.
            unsafe { write_invalid(p, r, flags) };
        }
        return; // block-uniform: every warp saw the same flags
    }
    if p.row_status != 0 {
        // The rows' statuses, now that the request is known to be valid.
        let mut i = warp;
        while i <= n {
            // SAFETY: as in the walk above.
            let flags = unsafe { row_flags(p, r, i) };
            if lane == 0 {
                // SAFETY: row0 + i < rows; row_status holds rows elements.
                unsafe { (p.row_status as *mut u32).add((req.row0 + i) as usize).write(flags) };
            }
            i += WARPS;
        }
    }
    if warp != 0 {
        return;
    }
    // SAFETY: the bonus row n stops, so j <= n and its warp's decision is j's.
    let dec = unsafe { shared.add((j % WARPS) as usize).read() };
    let drafts = p.drafts as *const i32;

    let last = if greedy {
        dec.best as i64
    } else {
        let mode = if j == n || dec.draft == -1 {
            JOB_TARGET
        } else if p.cache == 0 {
            JOB_ONE_HOT
        } else {
            JOB_RESIDUAL
        };
        if lane == 0 {
            // The request again from shared memory: registers kept through the
            // walk spilled (its seed, live around the reciprocal's slow-path call).
            // SAFETY: written by thread 0 before the barrier (caller). Volatile: a new read.
            let req = unsafe { shared_request().read_volatile() };
            let job = Job {
                mode,
                row: req.row0 + j,
                column: j,
                draft: dec.draft as u32,
                slot: req.slot.slot,
                temperature: req.slot.temperature,
                lse_t: dec.lse_t,
                lse_q: dec.lse_q,
                floors: floors(mode, &dec, p.floor_margin),
                seed: req.slot.seed,
                pos: dec.pos,
            };
            // SAFETY: jobs holds `requests` entries.
            unsafe { (p.jobs as *mut Job).add(r as usize).write(job) };
        }
        -1 // pass 2 writes the sampled token
    };
    if greedy && lane == 0 {
        // SAFETY: jobs holds `requests` entries.
        unsafe { (p.jobs as *mut Job).add(r as usize).write(NO_JOB) };
    }
    let mut i = lane;
    while i < k1 {
        let token = if i < j {
            // SAFETY: row0 + i < rows; accepted drafts are in range.
            unsafe { *drafts.add((req.row0 + i) as usize) as i64 }
        } else if i == j {
            last
        } else {
            -1
        };
        // SAFETY: r < requests, i <= K.
        unsafe { write_token(p, r, i, token) };
        i += WARP;
    }
    if lane == 0 {
        // SAFETY: per-request outputs hold `requests` elements.
        unsafe {
            (p.num_emitted as *mut i32).add(r as usize).write(j as i32 + 1);
            if p.accepted != 0 {
                (p.accepted as *mut i32).add(r as usize).write(j as i32);
            }
            if flags != 0 {
                gpu::atomic_or(p.status as *mut u32, flags);
            }
        }
    }
}

/// The outputs of invalid request `r`: tokens `-1`, no tokens emitted, no
/// job; `flags` into the status word.
///
/// # Safety
/// All 32 lanes of one warp call this together; `r < requests`.
#[inline(always)]
unsafe fn write_invalid(p: &RejectionParams, r: u32, flags: u32) {
    let lane = gpu::thread_idx_x() % WARP;
    let mut i = lane;
    while i <= p.max_drafts {
        // SAFETY: r < requests, i <= K.
        unsafe { write_token(p, r, i, -1) };
        i += WARP;
    }
    if lane == 0 {
        // SAFETY: per-request outputs hold `requests` elements; jobs too.
        unsafe {
            (p.num_emitted as *mut i32).add(r as usize).write(0);
            if p.accepted != 0 {
                (p.accepted as *mut i32).add(r as usize).write(0);
            }
            (p.jobs as *mut Job).add(r as usize).write(NO_JOB);
            gpu::atomic_or(p.status as *mut u32, flags);
        }
    }
}

/// Whether draft row `row.row` of `req`, with draft id `row.draft` and
/// position `row.pos`, stops the walk: a placeholder (`-1`) or a rejection,
/// whose `log_excess` it sets: the log of the larger of two lower bounds
/// on the residual's mass `Σ max(p − q, 0) = Σ max(q − p, 0)`, the rejected
/// id's excess `q − p` (for a one-hot draft, the mass itself, `1 − p`) and,
/// with draft logits, `mass` (the rows' `residual_mass_bound`). The excess
/// alone is about `1/V` on flat rows, some 10 nats below the mass, and
/// would let nearly every id through to its logarithms in pass 2.
///
/// # Safety
/// `row.row < n_r` of a valid request, `row.draft` is `-1` or in `0..V`;
/// `row` holds that row's argmax and log-sum-exps.
#[inline(always)]
unsafe fn stops<T: Load, C: Load>(p: &RejectionParams, req: &Request, row: &mut RowDecision, mass: f32) -> bool {
    let d = row.draft;
    if d == -1 {
        return true;
    }
    if req.slot.greedy() {
        return d as u32 != row.best;
    }
    let sampler = req.sampler(0);
    // SAFETY: row0 + row < rows, 0 <= d < vocab.
    let t = unsafe { (*target_row::<T>(p, req.row0 + row.row).add(d as usize)).as_f32() };
    let log_p = sampler.scaled(t) - row.lse_t;
    let log_q = if p.cache != 0 {
        // SAFETY: valid slot, row.row < n_r <= max_drafts, d < vocab.
        let q = unsafe { (*cache_row::<C>(p, req.slot.slot, row.row).add(d as usize)).as_f32() };
        sampler.scaled(q) - row.lse_q
    } else {
        0.0
    };
    if accepts(random_u32(req.slot.seed, row.pos, Stream::Accept, 0), log_q, log_p) {
        return false;
    }
    // Only a guess for the floors: the hardware's logarithm will do. `max`
    // ignores a NaN bound.
    let excess = gpu::fast_exp(log_q) - gpu::fast_exp(log_p);
    row.log_excess = gpu::fast_ln(if p.cache != 0 { excess.max(mass) } else { excess });
    true
}

/// The seeds of pass 2's floors (residual, target) for a job of `mode`
/// decided by `dec`: each candidate's log-mass less `margin`
/// ([`specdec_core::sample::FLOOR_MARGIN`]), the target's `lse_t` (its
/// weights are the scaled logits), the residual's bounded below as
/// [`stops`] says.
/// Pass 2 checks its result against them ([`Resampled::certified`]), so
/// they need not be exact.
#[inline(always)]
fn floors(mode: u32, dec: &RowDecision, margin: f32) -> (f32, f32) {
    // NaN (from NaN logits) seeds nothing: `-inf` is a floor every result reaches.
    let seed = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
    let target = seed(dec.lse_t - margin);
    let residual = match mode {
        JOB_RESIDUAL => seed(dec.log_excess - margin),
        // The residual's weights are the target's, one id removed.
        JOB_ONE_HOT => seed(dec.lse_t + dec.log_excess - margin),
        _ => target,
    };
    (residual, target)
}

/// Pass 2 (see module docs), its walks taking up to `Q` quads a batch.
///
/// # Safety
/// Launched by the host's checked launcher after pass 1 on the same stream.
#[inline(always)]
unsafe fn resample<T: Load, C: Load, const Q: u32>(p: &RejectionParams) {
    let (r, c, tid) = (gpu::block_idx_x(), gpu::block_idx_y(), gpu::thread_idx_x());
    if r >= p.requests || c >= p.resample_chunks {
        return;
    }
    // SAFETY: pass 1's decision wrote jobs[r] for every request.
    let job = unsafe { *(p.jobs as *const Job).add(r as usize) };
    if job.mode == JOB_NONE {
        return; // block-uniform
    }
    let (start, end) = chunk_range(p, p.resample_chunk, c);
    // SAFETY: every thread of the block is here; start % 4 == 0, end <= vocab.
    let best = unsafe { resample_range::<T, C, Q>(p, &job, start, end, job.floors) };
    // SAFETY: all threads of the block reach this reduction.
    let reduced = unsafe { block_reduce(Candidates(best)) };
    // SAFETY: all of warp 0, once per block of an active request.
    let refold = tid < WARP && unsafe { complete_resample(p, r, c, reduced) };
    // SAFETY: every thread of the block is here (the returns above are block-uniform).
    if !unsafe { gpu::sync_threads_or(refold) } {
        return;
    }
    // The seeded floors were not reached: the request's last block folds the
    // whole row again, unseeded (a second copy of the loop; a loop of two
    // rounds kept more registers live through both and spilled).
    // SAFETY: pass 1's decision wrote jobs[r].
    let job = unsafe { (p.jobs as *const Job).add(r as usize).read_volatile() };
    let ninf = f32::NEG_INFINITY;
    // SAFETY: as above.
    let best = unsafe { resample_range::<T, C, Q>(p, &job, 0, p.vocab, (ninf, ninf)) };
    // SAFETY: as above.
    let reduced = unsafe { block_reduce(Candidates(best)) };
    if tid == 0 {
        // Read again, not kept through the loop (which then spilled).
        // SAFETY: as above; r < requests, column <= K.
        unsafe {
            let column = (p.jobs as *const Job).add(r as usize).read_volatile().column;
            write_token(p, r, column, reduced.0.token() as i64)
        };
    }
}

/// Ids `start .. end` of the job's row folded by the block, up to `Q` quads a
/// batch, each candidate floored first at its seed in `floors`, then by its
/// block's best value after each batch (see [`Floored`]); valid in thread 0.
///
/// # Safety
/// Every thread of the block calls this together; `job` is pass 1's for
/// an active request; `start % 4 == 0`, `end <= vocab`.
#[inline(always)]
unsafe fn resample_range<T: Load, C: Load, const Q: u32>(
    p: &RejectionParams,
    job: &Job,
    start: u32,
    end: u32,
    floors: (f32, f32),
) -> Resampled {
    let sampler = Sampler::new(job.temperature, job.seed, job.pos, Stream::Target);
    // SAFETY: job.row < rows.
    let target = unsafe { target_row::<T>(p, job.row) };
    let draft = if job.mode == JOB_RESIDUAL {
        // SAFETY: a residual job has a cache, a valid slot and column < n_r <= K.
        unsafe { cache_row::<C>(p, job.slot, job.column) }
    } else {
        core::ptr::null()
    };
    // A warp evaluates the noise and the residual weight whenever one lane
    // must, so pruning each lane against the block's ids so far rather than
    // its own is what makes the floors pay; the seeds prune from the first quad.
    let cell = Cell::new((Floored::seeded(floors.0), Floored::seeded(floors.1)));
    let walk = block_state::<Walk>();
    // SAFETY: rows hold >= vocab >= end elements; start % 4 == 0.
    unsafe {
        // At most two quads a batch: registers for 3 blocks per SM (kernels' Cargo.toml).
        for_each_quad_shared::<Q, false, false, false, _>(
            target,
            start,
            end,
            walk,
            |_, _, _| {},
            #[inline(always)]
            |x, t, n| {
                let (t, (res_floor, tgt_floor)) = (widen(t), cell.get());
                let b = Resampled { residual: res_floor.probe(), target: tgt_floor.probe() };
                let folded = match job.mode {
                    JOB_RESIDUAL => {
                        // log(p − q) <= log p = tgt − lse_t. The draft logit
                        // is loaded only for an id the bounds cannot rule out:
                        // no draft registers live through the loop.
                        let res = |i: usize, tgt: f32| {
                            // SAFETY: x + i < end <= vocab: an id of the draft row.
                            let q = unsafe { (*draft.add(x as usize + i)).as_f32() };
                            ln_residual(tgt - job.lse_t, sampler.scaled(q) - job.lse_q)
                        };
                        sampler.fold_resample_logits(b, x, t, job.lse_t, res, n)
                    }
                    JOB_ONE_HOT => {
                        let res = |i: usize, tgt: f32| if x + i as u32 == job.draft { f32::NEG_INFINITY } else { tgt };
                        sampler.fold_resample_logits(b, x, t, 0.0, res, n)
                    }
                    _ => sampler.fold_resample_logits(b, x, t, 0.0, |_, tgt| tgt, n),
                };
                cell.set((res_floor.settle(folded.residual), tgt_floor.settle(folded.target)));
            },
            || {
                let (res_floor, tgt_floor) = cell.get();
                // SAFETY: for_each_quad_shared calls this in all lanes of the
                // warp together; the walk's shared words are the floors' alone.
                cell.set(unsafe {
                    let best = &raw mut (*walk).best;
                    (block_floor(res_floor, &raw mut (*best)[0]), block_floor(tgt_floor, &raw mut (*best)[1]))
                });
            },
        )
    };
    let (res_floor, tgt_floor) = cell.get();
    Resampled { residual: res_floor.own, target: tgt_floor.own }
}

/// Warp 0 of block `(r, c)` of pass 2 with the block's candidates: the
/// request's last block (the only one, for a row of one chunk) combines all
/// chunks and, if they reached the job's floors, writes the job's token;
/// otherwise it returns `true` in every lane: the row must be refolded.
///
/// # Safety
/// All 32 lanes of warp 0 call this together, once per block of request `r`
/// (which has a job).
#[inline(always)]
unsafe fn complete_resample(p: &RejectionParams, r: u32, c: u32, mine: Candidates) -> bool {
    let chunks = p.resample_chunks;
    // SAFETY: partials holds requests·resample_chunks entries, counters
    // `requests`; all `chunks` blocks of a request with a job arrive.
    let Some(acc) = (unsafe {
        last_block::combine(
            (p.partials as *mut Candidates).add(r as usize * chunks as usize),
            c,
            chunks,
            (p.counters as *mut u32).add(r as usize),
            mine,
        )
    }) else {
        return false;
    };
    // Read again rather than kept in registers through the loop. Volatile: as in `gather`.
    // SAFETY: pass 1's decision wrote jobs[r].
    let job = unsafe { (p.jobs as *const Job).add(r as usize).read_volatile() };
    if !acc.0.certified(job.floors) {
        return true;
    }
    if gpu::thread_idx_x() == 0 {
        // SAFETY: r < requests, column <= K (the job's).
        unsafe { write_token(p, r, job.column, acc.0.token() as i64) };
    }
    false
}

/// [`Resampled`] as a block reduction value.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Candidates(Resampled);

impl Reduce for Candidates {
    const IDENTITY: Candidates = Candidates(Resampled::IDENTITY);

    #[inline(always)]
    fn combine(self, o: Candidates) -> Candidates {
        Candidates(self.0.combine(o.0))
    }

    #[inline(always)]
    unsafe fn shfl_bfly(self, m: u32) -> Candidates {
        let shfl = |a: ArgMax| {
            // SAFETY: the caller guarantees a full, converged warp.
            unsafe { ArgMax { value: gpu::shfl_bfly_f32(a.value, m), index: gpu::shfl_bfly_u32(a.index, m) } }
        };
        Candidates(Resampled { residual: shfl(self.0.residual), target: shfl(self.0.target) })
    }

    #[inline(always)]
    unsafe fn warp_all(self) -> Candidates {
        // SAFETY (both): the caller guarantees a full, converged warp.
        unsafe { Candidates(Resampled { residual: warp_best(self.0.residual), target: warp_best(self.0.target) }) }
    }
}

macro_rules! rejection_kernels {
    ($($stats:ident, $small:ident, $resample:ident, $lean:ident, $resample_small:ident: $t:ty => $c:ty;)*) => {$(
        /// Pass 1 of `rejection_sample` for these target and cache dtypes.
        /// It keeps no overlaps: a third exponential per pair makes its loop
        /// compute-bound at large batch (benches/results/2026-12-01-nvidia-h200-overlap-ab.md),
        /// and the residual floors they seed pay only where a resample
        /// block's chunk is short.
        ///
        /// # Safety
        /// Launched by the host's checked launcher.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $stats(p: RejectionParams) {
            // SAFETY: forwarded.
            unsafe { stats::<$t, $c, 4, false>(&p) }
        }
        /// Pass 1 reading one quad a batch: the host's pick for chunks of a
        /// few tiles (small batches), where its code, less than half the
        /// size, is what the call waits for. It keeps the overlaps that
        /// seed the residual's floors (see `stops`).
        ///
        /// # Safety
        /// Launched by the host's checked launcher.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $small(p: RejectionParams) {
            // SAFETY: forwarded.
            unsafe { stats::<$t, $c, 1, true>(&p) }
        }
        /// Pass 2 of `rejection_sample` for these target and cache dtypes.
        ///
        /// # Safety
        /// Launched by the host's checked launcher.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $resample(p: RejectionParams) {
            // SAFETY: forwarded.
            unsafe { resample::<$t, $c, 2>(&p) }
        }
        /// Pass 2 in 64 registers (4 blocks per SM; kernels' Cargo.toml):
        /// the host's pick for a grid of more than one wave.
        ///
        /// # Safety
        /// Launched by the host's checked launcher.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $lean(p: RejectionParams) {
            // SAFETY: forwarded.
            unsafe { resample::<$t, $c, 2>(&p) }
        }
        /// Pass 2 walking one quad a batch: the host's pick for chunks of a
        /// few tiles, as pass 1's small variant.
        ///
        /// # Safety
        /// Launched by the host's checked launcher.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $resample_small(p: RejectionParams) {
            // SAFETY: forwarded.
            unsafe { resample::<$t, $c, 1>(&p) }
        }
    )*};
}

rejection_kernels! {
    rejection_stats_f32_f32, rejection_stats_small_f32_f32, rejection_resample_f32_f32, rejection_resample_lean_f32_f32, rejection_resample_small_f32_f32: f32 => f32;
    rejection_stats_f32_bf16, rejection_stats_small_f32_bf16, rejection_resample_f32_bf16, rejection_resample_lean_f32_bf16, rejection_resample_small_f32_bf16: f32 => Bf16;
    rejection_stats_f32_f16, rejection_stats_small_f32_f16, rejection_resample_f32_f16, rejection_resample_lean_f32_f16, rejection_resample_small_f32_f16: f32 => F16;
    rejection_stats_bf16_f32, rejection_stats_small_bf16_f32, rejection_resample_bf16_f32, rejection_resample_lean_bf16_f32, rejection_resample_small_bf16_f32: Bf16 => f32;
    rejection_stats_bf16_bf16, rejection_stats_small_bf16_bf16, rejection_resample_bf16_bf16, rejection_resample_lean_bf16_bf16, rejection_resample_small_bf16_bf16: Bf16 => Bf16;
    rejection_stats_bf16_f16, rejection_stats_small_bf16_f16, rejection_resample_bf16_f16, rejection_resample_lean_bf16_f16, rejection_resample_small_bf16_f16: Bf16 => F16;
    rejection_stats_f16_f32, rejection_stats_small_f16_f32, rejection_resample_f16_f32, rejection_resample_lean_f16_f32, rejection_resample_small_f16_f32: F16 => f32;
    rejection_stats_f16_bf16, rejection_stats_small_f16_bf16, rejection_resample_f16_bf16, rejection_resample_lean_f16_bf16, rejection_resample_small_f16_bf16: F16 => Bf16;
    rejection_stats_f16_f16, rejection_stats_small_f16_f16, rejection_resample_f16_f16, rejection_resample_lean_f16_f16, rejection_resample_small_f16_f16: F16 => F16;
}
