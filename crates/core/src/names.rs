//! The kernels the PTX exports, defined once: their symbols and launch bounds.
//!
//! The kernels crate exports each entry point under [`kernel_symbol!`]'s
//! name, the PTX build writes each [`Symbol`]'s launch bounds into the PTX,
//! and the host loads kernels by [`Kernel::symbol`]. A kernel of the table is
//! built for (logits, draft logits) dtype pairs ([`Pairs`]); its symbol for one
//! pair is `{name}_{logits}_{draft}`, as `gumbel_sample_bf16_f32`.
//!
//! # Launch bounds
//!
//! Rust has no launch-bounds attribute, so the PTX builder writes them into
//! the PTX as `.maxntid` and `.minnctapersm`: ptxas then keeps each kernel's
//! registers low enough for [`Symbol::min_blocks`] blocks of `BLOCK_THREADS`
//! threads per SM (65536 registers per SM: 80 a thread for 3 blocks, 64 for
//! 4). `.maxntid` is [`BLOCK_THREADS`](crate::layout::BLOCK_THREADS) for
//! every kernel, the block size every kernel is launched with. A symbol of
//! the table that the kernels do not export fails the PTX build (its bounds
//! name no entry). The measurements behind each entry's bounds are in
//! `benches/results/2026-12-02-design-measurements.md`.

use crate::dtype::DType;

/// The symbol of a kernel of this module for the dtypes of the kernels
/// crate's element types, a string literal (attributes take literals):
/// `kernel_symbol!(GUMBEL_SAMPLE, Bf16, f32)` is `"gumbel_sample_bf16_f32"`.
/// The first argument names a [`Kernel`] const of this module, the others
/// `f32`, `Bf16` or `F16`. `kernel_symbol!(@name GUMBEL_SAMPLE)` is the
/// kernel's [`Kernel::name`]: its arms below are where each name is spelled.
#[macro_export]
macro_rules! kernel_symbol {
    (@name GUMBEL_SAMPLE) => { "gumbel_sample" };
    (@name GUMBEL_SAMPLE_LEAN) => { "gumbel_sample_lean" };
    (@name GUMBEL_SAMPLE_SMALL) => { "gumbel_sample_small" };
    (@name REJECTION_STATS) => { "rejection_stats" };
    (@name REJECTION_STATS_SMALL) => { "rejection_stats_small" };
    (@name REJECTION_RESAMPLE) => { "rejection_resample" };
    (@name REJECTION_RESAMPLE_LEAN) => { "rejection_resample_lean" };
    (@name REJECTION_RESAMPLE_SMALL) => { "rejection_resample_small" };
    (@name GUMBEL_THRESHOLD) => { "gumbel_threshold" };
    (@name GUMBEL_SAMPLE_FILTERED) => { "gumbel_sample_filtered" };
    (@name REJECTION_THRESHOLD) => { "rejection_threshold" };
    (@name REJECTION_STATS_FILTERED) => { "rejection_stats_filtered" };
    (@name REJECTION_STATS_KEPT) => { "rejection_stats_kept" };
    (@name REJECTION_RESAMPLE_FILTERED) => { "rejection_resample_filtered" };
    (@name GUMBEL_THRESHOLD_SEARCH) => { "gumbel_threshold_search" };
    (@name REJECTION_THRESHOLD_SEARCH) => { "rejection_threshold_search" };
    (@name REJECTION_RATES) => { "rejection_rates" };
    (@name REJECTION_STATS_PROCESSED) => { "rejection_stats_processed" };
    (@name REJECTION_STATS_SMALL_PROCESSED) => { "rejection_stats_small_processed" };
    (@name REJECTION_STATS_FILTERED_PROCESSED) => { "rejection_stats_filtered_processed" };
    (@name REJECTION_BLOCK) => { "rejection_block" };
    (@name REJECTION_BLOCK_SHARDED) => { "rejection_block_sharded" };
    (@name LOGPROBS_LSE) => { "logprobs_lse" };
    (@name LOGPROBS_TOP) => { "logprobs_top" };
    (@name GUMBEL_COMBINE) => { "gumbel_combine" };
    (@name REJECTION_DECIDE_SHARDED) => { "rejection_decide_sharded" };
    (@name REJECTION_COMBINE_SHARDED) => { "rejection_combine_sharded" };
    (@name REJECTION_MERGE_SHARDED) => { "rejection_merge_sharded" };
    (@name GUMBEL_MERGE_SHARDED) => { "gumbel_merge_sharded" };
    (@name GUMBEL_THRESHOLD_SHARDED) => { "gumbel_threshold_sharded" };
    (@name REJECTION_THRESHOLD_SHARDED) => { "rejection_threshold_sharded" };
    (@name LOGPROBS_LSE_SHARDED) => { "logprobs_lse_sharded" };
    (@name LOGPROBS_COMBINE_SHARDED) => { "logprobs_combine_sharded" };
    (@name LOGPROBS_TOP_SHARDED) => { "logprobs_top_sharded" };
    (@name LOGPROBS_TOP_COMBINE_SHARDED) => { "logprobs_top_combine_sharded" };
    // `DType::name` of each element type.
    (@dtype f32) => { "f32" };
    (@dtype Bf16) => { "bf16" };
    (@dtype F16) => { "f16" };
    ($kernel:ident, $logits:ident, $draft:ident) => {
        concat!(
            $crate::kernel_symbol!(@name $kernel),
            "_",
            $crate::kernel_symbol!(@dtype $logits),
            "_",
            $crate::kernel_symbol!(@dtype $draft)
        )
    };
}

