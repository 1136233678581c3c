//! Vocab-parallel calls (`docs/VOCAB_PARALLEL.md`): each of `P` ranks holds
//! a shard of every row's ids, the ranks exchange a candidate per row, and
//! every rank returns the unsharded call's outputs bit for bit. Noise is
//! keyed by global id and candidates combine by the argmax rule (a total
//! order), so the split cannot change a token; sums are order-free
//! (`specdec_core::exp_sum`). Built so far, on the CPU backend:
//! `gumbel_sample` ([`crate::Cpu::sharded_gumbel_sample`]) and
//! `rejection_sample` ([`crate::Cpu::sharded_rejection_sample`]), with
//! filters that have a top-k and with log-probabilities.

use crate::error::{Error, Result};
use crate::memory::{Host, Memory};
use crate::params::Filters;
use crate::tensor::MAX_VOCAB;
use specdec_core::argmax::ArgMax;
use specdec_core::exp_sum::{ExpSum, GROUPS};
use specdec_core::filter::Filter;
use std::sync::{Arc, Barrier, Mutex};

mod device;
pub use device::InProcessCuda;
#[cfg(feature = "nccl")]
pub use device::Nccl;
/// The bounds of a sharded `rejection_sample` with filters on the CUDA
/// backend (REFERENCE §9): its filters' top-k, and its ranks.
pub use specdec_core::shard::{MAX_FILTERED_RANKS, MAX_TOP_K};

/// This rank's part of every row: ids `offset .. offset + V_r` of a row of
/// `vocab` ids, where `V_r` is the width of the logits the rank passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The global id of the rank's first id: a multiple of 4, as noise is drawn four ids a word.
    pub offset: usize,
    /// The whole row's ids, `V`.
    pub vocab: usize,
}

impl Shard {
    /// The ids a shard starts at are a multiple of this.
    pub const ALIGN: usize = 4;

    /// The shard's ids fit the row, and start where noise words start.
    pub(crate) fn check(&self, ids: usize) -> Result<()> {
        let bad = |detail: String| Err(Error::InvalidShard { detail });
        if self.vocab == 0 || self.vocab > MAX_VOCAB {
            return bad(format!("the row has {} ids, expected 1 ..= {MAX_VOCAB}", self.vocab));
        }
        if !self.offset.is_multiple_of(Self::ALIGN) {
            return bad(format!("offset {} is not a multiple of {}", self.offset, Self::ALIGN));
        }
        match self.offset.checked_add(ids) {
            Some(end) if end <= self.vocab => Ok(()),
            _ => bad(format!("{ids} ids from offset {} run past the row's {} ids", self.offset, self.vocab)),
        }
    }
}

/// What a rank says about its call before its rows' candidates: whether its
/// checks passed, its shard, and a digest of what every rank must pass alike
/// (slots, positions, parameters), so that every rank reaches one verdict on
/// whether the ranks' calls fit together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub ok: bool,
    pub offset: u32,
    pub ids: u32,
    pub vocab: u32,
    pub digest: u64,
}

impl Header {
    pub const BYTES: usize = 24;

    /// The header of a rank whose checks failed.
    pub const FAILED: Header = Header { ok: false, offset: 0, ids: 0, vocab: 0, digest: 0 };

    /// The header of a rank whose checks passed: it holds `ids` ids from
    /// `shard.offset`, and `words` are what every rank must pass alike.
    pub fn of(shard: Shard, ids: usize, words: impl IntoIterator<Item = u64>) -> Header {
        Header {
            ok: true,
            offset: shard.offset as u32,
            ids: ids as u32,
            vocab: shard.vocab as u32,
            digest: digest(words),
        }
    }

    /// The rank, of a group's `headers`, whose shard holds global id `id`.
    pub fn owner(headers: &[Header], id: u32) -> Option<usize> {
        headers.iter().position(|h| (h.offset..h.offset + h.ids).contains(&id))
    }

