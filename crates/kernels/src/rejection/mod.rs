//! `rejection_sample` (SPEC §4): verify each request's drafts against the
//! target, softmax-free, in two launches that never materialise a
//! probability and write nothing of size rows × V.
//!
//! 1. `rejection_stats_{target}_{draft}` (or, for chunks of a few tiles,
//!    its twin reading one quad a batch, `rejection_stats_small_…`, less
//!    than half the code): grid `(requests·(K+1), chunks)`.
//!    Block `(r·(K+1) + i, c)` reads chunk `c` of request `r`'s row `i` (if
//!    `i <= n_r`): greedy requests reduce the target argmax; sampling requests
//!    the target's (max, Σexp) of `t/T`, and for draft rows the draft's, from
//!    draft-logits column `i` of the request's slot (and, in the small twin, the
//!    two rows' overlap, which bounds the residual's mass from below). One
//!    [`Stats`] per block. The
//!    request's last block (`crate::last_block`) then decides: each warp takes
//!    rows `w, w + 8, …` (each row's chunks combined by the warp into
//!    log-sum-exps), checks their draft ids, reports their flags and finds
//!    the first that stops the walk (a rejection, a placeholder, or the bonus
//!    row), as rows decide independently; the first over all warps is `j`.
//!    Warp 0 writes the accepted drafts, `-1` padding, the counts, and a
//!    [`ResampleJob`] saying what token `j` must be sampled from (or `-1`s, for a
//!    request with a bad draft id), with all pass 2 needs of the request.
//! 2. `rejection_resample_{target}_{draft}`: grid `(requests,
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
//!    the decision seeded below their log-mass (`accept::floors`), so a block rules
//!    ids out from its first quad (at one request, a block walks one quad a
//!    thread, and cold floors let every id through to its logarithms). The
//!    request's last block combines the chunks and writes token `j` if they
//!    reached their floors (`Resampled::certified`); otherwise, with
//!    probability `exp(−e^FLOOR_MARGIN)`, it folds the whole row again unseeded.
//!
//! A call with sampling filters (SPEC §7.3) runs `rejection_threshold_{target}_{draft}`
//! first, grid `(2·requests·(K+1), threshold_chunks)`: the `τ` of each
//! target row and each draft row (`threshold.rs`), and then `rejection_stats_filtered_…`
//! and `rejection_stats_kept_…` (pass 1 of the requests summed by the run rule, and of those
//! summed a term a kept value: `stats::kept_rule`) and `rejection_resample_filtered_…`, the
//! two passes over the rows masked to their kept sets: the target's `p'` and the draft's `q'`,
//! so that the log-sum-exps are `LSE(S)`, a draft outside the target's `S` has
//! `log p' = -inf` and the residual and bonus never leave `S`. Pass 1 does
//! not read a row whose kept set the threshold kernel pooled whole
//! (`FilterScratch::pooled`): chunk 0 of the row sums its `LSE(S)` from the
//! pool (`stats::push_pool`), a term a kept value.
//!
//! Resampled and bonus tokens use the target stream of their row, so a request
//! with no drafts gets exactly `gumbel_sample`'s token for its bonus row.
//!
//! # Where each step of SPEC §4 lives
//!
//! - `stats.rs`: pass 1's kernel body, the row statistics (a chunk's
//!   log-sum-exps, argmax, overlap: [`Stats`]) and their combine.
//! - `accept.rs`: the decision its last block runs: the walk over a request's
//!   rows (`decide`), the accept test (`Request::accepts`, on
//!   `specdec_core::sample::accepts`) and the floors it seeds for pass 2.
//! - `resample.rs`: pass 2, the Gumbel-max over the job's row: the residual
//!   `max(p − q, 0)` (draft logits), `p` without the draft (one-hot), or `p`
//!   itself (the bonus row), all in `resample_range`; the chunks' combine and
//!   its certification against the floors.
//! - `threshold.rs`: the filtered rows' thresholds.
//! - `mod.rs`: what the steps share (the request as loaded and checked, row
//!   addressing, where a request's tokens go, the [`ResampleJob`] handed from
//!   the decision to pass 2) and the table of kernels, exported under the
//!   symbols of `specdec_core::names`.
//!
//! The CPU twin, `specdec::cpu::rejection` in the host crate, names the same
//! steps `Request::lse`, `Request::accepts` and `Request::resample`.

mod accept;
mod block_verification;
mod resample;
mod sharded;
mod stats;
mod threshold;

pub use accept::RowDecision;
pub use block_verification::Mass;
pub use stats::Head;
use stats::{BOTH_RULES, KEPT_RULE, RUN_RULE};

pub use specdec_core::scratch::{JOB_NONE, JOB_ONE_HOT, JOB_RESIDUAL, JOB_TARGET, ResampleJob, Stats};

