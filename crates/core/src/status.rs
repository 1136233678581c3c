//! Status flags for values that live in device memory (SPEC §5).
//!
//! A kernel that finds a bad per-row value never reads or writes out of
//! bounds: it gives the row a defined output (token `-1`) and ORs the flag
//! into the row's status word and the call's status word. The CPU backend
//! turns the same conditions into typed errors.

/// The row's slot is neither `-1` (padding) nor in `0..num_slots`.
pub const INVALID_SLOT: u32 = 1 << 0;
/// The slot's temperature is negative, NaN or infinite.
pub const INVALID_TEMPERATURE: u32 = 1 << 1;
/// The row's draft-logits column is outside `0..K`.
pub const INVALID_COLUMN: u32 = 1 << 2;
/// The row holds a NaN logit among its candidates (informational: the row is
/// still sampled, NaN counting as `-inf`; `rejection_sample` reports the row
/// as not valid).
pub const NAN_LOGITS: u32 = 1 << 3;

/// A draft token id is neither `-1` (placeholder) nor in `0..V`.
pub const INVALID_DRAFT: u32 = 1 << 4;
/// A request's row offsets are out of order, out of `0..=rows`, or give it
/// more than `K` drafts.
pub const INVALID_OFFSETS: u32 = 1 << 5;

/// The slot's sampling filters (SPEC §7) hold a bad value: `top_k < 0`,
/// `top_p` outside `(0, 1]` or `min_p` outside `[0, 1]` (NaN included), on
/// the target's filters or, in `rejection_sample`, the drafts'; or, in a
/// sharded `rejection_sample` on the GPU, a sampling request's filter
/// without a top-k of at most `shard::MAX_TOP_K`, which its ranks cannot
/// send (REFERENCE §9).
pub const INVALID_FILTER: u32 = 1 << 6;

/// The ranks of a sharded call disagree about the row: a rank's checks
/// failed, their calls or shards do not fit together, or they read
/// different slots, temperatures, seeds, positions or draft-logits columns
/// for it (`crate::shard`).
pub const INVALID_SHARD: u32 = 1 << 7;

/// Flags that make a row's (or request's) output invalid (tokens `-1`).
pub const INVALID: u32 = INVALID_SLOT
    | INVALID_TEMPERATURE
    | INVALID_COLUMN
    | INVALID_DRAFT
    | INVALID_OFFSETS
    | INVALID_FILTER
    | INVALID_SHARD;

/// A temperature is valid when it is `0` (greedy) or a positive, finite,
/// normal float: subnormal `T` would make the scale `1/T` infinite.
#[inline(always)]
pub fn temperature_is_valid(t: f32) -> bool {
    t == 0.0 || (f32::MIN_POSITIVE..=f32::MAX).contains(&t)
}