/// Which (logits, draft logits) dtype pairs a kernel is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pairs {
    /// Each of the nine.
    All,
    /// The three whose draft dtype is the logits' (a kernel that writes no
    /// draft logits: the host passes the logits' dtype twice).
    Same,
    /// `(f32, f32)` alone: a kernel that reads no logits.
    One,
}

/// A kernel of the PTX: one entry point per dtype pair of [`Kernel::pairs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// Its symbols' stem.
    pub name: &'static str,
    pub pairs: Pairs,
    /// Blocks of [`BLOCK_THREADS`](crate::layout::BLOCK_THREADS) threads per SM its registers must allow
    /// (`.minnctapersm`).
    pub min_blocks: u32,
}

/// `gumbel_sample` (SPEC §3). Capped at 80 registers: with the warp floor its
/// noise loop would take more, and 2 blocks per SM.
pub const GUMBEL_SAMPLE: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_SAMPLE), pairs: Pairs::All, min_blocks: 3 };

/// `gumbel_sample` without draft logits, its noise loop loading two quads at a
/// time, in 64 registers: the host's pick for grids of more than one wave,
/// where more blocks in flight pay more than each block's speed.
pub const GUMBEL_SAMPLE_LEAN: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_SAMPLE_LEAN), pairs: Pairs::Same, min_blocks: 4 };

/// `gumbel_sample` whose greedy loop reads one quad a batch, for one wave of
/// short chunks: its plain twin's bounds (it needs fewer registers, not more).
pub const GUMBEL_SAMPLE_SMALL: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_SAMPLE_SMALL), pairs: Pairs::All, min_blocks: 3 };

/// Pass 1 of `rejection_sample` (SPEC §4). Its walk keeps each thread's
/// order-free sums (REFERENCE §2.6) in shared memory and the decision it
/// inlines gathers them a group at a time, so both fit 80 registers, 3
/// blocks per SM, with the runs of 16 ids a thread loads at once.
pub const REJECTION_STATS: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS), pairs: Pairs::All, min_blocks: 3 };

/// Pass 1 for chunks of a few tiles: its plain twin's bounds (the runs'
/// loads spill at 4 blocks per SM).
pub const REJECTION_STATS_SMALL: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS_SMALL), pairs: Pairs::All, min_blocks: 3 };

/// Pass 2 of `rejection_sample`. Compute-bound (noise for the candidates): it
/// walks two quads a batch, not four, to fit 80 registers and 3 blocks per
/// SM. It loads a draft logit only for an id its bounds cannot rule out, so
/// its entries with f32 draft logits fit too.
pub const REJECTION_RESAMPLE: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_RESAMPLE), pairs: Pairs::All, min_blocks: 3 };

/// Pass 2 as [`REJECTION_RESAMPLE`] (the same body), in 64 registers: the
/// host's pick for grids of more than one wave.
pub const REJECTION_RESAMPLE_LEAN: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_RESAMPLE_LEAN), pairs: Pairs::All, min_blocks: 4 };

/// Pass 2 walking one quad a batch, for chunks of a few tiles: its plain
/// twin's bounds.
pub const REJECTION_RESAMPLE_SMALL: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_RESAMPLE_SMALL), pairs: Pairs::All, min_blocks: 3 };

