//! A sharded `rejection_sample` (REFERENCE §9, `docs/VOCAB_PARALLEL.md` §6
//! step 5): each of `P` ranks holds ids `p.shard.offset ..` of every row
//! and runs both passes over them; two exchanges (the host's) carry what
//! the decision and the token need of the other ranks' ids.
//!
//! 1. Pass 1 (`super::stats`) reduces each (request, row) pair over the
//!    rank's ids as the unsharded call reduces it over its chunks, and the
//!    pair's last block writes the pair's [`PairRecord`] into the rank's
//!    round-1 message ([`send_record`]).
//! 2. `rejection_decide_sharded` ([`decide_sharded`]), a block a request,
//!    combines each pair's `P` records into the pair's first workspace
//!    entry, as pass 1 combines a row's chunks (the sums are order-free, so
//!    these are the unsharded call's bits), and runs the decision
//!    (`super::accept::decide`), which reads the draft token's logits from
//!    the record of the rank that holds it ([`drafted`]).
//! 3. Pass 2 (`super::resample`) draws the job's candidates over the rank's
//!    ids, noise keyed by global id, from floors at `-inf` (one rank's
//!    candidates bound nothing of the row's), and the request's last block
//!    writes them into the rank's round-2 message.
//! 4. `rejection_combine_sharded` ([`combine_sharded`]), a thread a
//!    request, combines the `P` candidates by the argmax rule (a total
//!    order) and writes token `j`.
//!
//! With block verification (`RejectionParams::pair_jobs`) the decision
//! also writes pass 2's job at each row where a request's block may end
//! (`super::block_verification::row_job`); between 2 and 3 the block kernel
//! (`SHARDED`, with draft logits) writes the rank's part of each row's
//! residual mass into the round-2 message; pass 2 runs once over every
//! row's jobs (`pair_jobs`, launched as `jobs`); the
//! combine adds the masses, decides where each block ends
//! (`super::block_verification::block_end`) and takes that row's candidates.
//!
//! Ranks that disagree (a failed rank, shards that do not tile the row, a
//! pair whose slot, position, draft or rows differ between ranks) flag the
//! requests concerned `status::INVALID_SHARD`, which makes them invalid on
//! every rank alike.

use super::accept::{block_row, decide};
use super::block_verification::{Mass, block_end, noted, row_job, write_counts};
use super::stats::{GREEDY_ROW, Head, Row, SAMPLED_ROW, row_kind, tail_head, thresholds};
use super::threshold::{entry_at, filter_words, row_filter};
use super::{JOB_NONE, Request, ResampleJob, draft_row, target_row, write_request_token};
use crate::block::Reduce;
use crate::gpu::{self, WARP};
use crate::load::Load;
use crate::merge::merge_lists;
use crate::shard::block_unfit;
use crate::shared;
use crate::walk_sum::{gather_sum, warp_exp_sum};
use core::mem::offset_of;
use specdec_core::argmax::ArgMax;
use specdec_core::exp_sum::ExpSum;
use specdec_core::kernel_symbol;
use specdec_core::layout::{BLOCK_THREADS, RejectionParams, WARPS};
use specdec_core::sample::Resampled;
use specdec_core::scratch::{BlockState, LogprobsLse, Stats};
use specdec_core::shard::{self, Header, PairRecord, TopList};
use specdec_core::status::INVALID_SHARD;

