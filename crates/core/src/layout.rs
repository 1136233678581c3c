//! Block layout constants and the kernel parameter blocks, shared by the
//! kernels and the host launchers (`#[repr(C)]`, passed by value).
//!
//! Device pointers are carried as `u64` so this crate stays free of any
//! device-pointer type; the kernels cast them back.

use crate::shard::Header;

/// Threads per block of the sampling kernels.
pub const BLOCK_THREADS: u32 = 256;
/// Consecutive elements one thread handles per step (one Philox call's worth).
pub const ELEMS_PER_THREAD: u32 = 4;
/// Elements one block covers per step.
pub const TILE: u32 = BLOCK_THREADS * ELEMS_PER_THREAD;

/// Ids of a run: the segment of consecutive ids the GPU's order-free sum
/// takes as one term (REFERENCE §2.6); runs start at multiples of it, in a
/// row and, for the sums of a sharded call to be the unsharded call's, in
/// each rank's shard.
pub const RUN: u32 = 16;
/// Warps per block.
pub const WARPS: u32 = BLOCK_THREADS / 32;
/// Dynamic shared memory of every launch, in bytes: the size of the kernels'
/// `shared::Shared` (a slot per warp for the block's reductions, then one
/// record for the whole block), which asserts it.
pub const SHARED_BYTES: u32 = 352;
/// The walk sums of a kernel that sums by runs (two distributions,
/// `[exp_sum::GROUPS][BLOCK_THREADS]` `u128`s each), in bytes.
pub const WALK_SUMS_BYTES: u32 = 2 * crate::exp_sum::GROUPS as u32 * BLOCK_THREADS * 16;
/// Dynamic shared memory of the kernels that sum by runs (pass 1 of
/// `rejection_sample`, `logprobs_lse`): [`SHARED_BYTES`], then their walk
/// sums ([`WALK_SUMS_BYTES`]): the kernels' `shared::WalkShared`, which
/// asserts it.
pub const WALK_SHARED_BYTES: u32 = SHARED_BYTES + WALK_SUMS_BYTES;
/// Dynamic shared memory of the filter threshold kernels, in bytes: the size
/// of the kernels' `threshold::ThresholdShared` (a chunk's values, its
/// summary, the histograms of a search), which asserts it. Under the 48 KiB
/// a launch gets without opting in.
pub const THRESHOLD_SHARED_BYTES: u32 = 38_048;
/// Dynamic shared memory of the top-n log-probability kernel, in bytes:
/// [`SHARED_BYTES`], then each warp's top-n list ([`MAX_TOP_LOGPROBS`] `u64`
/// keys): the kernels' `logprobs::TopShared`, which asserts it.
pub const TOP_SHARED_BYTES: u32 = SHARED_BYTES + WARPS * MAX_TOP_LOGPROBS as u32 * 8;
/// Ids per block of the threshold kernels where a row's summaries cover it
/// ([`SUMMARY_CHUNKS`] of them): the values a block keeps in shared memory.
pub const THRESHOLD_CHUNK: u32 = 8 * TILE;
/// The most blocks per row of a threshold kernel, each with its summary in
/// the row's [`crate::scratch::FilterScratch`]: rows up to
/// `SUMMARY_CHUNKS · THRESHOLD_CHUNK` = 262,144 ids take the summaries' path.
pub const SUMMARY_CHUNKS: u32 = 32;

/// A call's per-slot sampling filters (SPEC §7) in device memory, each table
/// `[num_slots]` or 0 (that filter off for every slot).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct FilterTables {
    /// `i32`: `0` off, `< 0` invalid.
    pub top_k: u64,
    /// `f32` in `(0, 1]`.
    pub top_p: u64,
    /// `f32` in `[0, 1]`.
    pub min_p: u64,
}

impl FilterTables {
    /// Whether no table is given (the call is unfiltered).
    pub fn is_none(&self) -> bool {
        self.top_k == 0 && self.top_p == 0 && self.min_p == 0
    }
}

