//! Block verification (REFERENCE §4.11) on the GPU: the kernel that runs
//! between pass 1 and pass 2 of a call that asks for it, the rule of
//! `specdec_core::block_verification::block_verify` spread over blocks.
//!
//! Pass 1's decision accepts every draft of a sampling request and notes
//! each draft row (`scratch::BlockRow`: `log p`, `log q`, the log-sum-exps)
//! and the block's length `n` (`scratch::BlockState`; a block of one draft
//! is decided by the token rule, `u_0 < w_1`, by block `(0, r, 0)`). Block
//! `(s, r, c)` of this kernel (linear index `(s·requests + r)·block_chunks +
//! c`) then takes chunk `c` of row `i = n − 1 − s` of request `r` (rows
//! `1 ..= n − 1`; the grid runs every request's last row before any of its
//! earlier ones, so that a row found to stop spares those below it), weighs the block up to
//! it (`w_i`, `w_n`, bit for bit as the CPU twin) and sums its chunk of the
//! residual mass `r_i = Σ max(w_i·p − q, 0)`, unless the row cannot matter:
//!
//! - the block reaches its end (`u_{n−1} < w_n`: `τ = n`, no row below counts);
//! - the row cannot stop (`h_i <= w_i <= u_{i−1}`, since `r_i <= w_i`);
//! - a later row already stopped (`τ` is the largest row that stops).
//!
//! The row's last block tests `u_{i−1} < h_i` and raises the request's
//! `stop` to `i` if so; the request's last row to finish sets `τ` and, where
//! `τ < n`, writes the outputs from position `τ` on and the resample job of
//! row `τ`: pass 2 draws its residual `max(w_τ·p − q, 0)` (the target
//! shifted by `ln w_τ`). One-hot drafts read no row: `r_i = w_i·(1 − p(d_i))`.
//!
//! In a sharded call (`super::sharded`) no rank can decide a row: its
//! blocks sum the rank's ids of every row that may stop (the third shortcut
//! needs the whole row's masses) and the row's last block writes the
//! rank's part into its round-2 message (`shard::mass_at`); pass 2 draws
//! candidates at every row where the block may end ([`row_job`]); the
//! combine adds the ranks' parts and decides ([`block_end`]), as here.

use super::accept::{block_row, floors, write_processed};
use super::sharded::pairs;
use super::stats::thresholds;
use super::{JOB_ONE_HOT, JOB_RESIDUAL, ResampleJob, draft_row, target_row, write_request_token};
use crate::block::{Reduce, block_reduce, warp_fold};
use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, for_each_quad, widen};
use crate::row::chunk_range;
use crate::threshold::log_prob;
use specdec_core::block_verification::{below, ln_weight, next_weight, one_hot_mass, ratio, stop_probability};
use specdec_core::layout::RejectionParams;
use specdec_core::rng::{Stream, random_u32};
use specdec_core::sample::Sampler;
use specdec_core::scratch::{BlockRow, BlockState};
use specdec_core::shard;