    /// Every rank's checks passed, the ranks' calls agree, and their shards
    /// tile the row: each id on exactly one rank. The same verdict on every rank.
    pub fn check_group(headers: &[Header]) -> Result<()> {
        if let Some(rank) = headers.iter().position(|h| !h.ok) {
            return Err(Error::PeerFailed { rank });
        }
        let first = headers[0];
        if let Some(rank) = headers.iter().position(|h| (h.vocab, h.digest) != (first.vocab, first.digest)) {
            return Err(Error::InvalidShard {
                detail: format!(
                    "rank {rank}'s call differs from rank 0's (row length, slots, positions or parameters)"
                ),
            });
        }
        let mut spans: Vec<(u32, u32)> = headers.iter().map(|h| (h.offset, h.offset + h.ids)).collect();
        spans.sort_unstable();
        let mut next = 0;
        for (start, end) in spans {
            if start != next {
                return Err(Error::InvalidShard {
                    detail: format!("the ranks' shards do not tile the row: ids from {next} are held by {start}"),
                });
            }
            next = end;
        }
        if next != first.vocab {
            return Err(Error::InvalidShard {
                detail: format!("the ranks' shards end at id {next}, the row at {}", first.vocab),
            });
        }
        Ok(())
    }
}

/// `NotSharded` where a slot in use (`slots`, `-1` for none) of a random
/// request (`temperature > 0`; greedy rows ignore filters) filters its rows
/// of `vocab` ids by one of `tables` in a way a sharded call cannot: top-p or
/// min-p without a top-k, a kept set with no bound on its size, which no
/// shard can list. Arrays whose values keep every id are no filter, as in an
/// unsharded call. After the call's checks of slots and temperatures.
pub(crate) fn check_filters(
    slots: &[i32],
    temperature: &[f32],
    vocab: usize,
    tables: &[&Filters<'_, Host>],
) -> Result<()> {
    let mut random = slots.iter().filter_map(|&s| usize::try_from(s).ok()).filter(|&s| temperature[s] != 0.0);
    let unbounded = |f: Filter| !f.is_off(vocab) && !f.has_top_k(vocab);
    if random.any(|s| tables.iter().any(|t| unbounded(t.slot(s)))) {
        Err(Error::NotSharded { what: "top-p or min-p without top-k" })
    } else {
        Ok(())
    }
}

/// Slot `slot`'s filter in `table` as a sharded call reads it to size its
/// messages, before (or despite) its checks, so that a rank whose checks
/// fail still sends as much as the others: off for a padding slot, a
/// greedy one (`T = 0` ignores filters) and a slot past any array.
pub(crate) fn message_filter(table: &Filters<'_, Host>, temperature: &[f32], slot: i32) -> Filter {
    let Ok(slot) = usize::try_from(slot) else { return Filter::OFF };
    let random = temperature.get(slot).is_some_and(|&t| t != 0.0);
    if random { table.get(slot).unwrap_or(Filter::OFF) } else { Filter::OFF }
}

/// The length of the top-value list a row of `vocab` ids filtered by
/// `filter` sends (`cpu::filter::Largest`): its top-k, where it has one (0:
/// no list, and none where `vocab` is out of range: that rank's checks fail).
/// Ranks that disagree on `vocab`, or on whether there are draft logits,
/// may send lists of different lengths: the exchange fails on every rank.
pub(crate) fn list_length(filter: Filter, vocab: usize) -> usize {
    if vocab <= MAX_VOCAB && filter.has_top_k(vocab) { filter.top_k as usize } else { 0 }
}

/// A filter table's arrays (each its length, then its values' bits; none:
/// `u64::MAX`), as words of the header's digest.
pub(crate) fn filter_words<'a>(f: &'a Filters<'_, Host>) -> impl Iterator<Item = u64> + 'a {
    fn array<'a, T>(a: Option<&'a [T]>, bits: fn(&T) -> u64) -> impl Iterator<Item = u64> + 'a {
        let len = a.map_or(u64::MAX, |a| a.len() as u64);
        std::iter::once(len).chain(a.into_iter().flatten().map(bits))
    }
    let k = array(f.top_k, |&k| u64::from(k as u32));
    let p = array(f.top_p, |p| u64::from(p.to_bits()));
    k.chain(p).chain(array(f.min_p, |m| u64::from(m.to_bits())))
}

/// FNV-1a over `words`: the digest of a call's shared arguments.
pub(crate) fn digest(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        w.to_le_bytes().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
    })
}

/// The collective a sharded call runs: every rank's `send` (the same length
/// on every rank) lands, in rank order, in every rank's `recv` (`ranks()`
/// times as long). Every rank of a call must call it the same number of
/// times, with the same lengths.
pub trait Exchange<M: Memory> {
    fn rank(&self) -> usize;
    fn ranks(&self) -> usize;
    fn all_gather(&mut self, send: M::Ref<'_, u8>, recv: M::Mut<'_, u8>) -> Result<()>;
}

