//! The messages a rank of a sharded call on the GPU sends
//! (`docs/VOCAB_PARALLEL.md` §6 step 5), defined once for the kernels that
//! write and combine them and the host that sizes their buffers; the ranks'
//! messages arrive in rank order, each as long as the rank's.
//!
//! - `gumbel_sample`: a [`Header`], then a [`Row`] for each of the call's
//!   rows ([`message_bytes`]); in a call with filters, a round before it: a
//!   [`TopList`] for each row ([`lists_message_bytes`]).
//! - `rejection_sample`, round 1: a [`Header`], then a [`PairRecord`] for
//!   each (request, row) pair, `requests · (max_drafts + 1)` of them
//!   ([`pairs_message_bytes`]), and in a call with filters a target and a
//!   draft [`TopList`] for each pair after them; round 2: a word saying whether the rank got
//!   there, then a [`Resampled`] for each request ([`candidates_message_bytes`]).
//! - Either operation's log-probabilities, a round after the call's: a
//!   [`Header`], then a [`PositionSums`] for each of its positions
//!   ([`positions_message_bytes`]); with a top-n (or rank), one more: a
//!   [`Header`], then a [`PositionTop`] for each ([`tops_message_bytes`]).

use crate::argmax::ArgMax;
use crate::layout::MAX_TOP_LOGPROBS;
use crate::sample::Resampled;
use crate::scratch::{LogprobsPartial, Stats, TopPartial};

/// What a rank says about its call: whether its checks passed, its shard,
/// and a word the host derives from the call's shape (rows, slots, draft
/// logits), which every rank must pass alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Header {
    /// Non-zero where the rank's checks passed (a failed rank's message is zeros).
    pub ok: u32,
    /// The global id of the rank's first id.
    pub offset: u32,
    /// How many ids the rank holds.
    pub ids: u32,
    /// The whole row's ids.
    pub vocab: u32,
    pub call: u32,
    _pad: [u32; 3],
}

impl Header {
    /// The header of a rank whose checks passed.
    pub const fn new(offset: u32, ids: u32, vocab: u32, call: u32) -> Header {
        Header { ok: 1, offset, ids, vocab, call, _pad: [0; 3] }
    }

    /// Whether the rank holds global id `id` (`offset <= id < offset + ids`).
    pub const fn holds(&self, id: u32) -> bool {
        id.wrapping_sub(self.offset) < self.ids
    }

    /// Rank `r`'s part of the check that the `ranks` headers (`header(q)`:
    /// rank `q`'s) come from ranks whose checks passed, whose calls agree,
    /// and whose shards tile the row, each id on exactly one rank: every
    /// rank's part passes exactly when the group's does.
    #[inline(always)]
    pub fn fits(ranks: usize, header: impl Fn(usize) -> Header, r: usize) -> bool {
        let (first, h) = (header(0), header(r));
        let end = h.offset as u64 + h.ids as u64;
        if h.ok == 0 || (h.vocab, h.call) != (first.vocab, first.call) || end > h.vocab as u64 {
            return false;
        }
        // Within the row, pairwise disjoint and `vocab` ids in all: a tiling.
        let overlaps = |q: &Header| q.ids > 0 && q.offset < end as u32 && h.offset < q.offset + q.ids;
        let disjoint = h.ids == 0 || (0..ranks).all(|q| q == r || !overlaps(&header(q)));
        let total = r != 0 || (0..ranks).map(|q| header(q).ids as u64).sum::<u64>() == first.vocab as u64;
        disjoint && total
    }
}

/// A rank's result for one row: its best candidate over its ids (global
/// ids), the row's flags as the rank saw them, and a digest of the row's
/// inputs ([`row_digest`]), which every rank must read alike.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Row {
    pub best: ArgMax,
    pub flags: u32,
    pub digest: u32,
}

/// Bytes of a rank's message for a call of `rows` rows.
pub const fn message_bytes(rows: usize) -> usize {
    core::mem::size_of::<Header>() + rows * core::mem::size_of::<Row>()
}

/// Where row `row`'s [`Row`] lies in the message at device address `message`.
pub fn row_at(message: u64, row: usize) -> *mut Row {
    (message as usize + message_bytes(row)) as *mut Row
}

/// Bytes of a rank's round-1 message of a `gumbel_sample` call with filters
/// of `rows` rows: a [`TopList`] a row.
pub const fn lists_message_bytes(rows: usize) -> usize {
    rows * core::mem::size_of::<TopList>()
}

/// Where row `row`'s [`TopList`] lies in the round-1 message at `message`
/// of a `gumbel_sample` call with filters.
pub fn row_list_at(message: u64, row: usize) -> *mut TopList {
    (message as usize + lists_message_bytes(row)) as *mut TopList
}