/// The threshold `τ` of each filtered row of a `gumbel_sample` call (SPEC
/// §7.2), the blocks of a row each a chunk, before
/// [`GUMBEL_SAMPLE_FILTERED`]; its draft dtype is the one sampled values are
/// rounded to (SPEC §3.3). Bounded at 3 blocks per SM (its shared memory,
/// `layout::THRESHOLD_SHARED_BYTES`, would leave room for five; at four its
/// merge spills).
pub const GUMBEL_THRESHOLD: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_THRESHOLD), pairs: Pairs::All, min_blocks: 3 };

/// [`GUMBEL_THRESHOLD`] of a sharded call: the rank's own top-k threshold of
/// each filtered row, and the row's top-k list in the rank's round-1 message
/// (`shard::TopList`). An entry of its own: the list's writes, in the
/// unsharded call's kernel, give it a call frame that slows its filtered
/// calls (`benches/results/2026-12-06-nvidia-h100-sharded-gumbel-filters.md`).
/// Its bounds.
pub const GUMBEL_THRESHOLD_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_THRESHOLD_SHARDED), pairs: Pairs::All, min_blocks: 3 };

/// `gumbel_sample` of a call with filters: [`GUMBEL_SAMPLE`]'s body, every
/// value below its row's `τ` masked. Its plain twin's bounds.
pub const GUMBEL_SAMPLE_FILTERED: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_SAMPLE_FILTERED), pairs: Pairs::All, min_blocks: 3 };

/// The thresholds of a `rejection_sample` call with filters: the blocks of
/// each target row and each draft row of each request, before
/// [`REJECTION_STATS_FILTERED`]. Bounded as [`GUMBEL_THRESHOLD`].
pub const REJECTION_THRESHOLD: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_THRESHOLD), pairs: Pairs::All, min_blocks: 3 };

/// [`REJECTION_THRESHOLD`] of a sharded call, writing each filtered row's
/// top-k list too, an entry of its own as [`GUMBEL_THRESHOLD_SHARDED`] is
/// (`benches/results/2026-12-06-nvidia-h100-threshold-sharded-entry.ab.md`).
/// Its bounds.
pub const REJECTION_THRESHOLD_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_THRESHOLD_SHARDED), pairs: Pairs::All, min_blocks: 3 };

/// Pass 1 of a call with filters: [`REJECTION_STATS`]'s body over the masked
/// rows, for the requests whose kept sets are summed by the run rule
/// (REFERENCE §7.4), at 3 blocks per SM as its plain twin.
pub const REJECTION_STATS_FILTERED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS_FILTERED), pairs: Pairs::All, min_blocks: 3 };

/// Pass 1 of a call with filters, launched after [`REJECTION_STATS_FILTERED`]
/// over the same grid: the requests whose filters may pool their rows, their
/// kept sets summed a term a kept value (REFERENCE §7.4), at 3 blocks per SM.
/// A kernel of its own: in one with the run rule's loop, at 3 blocks, both
/// loops spill, and at 2 the top-k rows ran slower
/// (`benches/results/2026-12-06-nvidia-h100-kept-rule.ab.md`).
pub const REJECTION_STATS_KEPT: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS_KEPT), pairs: Pairs::All, min_blocks: 3 };

/// Pass 2 of a call with filters: [`REJECTION_RESAMPLE`]'s body over the
/// masked rows, its bounds.
pub const REJECTION_RESAMPLE_FILTERED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_RESAMPLE_FILTERED), pairs: Pairs::All, min_blocks: 3 };

/// A round of the top-p search of the rows [`GUMBEL_THRESHOLD`] left to all
/// their blocks (launched once a round, after it). An entry of its own: in
/// the same function as the threshold kernel's first launch, whose register
/// budget its body takes up to, it spills. Bounded as [`GUMBEL_THRESHOLD`]
/// (the same shared memory).
pub const GUMBEL_THRESHOLD_SEARCH: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_THRESHOLD_SEARCH), pairs: Pairs::All, min_blocks: 3 };

/// The same for [`REJECTION_THRESHOLD`].
pub const REJECTION_THRESHOLD_SEARCH: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_THRESHOLD_SEARCH), pairs: Pairs::All, min_blocks: 3 };

/// Pass 1 of a call that asks for processed log-probabilities
/// (REFERENCE §8): [`REJECTION_STATS`]'s body writing them as it decides,
/// greedy rows summing their exponentials too, at 3 blocks per SM as its
/// plain twin.
pub const REJECTION_STATS_PROCESSED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS_PROCESSED), pairs: Pairs::All, min_blocks: 3 };

