//! The records the kernels keep in the workspace's scratch between blocks
//! and launches of one call, defined once for the kernels (which read and
//! write them) and the host (which sizes the scratch regions by
//! `size_of`): a layout change is a compile-time change on both sides.

use crate::argmax::ArgMax;
use crate::exp_sum::ExpSum;
use crate::sample::Resampled;

/// Bytes of one per-block partial of a chunked row: `gumbel_sample`'s best
/// candidate and flags (the kernels' `block::Partial`, asserted there) and the
/// resample's two candidates ([`Resampled`]) share one region.
pub const PARTIAL_BYTES: usize = core::mem::size_of::<Resampled>();

/// Pass-1 result of one chunk of one row. Which fields a row uses depends on
/// its kind (the kernels' `Row`), and only those are combined. The target's
/// and the draft's sums are order-free ([`ExpSum`] of the GPU's run rule,
/// REFERENCE §2.6): a row's log-sum-exps do not depend on how the call
/// splits it into chunks.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Stats {
    pub target: ExpSum,
    pub draft: ExpSum,
    pub best: ArgMax,
    pub flags: u32,
    /// The target's and draft's overlap (`specdec_core::logspace::centre`),
    /// for the resample's residual floor (the kernels' `floors`).
    pub overlap: f32,
}

impl Stats {
    pub const IDENTITY: Stats =
        Stats { target: ExpSum::EMPTY, draft: ExpSum::EMPTY, best: ArgMax::IDENTITY, flags: 0, overlap: 0.0 };
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
/// from (the kernels' `floors`).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ResampleJob {
    pub mode: u32,
    pub row: u32,
    pub column: u32,
    pub draft: u32,
    pub slot: i32,
    pub temperature: f32,
    pub lse_t: f32,
    pub lse_q: f32,
    /// `ln w_τ` of a block-verified request's residual `max(w_τ·p − q, 0)`
    /// (REFERENCE §4.11): its walk shifts the target by `lse_t − ln_weight`;
    /// 0 for the draft-by-draft residual.
    pub ln_weight: f32,
    /// Seeds of the residual's and the target's floors.
    pub floors: (f32, f32),
    /// The `τ` of the job's target and draft rows in a call with filters
    /// (their kept sets: REFERENCE §7), `-inf` without: pass 2 reads them
    /// here rather than by request, so that it can take any list of jobs.
    pub thresholds: (f32, f32),
    pub seed: u64,
    pub pos: u64,
}

impl ResampleJob {
    /// No resample: a greedy or invalid request.
    pub const NONE: ResampleJob = ResampleJob {
        mode: JOB_NONE,
        row: 0,
        column: 0,
        draft: 0,
        slot: 0,
        temperature: 0.0,
        lse_t: 0.0,
        lse_q: 0.0,
        ln_weight: 0.0,
        floors: (0.0, 0.0),
        thresholds: (f32::NEG_INFINITY, f32::NEG_INFINITY),
        seed: 0,
        pos: 0,
    };
}

/// A draft row of a block-verified request (REFERENCE §4.11), as pass 1's
/// decision leaves it for the block kernel: the draft's log-probabilities
/// under the row's target and draft distributions, the row's log-sum-exps,
/// and the residual mass `r_i` the block kernel sums for it (written where
/// it summed it).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct BlockRow {
    pub log_p: f32,
    pub log_q: f32,
    pub lse_t: f32,
    pub lse_q: f32,
    pub mass: f64,
}

/// A block-verified request between pass 1 and the block kernel: `len`,
/// its drafts before the first placeholder (written by pass 1's decision
/// for a sampling request of one or more), `stop`, the largest row found
/// to stop so far, and `done`, the rows decided (an arrival counter). All
/// zero between calls: the request's last row resets them.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct BlockState {
    pub len: u32,
    pub stop: u32,
    pub done: u32,
}

/// Values a row's threshold blocks may keep for its merge
/// ([`FilterScratch::pool`]).
pub const POOL: usize = 4096;

/// One block's summary of its chunk of a filtered row: the chunk's values
/// that count (not NaN, above `-inf`), their largest, smallest and number,
/// and whether the candidates it kept are incomplete (`overflow != 0`).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Summary {
    pub max: f32,
    pub min: f32,
    pub count: u32,
    pub overflow: u32,
}