/// Writes pair `pair`'s record into the rank's round-1 message (from the
/// call's first pair, the rank's header too): where `valid`, the pair's
/// first entry, its argmax moved to global ids, and the raw target and
/// draft logits of the row's draft where the rank holds it; an empty
/// record elsewhere (which no decision reads); and the pair's digest
/// (`shard::pair_digest`, with the slot's filter values in a call with filters).
///
/// # Safety
/// One thread of pair `pair < requests·(K+1)`'s last block in a sharded
/// call, after the pair's first entry was written or combined (where
/// `valid`: a row `i <= n_r` of a valid request) and the pair's request
/// written to [`shared::request`] before a barrier (read from there, not
/// kept in registers through pass 1's walk).
#[inline(always)]
pub(super) unsafe fn send_record<T: Load, D: Load>(p: &RejectionParams, pair: u32, valid: bool) {
    // SAFETY (all): the request as the caller wrote it; the message holds a
    // header and requests·(K+1) records (workspace, host-sized); stats
    // requests·(K+1)·chunks entries; row = row0 + i < rows, where drafts
    // and pos hold an element each.
    unsafe {
        let req = &shared::request().read();
        if pair == 0 {
            (p.send as *mut Header).write(p.shard);
        }
        let record = shard::pair_at(p.send, pair as usize);
        // The entry's 16-byte pieces, copied as they are (a whole `Stats`
        // in registers would go through local memory), its tail's argmax
        // then moved to global ids.
        let (to, from) = (record as *mut [u32; 4], (p.stats as *const Stats).add(pair as usize * p.chunks as usize));
        if valid {
            for k in 0..core::mem::size_of::<Stats>() / 16 {
                to.add(k).write((from as *const [u32; 4]).add(k).read());
            }
        } else {
            (&raw mut (*record).stats).write(Stats::IDENTITY);
        }
        let tail = to.add(offset_of!(Stats, best) / 16);
        let mut best = tail.read();
        if best[1] != ArgMax::IDENTITY.index {
            best[1] += p.shard.offset;
            tail.write(best);
        }
        let i = pair % (p.max_drafts + 1).max(1); // max_drafts < u32::MAX (host-checked); keeps the panic path out
        let (mut drafted, mut draft, mut pos) = ([f32::NAN; 2], -1, 0);
        if valid {
            let row = req.row0 + i;
            pos = *(p.pos as *const u64).add(row as usize);
            if i < req.drafts {
                draft = *(p.drafts as *const i32).add(row as usize);
            }
            // The draft's logits, for a sampling row's accept test, where this rank holds the draft.
            let local = (draft as u32).wrapping_sub(p.shard.offset);
            if draft >= 0 && local < p.vocab && !req.slot.greedy() {
                drafted[0] = (*target_row::<T>(p, row).add(local as usize)).as_f32();
                if p.draft_logits != 0 {
                    drafted[1] = (*draft_row::<D>(p, req.slot.slot, i).add(local as usize)).as_f32();
                }
            }
        }
        let s = &req.slot;
        // The slot's filter values too: ranks that filter a row differently would find different `τ`s.
        let filters = if valid && p.filtered != 0 && s.slot >= 0 { filter_words(p, s.slot as usize) } else { [0; 6] };
        let digest = shard::pair_digest(s.slot, s.temperature, s.seed, pos, draft, req.row0, req.drafts, filters);
        (&raw mut (*record).drafted).write(drafted);
        (&raw mut (*record).digest).write(digest);
    }
}