/// The same keeping the overlaps, for chunks of a few tiles:
/// [`REJECTION_STATS_SMALL`]'s body.
pub const REJECTION_STATS_SMALL_PROCESSED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS_SMALL_PROCESSED), pairs: Pairs::All, min_blocks: 2 };

/// The same of a call with filters: [`REJECTION_STATS_FILTERED`]'s body,
/// at 2 blocks per SM.
pub const REJECTION_STATS_FILTERED_PROCESSED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_STATS_FILTERED_PROCESSED), pairs: Pairs::All, min_blocks: 2 };

/// Writes a synthetic-acceptance call's rates (`layout::RatesParams`) into
/// the workspace, before pass 1: one launch of one block, its parameter
/// block the only copy of them. Reads no logits (`Pairs::One`).
pub const REJECTION_RATES: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_RATES), pairs: Pairs::One, min_blocks: 1 };

/// Block verification's kernel (REFERENCE §4.11), between pass 1 and pass
/// 2 of a call that asks for it: each draft row's residual mass and stop
/// test, the last row of a request its decision. At 3 blocks per SM: its
/// loop of four quads a batch spills at 64 registers.
pub const REJECTION_BLOCK: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_BLOCK), pairs: Pairs::All, min_blocks: 3 };

/// [`REJECTION_BLOCK`] in a sharded call with draft logits: each draft
/// row's residual mass over the rank's ids, into its round-2 message (the
/// combine decides the block). Bounded as [`REJECTION_BLOCK`].
pub const REJECTION_BLOCK_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_BLOCK_SHARDED), pairs: Pairs::All, min_blocks: 3 };

/// The log-sum-exps of each emitted position of a call (REFERENCE §8), the
/// raw and the processed, and the emitted token's log-probabilities, after
/// either operation (`layout::LogprobsParams`), for the dtype of the values
/// it reads (both of the pair). Bounded as [`REJECTION_STATS`] (its
/// order-free sums, REFERENCE §2.6).
pub const LOGPROBS_LSE: Kernel = Kernel { name: kernel_symbol!(@name LOGPROBS_LSE), pairs: Pairs::Same, min_blocks: 4 };

/// The top-n and rank of each emitted position, after [`LOGPROBS_LSE`]:
/// each block's candidates in a warp's registers (a `u64` key a lane), at 3
/// blocks per SM.
pub const LOGPROBS_TOP: Kernel = Kernel { name: kernel_symbol!(@name LOGPROBS_TOP), pairs: Pairs::Same, min_blocks: 3 };

/// [`LOGPROBS_LSE`] as a rank of a sharded call (`LogprobsParams::send`):
/// each position's sums over the rank's ids and its token's value into the
/// rank's message, where the unsharded kernel writes the outputs.
pub const LOGPROBS_LSE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name LOGPROBS_LSE_SHARDED), pairs: Pairs::Same, min_blocks: 4 };

/// A sharded call's log-probabilities from its ranks' messages
/// (`LogprobsParams::recv`), a warp a position. Reads no logits (`Pairs::One`).
pub const LOGPROBS_COMBINE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name LOGPROBS_COMBINE_SHARDED), pairs: Pairs::One, min_blocks: 1 };

/// [`LOGPROBS_TOP`] as a rank of a sharded call: each position's top-n over
/// the rank's ids (global ids), their log-probabilities and its count of
/// ids above the token into the rank's message, where the unsharded kernel
/// writes the outputs.
pub const LOGPROBS_TOP_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name LOGPROBS_TOP_SHARDED), pairs: Pairs::Same, min_blocks: 3 };

/// A sharded call's top-n and rank from its ranks' messages, a block a
/// position. Reads no logits (`Pairs::One`).
pub const LOGPROBS_TOP_COMBINE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name LOGPROBS_TOP_COMBINE_SHARDED), pairs: Pairs::One, min_blocks: 1 };

/// A sharded `gumbel_sample`'s combine of its ranks' messages
/// (`layout::GumbelCombineParams`), a thread a row. Reads no logits (`Pairs::One`).
pub const GUMBEL_COMBINE: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_COMBINE), pairs: Pairs::One, min_blocks: 1 };

