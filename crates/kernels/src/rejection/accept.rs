//! The decision of `rejection_sample` (SPEC §4, accept): run by the last
//! block of pass 1 to finish a request. Its warps walk the request's rows,
//! test each draft ([`Request::accepts`]: the argmax for greedy requests,
//! `u < p/q` in log space otherwise), take the first row that stops the walk
//! as `j`, write the accepted tokens and counts, and hand pass 2 the
//! [`ResampleJob`] for token `j` with the floors its candidates start from.

use super::stats::{OVERLAP_ROW, row_flags, row_kind, row_stats, thresholds};
use super::{JOB_ONE_HOT, JOB_RESIDUAL, JOB_TARGET, Request, ResampleJob, draft_row, sharded_pass, target_row, write_request_token};
use crate::block::warp_fold;
use crate::gpu::{self, WARP};
use crate::load::Load;
use crate::shared;
use crate::threshold::{log_prob, raw_log_prob};
use specdec_core::layout::{RejectionParams, WARPS};
use specdec_core::scratch::{BlockRow, BlockState, LogprobsLse};
use specdec_core::logspace::residual_mass_bound;
use specdec_core::rng::{Stream, random_u32};
use specdec_core::block_verification::below;
use specdec_core::sample::accepts;
use specdec_core::status::{INVALID, INVALID_DRAFT};

/// One warp's part of a request's decision: the first of its rows that stops
/// the walk (a rejection, a placeholder, or the bonus row), and the flags of
/// all its rows. Passed through shared memory to warp 0.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct RowDecision {
    /// The row, or `u32::MAX` if none of the warp's rows stops.
    row: u32,
    /// Its draft id (`-1` for a placeholder or the bonus row).
    draft: i32,
    best: u32,
    lse_t: f32,
    lse_q: f32,
    /// The log of a lower bound on a rejected draft's residual mass (see [`Request::accepts`]).
    log_excess: f32,
    flags: u32,
    pos: u64,
}