/// The block kernel (see module docs); with `SHARDED`, a rank's in a
/// sharded call with draft logits, which writes each row's mass into the
/// rank's round-2 message and decides nothing.
///
/// # Safety
/// Launched by the host's checked launcher after pass 1 (with
/// `block_rows`; `SHARDED`: after the sharded decision) on the same stream,
/// over `requests · (max_drafts − 1) · block_chunks` blocks.
#[inline(always)]
pub(super) unsafe fn block<T: Load, D: Load, const SHARDED: bool>(p: &RejectionParams) {
    let (b, tid) = (gpu::block_idx_x(), gpu::thread_idx_x());
    let (chunks, requests) = (p.block_chunks.max(1), p.requests.max(1));
    let (slot, c) = (b / chunks, b % chunks);
    let (s, r) = (slot / requests, slot % requests);
    if s + 2 > p.max_drafts {
        return;
    }
    let state = (p.block_states as *mut BlockState).wrapping_add(r as usize);
    // Zero but for a request whose block pass 1 left to this kernel (and
    // zero again once its last row decided it: a late block leaves).
    // SAFETY: r < requests; block_states holds `requests` entries.
    let n = unsafe { gpu::atomic_load(&raw mut (*state).len) };
    // A block of one draft has no row to sum: block (0, r, 0) decides it
    // alone (a sharded call's combine does).
    let one = !SHARDED && n == 1 && s == 0 && c == 0;
    if s + 2 > n && !one {
        return; // block-uniform: not a row of the block
    }
    // Pass 1's job: the bonus (or placeholder) row `n`, with the request's slot and seed.
    // SAFETY: pass 1's decision wrote it; none rewrites it before this row arrives.
    let job = unsafe { *(p.jobs as *const ResampleJob).add(r as usize) };
    let row0 = job.row - job.column;
    let rows = (p.block_rows as *mut BlockRow).wrapping_add(block_row(p, r, 0));
    if one {
        // The token rule, `u_0 < w_1`, with the same word (REFERENCE §4.11).
        // SAFETY: row 0 was noted, and is one of the request's.
        let (w, u) = unsafe { (Weights::of(rows, 1, 1).end, word(p, &job, 0)) };
        let tau = below(u, w) as u32;
        if tid < WARP {
            // SAFETY: warp 0; the request's state, notes and outputs.
            unsafe { finish(p, r, state, &job, (n, tau), rows) };
        }
        return;
    }
    let i = n - 1 - s;
    // SAFETY: rows 0..n of the request were noted by pass 1 (n <= n_r); pos holds rows elements.
    let weights = unsafe { Weights::of(rows, n, i) };
    // SAFETY (both): row0 + j < row0 + n <= rows.
    let word = |j: u32| unsafe { word(p, &job, j) };
    let reaches_end = below(word(n - 1), weights.end);
    let may_stop = !reaches_end && below(word(i - 1), weights.at);
    // SAFETY: every thread of the block is here; the stop word lies in `state`.
    let later_stopped =
        !SHARDED && unsafe { gpu::sync_threads_or(tid == 0 && gpu::atomic_load(&raw mut (*state).stop) >= i) };
    let mine = if !may_stop || later_stopped {
        Mass::IDENTITY
    } else if p.draft_logits == 0 {
        // SAFETY: row i < n was noted.
        let log_p = unsafe { (*rows.add(i as usize)).log_p };
        // Once in the block's sum: thread 0 of its one chunk.
        Mass { units: 0, one: if c == 0 && tid == 0 { one_hot_mass(weights.at, log_p) } else { 0.0 } }
    } else {
        // SAFETY: every thread of the block is here; i < n <= n_r of a valid sampling request.
        let units = unsafe { chunk_mass::<T, D>(p, r, &job, row0, i, c, rows.add(i as usize).read(), weights.at) };
        Mass { units, one: 0.0 }
    };
    // SAFETY: every thread of the block reaches this reduction.
    let mine = unsafe { block_reduce(mine) };
    if tid >= WARP {
        return;
    }
    // SAFETY: all of warp 0; partials hold requests·(K−1)·block_chunks
    // entries (host-sized), counters requests·(K−1); the row's chunks all arrive.
    let Some(total) = (unsafe {
        last_block::combine(
            (p.partials as *mut Mass).add(slot as usize * chunks as usize),
            c,
            chunks,
            (p.counters as *mut u32).add(slot as usize),
            mine,
        )
    }) else {
        return;
    };
    if SHARDED {
        // Row i's last block: the rank's part of its mass (0 where it need
        // not be summed) into the round-2 message, for the combine.
        if tid == 0 {
            // SAFETY: the message holds a mass a pair (workspace, host-sized).
            unsafe { shard::mass_at(p.send, pairs(p) as usize, block_row(p, r, i)).write(total.units) };
        }
        return;
    }
    // Row i's last block (lane 0 holds the sum where the row is one chunk).
    // SAFETY: the stop word lies in `state`; rows.add(i) was noted.
    if tid == 0 && may_stop && unsafe { gpu::atomic_load(&raw mut (*state).stop) } < i {
        let mass = total.value();
        unsafe { (&raw mut (*rows.add(i as usize)).mass).write(mass) };
        if below(word(i - 1), stop_probability(weights.at, mass)) {
            // SAFETY: as above.
            unsafe { gpu::atomic_max_u32(&raw mut (*state).stop, i) };
        }
    }
    // SAFETY: all of warp 0, after lane 0's writes; the done counter lies in
    // `state` and rows 1..n each arrive once.
    if !unsafe { last_block::arrive(&raw mut (*state).done, n - 1) } {
        return;
    }
    // The request's last row: every row decided.
    // SAFETY: as above; the block's rows, weights and outputs are the request's.
    let tau = if reaches_end { n } else { unsafe { gpu::atomic_load(&raw mut (*state).stop) } };
    // SAFETY: warp 0; the request's state, notes and outputs.
    unsafe { finish(p, r, state, &job, (n, tau), rows) };
}

