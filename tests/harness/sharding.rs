//! Vocab-parallel calls in the tests (REFERENCE §9): uneven shards of a
//! row, each rank's columns of a buffer, rows of every kind for
//! `gumbel_sample` and each rank's call of it, special values for
//! `rejection_sample` batches, and a `rejection_sample` call run over `P`
//! ranks, one thread each with an in-process exchange, on the CPU backend
//! or on a GPU.

use crate::Batch;
use crate::batch::{ColumnSpec, DraftLogitsSpec, Values};
use crate::drafting::{RandomSpec, random_verify};
use crate::inputs::Rng;
use crate::verify::{Asked, LogprobBits, Verified, Verify};
use specdec::filter::Filter;
use specdec::shard::{Exchange, InProcess, InProcessCuda, Shard};
use specdec::{Cuda, DType, Distribution, DraftLogitsShape, MAX_TOP_LOGPROBS, Verification};
use std::ops::Range;

/// `P` shards of a row of `vocab` ids, uneven, each starting at a multiple of 4.
pub fn shards(vocab: usize, ranks: usize, rng: &mut Rng) -> Vec<Shard> {
    cut_row(vocab, ranks, Shard::ALIGN, rng)
}

/// The ids the CUDA `rejection_sample` sums as one run: a shard of its
/// sharded call starts at a multiple of this and ends at one or at the row's end.
pub const RUN: usize = specdec_core::layout::RUN as usize;

/// [`shards`] for the CUDA `rejection_sample`: every cut at a multiple of [`RUN`].
pub fn run_shards(vocab: usize, ranks: usize, rng: &mut Rng) -> Vec<Shard> {
    cut_row(vocab, ranks, RUN, rng)
}

/// `P` shards of a row of `vocab` ids, uneven, each starting at a multiple of `align`.
fn cut_row(vocab: usize, ranks: usize, align: usize, rng: &mut Rng) -> Vec<Shard> {
    let words = vocab.div_ceil(align);
    assert!(words >= ranks, "every rank needs an id");
    // Distinct cut points in words 1..words, sorted: shard r is words cut[r-1]..cut[r].
    let mut cuts: Vec<usize> = (1..words).collect();
    rng.shuffle(&mut cuts);
    let mut cuts: Vec<usize> = cuts.into_iter().take(ranks - 1).collect();
    cuts.sort_unstable();
    let starts = std::iter::once(0).chain(cuts.iter().map(|w| w * align));
    starts.map(|offset| Shard { offset, vocab }).collect()
}

/// The ids of shard `r` (up to the next shard's start, or the row's end).
pub fn ids(shards: &[Shard], r: usize) -> Range<usize> {
    shards[r].offset..shards.get(r + 1).map_or(shards[r].vocab, |s| s.offset)
}

/// Values `range` of each of `rows` rows starting `stride` apart, as dense rows.
pub fn columns(v: &Values, rows: usize, stride: usize, range: Range<usize>) -> Values {
    v.gather((0..rows).flat_map(|r| (r * stride + range.start)..(r * stride + range.end)))
}

/// The call rank `r` makes: ids `range` of every target row and of every
/// draft-logits row (`[slots, k, ids + pad]`), each row followed by `pad`
/// columns of a huge value that no call may read as a logit (`pad` from 0 to
/// 2 by the range's start), everything else alike.
pub fn rank_verify(v: &Verify, range: Range<usize>) -> Verify {
    let pad = range_pad(&range);
    let mut mine = v.clone();
    mine.target = padded_columns(&v.target, (0..v.rows).map(|r| r * v.row_stride), &range);
    (mine.vocab, mine.row_stride) = (range.len(), range.len() + pad);
    mine.draft = v.draft.as_ref().map(|(values, shape)| {
        let starts = (0..shape.slots).flat_map(|s| (0..shape.k).map(move |i| s * shape.stride0 + i * shape.stride1));
        (padded_columns(values, starts, &range), DraftLogitsShape::dense(shape.slots, shape.k, range.len() + pad))
    });
    mine
}