/// A sharded `rejection_sample`'s decision after its first exchange
/// (`layout::RejectionParams`, `shard_ranks` given), a block a request: the
/// ranks' records combined, then the decision pass 1 makes in an unsharded
/// call. Reads no logits (`Pairs::One`).
pub const REJECTION_DECIDE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_DECIDE_SHARDED), pairs: Pairs::One, min_blocks: 1 };

/// A sharded `rejection_sample`'s filtered rows after its first exchange
/// (`layout::RejectionParams`), a block a threshold entry: each row's `τ`
/// and `LSE(S)` from the ranks' top-k lists. Reads no logits (`Pairs::One`).
pub const REJECTION_MERGE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_MERGE_SHARDED), pairs: Pairs::One, min_blocks: 1 };

/// A sharded `gumbel_sample`'s filtered rows after its first exchange
/// (`layout::GumbelParams`, `shard_ranks` given), a block a row: each row's
/// `τ` from the ranks' top-k lists. Reads no logits (`Pairs::One`).
pub const GUMBEL_MERGE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name GUMBEL_MERGE_SHARDED), pairs: Pairs::One, min_blocks: 1 };

/// A sharded `rejection_sample`'s tokens after its second exchange, a
/// thread a request. Reads no logits (`Pairs::One`).
pub const REJECTION_COMBINE_SHARDED: Kernel =
    Kernel { name: kernel_symbol!(@name REJECTION_COMBINE_SHARDED), pairs: Pairs::One, min_blocks: 1 };

/// Every kernel of the PTX.
pub const ALL: [Kernel; 35] = [
    GUMBEL_SAMPLE,
    GUMBEL_SAMPLE_LEAN,
    GUMBEL_SAMPLE_SMALL,
    REJECTION_STATS,
    REJECTION_STATS_SMALL,
    REJECTION_RESAMPLE,
    REJECTION_RESAMPLE_LEAN,
    REJECTION_RESAMPLE_SMALL,
    GUMBEL_THRESHOLD,
    GUMBEL_SAMPLE_FILTERED,
    REJECTION_THRESHOLD,
    REJECTION_STATS_FILTERED,
    REJECTION_STATS_KEPT,
    REJECTION_RESAMPLE_FILTERED,
    GUMBEL_THRESHOLD_SEARCH,
    REJECTION_THRESHOLD_SEARCH,
    REJECTION_RATES,
    REJECTION_STATS_PROCESSED,
    REJECTION_STATS_SMALL_PROCESSED,
    REJECTION_STATS_FILTERED_PROCESSED,
    REJECTION_BLOCK,
    REJECTION_BLOCK_SHARDED,
    LOGPROBS_LSE,
    LOGPROBS_TOP,
    GUMBEL_COMBINE,
    REJECTION_DECIDE_SHARDED,
    REJECTION_COMBINE_SHARDED,
    REJECTION_MERGE_SHARDED,
    GUMBEL_MERGE_SHARDED,
    GUMBEL_THRESHOLD_SHARDED,
    REJECTION_THRESHOLD_SHARDED,
    LOGPROBS_LSE_SHARDED,
    LOGPROBS_COMBINE_SHARDED,
    LOGPROBS_TOP_SHARDED,
    LOGPROBS_TOP_COMBINE_SHARDED,
];

impl Kernel {
    /// The entry point for `logits` and `draft` (one of [`Kernel::pairs`]).
    pub const fn symbol(self, logits: DType, draft: DType) -> Symbol {
        Symbol { kernel: self, logits, draft }
    }

    /// Whether the PTX has an entry point of this kernel for the pair.
    pub const fn has(self, logits: DType, draft: DType) -> bool {
        match self.pairs {
            Pairs::All => true,
            Pairs::Same => logits as u32 == draft as u32,
            Pairs::One => logits as u32 == DType::F32 as u32 && draft as u32 == DType::F32 as u32,
        }
    }

    /// Its entry points, one per pair it is built for.
    pub fn symbols(self) -> impl Iterator<Item = Symbol> {
        DType::ALL
            .into_iter()
            .flat_map(move |l| DType::ALL.into_iter().map(move |d| (l, d)))
            .filter(move |&(l, d)| self.has(l, d))
            .map(move |(l, d)| self.symbol(l, d))
    }
}

/// Every entry point of the PTX.
pub fn symbols() -> impl Iterator<Item = Symbol> {
    ALL.into_iter().flat_map(Kernel::symbols)
}