/// The end of request `r`'s block of `n` drafts, decided at `tau`: its
/// state zero again for the next call, and where `tau < n` its outputs
/// rewritten ([`write_block`]).
///
/// # Safety
/// All 32 lanes of one warp call this together, once per request, after
/// every row of its block was decided; `state`, `rows` and `job` are the
/// request's.
#[inline(always)]
unsafe fn finish(p: &RejectionParams, r: u32, state: *mut BlockState, job: &ResampleJob, (n, tau): (u32, u32), rows: *const BlockRow) {
    if gpu::thread_idx_x() == 0 {
        // SAFETY: the request's state (caller).
        unsafe {
            gpu::atomic_store(&raw mut (*state).len, 0);
            gpu::atomic_store(&raw mut (*state).stop, 0);
        }
    }
    if tau < n {
        // SAFETY: one warp; tau < n rows noted; r < requests (caller).
        unsafe { write_block(p, r, job, n, tau, rows) };
    }
}

/// The weights a row's block needs: `w_i` of its row `i` and `w_n` of the
/// block's end (`specdec_core::block_verification::next_weight` over the
/// noted rows' ratios, in `f64`, as the CPU twin weighs them).
struct Weights {
    at: f64,
    end: f64,
}

impl Weights {
    /// # Safety
    /// `rows` holds the `n` noted rows of a request; `i <= n`.
    #[inline(always)]
    unsafe fn of(rows: *const BlockRow, n: u32, i: u32) -> Weights {
        let (mut w, mut at) = (1.0, 1.0);
        for j in 0..n {
            if j == i {
                at = w;
            }
            // SAFETY: j < n (caller).
            let row = unsafe { rows.add(j as usize).read() };
            w = next_weight(w, ratio(row.log_p, row.log_q));
        }
        Weights { at: if i == n { w } else { at }, end: w }
    }
}