use crate::row::{SlotState, write_token};
use specdec_core::dtype::{Bf16, F16};
use specdec_core::kernel_symbol;
use crate::gpu;
use specdec_core::layout::{MAX_SYNTHETIC_DRAFTS, RatesParams, RejectionParams};
use specdec_core::rng::Stream;
use specdec_core::sample::Sampler;
use specdec_core::status::INVALID_OFFSETS;

/// A request's rows and slot, checked where they live.
#[derive(Clone, Copy)]
pub struct Request {
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

/// Whether `p` is a rank's part of a sharded call (`sharded.rs`).
#[inline(always)]
fn sharded(p: &RejectionParams) -> bool {
    p.send != 0
}

/// [`sharded`] in a pass-1 kernel that writes the processed
/// log-probabilities if `PROCESSED`: never (a sharded call's passes write
/// none; its log-probability kernels do, after it), which those kernels
/// then need not test.
#[inline(always)]
fn sharded_pass<const PROCESSED: bool>(p: &RejectionParams) -> bool {
    !PROCESSED && sharded(p)
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

/// The draft row of draft `column` on `slot`: column `column` of the slot's draft logits.
///
/// # Safety
/// `p.draft_logits != 0`, `0 <= slot < num_slots`, `column < max_drafts`.
#[inline(always)]
unsafe fn draft_row<D>(p: &RejectionParams, slot: i32, column: u32) -> *const D {
    let offset = slot as usize * p.draft_stride0 as usize + column as usize * p.draft_stride1 as usize;
    // SAFETY: the host checked the draft logits cover num_slots × max_drafts rows of >= vocab.
    unsafe { (p.draft_logits as *const D).add(offset) }
}

/// Writes token `i` of request `r`.
///
/// # Safety
/// `r < requests`, `i <= max_drafts`.
#[inline(always)]
unsafe fn write_request_token(p: &RejectionParams, r: u32, i: u32, token: i64) {
    let at = r as usize * (p.max_drafts as usize + 1) + i as usize;
    // SAFETY: tokens holds requests·(K+1) elements of the flagged width.
    unsafe { write_token(p.tokens, p.tokens_i64, at, token) }
}

/// The entry points of `rejection_sample` for each (target, draft
/// logits) dtype pair, in a module per pair, exported under their `names` symbols.
macro_rules! rejection_kernels {
    ($($pair:ident: $t:ident => $d:ident;)*) => {$(
        #[doc = concat!(
            "`rejection_sample`'s kernels for ", stringify!($t), " target and ", stringify!($d), " draft logits."
        )]
        pub mod $pair {
            use super::*;

            /// Pass 1 of `rejection_sample` (`names::REJECTION_STATS`). It
            /// keeps no overlaps: a third exponential per pair makes its loop
            /// compute-bound at large batch
            /// (benches/results/2026-12-01-nvidia-h200-overlap-ab.md), and the
            /// residual floors they seed pay only where a resample block's
            /// chunk is short.
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 4, false, false, false, RUN_RULE>(&p) }
            }

            /// Pass 1 reading one quad a batch (`names::REJECTION_STATS_SMALL`):
            /// the host's pick for chunks of a few tiles (small batches), where
            /// its code, less than half the size, is what the call waits for.
            /// It keeps the overlaps that seed the residual's floors (see
            /// `Request::accepts`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS_SMALL, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats_small(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 1, true, false, false, RUN_RULE>(&p) }
            }