/// The decision of a sharded call (`names::REJECTION_DECIDE_SHARDED`; see
/// module docs): block `r` combines the ranks' records of request `r`'s
/// pairs, a warp a pair, then decides the request as pass 1's last block
/// does in an unsharded call.
///
/// # Safety
/// Launched by the host's checked launcher after round 1, with the call's
/// parameters: `recv` holds `shard_ranks >= 1` round-1 messages; grid
/// `(requests)`, `layout::SHARED_BYTES`.
#[unsafe(export_name = kernel_symbol!(REJECTION_DECIDE_SHARDED, f32, f32))]
pub unsafe extern "ptx-kernel" fn decide_sharded(p: RejectionParams) {
    let (r, tid) = (gpu::block_idx_x(), gpu::thread_idx_x());
    if r >= p.requests {
        return;
    }
    // SAFETY: r < requests.
    let req = unsafe { Request::load(&p, r) };
    if tid == 0 {
        // SAFETY: the launch has layout::SHARED_BYTES; the round-2 message
        // (in the rank's message buffer, free after round 1) holds its word
        // and a candidate a job: none for a job pass 2 leaves alone (a
        // request without one, a row where its block cannot end).
        unsafe {
            shared::request().write(req);
            let rows = if p.pair_jobs != 0 { p.max_drafts + 1 } else { 1 };
            for t in 0..rows {
                shard::candidates_at(p.send, pair_job(&p, r, t)).write(Resampled::IDENTITY);
            }
            if r == 0 {
                (p.send as *mut [u32; 4]).write([1, 0, 0, 0]);
            }
        }
    }
    // Whether the ranks' headers fit together: every block checks them all (a few).
    // SAFETY: every thread of the block is here (the return above is
    // block-uniform); `recv` holds the ranks' round-1 messages (caller).
    let unfit = unsafe { block_unfit(p.recv, round_1_bytes(&p), p.shard_ranks) };
    let k1 = p.max_drafts + 1;
    let mut i = tid / WARP;
    while i < k1 {
        let kind = row_kind::<false, false>(&p, &req, i);
        // SAFETY: the whole warp (a uniform loop); r·(K+1) + i is a pair of the call.
        unsafe { combine_ranks(&p, r * k1 + i, kind, unfit) };
        i += WARPS;
    }
    // SAFETY (both): every thread of the block is here; the barrier orders
    // the warps' entries and thread 0's request before the decision's reads.
    unsafe {
        gpu::sync_threads();
        if p.filtered != 0 {
            decide::<f32, f32, false, true, false>(&p, r);
        } else {
            decide::<f32, f32, false, false, false>(&p, r);
        }
    }
    if p.pair_jobs == 0 {
        return; // block-uniform
    }
    // Block verification: pass 2's job at each row of the request (none
    // where its block cannot end), from the decision's (thread 0 wrote it
    // and the request's block before the barrier).
    // SAFETY (all): every thread of the block is here; jobs holds `requests`
    // entries, pair_jobs `requests·(K+1)` (workspace, host-sized); t <= K.
    unsafe {
        gpu::sync_threads();
        let mut t = tid;
        while t < k1 {
            let job = (p.jobs as *const ResampleJob).add(r as usize).read();
            let at = pair_job(&p, r, t);
            let row = if job.mode == JOB_NONE { None } else { row_job(&p, r, &job, noted(&p, r), t) };
            (p.pair_jobs as *mut ResampleJob).add(at).write(row.unwrap_or(ResampleJob::NONE));
            t += BLOCK_THREADS;
        }
    }
}

/// Where request `r`'s job at row `t` lies in a call with block
/// verification, among `pair_jobs` and the round-2 candidates (pass 2's
/// job index): row by row, `t·requests + r`.
#[inline(always)]
pub(super) fn pair_job(p: &RejectionParams, r: u32, t: u32) -> usize {
    t as usize * p.requests as usize + r as usize
}

/// The call's (request, row) pairs, `requests·(K+1)`.
#[inline(always)]
pub(super) fn pairs(p: &RejectionParams) -> u32 {
    p.requests * (p.max_drafts + 1)
}

/// Bytes of a rank's round-1 message in the call.
#[inline(always)]
fn round_1_bytes(p: &RejectionParams) -> usize {
    shard::pairs_message_bytes(pairs(p) as usize, p.filtered != 0)
}