impl RowDecision {
    /// A warp's decision when none of its rows stops.
    const NONE: RowDecision =
        RowDecision { row: u32::MAX, draft: -1, best: 0, lse_t: 0.0, lse_q: 0.0, log_excess: 0.0, flags: 0, pos: 0 };
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
/// thread 0 wrote the request to [`shared::request`] before a barrier.
#[inline(always)]
pub(super) unsafe fn decide<T: Load, D: Load, const OVERLAP: bool, const FILTERED: bool, const PROCESSED: bool>(
    p: &RejectionParams,
    r: u32,
) {
    // SAFETY: written by thread 0 before the barrier (caller).
    let req = &unsafe { shared::request().read() };
    let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
    let k1 = p.max_drafts + 1;
    let n = req.drafts;
    let greedy = req.slot.greedy();
    let sharded = sharded_pass::<PROCESSED>(p);
    // Draft ids are checked against the whole row's ids.
    let vocab = if sharded { p.shard.vocab } else { p.vocab };

    // This warp's rows, in order: their flags (NaN logits, bad draft ids) and the first that stops.
    let mut mine = RowDecision::NONE;
    let mut i = warp;
    while req.slot.is_valid() && i <= n {
        let at = (req.row0 + i) as usize;
        // SAFETY: at < rows; drafts and pos hold rows elements.
        let (d, pos) =
            unsafe { (if i < n { *(p.drafts as *const i32).add(at) } else { -1 }, *(p.pos as *const u64).add(at)) };
        let kind = row_kind::<OVERLAP, PROCESSED>(p, req, i);
        // SAFETY: i <= n_r of a valid request; the warp is converged (uniform loop).
        let st = unsafe { row_stats(p, r, i, kind, sharded) };
        let bad = d < -1 || (d >= 0 && d as u32 >= vocab);
        mine.flags |= st.flags | if bad { INVALID_DRAFT } else { 0 };
        if mine.row == u32::MAX && !bad {
            // What the row's decision needs of its statistics, and nothing more kept live.
            let (lse_t, lse_q) = (st.lse_t, st.lse_q);
            let mut row = RowDecision {
                row: i,
                draft: d,
                best: st.best.index,
                lse_t: lse_t.value(),
                lse_q: lse_q.value(),
                log_excess: f32::NEG_INFINITY,
                flags: 0,
                pos,
            };
            let mass = if kind == OVERLAP_ROW {
                residual_mass_bound(lse_t, lse_q, st.overlap, gpu::fast_rsqrt)
            } else {
                f32::NAN
            };
            // SAFETY: i <= n_r of a valid request; d is -1 or in 0..V.
            if i == n || !unsafe { req.accepts::<T, D, FILTERED, PROCESSED>(p, r, &mut row, mass) } {
                mine = RowDecision { flags: mine.flags, ..row };
            }
        }
        i += WARPS;
    }
    // SAFETY: the launch has layout::SHARED_BYTES; the barrier before
    // `decide` ended the block's earlier use of the warp slots.
    let decisions = unsafe { shared::decisions() };
    if lane == 0 {
        // SAFETY: warp < WARPS.
        unsafe { decisions.add(warp as usize).write(mine) };
    }
    // SAFETY: every thread of the block is here (caller).
    unsafe { gpu::sync_threads() };
    // Every warp learns `j` and the request's flags.
    // SAFETY: lane < WARPS reads a decision written before the barrier.
    let own = if lane < WARPS { unsafe { decisions.add(lane as usize).read() } } else { RowDecision::NONE };
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
            let flags = unsafe { row_flags(p, r, i, row_kind::<OVERLAP, PROCESSED>(p, req, i), sharded) };
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
    let dec = unsafe { decisions.add((j % WARPS) as usize).read() };
    let drafts = p.drafts as *const i32;

    let last = if greedy {
        dec.best as i64
    } else {
        let mode = if j == n || dec.draft == -1 {
            JOB_TARGET
        } else if p.draft_logits == 0 {
            JOB_ONE_HOT
        } else {
            JOB_RESIDUAL
        };
        if lane == 0 {
            // The request again from shared memory: registers kept through the
            // walk spilled (its seed, live around the reciprocal's slow-path call).
            // SAFETY: written by thread 0 before the barrier (caller). Volatile: a new read.
            let req = unsafe { shared::request().read_volatile() };
            let job = ResampleJob {
                mode,
                row: req.row0 + j,
                column: j,
                draft: dec.draft as u32,
                slot: req.slot.slot,
                temperature: req.slot.temperature,
                lse_t: dec.lse_t,
                lse_q: dec.lse_q,
                ln_weight: 0.0,
                floors: floors(mode, dec.lse_t, dec.log_excess, p.floor_margin),
                // SAFETY: r < requests, j <= n_r; the threshold kernel wrote them.
                thresholds: if FILTERED { unsafe { thresholds(p, r, j) } } else { (f32::NEG_INFINITY, f32::NEG_INFINITY) },
                seed: req.slot.seed,
                pos: dec.pos,
            };
            // SAFETY: jobs holds `requests` entries.
            unsafe { (p.jobs as *mut ResampleJob).add(r as usize).write(job) };
            // A block of drafts is the block kernel's to decide.
            if p.block_states != 0 && j >= 1 {
                // SAFETY: block_states holds `requests` entries.
                unsafe { (&raw mut (*(p.block_states as *mut BlockState).add(r as usize)).len).write(j) };
            }
        }
        -1 // pass 2 writes the sampled token
    };
    if greedy && lane == 0 {
        // SAFETY: jobs holds `requests` entries.
        unsafe { (p.jobs as *mut ResampleJob).add(r as usize).write(ResampleJob::NONE) };
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
        unsafe { write_request_token(p, r, i, token) };
        // The processed log-probabilities past `j`, and a greedy request's at
        // `j` (its argmax's, raw); pass 2 writes a sampling request's.
        if PROCESSED && (i > j || (i == j && greedy)) {
            let log_p = if i > j {
                f32::NAN
            } else {
                // SAFETY: row0 + j < rows; the argmax is an id of the row.
                raw_log_prob(unsafe { (*target_row::<T>(p, req.row0 + j).add(dec.best as usize)).as_f32() }, dec.lse_t)
            };
            // SAFETY: r < requests, i <= K.
            unsafe { write_processed(p, r, i, log_p, dec.lse_t, greedy) };
        }
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
        // SAFETY: r < requests, i <= K; processed holds requests·(K+1) entries.
        unsafe {
            write_request_token(p, r, i, -1);
            if p.processed != 0 {
                (p.processed as *mut f32).add((r * (p.max_drafts + 1) + i) as usize).write(f32::NAN);
            }
        };
        i += WARP;
    }
    if lane == 0 {
        // SAFETY: per-request outputs hold `requests` elements; jobs too.
        unsafe {
            (p.num_emitted as *mut i32).add(r as usize).write(0);
            if p.accepted != 0 {
                (p.accepted as *mut i32).add(r as usize).write(0);
            }
            (p.jobs as *mut ResampleJob).add(r as usize).write(ResampleJob::NONE);
            gpu::atomic_or(p.status as *mut u32, flags);
        }
    }
}

impl Request {
    /// The accept test of SPEC §4 (`specdec_core::sample::accepts`, the CPU
    /// twin's `Request::accepts`): whether draft row `row.row`, with draft
    /// id `row.draft` and position `row.pos`, accepts its draft: a greedy
    /// request's if it is the target's argmax, a sampling request's if its
    /// acceptance uniform is below `p/q` (log space), either under
    /// synthetic acceptance if it is below the row's rate (SPEC §4.12,
    /// `specdec_core::block_verification::below`); a placeholder (`-1`)
    /// never. Under block verification (`p.block_rows`) a sampling
    /// request's draft always passes here, its row noted for the block
    /// kernel, which decides the block (`super::block_verification`). Where the call asks for processed log-probabilities, it writes
    /// an accepted draft's (a greedy request's raw: `t − LSE` at `T = 1`),
    /// provisionally: the decision sets the rows past `j` to NaN once `j` is
    /// known, after a barrier. On a rejection it sets `row.log_excess`: the log of the larger
    /// of two lower bounds on the residual's mass `Σ max(p − q, 0) =
    /// Σ max(q − p, 0)`, the rejected id's excess `q − p` (for a one-hot
    /// draft, the mass itself, `1 − p`) and, with draft logits, `mass` (the
    /// rows' `residual_mass_bound`), which seeds pass 2's floors. The excess
    /// alone is about `1/V` on flat rows, some 10 nats below the mass, and
    /// would let nearly every id through to its logarithms in pass 2.
    ///
    /// # Safety
    /// `row.row < n_r` of a valid request, `row.draft` is `-1` or in `0..V`;
    /// `row` holds that row's argmax and log-sum-exps. With `FILTERED`, of
    /// request `r` after the threshold kernel: `p` and `q` are the kept sets'
    /// (`crate::threshold::log_prob`), `log p' = -inf` outside the target's.
    #[inline(always)]
    unsafe fn accepts<T: Load, D: Load, const FILTERED: bool, const PROCESSED: bool>(
        &self,
        p: &RejectionParams,
        r: u32,
        row: &mut RowDecision,
        mass: f32,
    ) -> bool {
        let d = row.draft;
        if d == -1 {
            return false;
        }
        // Synthetic acceptance (SPEC §4.12) decides by the rate alone; a
        // rejected sampling row still seeds its residual's floors below.
        let synthetic = p.rates != 0;
        if self.slot.greedy() {
            // SAFETY (both): row.row < n_r.
            let accepted = if synthetic { unsafe { by_rate(p, self.slot.seed, row) } } else { d as u32 == row.best };
            if accepted && PROCESSED {
                // SAFETY: row0 + row < rows, 0 <= d < vocab.
                let t = unsafe { (*target_row::<T>(p, self.row0 + row.row).add(d as usize)).as_f32() };
                // SAFETY: r < requests, row.row < n_r.
                unsafe { write_processed(p, r, row.row, raw_log_prob(t, row.lse_t), row.lse_t, true) };
            }
            return accepted;
        }
        // SAFETY: row.row < n_r.
        let by_rate = synthetic && unsafe { by_rate(p, self.slot.seed, row) };
        if by_rate && !PROCESSED {
            return true;
        }
        let sampler = self.sampler(0);
        let (tau_t, tau_q) = if FILTERED {
            // SAFETY: r < requests, row.row < n_r (caller).
            unsafe { thresholds(p, r, row.row) }
        } else {
            (f32::NEG_INFINITY, f32::NEG_INFINITY)
        };
        // SAFETY: row.row < n_r of a valid request, 0 <= d < V (caller).
        let [t, q] = unsafe { self.drafted::<T, D>(p, r, row.row, d, sharded_pass::<PROCESSED>(p)) };
        let log_p = log_prob(sampler.scaled(t), tau_t, row.lse_t);
        let log_q = if p.draft_logits != 0 { log_prob(sampler.scaled(q), tau_q, row.lse_q) } else { 0.0 };
        // Block verification (REFERENCE §4.11): every draft passes here,
        // its row noted for the block kernel, which decides the block.
        let block = p.block_rows != 0;
        if block {
            let note = BlockRow { log_p, log_q, lse_t: row.lse_t, lse_q: row.lse_q, mass: 0.0 };
            // SAFETY: block_rows holds requests·(K+1) entries; r < requests, row.row < n_r.
            unsafe { (p.block_rows as *mut BlockRow).add(block_row(p, r, row.row)).write(note) };
        }
        if block
            || by_rate
            || (!synthetic && accepts(random_u32(self.slot.seed, row.pos, Stream::Accept, 0), log_q, log_p))
        {
            if PROCESSED {
                // SAFETY: r < requests, row.row < n_r.
                unsafe { write_processed(p, r, row.row, log_p, row.lse_t, false) };
            }
            return true;
        }
        // Only a guess for the floors: the hardware's logarithm will do. `max`
        // ignores a NaN bound.
        let excess = gpu::fast_exp(log_q) - gpu::fast_exp(log_p);
        row.log_excess = gpu::fast_ln(if p.draft_logits != 0 { excess.max(mass) } else { excess });
        false
    }
}

impl Request {
    /// The raw target and draft logits of draft `d` at draft row `i` of
    /// request `r` (the draft's NaN without draft logits): from the rows, or
    /// in a `sharded` call from the round-1 record of the rank that holds `d`.
    ///
    /// # Safety
    /// `i < n_r` of valid request `r`, `0 <= d < V` (the whole row's).
    #[inline(always)]
    unsafe fn drafted<T: Load, D: Load>(&self, p: &RejectionParams, r: u32, i: u32, d: i32, sharded: bool) -> [f32; 2] {
        if sharded {
            // SAFETY: in the sharded decision, a pair of the call.
            return unsafe { super::sharded::drafted(p, r * (p.max_drafts + 1) + i, d) };
        }
        // SAFETY: row0 + i < rows, d < vocab; a valid slot and i < n_r <= max_drafts for the draft row.
        unsafe {
            let t = (*target_row::<T>(p, self.row0 + i).add(d as usize)).as_f32();
            let q = if p.draft_logits != 0 {
                (*draft_row::<D>(p, self.slot.slot, i).add(d as usize)).as_f32()
            } else {
                f32::NAN
            };
            [t, q]
        }
    }
}

/// Whether synthetic acceptance (SPEC §4.12) accepts draft row `row.row`
/// (seeded `seed`): its acceptance uniform below the row's rate, in `f64`
/// as the CPU's. Out of line: the decision's code stays as compact as
/// without it (a small call fetches it cold).
///
/// # Safety
/// `p.rates != 0`; `row.row < n_r <= max_drafts` (the rates kernel wrote that many).
#[inline(never)]
unsafe fn by_rate(p: &RejectionParams, seed: u64, row: &RowDecision) -> bool {
    // SAFETY: the rates hold max_drafts entries (caller).
    let rate = unsafe { *(p.rates as *const f32).add(row.row as usize) };
    below(random_u32(seed, row.pos, Stream::Accept, 0), f64::from(rate))
}

/// The index of row `i` of request `r` in the block rows (`RejectionParams::block_rows`).
#[inline(always)]
pub(super) fn block_row(p: &RejectionParams, r: u32, i: u32) -> usize {
    r as usize * (p.max_drafts as usize + 1) + i as usize
}

/// Writes position `i` of request `r`'s processed log-probability `log_p`
/// and, for a top-n kernel after the call, its log-sum-exps (`lse_t` of its
/// target row: a greedy request's at `T = 1`, its raw one too), where the
/// call asks for them (`RejectionParams::processed`, `lse`); by every lane
/// that calls it, the same values.
///
/// # Safety
/// `r < requests`, `i <= max_drafts`.
#[inline(always)]
pub(super) unsafe fn write_processed(p: &RejectionParams, r: u32, i: u32, log_p: f32, lse_t: f32, greedy: bool) {
    let at = r as usize * (p.max_drafts as usize + 1) + i as usize;
    // SAFETY: processed and lse hold requests·(K+1) entries where given (host-sized).
    unsafe {
        if p.processed != 0 {
            (p.processed as *mut f32).add(at).write(log_p);
        }
        if p.lse != 0 {
            let lse = LogprobsLse { raw: if greedy { lse_t } else { f32::NAN }, processed: lse_t };
            (p.lse as *mut LogprobsLse).add(at).write(lse);
        }
    }
}

/// The seeds of pass 2's floors (residual, target) for a job of `mode` on a
/// row of target log-sum-exp `lse_t`: each candidate's log-mass less
/// `margin` ([`specdec_core::sample::FLOOR_MARGIN`]), the target's `lse_t`
/// (its weights are the scaled logits), the residual's `log_excess` (a
/// lower bound of its mass: as [`Request::accepts`] says, or block
/// verification's summed mass; relative to `lse_t` for a one-hot draft).
/// Pass 2 checks its result against them ([`Resampled::certified`]), so
/// they need not be exact.
#[inline(always)]
pub(super) fn floors(mode: u32, lse_t: f32, log_excess: f32, margin: f32) -> (f32, f32) {
    // NaN (from NaN logits) seeds nothing: `-inf` is a floor every result reaches.
    let seed = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
    let target = seed(lse_t - margin);
    let residual = match mode {
        JOB_RESIDUAL => seed(log_excess - margin),
        // The residual's weights are the target's, one id removed.
        JOB_ONE_HOT => seed(lse_t + log_excess - margin),
        _ => target,
    };
    (residual, target)
}