/// A rank's result for one (request, row) pair of a sharded
/// `rejection_sample` (round 1): the row's statistics over the rank's ids
/// (`stats`: the order-free sums, the argmax by global id, the flags), the
/// raw target and draft logits of the row's draft token where the rank
/// holds it (unread elsewhere), and a digest of what the row reads besides
/// its logits ([`pair_digest`]), which every rank must read alike.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct PairRecord {
    pub stats: Stats,
    pub drafted: [f32; 2],
    pub digest: u32,
    _pad: u32,
}

impl PairRecord {
    pub const fn new(stats: Stats, drafted: [f32; 2], digest: u32) -> PairRecord {
        PairRecord { stats, drafted, digest, _pad: 0 }
    }
}

/// Bytes of a rank's round-1 message for `pairs` (request, row) pairs,
/// with a target and a draft [`TopList`] a pair after the records in a call
/// with filters (`lists`).
pub const fn pairs_message_bytes(pairs: usize, lists: bool) -> usize {
    let lists = if lists { 2 * pairs * core::mem::size_of::<TopList>() } else { 0 };
    core::mem::size_of::<Header>() + pairs * core::mem::size_of::<PairRecord>() + lists
}

/// The largest top-k a sharded call on the GPU filters by: a rank's list
/// of a row holds at most `MAX_TOP_K − 1` values (REFERENCE §9).
pub const MAX_TOP_K: u32 = 256;

/// The most ranks of a sharded call with filters on the GPU: its merge
/// kernel sorts a row's lists from every rank in a block's shared memory
/// ([`merge_entries`] of `filter::Group`, 32 KiB at 8 ranks).
pub const MAX_FILTERED_RANKS: usize = 8;

/// The merge kernel's entries for `ranks` ranks: a list's slots a rank,
/// padded to a power of two for its sort.
pub const fn merge_entries(ranks: usize) -> usize {
    (ranks * MAX_TOP_K as usize).next_power_of_two()
}

/// A rank's part of a filtered row of a sharded call on the GPU (round 1:
/// `rejection_sample`'s after the pair records, `gumbel_sample`'s alone):
/// its largest scaled values (as the row samples them) of the
/// row, as its own top-k filter by the slot's `top_k` keeps them: `tie`, its
/// `top_k`-th largest value that counts (not NaN, above `-inf`; its smallest
/// where it has fewer), `ties` of its ids valued `tie` (at least one where
/// `tie` is `+inf`), and the `above` values above it (`values[..above]`, in
/// no order). Every value of the row at or above the row's `top_k`-th
/// largest is then in some rank's list, with its full count: the ranks'
/// lists decide the row's `τ` and `LSE(S)` under any filter whose top-k is
/// `top_k` (`filter::threshold` over their tie groups).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct TopList {
    pub values: [f32; MAX_TOP_K as usize - 1],
    pub tie: f32,
    pub ties: u32,
    pub above: u32,
    _pad: [u32; 2],
}

/// Where the [`TopList`] of pair `pair` (`which`: 0 the target row, 1 the
/// draft row) lies in the round-1 message at `message` of a call of `pairs`
/// pairs with filters.
pub fn list_at(message: u64, pairs: usize, which: usize, pair: usize) -> *mut TopList {
    let lists = message as usize + pairs_message_bytes(pairs, false);
    (lists + (which * pairs + pair) * core::mem::size_of::<TopList>()) as *mut TopList
}

/// Where pair `pair`'s [`PairRecord`] lies in the round-1 message at `message`.
pub fn pair_at(message: u64, pair: usize) -> *mut PairRecord {
    (message as usize + pairs_message_bytes(pair, false)) as *mut PairRecord
}

/// Bytes of a rank's round-2 message for `requests` requests: a 16-byte
/// word (non-zero where the rank got there), then a [`Resampled`] a request.
pub const fn candidates_message_bytes(requests: usize) -> usize {
    (1 + requests) * core::mem::size_of::<Resampled>()
}

/// Where job `job`'s candidates lie in the round-2 message at `message`:
/// request `job`'s, or in a call with block verification pair `job`'s.
pub fn candidates_at(message: u64, job: usize) -> *mut Resampled {
    (message as usize + candidates_message_bytes(job)) as *mut Resampled
}

/// Bytes of a rank's round-2 message in a call with block verification of
/// `pairs` (request, row) pairs: the word and a [`Resampled`] a pair (a
/// block's candidates at each row where it may end), then a `u64` a pair
/// (its residual mass over the rank's ids, in `2^-60` units), padded to 16 bytes.
pub const fn block_candidates_message_bytes(pairs: usize) -> usize {
    (candidates_message_bytes(pairs) + pairs * 8).next_multiple_of(16)
}