/// Pair `pair`'s `P` records combined by the warp into its first workspace
/// entry (`pair · chunks`): the sums by `walk_sum::gather_sum`, the heads
/// as a row of `kind`'s; `INVALID_SHARD` where the headers do not fit
/// (`unfit`) or the ranks' digests of the pair differ.
///
/// # Safety
/// All 32 lanes of the warp call this together, converged; `recv` holds the
/// ranks' round-1 messages; `pair < requests·(K+1)`.
#[inline(always)]
unsafe fn combine_ranks(p: &RejectionParams, pair: u32, kind: u32, unfit: bool) {
    let (ranks, len) = (p.shard_ranks, round_1_bytes(p));
    let first = shard::pair_at(p.recv, pair as usize) as *const u8;
    // SAFETY (all): q < ranks: rank q's record of the pair, inside `recv`
    // (caller), 16-byte aligned (messages of multiples of 16 bytes).
    let record = |q: u32| unsafe { first.add(q as usize * len) as *const PairRecord };
    let mine = gpu::thread_idx_x() % WARP;
    // SAFETY: stats holds requests·(K+1)·chunks entries (workspace).
    let entry = unsafe { (p.stats as *mut Stats).add(pair as usize * p.chunks as usize) };
    // Each sum written as soon as it is gathered (one `ExpSum` live at a
    // time; a whole `Stats` would go through local memory).
    // SAFETY (all): the whole warp (caller); `field` an `ExpSum` field of `Stats`.
    let sum_into = |field: usize| unsafe {
        let sum = gather_sum(first, len, ranks, offset_of!(PairRecord, stats) + field);
        if mine == 0 {
            ((entry as *mut u8).add(field) as *mut ExpSum).write(sum);
        }
    };
    // A filtered row's sums are its kept set's, which the merge kernel wrote.
    let k1 = p.max_drafts + 1;
    // SAFETY: pair < requests·(K+1): its request's entries; written by the
    // threshold kernel and, where a value, the merge kernel (earlier launches).
    let (tau_t, tau_q) = if p.filtered != 0 {
        unsafe { thresholds(p, pair / k1, pair % k1) }
    } else {
        (f32::NEG_INFINITY, f32::NEG_INFINITY)
    };
    if !(tau_t > f32::NEG_INFINITY) {
        sum_into(offset_of!(Stats, target));
    }
    if !(tau_q > f32::NEG_INFINITY) {
        sum_into(offset_of!(Stats, draft));
    }
    let digest = |q: u32| unsafe { (*record(q)).digest };
    let ours = digest(0);
    let (mut head, mut differ) = (Head::IDENTITY, false);
    let mut q = mine;
    while q < ranks {
        let theirs = unsafe { tail_head(&raw const (*record(q)).stats) };
        head = if kind == GREEDY_ROW { greedy(head, theirs) } else { sampled(head, theirs) };
        differ |= digest(q) != ours;
        q += WARP;
    }
    // SAFETY (all): a full, converged warp (caller).
    let (head, differ) = unsafe {
        let head = if kind == GREEDY_ROW {
            Row::<GREEDY_ROW>(head).warp_all().0
        } else {
            Row::<SAMPLED_ROW>(head).warp_all().0
        };
        (head, gpu::warp_or_u32(differ as u32) != 0)
    };
    let flags = head.flags | if unfit || differ { INVALID_SHARD } else { 0 };
    if mine == 0 {
        // SAFETY: the pair's entry, a field at a time (as above).
        unsafe {
            (&raw mut (*entry).best).write(head.best);
            (&raw mut (*entry).flags).write(flags);
            (&raw mut (*entry).overlap).write(head.overlap);
        }
    }
}

/// Two heads of a greedy row combined: argmax and flags.
#[inline(always)]
fn greedy(a: Head, b: Head) -> Head {
    Row::<GREEDY_ROW>(a).combine(Row(b)).0
}

/// Two heads of a sampling row combined: flags (its sums are apart).
#[inline(always)]
fn sampled(a: Head, b: Head) -> Head {
    Row::<SAMPLED_ROW>(a).combine(Row(b)).0
}

/// The raw target and draft logits of draft id `d` at pair `pair`, from
/// the round-1 record of the rank that holds `d` (NaN where none does: the
/// headers then do not fit, and the request is invalid).
///
/// # Safety
/// In `decide_sharded`: `recv` holds the ranks' round-1 messages; `pair <
/// requests·(K+1)`.
#[inline(always)]
pub(super) unsafe fn drafted(p: &RejectionParams, pair: u32, d: i32) -> [f32; 2] {
    let len = round_1_bytes(p) as u64;
    for q in 0..p.shard_ranks as u64 {
        let message = p.recv + q * len;
        // SAFETY (both): rank q's message, inside `recv` (caller).
        let h = unsafe { *(message as *const Header) };
        if h.holds(d as u32) {
            return unsafe { (*shard::pair_at(message, pair as usize)).drafted };
        }
    }
    [f32::NAN; 2]
}