/// Where a filtered row's top-p search by the search kernels stands between
/// their launches (`filter::ROUNDS` of them after the threshold kernel, one
/// radix digit each, every block of the row histogramming its chunk): for a
/// row whose candidates do not bound `τ` (top-p without top-k or min-p, or
/// a pool that overflowed), in a call that launches them. `active` is zero
/// between calls (the search's last round clears it).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Search {
    /// Non-zero while the row is searched by the rounds.
    pub active: u32,
    /// The digits chosen so far (`filter::Radix`).
    pub prefix: u32,
    pub round: u32,
    /// The slot's `top_p`; the survivors' floor `τ_1`; the row's maximum.
    pub top_p: f32,
    pub floor: f32,
    pub max: f32,
    /// The survivors' mass above the chosen digits' values, and all of it
    /// (`filter::mass` units).
    pub acc: u64,
    pub total: u64,
}

/// Where a filtered row's pool holds every value of its kept set `S` (no
/// block overflowed, no NaN in the row): the number of values in the pool
/// and the row's maximum, from which the verifier's pass 1 takes `LSE(S)`
/// without reading the row (for a finite `τ`). [`Pooled::NONE`] elsewhere.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Pooled {
    pub count: u32,
    pub max: f32,
}

impl Pooled {
    pub const NONE: Pooled = Pooled { count: u32::MAX, max: f32::NAN };
}

/// The scratch of one filtered row of a threshold kernel (SPEC §7.2): each
/// block's [`Summary`], the candidates the blocks keep (`pool[..cursor]`:
/// when no block overflowed, every value of the row that can decide `τ`),
/// the largest of the blocks' cuts (`floor`, as `filter::key`: no value
/// below it can be in the row's `S_1`), the row's [`Search`] and the
/// histogram of its current round (counts and masses per digit), whether
/// the pool holds all of the row's `S` ([`Pooled`], written by the row's
/// last block each call), and the row's arrival counter. `counter`,
/// `cursor`, `floor`, the histogram and `search.active` are zero between
/// calls (the row's last block resets them). 16-byte aligned: the merge
/// reads summaries and pool 16 bytes a load.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct FilterScratch {
    pub summaries: [Summary; crate::layout::SUMMARY_CHUNKS as usize],
    pub pool: [f32; POOL],
    pub masses: [u64; crate::filter::DIGITS],
    pub counts: [u32; crate::filter::DIGITS],
    pub search: Search,
    pub pooled: Pooled,
    pub counter: u32,
    pub cursor: u32,
    pub floor: u32,
}

const _: () = assert!(core::mem::size_of::<FilterScratch>() == 20_032, "the bytes REFERENCE §5.1 states");

/// One block's part of a position's log-sum-exps (the log-probability
/// kernels, `layout::LogprobsParams`): of the raw values at `T = 1`, and of
/// the processed ones (scaled, masked to the kept set).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct LogprobsPartial {
    pub raw: ExpSum,
    pub processed: ExpSum,
}

impl LogprobsPartial {
    pub const IDENTITY: LogprobsPartial = LogprobsPartial { raw: ExpSum::EMPTY, processed: ExpSum::EMPTY };
}

/// A position's log-sum-exps, `raw` and `processed` (a greedy position's
/// processed is its raw one), from the first log-probability kernel to the top-n kernel.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct LogprobsLse {
    pub raw: f32,
    pub processed: f32,
}

/// One block's top-n candidates of its chunk of a position's row, best
/// first (`keys[..top_n]`, each a `top_key`, 0 where the chunk has fewer
/// ids), and how many of its ids have a log-probability larger than the
/// emitted token's.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct TopPartial {
    pub keys: [u64; crate::layout::MAX_TOP_LOGPROBS],
    pub larger: u32,
}

/// The order key of id `id` of log-probability `v` in a top-n: larger for a
/// larger `v`, then for a smaller id (the argmax's order, REFERENCE §8.2),
/// NaN as `-inf`, `-0` as `+0`; never 0, which marks an empty entry.
#[inline(always)]
pub fn top_key(v: f32, id: u32) -> u64 {
    let v = if v.is_nan() { f32::NEG_INFINITY } else { v + 0.0 };
    let order = (crate::argmax::floor_key(v) as u32) ^ 0x8000_0000;
    (order as u64) << 32 | (!id) as u64
}

/// The id of a [`top_key`].
#[inline(always)]
pub fn top_key_id(key: u64) -> u32 {
    !(key as u32)
}