/// Chunk `c` of row `i`'s residual mass `Σ max(w·p(x) − q(x), 0)` (valid in
/// thread 0 after the block's reduction): `p` and `q` the row's target and
/// draft distributions (masked to their kept sets in a call with filters),
/// from the noted log-sum-exps, a NaN value a probability of 0 (as on the
/// CPU); each quad's terms summed in `f32`, the quads in `f64`.
///
/// # Safety
/// Every thread of the block calls this together; request `r` is a valid
/// sampling request with draft logits, `i < n_r`; `note` is row `i`'s.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn chunk_mass<T: Load, D: Load>(
    p: &RejectionParams,
    r: u32,
    job: &ResampleJob,
    row0: u32,
    i: u32,
    c: u32,
    note: BlockRow,
    w: f64,
) -> u64 {
    let (start, end) = chunk_range(p.vocab, p.block_chunk, c);
    let sampler = Sampler::new(job.temperature, 0, 0, Stream::Target);
    let (tau_t, tau_q) = if p.filtered != 0 {
        // SAFETY: the threshold kernel wrote row i's (r < requests, i <= K).
        unsafe { thresholds(p, r, i) }
    } else {
        (f32::NEG_INFINITY, f32::NEG_INFINITY)
    };
    let lw = ln_weight(w);
    let prob = |lp: f32| if lp.is_nan() { 0.0 } else { gpu::fast_exp(lp) };
    let mut acc = 0u64;
    // SAFETY: row0 + i < rows; a valid slot's draft column i < n_r <= K; both rows hold >= vocab >= end elements.
    unsafe {
        let (target, draft) = (target_row::<T>(p, row0 + i), draft_row::<D>(p, job.slot, i));
        for_each_quad::<false, 4, _, _>(
            target,
            draft,
            start,
            end,
            gpu::thread_idx_x(),
            #[inline(always)]
            |_, t, q, n| {
                let (t, q) = (widen(t), widen(q));
                let mut quad = 0.0f32;
                for l in 0..4 {
                    if (l as u32) < n {
                        let a = prob(log_prob(sampler.scaled(t[l]), tau_t, note.lse_t) + lw);
                        let b = prob(log_prob(sampler.scaled(q[l]), tau_q, note.lse_q));
                        quad += (a - b).max(0.0);
                    }
                }
                acc += Mass::units(quad);
            },
        )
    };
    acc
}

/// Request `r`'s outputs where its block stopped at `tau < n` (pass 1 wrote
/// them as if it reached `n`): tokens `-1` from `tau` on (pass 2 writes
/// `tau`'s), the processed log-probabilities NaN past it, the counts, and
/// the job of row `tau`'s residual ([`residual_job`]).
///
/// # Safety
/// All 32 lanes of one warp call this together; `rows` holds the `n`
/// noted rows of valid sampling request `r`; `job` is pass 1's.
#[inline(always)]
unsafe fn write_block(p: &RejectionParams, r: u32, job: &ResampleJob, n: u32, tau: u32, rows: *const BlockRow) {
    let lane = gpu::thread_idx_x() % WARP;
    let mut x = tau + lane;
    while x <= n {
        // SAFETY: r < requests, x <= n <= K.
        unsafe {
            if x < n {
                write_request_token(p, r, x, -1);
            }
            if x > tau {
                write_processed(p, r, x, f32::NAN, f32::NAN, false);
            }
        }
        x += WARP;
    }
    if lane != 0 {
        return;
    }
    // SAFETY: tau < n rows noted (caller); jobs holds `requests` entries.
    unsafe {
        (p.jobs as *mut ResampleJob).add(r as usize).write(residual_job(p, r, job, rows, n, tau));
        write_counts(p, r, tau);
    }
}

/// Request `r`'s counts where its block ends at `tau`: `tau + 1` tokens
/// emitted, `tau` drafts accepted.
///
/// # Safety
/// `r < requests`.
#[inline(always)]
pub(super) unsafe fn write_counts(p: &RejectionParams, r: u32, tau: u32) {
    // SAFETY: the per-request outputs hold `requests` entries.
    unsafe {
        (p.num_emitted as *mut i32).add(r as usize).write(tau as i32 + 1);
        if p.accepted != 0 {
            (p.accepted as *mut i32).add(r as usize).write(tau as i32);
        }
    }
}