/// Parameters of `gumbel_sample` (SPEC §3). Row `r` owns `logits + r*row_stride`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct GumbelParams {
    /// `[rows, >= vocab]` logits, last stride 1.
    pub logits: u64,
    /// Elements between rows (0 broadcasts one row).
    pub row_stride: u64,
    /// `i32 [rows]`: the slot of each row, `-1` for padding.
    pub slots: u64,
    /// `f32 [num_slots]`.
    pub temperature: u64,
    /// `u64 [num_slots]`.
    pub seed: u64,
    /// `u64 [rows]`.
    pub pos: u64,
    /// `[num_slots, draft_k, >= vocab]` draft logits, or 0 for none.
    pub draft_logits: u64,
    pub draft_stride0: u64,
    pub draft_stride1: u64,
    /// `i32 [rows]` per-row draft-logits columns, or 0 to use `draft_column`.
    pub draft_columns: u64,
    /// `Partial [rows, chunks]` scratch.
    pub partials: u64,
    /// `u32 [rows]` arrival counters, zero between calls (workspace).
    pub counters: u64,
    /// `i32 [rows]` or `i64 [rows]` (see `tokens_i64`).
    pub tokens: u64,
    /// `u32 [rows]` per-row status flags, or 0.
    pub row_status: u64,
    /// One `u32`: OR of every flag raised.
    pub status: u64,
    /// The slots' filters; with any, the filtered kernels run and
    /// `thresholds` is `f32 [rows]` scratch: each row's `τ` (SPEC §7.2),
    /// `-inf` for a row kept whole, NaN for one whose filter values are bad.
    pub filters: FilterTables,
    pub thresholds: u64,
    /// `FilterScratch [rows]` (workspace): the threshold kernel's summaries.
    pub filter_scratch: u64,
    /// Blocks per row of the threshold kernel, each `threshold_chunk` ids.
    pub threshold_chunk: u32,
    pub threshold_chunks: u32,
    /// Non-zero where the search kernels follow the threshold kernel (the
    /// rows it cannot bound are then left to them: `scratch::Search`).
    pub threshold_search: u32,
    pub rows: u32,
    pub vocab: u32,
    pub num_slots: u32,
    pub draft_k: u32,
    /// The column for all rows when `draft_columns == 0`.
    pub draft_column: u32,
    /// Elements per block (a multiple of `TILE`) and blocks per row.
    pub chunk: u32,
    pub chunks: u32,
    pub drafting: u32,
    pub tokens_i64: u32,
    /// A sharded call's message (`shard::Header`, then a `shard::Row` a
    /// row) instead of its outputs, or 0 for an unsharded call; with
    /// filters, first its round-1 message (a `shard::TopList` a row:
    /// `shard::lists_message_bytes(rows)`).
    pub send: u64,
    /// With filters, every rank's round-1 message after the first exchange
    /// (`shard_ranks` of them, in rank order), which the merge kernel reads.
    pub recv: u64,
    pub shard_ranks: u32,
    /// A sharded call's header, which the kernel writes into `send`; its
    /// `offset` is the global id of the logits' first id (0 unsharded).
    pub shard: Header,
}

/// Parameters of `gumbel_combine`: the `ranks` messages of a sharded
/// `gumbel_sample` of `rows` rows (`shard::message_bytes(rows)` each, in
/// rank order at `recv`), combined into the call's outputs, as
/// [`GumbelParams`] names them.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct GumbelCombineParams {
    pub recv: u64,
    pub tokens: u64,
    pub row_status: u64,
    pub status: u64,
    pub ranks: u32,
    pub rows: u32,
    pub tokens_i64: u32,
    /// The log-probability rounds after the call's: each message is
    /// `shard::last_round_bytes(shard::message_bytes(rows), logprob_rounds)` long.
    pub logprob_rounds: u32,
}