/// The padding columns after a rank's ids `range` of each row: 0 to 2, by the range's start.
fn range_pad(range: &Range<usize>) -> usize {
    range.start % 3
}

/// Values `range` of the rows starting at `starts`, each followed by
/// [`range_pad`] columns of [`PAST_ROW`], as dense rows.
fn padded_columns(values: &Values, starts: impl Iterator<Item = usize>, range: &Range<usize>) -> Values {
    let mut out = Vec::new();
    for start in starts {
        out.extend(values.f32s(start + range.start..start + range.end));
        out.extend(std::iter::repeat_n(PAST_ROW, range_pad(range)));
    }
    Values::from_f32(values.dtype(), &out)
}

/// Rows of every kind: random logits at several temperatures, greedy and
/// padding rows, and rows with NaN, `±inf` and nothing above `-inf`.
pub fn gumbel_rows(vocab: usize, rows: usize, dtype: DType, rng: &mut Rng) -> Batch {
    let mut x: Vec<f32> = (0..rows * vocab).map(|_| rng.uniform(-4.0, 4.0)).collect();
    let special = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY];
    for r in 0..rows {
        match r % 7 {
            // A NaN, -inf or +inf somewhere in the row.
            1..=3 => x[r * vocab + rng.below(vocab)] = special[r % 7 - 1],
            // Nothing above -inf (NaN and -inf only).
            4 => x[r * vocab..(r + 1) * vocab].iter_mut().enumerate().for_each(|(i, v)| {
                *v = if i % 3 == 0 { f32::NAN } else { f32::NEG_INFINITY };
            }),
            // Ties: the row's maximum twice.
            5 => {
                let (a, b) = (rng.below(vocab), rng.below(vocab));
                x[r * vocab + a] = 9.0;
                x[r * vocab + b] = 9.0;
            }
            _ => {}
        }
    }
    let mut b = Batch::new(Values::from_f32(dtype, &x), rows, vocab, 1.0, 7);
    b.temperature = vec![0.0, 0.6, 1.0, 1.5];
    b.seed = vec![3, 5, u64::MAX, 11];
    b.slots = (0..rows).map(|r| (r % 5) as i32 - 1).collect();
    b.pos = (0..rows as u64).map(|r| r * 7919 + 100).collect();
    b
}

/// `batch` drafting into `[4 slots, 3 columns, vocab]` draft logits of
/// `dtype`: its rows on slots 0 to 2 and every fourth padding, row `r`
/// writing column `r / 4`.
pub fn drafting_into(mut batch: Batch, dtype: DType) -> Batch {
    batch.drafting = true;
    let columns = (0..batch.rows as i32).map(|r| r / 4).collect();
    batch.draft_logits = Some(DraftLogitsSpec::dense(dtype, 4, 3, batch.vocab, ColumnSpec::PerRow(columns)));
    batch.slots = (0..batch.rows).map(|r| if r % 4 == 3 { -1 } else { (r % 4) as i32 }).collect();
    batch
}

/// The `gumbel_sample` call rank `r` makes: ids `range` of every row of
/// `batch` and of every draft-logits row, each row followed by `pad` columns
/// (from 0 to 2 by the range's start) of a huge value that no call may read
/// as a logit, everything else alike (a broadcast row stays one). Its draft
/// logits start as `DraftLogitsSpec::SENTINEL`.
pub fn rank_batch(batch: &Batch, range: Range<usize>) -> Batch {
    let pad = range_pad(&range);
    let stored = if batch.row_stride == 0 { 1 } else { batch.rows };
    let mut mine = batch.clone();
    mine.logits = padded_columns(&batch.logits, (0..stored).map(|r| r * batch.row_stride), &range);
    mine.vocab = range.len();
    mine.row_stride = if batch.row_stride == 0 { 0 } else { range.len() + pad };
    mine.draft_logits = batch
        .draft_logits
        .as_ref()
        .map(|d| DraftLogitsSpec::dense(d.data.dtype(), d.slots, d.k, range.len() + pad, d.column.clone()));
    mine
}