/// The job of the residual at row `tau < n` of a block of `n` drafts
/// (`job` the decision's, at row `n`; `rows` its notes): weighted by
/// `w_tau`, its floors from the summed mass `r_tau` (`tau >= 1`) or, at row
/// 0, the draft's excess `q(d) − p(d)` (a guess: pass 2 certifies against them).
///
/// # Safety
/// `rows` holds the `n` noted rows of a valid sampling request; `tau < n`.
#[inline(always)]
unsafe fn residual_job(p: &RejectionParams, r: u32, job: &ResampleJob, rows: *const BlockRow, n: u32, tau: u32) -> ResampleJob {
    let row = job.row - job.column + tau;
    // SAFETY: tau < n rows noted; row < rows.
    let (note, d, pos) = unsafe {
        (rows.add(tau as usize).read(), *(p.drafts as *const i32).add(row as usize), *(p.pos as *const u64).add(row as usize))
    };
    // SAFETY: as above.
    let w = unsafe { Weights::of(rows, n, tau) }.at;
    let (mode, log_excess) = if p.draft_logits == 0 {
        (JOB_ONE_HOT, gpu::fast_ln(1.0 - gpu::fast_exp(note.log_p)))
    } else if tau == 0 {
        (JOB_RESIDUAL, gpu::fast_ln(gpu::fast_exp(note.log_q) - gpu::fast_exp(note.log_p)))
    } else {
        (JOB_RESIDUAL, gpu::fast_ln(note.mass as f32))
    };
    ResampleJob {
        mode,
        row,
        column: tau,
        draft: d as u32,
        lse_t: note.lse_t,
        lse_q: note.lse_q,
        ln_weight: ln_weight(w),
        floors: floors(mode, note.lse_t, log_excess, p.floor_margin),
        // SAFETY: r < requests, tau < n_r; the threshold kernel wrote them.
        thresholds: if p.filtered != 0 { unsafe { thresholds(p, r, tau) } } else { (f32::NEG_INFINITY, f32::NEG_INFINITY) },
        pos,
        ..*job
    }
}

/// The acceptance word of row `j` of the request whose decision's job is `job`.
///
/// # Safety
/// Row `j` is one of the request's.
#[inline(always)]
unsafe fn word(p: &RejectionParams, job: &ResampleJob, j: u32) -> u32 {
    // SAFETY: pos holds an element a row (caller).
    let pos = unsafe { *(p.pos as *const u64).add((job.row - job.column + j) as usize) };
    random_u32(job.seed, pos, Stream::Accept, 0)
}

/// Request `r`'s block after the decision: its `n` (0 where the request is
/// not block-verified) and its noted rows.
///
/// # Safety
/// `r < requests` of a call with block verification, after the decision's launch.
#[inline(always)]
pub(super) unsafe fn noted(p: &RejectionParams, r: u32) -> (u32, *const BlockRow) {
    // SAFETY: block_states holds `requests` entries.
    let n = unsafe { (*(p.block_states as *const BlockState).add(r as usize)).len };
    (n, (p.block_rows as *const BlockRow).wrapping_add(block_row(p, r, 0)))
}

/// Whether a block of `n >= 1` drafts (`job` the decision's, `rows` its
/// notes) may end at row `t <= n`: at `n` where it reaches its end
/// (`u_{n−1} < w_n`), else at row 0 or at a row that may stop (`u_{t−1} <
/// w_t`): the block kernel's shortcuts, which need no mass.
///
/// # Safety
/// As for [`residual_job`]; `t <= n`.
#[inline(always)]
unsafe fn may_end_at(p: &RejectionParams, job: &ResampleJob, rows: *const BlockRow, n: u32, t: u32) -> bool {
    // SAFETY (all): rows 0..n noted, t <= n (caller).
    let weights = unsafe { Weights::of(rows, n, t) };
    let reaches_end = below(unsafe { word(p, job, n - 1) }, weights.end);
    if t == n { reaches_end } else { !reaches_end && (t == 0 || below(unsafe { word(p, job, t - 1) }, weights.at)) }
}

/// Pass 2's job at row `t` of a sharded call's request `r` (`job` the
/// decision's, `(n, rows)` its [`noted`] block; `n = 0`: the token rule's
/// job alone): the decision's at `t = n`, the residual's at a row `t < n`,
/// where the block may end there ([`may_end_at`]); none elsewhere.
///
/// # Safety
/// `job` the decision's for valid sampling request `r < requests` of a
/// call with block verification, `(n, rows)` its block; `t <= max_drafts`.
#[inline(always)]
pub(super) unsafe fn row_job(
    p: &RejectionParams,
    r: u32,
    job: &ResampleJob,
    (n, rows): (u32, *const BlockRow),
    t: u32,
) -> Option<ResampleJob> {
    // SAFETY (both): t <= n rows noted (caller).
    if t > n || (n > 0 && !unsafe { may_end_at(p, job, rows, n, t) }) {
        return None;
    }
    Some(if t == n { *job } else { unsafe { residual_job(p, r, job, rows, n, t) } })
}