/// The filtered rows of a sharded call after round 1
/// (`names::REJECTION_MERGE_SHARDED`): block `e` takes threshold entry `e`
/// (`which · requests·(K+1) + pair`, as `super::threshold::entry`) where
/// its row is filtered (`super::threshold::row_filter`: every rank finds
/// the same rows), finds `τ` from the ranks' [`TopList`]s of the row by
/// the slot's filter (`crate::merge::merge_lists`: the unsharded call's
/// bits, a function of the values at or above the row's `top_k`-th largest,
/// which the lists hold with their counts), and `LSE(S)` in warp 0
/// (`ExpSum`, a term a kept value, as pass 1 sums a kept set, a lane's
/// groups combined over the warp): `τ` into the entry's threshold (where
/// pass 2 and the decision read it), the sum into the pair's first
/// workspace entry (where the decision's combine leaves it:
/// [`combine_ranks`]).
///
/// # Safety
/// Launched by the host's checked launcher after round 1 of a call with
/// filters, with its parameters: `recv` holds `shard_ranks` round-1
/// messages; grid `(2·requests·(K+1))`, `shard::merge_entries(shard_ranks)`
/// `filter::Group`s of dynamic shared memory.
#[unsafe(export_name = kernel_symbol!(REJECTION_MERGE_SHARDED, f32, f32))]
pub unsafe extern "ptx-kernel" fn merge_sharded(p: RejectionParams) {
    let tid = gpu::thread_idx_x();
    let Some((which, pair, r, i)) = entry_at(&p, gpu::block_idx_x()) else {
        return;
    };
    // SAFETY (both): r < requests, i <= max_drafts.
    let req = unsafe { Request::load(&p, r) };
    let Ok(filter) = (unsafe { row_filter(&p, &req, i, which) }) else {
        return; // not filtered: the threshold kernel's `τ` stands
    };
    let len = round_1_bytes(&p) as u64;
    // SAFETY: rank q's message, inside `recv` (caller).
    let list = |q: u32| {
        shard::list_at(p.recv + q as u64 * len, pairs(&p) as usize, which as usize, pair as usize) as *const TopList
    };
    // SAFETY (all): every thread of the block is here (the returns above
    // are block-uniform); `merge_lists` wrote `τ` and the groups before a
    // barrier; the launch's shared memory as `merge_lists` needs it (caller).
    unsafe {
        let tau_at = (p.thresholds as *mut f32).add(super::threshold::entry(&p, r, i, which));
        let (groups, n) = merge_lists(p.shard_ranks, list, filter, p.shard.vocab as usize, tau_at);
        if tid < WARP {
            // The groups are the entries of a nonzero count (`join_groups`).
            let tau = tau_at.read();
            let mut sum = ExpSum::EMPTY;
            let mut j = tid;
            while j < n {
                let e = groups.add(j as usize).read();
                if e.count > 0 && e.value >= tau {
                    sum.push_count(e.value, e.count);
                }
                j += WARP;
            }
            let sum = warp_exp_sum(sum);
            if tid == 0 {
                // The pair's first stats entry (workspace, host-sized).
                let stats = (p.stats as *mut Stats).add(pair as usize * p.chunks as usize);
                let field = if which == 0 { &raw mut (*stats).target } else { &raw mut (*stats).draft };
                field.write(sum);
            }
        }
    }
}