            /// The thresholds of a call with filters (`names::REJECTION_THRESHOLD`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher (grid and shared
            /// memory as `threshold.rs` says).
            #[unsafe(export_name = kernel_symbol!(REJECTION_THRESHOLD, $t, $d))]
            pub unsafe extern "ptx-kernel" fn threshold(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::threshold::thresholds::<$t, $d, false, false>(&p) }
            }

            /// The thresholds and top-k lists of a sharded call with filters
            /// (`names::REJECTION_THRESHOLD_SHARDED`).
            ///
            /// # Safety
            /// As `threshold`, in a sharded call: `send` holds the rank's
            /// round-1 message with its lists.
            #[unsafe(export_name = kernel_symbol!(REJECTION_THRESHOLD_SHARDED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn threshold_sharded(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::threshold::thresholds::<$t, $d, false, true>(&p) }
            }

            /// A round of the top-p search of the rows `threshold` left to
            /// all their blocks (`names::REJECTION_THRESHOLD_SEARCH`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher after `threshold`,
            /// with its grid and shared memory, once a round.
            #[unsafe(export_name = kernel_symbol!(REJECTION_THRESHOLD_SEARCH, $t, $d))]
            pub unsafe extern "ptx-kernel" fn threshold_search(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::threshold::thresholds::<$t, $d, true, false>(&p) }
            }

            /// Pass 1 of a call with filters, after `threshold`
            /// (`names::REJECTION_STATS_FILTERED`): its requests summed by
            /// the run rule.
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS_FILTERED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats_filtered(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 4, false, true, false, RUN_RULE>(&p) }
            }

            /// Pass 1 of a call with filters, beside `stats_filtered`
            /// (`names::REJECTION_STATS_KEPT`): its requests summed a term
            /// a kept value.
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS_KEPT, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats_kept(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 4, false, true, false, KEPT_RULE>(&p) }
            }

            /// Pass 1 of a call that asks for processed log-probabilities
            /// (`names::REJECTION_STATS_PROCESSED`): the passes write
            /// them, a greedy row summing its exponentials too (the plain
            /// kernels keep the registers those take).
            ///
            /// # Safety
            /// Launched by the host's checked launcher (`p.processed` given).
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS_PROCESSED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats_processed(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 4, false, false, true, RUN_RULE>(&p) }
            }

            /// `stats_processed` reading one quad a batch, keeping the overlaps
            /// (`names::REJECTION_STATS_SMALL_PROCESSED`): the host's pick
            /// where it would take `stats_small`.
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS_SMALL_PROCESSED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats_small_processed(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 1, true, false, true, RUN_RULE>(&p) }
            }

            /// `stats_processed` of a call with filters, after `threshold`
            /// (`names::REJECTION_STATS_FILTERED_PROCESSED`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher (`p.processed` given).
            #[unsafe(export_name = kernel_symbol!(REJECTION_STATS_FILTERED_PROCESSED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn stats_filtered_processed(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::stats::stats::<$t, $d, 4, false, true, true, BOTH_RULES>(&p) }
            }

            /// Pass 2 of a call with filters (`names::REJECTION_RESAMPLE_FILTERED`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_RESAMPLE_FILTERED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn resample_filtered(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::resample::resample::<$t, $d, 2, true>(&p) }
            }

            /// Block verification's kernel, between the passes
            /// (`names::REJECTION_BLOCK`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_BLOCK, $t, $d))]
            pub unsafe extern "ptx-kernel" fn block(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::block_verification::block::<$t, $d, false>(&p) }
            }

            /// Block verification's kernel in a sharded call with draft
            /// logits (`names::REJECTION_BLOCK_SHARDED`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_BLOCK_SHARDED, $t, $d))]
            pub unsafe extern "ptx-kernel" fn block_sharded(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::block_verification::block::<$t, $d, true>(&p) }
            }

            /// Pass 2 of `rejection_sample` (`names::REJECTION_RESAMPLE`).
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_RESAMPLE, $t, $d))]
            pub unsafe extern "ptx-kernel" fn resample(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::resample::resample::<$t, $d, 2, false>(&p) }
            }

            /// Pass 2, the body of `resample` under the launch bounds of
            /// `names::REJECTION_RESAMPLE_LEAN` (64 registers): the host's
            /// pick for a grid of more than one wave.
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_RESAMPLE_LEAN, $t, $d))]
            pub unsafe extern "ptx-kernel" fn resample_lean(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::resample::resample::<$t, $d, 2, false>(&p) }
            }

            /// Pass 2 walking one quad a batch
            /// (`names::REJECTION_RESAMPLE_SMALL`): the host's pick for chunks
            /// of a few tiles, as pass 1's small variant.
            ///
            /// # Safety
            /// Launched by the host's checked launcher.
            #[unsafe(export_name = kernel_symbol!(REJECTION_RESAMPLE_SMALL, $t, $d))]
            pub unsafe extern "ptx-kernel" fn resample_small(p: RejectionParams) {
                // SAFETY: forwarded.
                unsafe { super::resample::resample::<$t, $d, 1, false>(&p) }
            }
        }
    )*};
}

for_each_dtype_pair!(rejection_kernels);

/// Writes a synthetic-acceptance call's rates into the workspace
/// (`names::REJECTION_RATES`): thread `t < count` stores rate `t`. The
/// indexed read copies the parameter block to local memory, which this
/// one-block kernel can afford and the passes, which read the rates from
/// the workspace, would not.
///
/// # Safety
/// Launched by the host's checked launcher: one block; `dst` holds `count
/// <= MAX_SYNTHETIC_DRAFTS` floats.
#[unsafe(export_name = kernel_symbol!(REJECTION_RATES, f32, f32))]
pub unsafe extern "ptx-kernel" fn rates(p: RatesParams) {
    let t = gpu::thread_idx_x();
    if t < p.count && (t as usize) < MAX_SYNTHETIC_DRAFTS {
        // SAFETY: t < count <= the entries of dst (caller).
        unsafe { (p.dst as *mut f32).add(t as usize).write(p.rates[t as usize]) };
    }
}