/// Where a sharded call's block of `n >= 1` drafts ends (`τ`), from the
/// residual masses `mass(i, w_i)` of the rows that may stop: the block
/// kernel's decision, every such row's mass summed.
///
/// # Safety
/// As for [`may_end_at`].
#[inline(always)]
pub(super) unsafe fn block_end(
    p: &RejectionParams,
    job: &ResampleJob,
    rows: *const BlockRow,
    n: u32,
    mass: impl Fn(u32, f64) -> f64,
) -> u32 {
    // SAFETY (all): rows 0..n noted (caller).
    if unsafe { may_end_at(p, job, rows, n, n) } {
        return n;
    }
    for i in (1..n).rev() {
        let (w, u) = unsafe { (Weights::of(rows, n, i).at, word(p, job, i - 1)) };
        if below(u, w) && below(u, stop_probability(w, mass(i, w))) {
            return i;
        }
    }
    0
}

/// A chunk's residual mass as a block reduction value: 16 bytes, as
/// `last_block::gather` reads partials. With draft logits, each quad's mass
/// (its lanes' `f32` sum, in a fixed order) truncated to a multiple of
/// `2^-60` and added as integers (`units`): order-free, so that a row's
/// `r_i` does not depend on how the call splits it into chunks (REFERENCE
/// §2.6); one-hot, the row's one term (`one`, added to zeros).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Mass {
    units: u64,
    one: f64,
}

impl Mass {
    /// A sharded call's mass of a row: the ranks' `units` summed, or
    /// one-hot (`Some((w, log p(d)))`) the row's one term, as the block's
    /// [`Mass::value`] reads.
    #[inline(always)]
    pub(super) fn of_ranks(units: u64, one_hot: Option<(f64, f32)>) -> f64 {
        let one = one_hot.map_or(0.0, |(w, log_p)| one_hot_mass(w, log_p));
        Mass { units, one }.value()
    }

    /// `2^60`: a quad's mass (at most about 1) in units of `2^-60`.
    const UNIT: f64 = (1u64 << 60) as f64;

    /// A quad's mass `x >= 0` in units of `2^-60`, truncated (below `2^61`).
    #[inline(always)]
    fn units(x: f32) -> u64 {
        (f64::from(x.min(2.0)) * Mass::UNIT) as u64
    }

    /// The mass the units and the one-hot term make.
    #[inline(always)]
    fn value(self) -> f64 {
        self.one + self.units as f64 / Mass::UNIT
    }
}

const _: () = assert!(core::mem::size_of::<Mass>() == specdec_core::scratch::PARTIAL_BYTES);

impl Reduce for Mass {
    const IDENTITY: Mass = Mass { units: 0, one: 0.0 };

    #[inline(always)]
    fn combine(self, o: Mass) -> Mass {
        Mass { units: self.units.wrapping_add(o.units), one: self.one + o.one }
    }

    #[inline(always)]
    unsafe fn warp_all(self) -> Mass {
        let shfl = |v: Mass, m: u32| {
            // SAFETY (all): the caller guarantees a full, converged warp.
            let word = |x: u64| unsafe {
                u64::from(gpu::shfl_bfly_u32(x as u32, m)) | u64::from(gpu::shfl_bfly_u32((x >> 32) as u32, m)) << 32
            };
            Mass { units: word(v.units), one: f64::from_bits(word(v.one.to_bits())) }
        };
        // SAFETY: as above.
        unsafe { warp_fold(self, shfl, Mass::combine) }
    }
}