/// The tokens of a sharded call's jobs (`names::REJECTION_COMBINE_SHARDED`;
/// see module docs): thread `t` of block `b` combines request `b·BLOCK_THREADS
/// + t`'s candidates from the ranks' round-2 messages and writes its token
/// `j`; `-1` and `INVALID_SHARD` where a rank did not get there. A block
/// of drafts ends where the ranks' masses decide
/// (`block_verification::block_end`): its token there, its outputs past it
/// undone (tokens `-1`, the counts), its state zero again. Where the
/// call asks for processed log-probabilities (`p.lse`), it writes each
/// emitted position's target log-sum-exp of a sampling request, from the
/// pair's combined entry as the decision took it, for the log-probability
/// kernels after the call (`crate::logprobs::combine_sharded`).
///
/// # Safety
/// Launched by the host's checked launcher after round 2, with the call's
/// parameters: `recv` holds `shard_ranks` round-2 messages; grid
/// `(⌈requests / BLOCK_THREADS⌉)`, no shared memory.
#[unsafe(export_name = kernel_symbol!(REJECTION_COMBINE_SHARDED, f32, f32))]
pub unsafe extern "ptx-kernel" fn combine_sharded(p: RejectionParams) {
    let r = gpu::block_idx_x() * BLOCK_THREADS + gpu::thread_idx_x();
    if r >= p.requests {
        return;
    }
    // SAFETY: the decision wrote jobs[r] (an earlier launch).
    let job = unsafe { *(p.jobs as *const ResampleJob).add(r as usize) };
    if job.mode == JOB_NONE {
        return;
    }
    let (k1, block) = (p.max_drafts + 1, p.pair_jobs != 0);
    let pairs = pairs(&p) as usize;
    let own = if block { shard::block_candidates_message_bytes(pairs) } else { shard::candidates_message_bytes(p.requests as usize) };
    let len = shard::last_round_bytes(own, p.logprob_rounds);
    let message = |q: u32| p.recv + q as u64 * len as u64;
    // SAFETY: r < requests of a call with block verification, after the decision.
    let (n, rows) = if block { unsafe { noted(&p, r) } } else { (0, core::ptr::null()) };
    let tau = if n == 0 {
        job.column
    } else {
        // One-hot rows sum nothing: each mass is the noted row's one term.
        // SAFETY (both): row i < n was noted; the ranks' masses of the
        // request's pairs, inside `recv` (caller).
        let mass = |i: u32, w: f64| {
            if p.draft_logits == 0 {
                return Mass::of_ranks(0, Some((w, unsafe { (*rows.add(i as usize)).log_p })));
            }
            let at = |q: u32| unsafe { *shard::mass_at(message(q), pairs, block_row(&p, r, i)) };
            Mass::of_ranks((0..p.shard_ranks).fold(0u64, |sum, q| sum.wrapping_add(at(q))), None)
        };
        // SAFETY: the request's noted block of n drafts; `job` the decision's.
        unsafe { block_end(&p, &job, rows, n, mass) }
    };
    let x = if block { pair_job(&p, r, tau) } else { r as usize };
    let (mut best, mut arrived) = (Resampled::IDENTITY, true);
    for q in 0..p.shard_ranks {
        // SAFETY (both): rank q's message, inside `recv` (caller); job x's candidates in it.
        unsafe {
            arrived &= *(message(q) as *const u32) != 0;
            best = best.combine(*shard::candidates_at(message(q), x));
        }
    }
    let token = if arrived { best.token() as i64 } else { -1 };
    // SAFETY: r < requests, tau <= n <= K; status one u32; the request's block state.
    unsafe {
        write_request_token(&p, r, tau, token);
        if tau < n {
            for i in tau + 1..n {
                write_request_token(&p, r, i, -1);
            }
            write_counts(&p, r, tau);
        }
        if n > 0 {
            (&raw mut (*(p.block_states as *mut BlockState).add(r as usize)).len).write(0);
        }
        if !arrived {
            gpu::atomic_or(p.status as *mut u32, INVALID_SHARD);
        }
    }
    if p.lse != 0 {
        // SAFETY: r < requests; the decision wrote num_emitted <= K + 1.
        let emitted = unsafe { *(p.num_emitted as *const i32).add(r as usize) };
        let k1 = p.max_drafts + 1;
        for i in 0..emitted.max(0) as u32 {
            let pair = r * k1 + i;
            // SAFETY: the pair's first stats entry (combined by the decision's
            // launch); lse holds requests·(K+1) entries (host-sized).
            unsafe {
                let entry = (p.stats as *const Stats).add(pair as usize * p.chunks as usize);
                let lse_t = (&raw const (*entry).target).read().to_lse().value();
                (p.lse as *mut LogprobsLse).add(pair as usize).write(LogprobsLse { raw: f32::NAN, processed: lse_t });
            }
        }
    }
}