/// What a rank's padding columns hold: a logit no id of the row comes near.
const PAST_ROW: f32 = 1e30;

/// The (target, draft logits) dtypes sharded verification is checked with:
/// every target dtype one-hot, and draft logits of every dtype, equal to
/// the target's or not.
pub const VERIFY_DTYPES: [(DType, Option<DType>); 7] = [
    (DType::F32, None),
    (DType::F32, Some(DType::F32)),
    (DType::BF16, Some(DType::BF16)),
    (DType::F16, Some(DType::F32)),
    (DType::F32, Some(DType::F16)),
    (DType::BF16, None),
    (DType::F16, None),
];

/// A NaN (or, more rarely, a `+inf`) at a random id of some target rows and
/// some draft rows.
pub fn add_specials(v: &mut Verify, rng: &mut Rng) {
    let special = |rng: &mut Rng| match rng.below(10) {
        0..=2 => Some(f32::NAN),
        3 => Some(f32::INFINITY),
        _ => None,
    };
    for row in 0..v.rows {
        if let Some(x) = special(rng) {
            v.target.set_f32(row * v.row_stride + rng.below(v.vocab), x);
        }
    }
    if let Some((values, shape)) = &mut v.draft {
        for slot in 0..shape.slots {
            for i in 0..shape.k {
                if let Some(x) = special(rng) {
                    values.set_f32(slot * shape.stride0 + i * shape.stride1 + rng.below(v.vocab), x);
                }
            }
        }
    }
}

/// Sets about one target row in 8 to `-inf` throughout, half of them with a
/// NaN at id 0: rows with nothing above `-inf`, whose argmax is id 0 and
/// whose log-sum-exp is `-inf` (the token's value decides its log-probability).
pub fn add_empty_rows(v: &mut Verify, rng: &mut Rng) {
    for row in 0..v.rows {
        if rng.below(8) == 0 {
            let start = row * v.row_stride;
            (start..start + v.vocab).for_each(|i| v.target.set_f32(i, f32::NEG_INFINITY));
            if rng.below(2) == 0 {
                v.target.set_f32(start, f32::NAN);
            }
        }
    }
}

/// How often requests stopped short of their bonus row, and ran to it.
#[derive(Default)]
pub struct Coverage {
    pub stopped: usize,
    pub bonus: usize,
}

impl Coverage {
    /// Counts `v`'s requests by whether `out` accepted all their drafts.
    pub fn add(&mut self, v: &Verify, out: &Verified) {
        for r in 0..v.requests() {
            let n = v.offsets[r + 1] - v.offsets[r] - 1;
            if out.accepted[r] < n { self.stopped += 1 } else { self.bonus += 1 }
        }
    }
}

/// Runs `v` over `shards`, one thread a rank, rank `r` calling
/// `rank_call(r, &its Verify)`'s outputs (to make ranks disagree); each
/// rank's outputs, in rank order.
pub fn run_sharded_verify(
    v: &Verify,
    shards: &[Shard],
    rank_call: impl Fn(usize, Verify) -> Verify + Sync,
) -> Vec<specdec::Result<Verified>> {
    in_ranks(shards.len(), |r, exchange| rank_call(r, rank_verify(v, ids(shards, r))).run_sharded(shards[r], exchange))
}

/// [`run_sharded_verify`] without changes, every rank asking for `asked`
/// log-probabilities (`rank_asked(r)`'s where given, to make ranks disagree).
pub fn run_sharded_logprobs(
    v: &Verify,
    shards: &[Shard],
    rank_asked: impl Fn(usize) -> Option<Asked> + Sync,
) -> Vec<specdec::Result<(Verified, LogprobBits)>> {
    in_ranks(shards.len(), |r, exchange| {
        rank_verify(v, ids(shards, r)).run_sharded_logprobs(shards[r], exchange, rank_asked(r))
    })
}