/// Where pair `pair`'s residual mass lies in such a message of `pairs` pairs.
pub fn mass_at(message: u64, pairs: usize, pair: usize) -> *mut u64 {
    (message as usize + candidates_message_bytes(pairs) + pair * 8) as *mut u64
}

/// Bytes of a rank's message in the last round of a sharded call's own
/// (`gumbel_sample`'s rows, `rejection_sample`'s round 2) whose messages
/// hold `bytes`, before `logprob_rounds` rounds of log-probabilities: 16
/// more a round, so that ranks whose asks take different numbers of rounds
/// send messages of different lengths there and their exchange fails on
/// every rank, rather than some waiting for rounds the others never run.
pub const fn last_round_bytes(bytes: usize, logprob_rounds: u32) -> usize {
    bytes + 16 * logprob_rounds as usize
}

/// A rank's part of one emitted position's log-probabilities: the sums of
/// its ids of the position's row that the call asks for (`ExpSum::EMPTY`
/// where it asks none), and the emitted token's raw value where the rank
/// holds it (`held`; unread elsewhere).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct PositionSums {
    pub sums: LogprobsPartial,
    pub x: f32,
    pub held: u32,
}

/// Bytes of a rank's log-probability message for `positions` positions.
pub const fn positions_message_bytes(positions: usize) -> usize {
    core::mem::size_of::<Header>() + positions * core::mem::size_of::<PositionSums>()
}

/// Where position `at`'s [`PositionSums`] lies in the message at `message`.
pub fn position_at(message: u64, at: usize) -> *mut PositionSums {
    (message as usize + positions_message_bytes(at)) as *mut PositionSums
}

/// A rank's part of one emitted position's top-n and rank: its best
/// `top_n` ids of the row and its count of ids above the emitted token's
/// (`top`, keys of global ids), and each listed id's log-probability as the
/// unsharded call writes it (`logprobs[j]`, `keys[j]`'s; NaN past the list).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct PositionTop {
    pub top: TopPartial,
    pub logprobs: [f32; MAX_TOP_LOGPROBS],
}

/// Bytes of a rank's top-n message for `positions` positions.
pub const fn tops_message_bytes(positions: usize) -> usize {
    core::mem::size_of::<Header>() + positions * core::mem::size_of::<PositionTop>()
}

/// Where position `at`'s [`PositionTop`] lies in the message at `message`.
pub fn position_top_at(message: u64, at: usize) -> *mut PositionTop {
    (message as usize + tops_message_bytes(at)) as *mut PositionTop
}

/// A digest of what a row's sampling reads besides its logits: its slot,
/// the slot's temperature and seed, its position, its draft-logits column
/// and the slot's filter values as words (`filters`: `top_k`, `top_p`,
/// `min_p`, 0 for a table the call lacks). Ranks that read different values
/// for a row would draw under different noise or keep different sets, so
/// the combine flags the row instead.
pub fn row_digest(slot: i32, temperature: f32, seed: u64, pos: u64, column: u32, filters: [u32; 3]) -> u32 {
    let ([a, b, c, d, e, f], [k, p, m]) = (slot_words(slot, temperature, seed, pos), filters);
    fnv(&[a, b, c, d, e, f, column, k, p, m])
}

/// A digest of what a `rejection_sample` pair reads besides its logits: its
/// request's slot and the slot's temperature and seed, the row's position
/// and draft id, the request's first row and draft count, and the slot's
/// filter values as words (`filters`: the target's `top_k`, `top_p` and
/// `min_p`, then the draft logits', 0 for a table the call lacks).
#[allow(clippy::too_many_arguments)]
pub fn pair_digest(
    slot: i32,
    temperature: f32,
    seed: u64,
    pos: u64,
    draft: i32,
    row0: u32,
    drafts: u32,
    filters: [u32; 6],
) -> u32 {
    let ([a, b, c, d, e, f], [g, h, i, j, k, l]) = (slot_words(slot, temperature, seed, pos), filters);
    fnv(&[a, b, c, d, e, f, draft as u32, row0, drafts, g, h, i, j, k, l])
}

/// The words both digests begin with: a slot, its temperature and seed, and
/// a row's position.
fn slot_words(slot: i32, temperature: f32, seed: u64, pos: u64) -> [u32; 6] {
    [slot as u32, temperature.to_bits(), seed as u32, (seed >> 32) as u32, pos as u32, (pos >> 32) as u32]
}

