//! Pass 2 of `rejection_sample` (SPEC §4, resample and bonus): the
//! Gumbel-max over row `j` of each request's [`ResampleJob`]: the residual
//! `log(p − q)` with draft logits, `p` less the rejected id with one-hot
//! drafts, `p` itself for the bonus row or a placeholder (all in
//! [`resample_range`]). Chunks combine in the request's last block, which
//! writes token `j` once the result is certified against the job's floors,
//! or folds the row again unseeded.

use super::accept::write_processed;
use super::{JOB_NONE, JOB_ONE_HOT, JOB_RESIDUAL, ResampleJob, draft_row, sharded, target_row, write_request_token};
use crate::block::{Reduce, block_reduce, warp_best};
use crate::fold::block_floor;
use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, for_each_quad_shared, widen};
use crate::row::chunk_range;
use crate::shared;
use crate::threshold::{kept, mask, processed_log_prob};
use core::cell::Cell;
use specdec_core::argmax::Floored;
use specdec_core::layout::RejectionParams;
use specdec_core::logspace::ln_residual;
use specdec_core::rng::Stream;
use specdec_core::sample::{Resampled, Sampler};
use specdec_core::shard;

/// Pass 2 (see module docs), its walks taking up to `Q` quads a batch; with
/// `FILTERED`, over the job's rows masked to their kept sets.
///
/// # Safety
/// Launched by the host's checked launcher after pass 1 on the same stream.
#[inline(always)]
pub(super) unsafe fn resample<T: Load, D: Load, const Q: u32, const FILTERED: bool>(p: &RejectionParams) {
    // Job r of `requests` jobs: request r's, or in a sharded call with block
    // verification a pair's (`RejectionParams::pair_jobs`, launched as `jobs`).
    let (r, c, tid) = (gpu::block_idx_x(), gpu::block_idx_y(), gpu::thread_idx_x());
    if r >= p.requests || c >= p.resample_chunks {
        return;
    }
    // SAFETY: pass 1's decision wrote jobs[r] for every request.
    let job = unsafe { *(p.jobs as *const ResampleJob).add(r as usize) };
    if job.mode == JOB_NONE {
        return; // block-uniform
    }
    let (start, end) = chunk_range(p.vocab, p.resample_chunk, c);
    // A rank of a sharded call draws over its ids alone, which bound nothing of the row's mass.
    let ninf = f32::NEG_INFINITY;
    let floors = if sharded(p) { (ninf, ninf) } else { job.floors };
    // SAFETY: every thread of the block is here; start % 4 == 0, end <= vocab.
    let best = unsafe { resample_range::<T, D, Q, FILTERED>(p, &job, start, end, floors) };
    // SAFETY: all threads of the block reach this reduction.
    let reduced = unsafe { block_reduce(Candidates(best)) };
    // SAFETY: all of warp 0, once per block of an active request.
    let refold = tid < WARP && unsafe { complete_resample::<T, FILTERED>(p, r, c, reduced) };
    // SAFETY: every thread of the block is here (the returns above are block-uniform).
    if !unsafe { gpu::sync_threads_or(refold) } {
        return;
    }
    // The seeded floors were not reached: the request's last block folds the
    // whole row again, unseeded (a second copy of the loop; a loop of two
    // rounds kept more registers live through both and spilled).
    // SAFETY: pass 1's decision wrote jobs[r].
    let job = unsafe { (p.jobs as *const ResampleJob).add(r as usize).read_volatile() };
    // SAFETY: as above.
    let best = unsafe { resample_range::<T, D, Q, FILTERED>(p, &job, 0, p.vocab, (ninf, ninf)) };
    // SAFETY: as above.
    let reduced = unsafe { block_reduce(Candidates(best)) };
    if tid == 0 {
        // Read again, not kept through the loop (which then spilled).
        // SAFETY: as above; r < requests.
        unsafe {
            let job = (p.jobs as *const ResampleJob).add(r as usize).read_volatile();
            write_job_token::<T, FILTERED>(p, r, &job, reduced.0.token())
        };
    }
}

/// Writes the token of request `r`'s job and, where the call asks for it
/// (`RejectionParams::processed`, `lse`), its processed log-probability and
/// log-sum-exp: under the
/// target row's kept set and log-sum-exp (the job's `lse_t`), as the CPU
/// twin's `Dist::log_prob`, a NaN logit `-inf`.
///
/// # Safety
/// One thread; `job` is pass 1's for request `r < requests`; `token` is an
/// id of its row or `u32::MAX` (none: the row has no candidate).
#[inline(always)]
unsafe fn write_job_token<T: Load, const FILTERED: bool>(p: &RejectionParams, r: u32, job: &ResampleJob, token: u32) {
    // SAFETY: r < requests, column <= K (the job's).
    unsafe { write_request_token(p, r, job.column, token as i64) };
    if p.processed == 0 && p.lse == 0 {
        return;
    }
    let log_p = if token < p.vocab {
        // SAFETY: job.row < rows, token < vocab.
        let x = unsafe { (*target_row::<T>(p, job.row).add(token as usize)).as_f32() };
        let tau = if FILTERED { job.thresholds.0 } else { f32::NEG_INFINITY };
        let sampler = Sampler::new(job.temperature, 0, 0, Stream::Target);
        processed_log_prob(x, &sampler, tau, job.lse_t)
    } else {
        f32::NAN
    };
    // SAFETY: r < requests, column <= K; a resample job's request samples.
    unsafe { write_processed(p, r, job.column, log_p, job.lse_t, false) };
}