/// Parameters of `rejection_sample` (SPEC §4). Request `r` owns target rows
/// `offsets[r] .. offsets[r+1]`: `n_r` draft rows then its bonus row.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct RejectionParams {
    /// `[rows, >= vocab]` target logits, last stride 1.
    pub target: u64,
    pub row_stride: u64,
    /// `i32 [requests + 1]`.
    pub offsets: u64,
    /// `i32 [rows]`: the draft verified at each row (`-1` placeholder); the
    /// bonus row's entry is not read.
    pub drafts: u64,
    /// `i32 [requests]`.
    pub slots: u64,
    /// `u64 [rows]`.
    pub pos: u64,
    /// `f32 [num_slots]`, `u64 [num_slots]`.
    pub temperature: u64,
    pub seed: u64,
    /// `[num_slots, >= max_drafts, >= vocab]` draft logits (raw), or 0 for
    /// one-hot drafts. Draft `i` of a request is column `i` of its slot.
    pub draft_logits: u64,
    pub draft_stride0: u64,
    pub draft_stride1: u64,
    /// Scratch: `StatsPartial [requests · (max_drafts+1) · chunks]`,
    /// `Job [requests]`, `Partial [requests · chunks]`.
    pub stats: u64,
    pub jobs: u64,
    pub partials: u64,
    /// `u32 [requests]` arrival counters, zero between calls (workspace).
    pub counters: u64,
    /// `u32 [rows]` arrival counters of pass 1's rows, zero between calls
    /// (workspace: the `max_rows` after `counters`).
    pub row_counters: u64,
    /// `[requests, max_drafts + 1]`, `i32` or `i64`.
    pub tokens: u64,
    /// `i32 [requests]`; `accepted` may be 0 (not wanted).
    pub num_emitted: u64,
    pub accepted: u64,
    /// `u32 [rows]` per-row flags, or 0.
    pub row_status: u64,
    /// One `u32`: OR of every flag raised.
    pub status: u64,
    /// The slots' filters on the target and those the drafts were sampled
    /// with (SPEC §7.3); with any, the filtered kernels run and `thresholds`
    /// is `f32 [2, requests · (max_drafts + 1)]` scratch: the `τ` of row `i`
    /// of request `r` at `r · (max_drafts + 1) + i`, the target's then the
    /// draft's (`-inf`: kept whole; NaN in the target's: bad filter values).
    pub filters: FilterTables,
    pub draft_filters: FilterTables,
    pub thresholds: u64,
    /// `FilterScratch [2, requests · (max_drafts + 1)]` (workspace), as
    /// `thresholds`: the threshold kernel's summaries.
    pub filter_scratch: u64,
    /// Blocks per row of the threshold kernel, each `threshold_chunk` ids.
    pub threshold_chunk: u32,
    pub threshold_chunks: u32,
    /// Non-zero where the search kernels follow the threshold kernel (the
    /// rows it cannot bound are then left to them: `scratch::Search`).
    pub threshold_search: u32,
    pub rows: u32,
    pub vocab: u32,
    pub requests: u32,
    pub max_drafts: u32,
    pub num_slots: u32,
    pub chunk: u32,
    pub chunks: u32,
    /// The same for pass 2, which reads one row per request.
    pub resample_chunk: u32,
    pub resample_chunks: u32,
    pub tokens_i64: u32,
    /// How far below each candidate's log-mass pass 2 seeds its floors
    /// (`sample::FLOOR_MARGIN`; `-inf` makes every resample refold).
    pub floor_margin: f32,
    /// `f32 [requests, max_drafts + 1]`: each emitted token's processed
    /// log-probability (REFERENCE §8), written by the passes themselves for
    /// a call that asks for it alone (greedy rows then also sum their
    /// exponentials in pass 1), NaN past `num_emitted`; 0 where not asked.
    pub processed: u64,
    /// `scratch::LogprobsLse [requests · (max_drafts + 1)]` (workspace): each
    /// emitted position's log-sum-exps, written with `processed` for a
    /// top-n kernel after the call (`LogprobsParams::lse`); 0: none.
    pub lse: u64,
    /// `f32 [max_drafts]` (workspace), the rates of a synthetic-acceptance
    /// call (SPEC §4.12), written by the rates kernel before pass 1: draft
    /// `i` accepted iff its acceptance uniform is below entry `i`; 0 for
    /// the token rule.
    pub rates: u64,
    /// Block verification (REFERENCE §4.11; 0 for the other rules):
    /// `scratch::BlockRow [requests · (max_drafts + 1)]` and
    /// `scratch::BlockState [requests]` (workspace). Pass 1's decision then
    /// accepts every draft of a sampling request, noting each row, and the
    /// block kernel decides the block (`block_chunks` blocks of
    /// `block_chunk` ids for each draft row).
    pub block_rows: u64,
    pub block_states: u64,
    pub block_chunk: u32,
    pub block_chunks: u32,
    /// A sharded call with block verification: `Job [requests · (max_drafts
    /// + 1)]` (workspace), pass 2's jobs a (request, row) pair, which the
    /// decision's launch writes (a block's rows where it may end; none
    /// elsewhere). 0 otherwise: pass 2 takes `jobs`, one a request.
    pub pair_jobs: u64,
    /// Non-zero where the call has filters (the threshold kernel wrote `thresholds`).
    pub filtered: u32,
    /// A sharded call (REFERENCE §9; all zero for an unsharded one): its
    /// header (`offset`, the global id of the logits' first id; `vocab`,
    /// the whole row's ids), the rank's message (`send`) and every rank's
    /// after each exchange (`recv`, `shard_ranks` of them), each
    /// `shard::pairs_message_bytes(requests·(K+1), filtered)` long in round 1 and
    /// `shard::last_round_bytes` of `shard::candidates_message_bytes(requests)`
    /// (with block verification `shard::block_candidates_message_bytes(requests·(K+1))`)
    /// and `logprob_rounds` (the log-probability rounds after the call's) in round 2.
    pub shard: Header,
    pub send: u64,
    pub recv: u64,
    pub shard_ranks: u32,
    pub logprob_rounds: u32,
}