/// [`run_sharded_verify`] through [`Cuda::sharded_rejection_sample`]: the
/// ranks on `cuda`'s device ([`in_device_ranks`]), each with a workspace for
/// `shards.len()` ranks and `v`'s positions.
pub fn run_sharded_verify_device(
    cuda: &Cuda,
    v: &Verify,
    shards: &[Shard],
    rank_call: impl Fn(usize, Verify) -> Verify + Sync,
) -> Vec<specdec::Result<Verified>> {
    let rows = v.requests() * (v.max_drafts + 1);
    in_device_ranks(cuda, shards.len(), |r, rank, exchange| {
        let mut ws = rank.sharded_workspace(rows, shards.len()).expect("a workspace");
        rank_call(r, rank_verify(v, ids(shards, r))).run_device_sharded(rank, &mut ws, shards[r], exchange)
    })
}

/// [`run_sharded_logprobs`] through [`Cuda::sharded_rejection_sample`], as
/// [`run_sharded_verify_device`] runs it, every rank asking for `asked`
/// log-probabilities.
pub fn run_sharded_logprobs_device(
    cuda: &Cuda,
    v: &Verify,
    shards: &[Shard],
    asked: Option<Asked>,
) -> Vec<specdec::Result<(Verified, LogprobBits)>> {
    let rows = v.requests() * (v.max_drafts + 1);
    in_device_ranks(cuda, shards.len(), |r, rank, exchange| {
        let mut ws = rank.sharded_workspace(rows, shards.len()).expect("a workspace");
        rank_verify(v, ids(shards, r)).run_device_logprobs_with(rank, asked, |call, out| {
            rank.sharded_rejection_sample(&mut ws, shards[r], exchange, call, out)
        })
    })
}

/// The log-probabilities the sharded tests ask for: each output alone, all
/// of them, ranks alone, and the largest top-n, under either distribution.
pub const ASKS: [Asked; 6] = [
    Asked { processed: true, raw: false, top: None },
    Asked { processed: false, raw: true, top: None },
    Asked { processed: true, raw: true, top: Some((5, Distribution::Processed)) },
    Asked { processed: false, raw: false, top: Some((0, Distribution::Raw)) },
    Asked { processed: true, raw: false, top: Some((MAX_TOP_LOGPROBS, Distribution::Raw)) },
    Asked { processed: false, raw: true, top: Some((1, Distribution::Processed)) },
];