/// Ids `start .. end` of the job's row folded by the block, up to `Q` quads a
/// batch, each candidate floored first at its seed in `floors`, then by its
/// block's best value after each batch (see [`Floored`]); valid in thread 0.
/// With `FILTERED`, the target and draft values masked to the kept sets of
/// the job's row (`crate::threshold`): the residual of `p'` and `q'`.
///
/// # Safety
/// Every thread of the block calls this together; `job` is an active
/// job of the call; `start % 4 == 0`, `end <= vocab`.
#[inline(always)]
unsafe fn resample_range<T: Load, D: Load, const Q: u32, const FILTERED: bool>(
    p: &RejectionParams,
    job: &ResampleJob,
    start: u32,
    end: u32,
    floors: (f32, f32),
) -> Resampled {
    let sampler = Sampler::new(job.temperature, job.seed, job.pos, Stream::Target);
    let (tau_t, tau_q) = if FILTERED { job.thresholds } else { (f32::NEG_INFINITY, f32::NEG_INFINITY) };
    // SAFETY: job.row < rows.
    let target = unsafe { target_row::<T>(p, job.row) };
    let draft = if job.mode == JOB_RESIDUAL {
        // SAFETY: a residual job has draft logits, a valid slot and column < n_r <= K.
        unsafe { draft_row::<D>(p, job.slot, job.column) }
    } else {
        core::ptr::null()
    };
    // Noise and candidates are keyed by global id (the shard's, in a sharded call).
    let offset = p.shard.offset;
    // The target's shift in the residual: `log(w·p) = t − (lse_t − ln w)`,
    // `w = 1` but in a block-verified residual (REFERENCE §4.11).
    let shift = job.lse_t - job.ln_weight;
    // A warp evaluates the noise and the residual weight whenever one lane
    // must, so pruning each lane against the block's ids so far rather than
    // its own is what makes the floors pay; the seeds prune from the first quad.
    let cell = Cell::new((Floored::seeded(floors.0), Floored::seeded(floors.1)));
    // SAFETY: the launch has layout::SHARED_BYTES, the walk below its one user.
    let walk = unsafe { shared::walk() };
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
                let t = if FILTERED { mask(t, tau_t, &sampler) } else { t };
                let b = Resampled { residual: res_floor.probe(), target: tgt_floor.probe() };
                let folded = match job.mode {
                    JOB_RESIDUAL => {
                        // log(w·p − q) <= log(w·p) = tgt − shift. The draft logit
                        // is loaded only for an id the bounds cannot rule out:
                        // no draft registers live through the loop.
                        let res = |i: usize, tgt: f32| {
                            // SAFETY (in the walk's unsafe block): x + i < end <= vocab: an id of the draft row.
                            let q = sampler.scaled((*draft.add(x as usize + i)).as_f32());
                            let q = if FILTERED { kept(q, tau_q) } else { q };
                            ln_residual(tgt - shift, q - job.lse_q)
                        };
                        sampler.fold_resample_logits(b, x + offset, t, shift, res, n)
                    }
                    JOB_ONE_HOT => {
                        let res = |i: usize, tgt: f32| {
                            if x + offset + i as u32 == job.draft { f32::NEG_INFINITY } else { tgt }
                        };
                        sampler.fold_resample_logits(b, x + offset, t, 0.0, res, n)
                    }
                    _ => sampler.fold_resample_logits(b, x + offset, t, 0.0, |_, tgt| tgt, n),
                };
                cell.set((res_floor.settle(folded.residual), tgt_floor.settle(folded.target)));
            },
            || {
                let (res_floor, tgt_floor) = cell.get();
                // SAFETY (in the walk's unsafe block): for_each_quad_shared calls
                // this in all lanes of the warp together; the walk's shared
                // words are the floors' alone.
                let best = &raw mut (*walk).best;
                cell.set((block_floor(res_floor, &raw mut (*best)[0]), block_floor(tgt_floor, &raw mut (*best)[1])));
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
unsafe fn complete_resample<T: Load, const FILTERED: bool>(
    p: &RejectionParams,
    r: u32,
    c: u32,
    mine: Candidates,
) -> bool {
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
    if sharded(p) {
        // The rank's candidates go into its round-2 message (`sharded.rs`).
        if gpu::thread_idx_x() == 0 {
            // SAFETY: the message holds its word and `requests` candidates (workspace, host-sized).
            unsafe { shard::candidates_at(p.send, r as usize).write(acc.0) };
        }
        return false;
    }
    // Read again rather than kept in registers through the loop. Volatile: as in `gather`.
    // SAFETY: pass 1's decision wrote jobs[r].
    let job = unsafe { (p.jobs as *const ResampleJob).add(r as usize).read_volatile() };
    if !acc.0.certified(job.floors) {
        return true;
    }
    if gpu::thread_idx_x() == 0 {
        // SAFETY: one thread; the job of request r < requests.
        unsafe { write_job_token::<T, FILTERED>(p, r, &job, acc.0.token()) };
    }
    false
}

/// [`Resampled`] as a block reduction value.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Candidates(Resampled);

const _: () = assert!(core::mem::size_of::<Candidates>() == specdec_core::scratch::PARTIAL_BYTES);

impl Reduce for Candidates {
    const IDENTITY: Candidates = Candidates(Resampled::IDENTITY);

    #[inline(always)]
    fn combine(self, o: Candidates) -> Candidates {
        Candidates(self.0.combine(o.0))
    }

    #[inline(always)]
    unsafe fn warp_all(self) -> Candidates {
        // SAFETY (both): the caller guarantees a full, converged warp.
        unsafe { Candidates(Resampled { residual: warp_best(self.0.residual), target: warp_best(self.0.target) }) }
    }
}