/// The most drafts a synthetic-acceptance call of the CUDA backend takes:
/// its rates travel to the device in a kernel's parameter block
/// ([`RatesParams`]), so that a call copies nothing and can be captured.
pub const MAX_SYNTHETIC_DRAFTS: usize = 64;

/// Parameters of the kernel that writes a synthetic-acceptance call's rates
/// into the workspace: `rates[..count]` to `dst`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct RatesParams {
    pub rates: [f32; MAX_SYNTHETIC_DRAFTS],
    pub dst: u64,
    pub count: u32,
}

/// How a log-probability call's positions map to rows and tokens
/// ([`LogprobsParams::op`]).
pub const POSITIONS_GUMBEL: u32 = 0;
pub const POSITIONS_REJECTION: u32 = 1;

/// The most top log-probabilities a call may ask for per position (REFERENCE §8.2).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Parameters of the log-probability kernels (REFERENCE §8), launched after
/// a call of either operation over its **positions**: `gumbel_sample`'s rows
/// (`op = POSITIONS_GUMBEL`: position `r` is row `r`, emitted where its token
/// is an id), or `rejection_sample`'s `[requests, max_drafts + 1]` token
/// slots (`POSITIONS_REJECTION`: position `r·(K+1) + i` is target row
/// `offsets[r] + i`, emitted where `i < num_emitted[r]`). Each position's
/// token, slot and `τ` are read from the call's own buffers.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct LogprobsParams {
    /// `[rows, >= vocab]`: the logits a position's token was drawn from.
    pub values: u64,
    pub row_stride: u64,
    /// `gumbel_sample` drafting into draft logits of a dtype that rounds the
    /// logits (`rounded != 0`): a position of a slot `>= 0` reads the stored
    /// values, column `draft_column` (or `draft_columns[row]`) of its slot.
    pub draft_logits: u64,
    pub draft_stride0: u64,
    pub draft_stride1: u64,
    pub draft_columns: u64,
    /// `i32 [requests + 1]` (`rejection_sample`), else 0.
    pub offsets: u64,
    /// `i32`: a row's slot (`gumbel_sample`), a request's (`rejection_sample`).
    pub slots: u64,
    /// `f32 [num_slots]`.
    pub temperature: u64,
    /// The call's tokens (`i32` or `i64`, `tokens_i64`), one per position.
    pub tokens: u64,
    /// `i32 [requests]` (`rejection_sample`), else 0.
    pub num_emitted: u64,
    /// `f32 [positions]`: each target row's `τ` where the call was filtered (its
    /// thresholds, target entries first), else 0 (rows kept whole).
    pub thresholds: u64,
    /// Outputs, each 0 where not asked: `f32 [positions]` ×2, `f32` and
    /// `i32 [positions, top_n]`, `i32 [positions]`.
    pub processed: u64,
    pub raw: u64,
    pub top_logprobs: u64,
    pub top_ids: u64,
    pub ranks: u64,
    /// Scratch: `LogprobsPartial [positions · chunks]`, `LogprobsLse
    /// [positions]`, `TopPartial [positions · chunks]`.
    pub partials: u64,
    pub lse: u64,
    pub top_partials: u64,
    /// `u32 [positions]` arrival counters, zero between calls (workspace).
    pub counters: u64,
    pub op: u32,
    /// Non-zero: the call drafted into rounding draft logits (above);
    /// `source` says which positions this launch takes: 0 those that read
    /// `values`, 1 those that read the stored values.
    pub rounded: u32,
    pub source: u32,
    pub draft_column: u32,
    pub positions: u32,
    pub vocab: u32,
    pub num_slots: u32,
    pub max_drafts: u32,
    pub tokens_i64: u32,
    /// `0 ..= MAX_TOP_LOGPROBS`, and whether the top-n is of the raw distribution.
    pub top_n: u32,
    pub top_raw: u32,
    /// Non-zero: the call's own kernels wrote the processed
    /// log-probabilities and each emitted position's processed log-sum-exp
    /// (`rejection_sample`'s passes, from pass 1's `LSE(S)`): the first
    /// kernel sums the raw distribution alone and keeps only its sum.
    pub processed_in_passes: u32,
    pub chunk: u32,
    pub chunks: u32,
    /// A sharded call's log-probabilities (`send != 0`): `values` hold ids
    /// `shard.offset ..` of each row (`vocab` of them, `shard.vocab` the
    /// whole row's); the first kernel writes each position's sums and token
    /// value into `send` (`shard::positions_message_bytes(positions)`, the
    /// header first), and the combine kernel reads every rank's from `recv`
    /// (`shard_ranks` of them, in rank order) and writes the outputs.
    pub shard: Header,
    pub send: u64,
    pub recv: u64,
    pub shard_ranks: u32,
}