/// Every rank's `send` (the same length on every rank), in rank order: one
/// [`Exchange::all_gather`] into a buffer of its own.
pub(crate) fn gather(exchange: &mut dyn Exchange<Host>, send: &[u8]) -> Result<Vec<u8>> {
    let mut recv = vec![0u8; exchange.ranks() * send.len()];
    exchange.all_gather(send, &mut recv)?;
    Ok(recv)
}

/// `P` ranks in one process, one thread each, meeting at a barrier: for
/// tests, and for running a sharded call without a collective library.
pub struct InProcess {
    rank: usize,
    shared: Arc<Shared>,
}

struct Shared {
    ranks: usize,
    barrier: Barrier,
    sent: Mutex<Vec<Vec<u8>>>,
}

impl InProcess {
    /// The `ranks` members of one group, rank 0 first: give each to its own thread.
    pub fn group(ranks: usize) -> Vec<InProcess> {
        let sent = Mutex::new(vec![Vec::new(); ranks]);
        let shared = Arc::new(Shared { ranks, barrier: Barrier::new(ranks), sent });
        (0..ranks).map(|rank| InProcess { rank, shared: shared.clone() }).collect()
    }
}

impl Exchange<Host> for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.shared.ranks
    }

    /// Every rank sees every rank's bytes, so a length that differs between
    /// ranks is the same error on all of them, and none waits forever.
    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let ranks = self.ranks();
        self.shared.lock()[self.rank] = send.to_vec();
        self.shared.barrier.wait();
        let result = {
            let sent = self.shared.lock();
            if let Some((rank, s)) = sent.iter().enumerate().find(|(_, s)| s.len() != send.len()) {
                Err(format!("rank {rank} sent {} bytes, rank {} {}", s.len(), self.rank, send.len()))
            } else if recv.len() != ranks * send.len() {
                Err(format!("rank {} gave {} bytes to receive {ranks} × {}", self.rank, recv.len(), send.len()))
            } else {
                for (part, s) in recv.chunks_exact_mut(send.len().max(1)).zip(sent.iter()) {
                    part.copy_from_slice(s);
                }
                Ok(())
            }
        };
        // Nobody writes the next round's bytes before everyone has read these.
        self.shared.barrier.wait();
        result.map_err(Error::Exchange)
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A row's candidate, as a rank sends it: its best `ArgMax` (global id) and
/// whether its ids held a NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub best: ArgMax,
    pub nan: bool,
}

impl Candidate {
    const BYTES: usize = 12;

    /// Loses to every candidate: what the combine starts from.
    pub const NONE: Candidate = Candidate { best: ArgMax::IDENTITY, nan: false };

    /// The combine of two ranks' candidates: the argmax rule, NaN from either.
    pub fn combine(self, other: Candidate) -> Candidate {
        Candidate { best: self.best.combine(other.best), nan: self.nan | other.nan }
    }
}

/// What a rank sends for a call: its header, then its rows' candidates.
pub(crate) fn encode(header: Header, rows: &[Candidate]) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(message_len(rows.len())));
    w.header(header);
    for c in rows {
        w.arg_max(c.best);
        w.u32(u32::from(c.nan));
    }
    w.0
}

/// The message length of a call of `rows` rows.
pub(crate) fn message_len(rows: usize) -> usize {
    Header::BYTES + rows * Candidate::BYTES
}

/// One rank's message, from `r`: its header and its `rows` rows' candidates.
pub(crate) fn decode(r: &mut Reader, rows: usize) -> (Header, Vec<Candidate>) {
    let header = r.header();
    let candidates = (0..rows).map(|_| Candidate { best: r.arg_max(), nan: r.u32() != 0 }).collect();
    (header, candidates)
}

/// A message being written: little-endian fields, in the order the reader
/// takes them.
pub(crate) struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u32(&mut self, w: u32) {
        self.0.extend_from_slice(&w.to_le_bytes());
    }

    pub fn u64(&mut self, w: u64) {
        self.0.extend_from_slice(&w.to_le_bytes());
    }

    pub fn f32(&mut self, x: f32) {
        self.u32(x.to_bits());
    }

    pub fn arg_max(&mut self, a: ArgMax) {
        self.f32(a.value);
        self.u32(a.index);
    }

    pub fn header(&mut self, h: Header) {
        for w in [u32::from(h.ok), h.offset, h.ids, h.vocab] {
            self.u32(w);
        }
        self.u64(h.digest);
    }

    /// A 128-bit integer, low half first.
    pub fn u128(&mut self, w: u128) {
        self.u64(w as u64);
        self.u64((w >> 64) as u64);
    }

    /// An order-free row sum ([`EXP_SUM_BYTES`]).
    pub fn exp_sum(&mut self, s: &ExpSum) {
        self.f32(s.max());
        s.sums().iter().for_each(|&g| self.u128(g));
    }
}