/// `rank(r, backend, exchange)` for each of `ranks` ranks on `cuda`'s
/// device, each with a new stream, a backend on it and a scoped thread,
/// meeting through one `InProcessCuda` group; the results in rank order.
pub fn in_device_ranks<R: Send>(
    cuda: &Cuda,
    ranks: usize,
    rank: impl Fn(usize, &Cuda, &mut InProcessCuda) -> R + Sync,
) -> Vec<R> {
    let ctx = cuda.stream().context().clone();
    let streams: Vec<_> = (0..ranks).map(|_| ctx.new_stream().expect("a stream")).collect();
    let rank = &rank;
    std::thread::scope(|s| {
        let handles: Vec<_> = InProcessCuda::group(streams)
            .into_iter()
            .enumerate()
            .map(|(r, mut exchange)| {
                s.spawn(move || {
                    let backend = Cuda::new(exchange.stream().clone()).expect("a backend on the rank's stream");
                    rank(r, &backend, &mut exchange)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
    })
}

/// `rank(r, exchange)` for each of `ranks` ranks, one scoped thread a rank,
/// meeting through one `InProcess` group; the results in rank order.
pub fn in_ranks<R: Send>(ranks: usize, rank: impl Fn(usize, &mut InProcess) -> R + Sync) -> Vec<R> {
    let rank = &rank;
    std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(ranks)
            .into_iter()
            .enumerate()
            .map(|(r, mut exchange)| s.spawn(move || rank(r, &mut exchange)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
    })
}

/// What rank `r` sends in round `round`: `len` bytes of its own.
pub fn message(r: usize, round: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (r * 64 + round * 16 + i % 7) as u8).collect()
}

/// Rank `r` of `exchange` sends `message(r, round, lens[r])` for each
/// round, rewriting the same send buffer as soon as a round returns;
/// each round's receive buffer, read back after the rounds.
pub fn gather_rounds(
    exchange: &mut dyn Exchange<specdec::Device>,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    lens: &[usize],
    rounds: usize,
) -> Vec<specdec::Result<Vec<u8>>> {
    let (r, ranks) = (exchange.rank(), exchange.ranks());
    let mut send = stream.alloc_zeros::<u8>(lens[r]).expect("a send buffer");
    let mut got = Vec::new();
    let mut recvs = Vec::new();
    for round in 0..rounds {
        stream.memcpy_htod(&message(r, round, lens[r]), &mut send).expect("the send buffer written");
        let mut recv = stream.alloc_zeros::<u8>(ranks * lens[r]).expect("a receive buffer");
        let result = exchange.all_gather(send.as_view(), recv.as_view_mut());
        recvs.push((result, recv));
    }
    for (result, recv) in recvs {
        got.push(result.map(|()| stream.clone_dtoh(&recv).expect("the receive buffer read")));
    }
    got
}

/// A random filter with a top-k below `vocab`, at most `most` (alone, or
/// with top-p, min-p or both on top of it), or none.
pub fn random_filter(rng: &mut Rng, vocab: usize, most: u32) -> Filter {
    let ks: Vec<u32> = [1, 2, 3, 7, 50, 256, 300, vocab as u32 - 1]
        .into_iter()
        .filter(|&k| k >= 1 && k < vocab as u32 && k <= most)
        .collect();
    let top_k = rng.pick(&ks);
    match rng.below(6) {
        0 => Filter::OFF,
        1 | 2 => Filter { top_k, ..Filter::OFF },
        3 => Filter { top_k, top_p: rng.pick(&[0.3, 0.9, 0.999]), ..Filter::OFF },
        4 => Filter { top_k, min_p: rng.pick(&[0.05, 0.5, 1.0]), ..Filter::OFF },
        _ => Filter { top_k, top_p: 0.8, min_p: 0.1 },
    }
}

/// Rounds half of the target rows' and draft rows' values to multiples of
/// 1/2: tie groups that straddle a top-k's `k`-th value, within and across shards.
pub fn add_ties(v: &mut Verify, rng: &mut Rng) {
    let round = |x: f32| (x * 2.0).round() / 2.0;
    for row in 0..v.rows {
        if rng.below(2) == 0 {
            for i in row * v.row_stride..row * v.row_stride + v.vocab {
                v.target.set_f32(i, round(v.target.get(i)));
            }
        }
    }
    if let Some((values, shape)) = &mut v.draft {
        for slot in 0..shape.slots {
            for i in 0..shape.k {
                if rng.below(2) == 0 {
                    let start = slot * shape.stride0 + i * shape.stride1;
                    (start..start + v.vocab).for_each(|e| values.set_f32(e, round(values.get(e))));
                }
            }
        }
    }
}

/// A random ragged batch verified by `verification`, with ties ([`add_ties`]), NaN and `±inf`.
pub fn tied_verify(rng: &mut Rng, spec: RandomSpec, verification: Verification<'static>) -> Verify {
    let mut v = random_verify(rng, spec);
    v.verification = verification;
    add_ties(&mut v, rng);
    add_specials(&mut v, rng);
    v
}