/// FNV-1a over `words`, then a final mix, so that one bit moves many.
/// A slice of a fixed-size array, walked by index: in the kernels it
/// unrolls into registers (an iterator chain went through local memory).
fn fnv(words: &[u32]) -> u32 {
    let mut h = 0x811c_9dc5u32;
    let mut i = 0;
    while i < words.len() {
        h = (h ^ words[i]).wrapping_mul(0x0100_0193);
        i += 1;
    }
    let h = (h ^ (h >> 16)).wrapping_mul(0x7feb_352d);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_what_the_kernels_gather() {
        assert_eq!(core::mem::size_of::<Header>(), 32);
        assert_eq!(core::mem::size_of::<Row>(), 16);
        assert_eq!(message_bytes(3), 32 + 48);
        assert_eq!(core::mem::size_of::<PairRecord>(), 160);
        assert_eq!(pairs_message_bytes(2, false), 32 + 320);
        assert_eq!(core::mem::size_of::<TopList>(), 1040);
        assert_eq!(pairs_message_bytes(2, true), 32 + 320 + 4 * 1040);
        assert_eq!(list_at(0, 2, 1, 1) as usize, 32 + 320 + 3 * 1040);
        assert_eq!(candidates_message_bytes(2), 48);
        assert_eq!(lists_message_bytes(3), 3 * 1040);
        assert_eq!(row_list_at(16, 2) as usize, 16 + 2 * 1040);
        assert_eq!(core::mem::size_of::<PositionSums>(), 144);
        assert_eq!(position_at(0, 2) as usize, 32 + 2 * 144);
        assert_eq!(core::mem::size_of::<PositionTop>(), 256);
        assert_eq!(position_top_at(0, 2) as usize, 32 + 2 * 256);
        // A position's top-n fits the slot a pair's round-1 record takes.
        assert!(
            core::mem::size_of::<PositionTop>()
                <= core::mem::size_of::<PairRecord>() + 2 * core::mem::size_of::<TopList>()
        );
    }

    #[test]
    fn a_group_fits_only_if_every_rank_passed_agreed_and_the_shards_tile_the_row() {
        let h = |offset, ids| Header::new(offset, ids, 20, 9);
        let fits = |g: &[Header]| (0..g.len()).all(|r| Header::fits(g.len(), |q| g[q], r));
        assert!(fits(&[h(8, 12), h(0, 8)]));
        assert!(fits(&[h(0, 20)]));
        assert!(fits(&[h(0, 8), h(8, 0), h(8, 12)]));
        let other = Header { call: 10, ..h(8, 12) };
        let failed = Header::default();
        let bad: [&[Header]; 7] = [
            &[h(0, 8), failed],
            &[failed, h(0, 20)],
            &[h(0, 8), other],
            &[h(0, 8), h(12, 8)],
            &[h(0, 8), h(4, 16)],
            &[h(0, 8), h(8, 8)],
            &[h(0, 12), h(8, 12)],
        ];
        for g in bad {
            assert!(!fits(g), "{g:?}");
        }
    }

    #[test]
    fn every_input_of_a_row_moves_its_digest() {
        let f = [50, 0.9f32.to_bits(), 0];
        let base = row_digest(3, 0.7, 11, 100, 2, f);
        let moved = [
            row_digest(4, 0.7, 11, 100, 2, f),
            row_digest(3, 0.8, 11, 100, 2, f),
            row_digest(3, 0.7, 11 | 1 << 40, 100, 2, f),
            row_digest(3, 0.7, 11, 101, 2, f),
            row_digest(3, 0.7, 11, 100 | 1 << 33, 2, f),
            row_digest(3, 0.7, 11, 100, 3, f),
            row_digest(3, 0.7, 11, 100, 2, [51, f[1], 0]),
            row_digest(3, 0.7, 11, 100, 2, [50, f[1] ^ 1, 0]),
            row_digest(3, 0.7, 11, 100, 2, [50, f[1], 1]),
        ];
        assert!(moved.iter().all(|&d| d != base), "{base} {moved:?}");
        let f = [50, 0.9f32.to_bits(), 0, 20, 0, 0.1f32.to_bits()];
        let base = pair_digest(3, 0.7, 11, 100, 5, 8, 2, f);
        let fields = [
            pair_digest(4, 0.7, 11, 100, 5, 8, 2, f),
            pair_digest(3, 0.8, 11, 100, 5, 8, 2, f),
            pair_digest(3, 0.7, 11 | 1 << 40, 100, 5, 8, 2, f),
            pair_digest(3, 0.7, 11, 100 | 1 << 33, 5, 8, 2, f),
            pair_digest(3, 0.7, 11, 100, -1, 8, 2, f),
            pair_digest(3, 0.7, 11, 100, 5, 9, 2, f),
            pair_digest(3, 0.7, 11, 100, 5, 8, 1, f),
        ];
        let words: [u32; 6] = core::array::from_fn(|w| {
            let mut g = f;
            g[w] ^= 1;
            pair_digest(3, 0.7, 11, 100, 5, 8, 2, g)
        });
        let moved: [u32; 13] = core::array::from_fn(|i| if i < 7 { fields[i] } else { words[i - 7] });
        assert!(moved.iter().all(|&d| d != base), "{base} {moved:?}");
    }
}