/// One entry point: a kernel for one (logits, draft logits) dtype pair.
/// Displays as its symbol, `{name}_{logits}_{draft}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    pub kernel: Kernel,
    pub logits: DType,
    pub draft: DType,
}

impl Symbol {
    /// Its `.maxntid`: [`BLOCK_THREADS`](crate::layout::BLOCK_THREADS), the
    /// block size every kernel is launched with.
    pub const fn max_threads(self) -> u32 {
        crate::layout::BLOCK_THREADS
    }

    /// Its `.minnctapersm`: the blocks of [`BLOCK_THREADS`](crate::layout::BLOCK_THREADS) threads per SM
    /// its registers must allow.
    pub const fn min_blocks(self) -> u32 {
        self.kernel.min_blocks
    }
}

impl core::fmt::Display for Symbol {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}_{}_{}", self.kernel.name, self.logits.name(), self.draft.name())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    /// The dtype of a kernels-crate element type, as `kernel_symbol!` takes it.
    macro_rules! dtype {
        (f32) => {
            DType::F32
        };
        (Bf16) => {
            DType::BF16
        };
        (F16) => {
            DType::F16
        };
    }

    /// `kernel_symbol!` agrees with `Symbol`'s display for every pair of each kernel.
    macro_rules! check {
        ($($kernel:ident)*) => {$(
            check!(@pairs $kernel:
                f32 f32, f32 Bf16, f32 F16, Bf16 f32, Bf16 Bf16, Bf16 F16, F16 f32, F16 Bf16, F16 F16);
        )*};
        (@pairs $kernel:ident: $($l:ident $d:ident),*) => {$(
            assert_eq!(kernel_symbol!($kernel, $l, $d), $kernel.symbol(dtype!($l), dtype!($d)).to_string());
        )*};
    }

    #[test]
    fn the_macro_spells_each_symbol() {
        check!(GUMBEL_SAMPLE GUMBEL_SAMPLE_LEAN GUMBEL_SAMPLE_SMALL REJECTION_STATS REJECTION_STATS_SMALL
            REJECTION_RESAMPLE REJECTION_RESAMPLE_LEAN REJECTION_RESAMPLE_SMALL GUMBEL_THRESHOLD
            GUMBEL_SAMPLE_FILTERED REJECTION_THRESHOLD REJECTION_STATS_FILTERED REJECTION_STATS_KEPT
            REJECTION_RESAMPLE_FILTERED
            GUMBEL_THRESHOLD_SEARCH REJECTION_THRESHOLD_SEARCH REJECTION_STATS_PROCESSED
            REJECTION_STATS_SMALL_PROCESSED REJECTION_STATS_FILTERED_PROCESSED REJECTION_BLOCK REJECTION_BLOCK_SHARDED REJECTION_RATES
            LOGPROBS_LSE LOGPROBS_TOP GUMBEL_COMBINE REJECTION_DECIDE_SHARDED REJECTION_COMBINE_SHARDED
            REJECTION_MERGE_SHARDED GUMBEL_MERGE_SHARDED GUMBEL_THRESHOLD_SHARDED
            REJECTION_THRESHOLD_SHARDED LOGPROBS_LSE_SHARDED LOGPROBS_COMBINE_SHARDED LOGPROBS_TOP_SHARDED
            LOGPROBS_TOP_COMBINE_SHARDED);
        assert_eq!(kernel_symbol!(GUMBEL_SAMPLE, Bf16, f32), "gumbel_sample_bf16_f32");
    }

    #[test]
    fn the_table() {
        let all: Vec<_> = symbols().map(|s| s.to_string()).collect();
        assert_eq!(all.len(), 22 * 9 + 5 * 3 + 8);
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        let lean: Vec<_> = GUMBEL_SAMPLE_LEAN.symbols().map(|s| s.to_string()).collect();
        assert_eq!(lean, ["gumbel_sample_lean_f32_f32", "gumbel_sample_lean_bf16_bf16", "gumbel_sample_lean_f16_f16"]);
        assert_eq!(REJECTION_STATS.symbol(DType::F32, DType::F32).min_blocks(), 3);
        assert_eq!(REJECTION_STATS_SMALL.symbol(DType::F32, DType::BF16).min_blocks(), 3);
        assert_eq!(GUMBEL_SAMPLE_LEAN.symbol(DType::F32, DType::F32).min_blocks(), 4);
        assert_eq!(GUMBEL_SAMPLE.symbol(DType::F16, DType::F32).min_blocks(), 3);
    }
}