/// Bytes of an [`ExpSum`] in a message: its maximum and its group sums.
pub(crate) const EXP_SUM_BYTES: usize = 4 + 16 * GROUPS;

/// A message being read, field by field as [`Writer`] wrote them.
pub(crate) struct Reader<'a> {
    pub bytes: &'a [u8],
    pub at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let field = self.bytes[self.at..self.at + N].try_into().expect("N bytes");
        self.at += N;
        field
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    pub fn f32(&mut self) -> f32 {
        f32::from_bits(self.u32())
    }

    pub fn arg_max(&mut self) -> ArgMax {
        ArgMax { value: self.f32(), index: self.u32() }
    }

    pub fn header(&mut self) -> Header {
        let (ok, offset, ids, vocab) = (self.u32() != 0, self.u32(), self.u32(), self.u32());
        Header { ok, offset, ids, vocab, digest: self.u64() }
    }

    pub fn u128(&mut self) -> u128 {
        u128::from(self.u64()) | u128::from(self.u64()) << 64
    }

    pub fn exp_sum(&mut self) -> ExpSum {
        let max = self.f32();
        ExpSum::from_parts(max, core::array::from_fn(|_| self.u128()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let rows = [
            Candidate { best: ArgMax { value: -1.5, index: 7 }, nan: false },
            Candidate { best: ArgMax { value: f32::NEG_INFINITY, index: 0 }, nan: true },
        ];
        let header = Header { ok: true, offset: 8, ids: 12, vocab: 20, digest: u64::MAX - 3 };
        let decoded = |bytes: &[u8]| decode(&mut Reader { bytes, at: 0 }, 2);
        assert_eq!(decoded(&encode(header, &rows)), (header, rows.to_vec()));
        assert_eq!(decoded(&encode(Header::FAILED, &rows)).0, Header::FAILED);
        assert_eq!(encode(header, &rows).len(), message_len(2));
    }

    #[test]
    fn a_group_passes_only_if_every_rank_passed_agreed_and_the_shards_tile_the_row() {
        let h = |offset, ids| Header { ok: true, offset, ids, vocab: 20, digest: 9 };
        assert!(Header::check_group(&[h(8, 12), h(0, 8)]).is_ok());
        assert!(matches!(Header::check_group(&[h(0, 8), Header::FAILED]), Err(Error::PeerFailed { rank: 1 })));
        let other = Header { digest: 10, ..h(8, 12) };
        for bad in [[h(0, 8), other], [h(0, 8), h(12, 8)], [h(0, 8), h(4, 16)], [h(0, 8), h(8, 8)]] {
            assert!(matches!(Header::check_group(&bad), Err(Error::InvalidShard { .. })), "{bad:?}");
        }
    }

    #[test]
    fn shards_start_on_a_noise_word_and_fit_the_row() {
        assert!(Shard { offset: 8, vocab: 20 }.check(12).is_ok());
        for (shard, ids) in [(Shard { offset: 6, vocab: 20 }, 4), (Shard { offset: 8, vocab: 20 }, 13)] {
            assert!(matches!(shard.check(ids), Err(Error::InvalidShard { .. })), "{shard:?} {ids}");
        }
    }

    #[test]
    fn an_in_process_group_gathers_in_rank_order_and_flags_unequal_lengths() {
        let group = InProcess::group(3);
        let got: Vec<Result<Vec<u8>>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .into_iter()
                .map(|mut x| {
                    s.spawn(move || {
                        let r = x.rank() as u8;
                        let mut recv = vec![0u8; 6];
                        x.all_gather(&[r, r + 10], &mut recv)?;
                        // A second round with one rank sending more: an error on every rank.
                        let long = vec![r; if r == 1 { 3 } else { 2 }];
                        let mut recv2 = vec![0u8; 3 * long.len()];
                        assert!(matches!(x.all_gather(&long, &mut recv2), Err(Error::Exchange(_))));
                        Ok(recv)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for recv in got {
            assert_eq!(recv.unwrap(), vec![0, 10, 1, 11, 2, 12]);
        }
    }
}
