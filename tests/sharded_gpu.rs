//! Vocab-parallel `gumbel_sample` on the GPU (`docs/VOCAB_PARALLEL.md` §6
//! step 5), with the `gpu` feature: `P` ranks on device 0, a stream and a
//! thread each, meeting through `shard::InProcessCuda`, each holding a shard
//! of every row's ids, return exactly the unsharded GPU call's tokens and
//! row statuses and together write exactly its draft logits, with filters
//! with a top-k too, and its processed and raw log-probabilities bit for bit
//! (shards on runs of 16 ids; a top-n is refused); ranks that disagree flag
//! the rows concerned on every rank.
#![cfg(feature = "gpu")]

use specdec::filter::Filter;
use specdec::shard::{MAX_TOP_K, Shard};
use specdec::status::{INVALID_FILTER, INVALID_SHARD, NAN_LOGITS};
use specdec::{Cuda, DType, Distribution, Error};
use specdec_suite::batch::{DraftLogitsSpec, Sampled};
use specdec_suite::inputs::{Rng, histogram, mixed_logits};
use specdec_suite::sharding::{
    ASKS, RUN, columns, drafting_into, gumbel_rows, ids, in_device_ranks, random_filter, rank_batch, run_shards, shards,
};
use specdec_suite::stats::softmax;
use specdec_suite::verify::{Asked, LogprobBits};
use specdec_suite::{Batch, FilterTable, chi_square};

/// What a rank returned: its outputs, and its draft logits.
type RankOut = (specdec::Result<Sampled>, Option<DraftLogitsSpec>);

/// What a rank asked for log-probabilities returned: its outputs and those, and its draft logits.
type LogprobRankOut = (specdec::Result<(Sampled, LogprobBits)>, Option<DraftLogitsSpec>);

/// Runs `batch` sharded over `shards` on device 0, rank `r` passing
/// `rank_batch` of ids `ranges[r]` of `rank_of(r, batch)` with a workspace
/// for `workspace_ranks(r)` ranks.
fn run_ranks(
    cuda: &Cuda,
    batch: &Batch,
    shards: &[Shard],
    ranges: &[std::ops::Range<usize>],
    rank_of: impl Fn(usize, &Batch) -> Batch + Sync,
    workspace_ranks: impl Fn(usize) -> usize + Sync,
) -> Vec<RankOut> {
    let got = run_ranks_asking(cuda, batch, shards, ranges, rank_of, workspace_ranks, None);
    got.into_iter().map(|(result, draft)| (result.map(|(sampled, _)| sampled), draft)).collect()
}

/// [`run_ranks`], every rank asking for `asked` log-probabilities.
fn run_ranks_asking(
    cuda: &Cuda,
    batch: &Batch,
    shards: &[Shard],
    ranges: &[std::ops::Range<usize>],
    rank_of: impl Fn(usize, &Batch) -> Batch + Sync,
    workspace_ranks: impl Fn(usize) -> usize + Sync,
    asked: Option<Asked>,
) -> Vec<LogprobRankOut> {
    in_device_ranks(cuda, shards.len(), |r, rank, exchange| {
        let mut ws = rank.sharded_workspace(batch.rows, workspace_ranks(r)).expect("a workspace");
        let mut mine = rank_batch(&rank_of(r, batch), ranges[r].clone());
        let result = mine.run_device_logprobs_with(rank, asked, |call, out| {
            rank.sharded_gumbel_sample(&mut ws, shards[r], exchange, call, out)
        });
        (result, mine.draft_logits)
    })
}

/// The ids of every shard, in rank order.
fn ranges(shards: &[Shard]) -> Vec<std::ops::Range<usize>> {
    (0..shards.len()).map(|r| ids(shards, r)).collect()
}

fn run_sharded(cuda: &Cuda, batch: &Batch, shards: &[Shard]) -> Vec<RankOut> {
    run_ranks(cuda, batch, shards, &ranges(shards), |_, b| b.clone(), |_| shards.len())
}

/// Every rank's outputs and `asked` log-probabilities are the unsharded
/// GPU call's (whose outputs are the CPU's), and its draft logits that
/// call's columns of them; returns that call's log-probabilities.
fn check_equal(cuda: &Cuda, batch: &Batch, shards: &[Shard], asked: Option<Asked>, ctx: &str) -> LogprobBits {
    let mut whole = batch.clone();
    let mut ws = cuda.workspace(batch.rows).expect("a workspace");
    let want = whole
        .run_device_logprobs_with(cuda, asked, |call, out| cuda.gumbel_sample(&mut ws, call, out))
        .unwrap_or_else(|e| panic!("{ctx}: unsharded: {e}"));
    let cpu = batch.clone().run(&specdec::Backend::cpu()).expect("the CPU call");
    assert_eq!(want.0, cpu, "{ctx}: the unsharded GPU call is the CPU's");
    let got = run_ranks_asking(cuda, batch, shards, &ranges(shards), |_, b| b.clone(), |_| shards.len(), asked);
    for (r, (result, draft)) in got.into_iter().enumerate() {
        let got = result.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}"));
        assert_eq!(got, want, "{ctx} rank {r}");
        if let (Some(mine), Some(all)) = (draft, &whole.draft_logits) {
            let (range, rows) = (ids(shards, r), all.slots * all.k);
            let written = columns(&mine.data, rows, mine.width, 0..range.len());
            let expected = columns(&all.data, rows, all.width, range.clone());
            let same = (0..written.len()).all(|i| written.bits(i) == expected.bits(i));
            assert!(same, "{ctx} rank {r}: draft logits");
            let past = columns(&mine.data, rows, mine.width, range.len()..mine.width);
            let untouched = (0..past.len()).all(|i| past.get(i) == DraftLogitsSpec::SENTINEL);
            assert!(untouched, "{ctx} rank {r}: draft logits past the shard");
        }
    }
    want.1
}

#[test]
fn sharded_tokens_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(41);
    for dtype in DType::ALL {
        for (vocab, rows) in [(37, 21), (1000, 14), (4097, 7), (151_936, 6)] {
            for ranks in [1, 2, 3, 8] {
                for drafting in [false, true] {
                    let mut b = gumbel_rows(vocab, rows, dtype, &mut rng);
                    b.drafting = drafting;
                    b.tokens_i64 = drafting;
                    let shards = shards(vocab, ranks, &mut rng);
                    let ctx = format!("{dtype:?} V {vocab} P {ranks} drafting {drafting}");
                    check_equal(&cuda, &b, &shards, None, &ctx);
                }
            }
        }
    }
}

/// A batch large enough that every kernel variant runs (the lean one past a
/// wave, chunked rows below one), with rows of every kind.
#[test]
fn sharded_large_batches_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(42);
    for (vocab, rows) in [(32_000, 700), (151_936, 64), (129_280, 3)] {
        let b = gumbel_rows(vocab, rows, DType::BF16, &mut rng);
        let shards = shards(vocab, 2, &mut rng);
        check_equal(&cuda, &b, &shards, None, &format!("V {vocab} rows {rows}"));
    }
}

#[test]
fn sharded_draft_logits_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(43);
    // f32 logits into bf16 draft logits round them: the rows are sampled as stored.
    for (logits, draft) in [(DType::F32, DType::F32), (DType::F32, DType::BF16), (DType::BF16, DType::F16)] {
        for ranks in [2, 3, 8] {
            let (vocab, rows) = (5001, 12);
            let b = drafting_into(gumbel_rows(vocab, rows, logits, &mut rng), draft);
            let shards = shards(vocab, ranks, &mut rng);
            check_equal(&cuda, &b, &shards, None, &format!("{logits:?} into {draft:?} P {ranks}"));
        }
    }
}

/// Filters with a top-k of at most `shard::MAX_TOP_K` (top-p and min-p on
/// top of it too), random per slot, on rows of every kind, half of them tie
/// groups at every half-integer (ties at the `k`-th value within and across
/// shards), into draft logits that round the values or not: every rank's
/// outputs are the unsharded GPU call's (the CPU's).
#[test]
fn sharded_filtered_tokens_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(45);
    let kinds = [
        (DType::F32, None),
        (DType::BF16, None),
        (DType::F16, None),
        (DType::F32, Some(DType::BF16)),
        (DType::BF16, Some(DType::BF16)),
    ];
    for (logits, draft) in kinds {
        for (vocab, rows) in [(37, 21), (1000, 14), (4097, 9), (20_000, 8), (151_936, 5)] {
            for ranks in [1, 2, 3, 8] {
                // `drafting_into`'s 3 columns take 12 rows.
                let rows = if draft.is_some() { rows.min(12) } else { rows };
                let mut b = gumbel_rows(vocab, rows, logits, &mut rng);
                let filters = tie_and_filter(&mut b, &mut rng);
                if let Some(d) = draft {
                    b = drafting_into(b, d);
                }
                let shards = shards(vocab, ranks, &mut rng);
                let ctx = format!("{logits:?} into {draft:?}, V {vocab}, P {ranks}, {filters:?}");
                check_equal(&cuda, &b, &shards, None, &ctx);
            }
        }
    }
}

/// Rounds half of `b`'s rows (dense, of 4 slots) to multiples of 1/2 (tie
/// groups at the `k`-th value, within and across shards) and gives each slot
/// a random filter with a top-k of at most `shard::MAX_TOP_K`; the filters.
fn tie_and_filter(b: &mut Batch, rng: &mut Rng) -> Vec<Filter> {
    let vocab = b.vocab;
    for row in (0..b.rows).filter(|_| rng.below(2) == 0) {
        for i in row * vocab..(row + 1) * vocab {
            b.logits.set_f32(i, (b.logits.get(i) * 2.0).round() / 2.0);
        }
    }
    let filters: Vec<Filter> = (0..4).map(|_| random_filter(rng, vocab, MAX_TOP_K)).collect();
    b.filters = FilterTable::per_slot(&filters);
    filters
}

/// A sharded call's log-probabilities (processed, raw, top-n and ranks:
/// [`ASKS`]) are the unsharded GPU call's, bit for bit, beside its tokens, statuses and draft
/// logits: rows of every kind and dtype on greedy, sampling and padding
/// slots, unfiltered or tied under per-slot filters with a top-k of at most
/// `shard::MAX_TOP_K`, and f32 rows drafting into bf16 draft logits (sampled,
/// and their log-probabilities taken, from the stored values), over 1, 2, 3
/// and 8 uneven shards on runs of [`RUN`] ids.
#[test]
fn sharded_logprobs_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(47);
    let (mut finite, mut listed, mut ranked) = (0, 0, 0);
    let mut check = |b: &Batch, shards: &[Shard], ctx: &str| {
        for asked in ASKS {
            let bits = check_equal(&cuda, b, shards, Some(asked), &format!("{ctx}, {asked:?}"));
            finite += bits.processed.iter().chain(&bits.raw).filter(|&&x| f32::from_bits(x).is_finite()).count();
            listed += bits.top.iter().filter(|&&x| f32::from_bits(x).is_finite()).count();
            ranked += bits.ranks.iter().filter(|&&rank| rank > 1).count();
        }
    };
    for dtype in DType::ALL {
        for (vocab, rows) in [(37usize, 21), (1000, 14), (151_936, 5)] {
            for filtered in [false, true] {
                for ranks in [1, 2, 3, 8].into_iter().filter(|&p| vocab.div_ceil(RUN) >= p) {
                    let mut b = gumbel_rows(vocab, rows, dtype, &mut rng);
                    let filters = if filtered { tie_and_filter(&mut b, &mut rng) } else { Vec::new() };
                    let shards = run_shards(vocab, ranks, &mut rng);
                    check(&b, &shards, &format!("{dtype:?} V {vocab} P {ranks} {filters:?}"));
                }
            }
        }
    }
    for filtered in [false, true] {
        for ranks in [1, 2, 3, 8] {
            let (vocab, rows) = (5001, 12);
            let mut b = gumbel_rows(vocab, rows, DType::F32, &mut rng);
            let filters = if filtered { tie_and_filter(&mut b, &mut rng) } else { Vec::new() };
            let b = drafting_into(b, DType::BF16);
            let shards = run_shards(vocab, ranks, &mut rng);
            check(&b, &shards, &format!("F32 into BF16 P {ranks} {filters:?}"));
        }
    }
    // Not a comparison of NaNs, nor of ranks all 1: many finite values, many
    // sampled tokens below the argmax.
    assert!(
        finite >= 2000 && listed >= 1000 && ranked >= 100,
        "finite log-probabilities {finite}, in top-ns {listed}, ranks above 1 {ranked}"
    );
}

/// Log-probabilities of a sharded call on the CUDA backend need shards on
/// runs of [`RUN`] ids (the sums' terms): shards cut at a multiple of 4 ids
/// but not of 16, which serve a call without them, are each rank's
/// `Error::InvalidShard`, whatever is asked (a top-n or ranks alone too);
/// one rank off the runs is its error (the others fail too, or flag every row).
#[test]
fn sharded_logprobs_off_the_runs_are_refused() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(48);
    let b = gumbel_rows(64, 10, DType::F32, &mut rng);
    let processed = Asked { processed: true, raw: false, top: None };
    let run = |shards: &[Shard], ranges: &[std::ops::Range<usize>], asked: Asked| {
        run_ranks_asking(&cuda, &b, shards, ranges, |_, b| b.clone(), |_| 2, Some(asked))
    };

    // Cut at id 20: both ranks' ids leave the runs (rank 0's end, rank 1's start).
    let at_20 = [Shard { offset: 0, vocab: 64 }, Shard { offset: 20, vocab: 64 }];
    check_equal(&cuda, &b, &at_20, None, "cut at 20, no log-probabilities");
    for asked in [processed, Asked { processed: false, raw: false, top: Some((0, Distribution::Raw)) }] {
        for (r, (result, _)) in run(&at_20, &[0..20, 20..64], asked).iter().enumerate() {
            assert!(matches!(result, Err(Error::InvalidShard { .. })), "cut at 20, {asked:?} rank {r}: {result:?}");
        }
    }

    // Rank 1 starts at 36 (rank 0 holds 0..32), or rank 0's ids end at 20
    // (rank 1 holds 32..64): the rank off the runs says why; the other
    // takes part in the exchange and fails, or flags every row.
    let flagged_all =
        |got: &Sampled| got.tokens.iter().all(|&t| t == -1) && got.row_status.iter().all(|s| s & INVALID_SHARD != 0);
    let off_36 = [Shard { offset: 0, vocab: 64 }, Shard { offset: 36, vocab: 64 }];
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    for (shards, ranges, off) in [(off_36, [0..32, 36..64], 1), (halves, [0..20, 32..64], 0)] {
        let got = run(&shards, &ranges, processed);
        let ctx = format!("{ranges:?}");
        assert!(matches!(&got[off].0, Err(Error::InvalidShard { .. })), "{ctx}: rank {off}: {:?}", got[off].0);
        let other = &got[1 - off].0;
        assert!(other.as_ref().map_or(true, |(got, _)| flagged_all(got)), "{ctx}: rank {}: {other:?}", 1 - off);
    }
}

/// A sampling row whose slot's filters have no top-k of at most
/// `shard::MAX_TOP_K` cannot be sent in the lists: it is flagged
/// `INVALID_FILTER` on every rank, token `-1`; greedy and padding rows, and
/// the rows of other slots, are the unsharded call's.
#[test]
fn sharded_filters_without_lists_are_flagged() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(46);
    let halves = [Shard { offset: 0, vocab: 600 }, Shard { offset: 300, vocab: 600 }];
    for unsent in [
        Filter { top_p: 0.9, ..Filter::OFF },
        Filter { min_p: 0.2, ..Filter::OFF },
        Filter { top_p: 0.8, min_p: 0.1, ..Filter::OFF },
        Filter { top_k: MAX_TOP_K + 1, ..Filter::OFF },
    ] {
        let mut b = gumbel_rows(600, 15, DType::F32, &mut rng);
        // Slot 1 (T = 0.6) the unsent filter, slot 0 (greedy) too, slot 2 a top-k.
        b.filters = FilterTable::per_slot(&[unsent, unsent, Filter { top_k: 3, ..Filter::OFF }, Filter::OFF]);
        let mut sent = b.clone();
        sent.filters = FilterTable::per_slot(&[unsent, Filter::OFF, Filter { top_k: 3, ..Filter::OFF }, Filter::OFF]);
        let want = sent.clone().run(&specdec::Backend::cpu()).expect("the CPU call");
        let got = run_sharded(&cuda, &b, &halves);
        slot_1_flagged(&b, got, &want, INVALID_FILTER, &format!("{unsent:?}"));
    }
}

/// Every rank's rows of `b`'s slot 1 got token `-1` and `flag`, and its
/// other rows are `want`'s.
fn slot_1_flagged(b: &Batch, got: Vec<RankOut>, want: &Sampled, flag: u32, ctx: &str) {
    for (r, (result, _)) in got.into_iter().enumerate() {
        let got = result.unwrap_or_else(|e| panic!("{ctx}: rank {r}: {e}"));
        for row in 0..b.rows {
            let (token, status) = (got.tokens[row], got.row_status[row]);
            if b.slots[row] == 1 {
                assert_eq!((token, status & flag), (-1, flag), "{ctx}: rank {r} row {row}");
            } else {
                assert_eq!((token, status), (want.tokens[row], want.row_status[row]), "{ctx}: rank {r} row {row}");
            }
        }
    }
}

/// Ranks whose log-probability asks take different numbers of exchanges
/// (none, the sums' round alone, the sums' and a top-n's) fail with
/// `Error::Exchange` on every rank, filtered or not, rather than some
/// waiting forever for a round the others never run: their rows' messages
/// differ in length (`shard::last_round_bytes`).
#[test]
fn ranks_whose_asks_take_different_rounds_fail_alike() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(49);
    let processed = Asked { processed: true, raw: false, top: None };
    let top = Asked { processed: false, raw: false, top: Some((5, Distribution::Raw)) };
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    for filtered in [false, true] {
        let mut b = gumbel_rows(64, 10, DType::F32, &mut rng);
        if filtered {
            tie_and_filter(&mut b, &mut rng);
        }
        for asks in [[None, Some(processed)], [Some(processed), Some(top)], [Some(top), None]] {
            let got = in_device_ranks(&cuda, 2, |r, rank, exchange| {
                let mut ws = rank.sharded_workspace(b.rows, 2).expect("a workspace");
                rank_batch(&b, ids(&halves, r)).run_device_logprobs_with(rank, asks[r], |call, out| {
                    rank.sharded_gumbel_sample(&mut ws, halves[r], exchange, call, out)
                })
            });
            for (r, got) in got.iter().enumerate() {
                assert!(matches!(got, Err(Error::Exchange(_))), "filtered {filtered}, {asks:?}: rank {r}: {got:?}");
            }
        }
    }
}

/// Ranks that disagree in device memory flag the rows concerned, on every
/// rank; what a rank can see on the host is its own typed error.
#[test]
fn ranks_that_disagree_flag_their_rows() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(44);
    let b = gumbel_rows(64, 10, DType::F32, &mut rng);
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    let flagged_all =
        |got: &Sampled| got.tokens.iter().all(|&t| t == -1) && got.row_status.iter().all(|s| s & INVALID_SHARD != 0);

    // A seed that differs between ranks: the rows of that slot, and only they.
    let got = run_ranks(
        &cuda,
        &b,
        &halves,
        &[0..32, 32..64],
        |r, batch| {
            let mut mine = batch.clone();
            mine.seed[1] += r as u64;
            mine
        },
        |_| 2,
    );
    let want = b.clone().run(&specdec::Backend::cpu()).expect("the CPU call");
    slot_1_flagged(&b, got, &want, INVALID_SHARD, "a seed");

    // A rank that fails its checks (an offset off a noise word) says why; the others flag every row.
    let bad = [Shard { offset: 0, vocab: 64 }, Shard { offset: 30, vocab: 64 }];
    let got = run_ranks(&cuda, &b, &bad, &[0..30, 30..64], |_, batch| batch.clone(), |_| 2);
    assert!(matches!(&got[1].0, Err(Error::InvalidShard { .. })), "{:?}", got[1].0);
    assert!(flagged_all(got[0].0.as_ref().expect("rank 0 returns")), "{:?}", got[0].0);

    // A slot's filter that differs between ranks: the rows of that slot, and only they.
    let filtered = |top_k: u32| {
        FilterTable::per_slot(&[
            Filter { top_k: 5, ..Filter::OFF },
            Filter { top_k, ..Filter::OFF },
            Filter::OFF,
            Filter::OFF,
        ])
    };
    let mut b_filtered = b.clone();
    b_filtered.filters = filtered(5);
    let want = b_filtered.clone().run(&specdec::Backend::cpu()).expect("the CPU call");
    let got = run_ranks(
        &cuda,
        &b_filtered,
        &halves,
        &[0..32, 32..64],
        |r, batch| {
            let mut mine = batch.clone();
            mine.filters = filtered(5 + r as u32);
            mine
        },
        |_| 2,
    );
    slot_1_flagged(&b, got, &want, INVALID_SHARD, "a filter");

    // Filter arrays on one rank only (a call of another number of
    // exchanges): the exchange fails on every rank, and none waits.
    let got = run_ranks(
        &cuda,
        &b,
        &halves,
        &[0..32, 32..64],
        |r, batch| {
            let mut mine = batch.clone();
            if r == 0 {
                mine.filters = FilterTable::uniform(Filter { top_k: 5, ..Filter::OFF }, 4);
            }
            mine
        },
        |_| 2,
    );
    for (r, (result, _)) in got.iter().enumerate() {
        assert!(matches!(result, Err(Error::Exchange(_))), "rank {r}: {result:?}");
    }

    // Shards that leave ids to no rank, or overlap: every row flagged on every rank.
    for (shards, ranges) in [
        ([Shard { offset: 0, vocab: 64 }, Shard { offset: 36, vocab: 64 }], [0..32, 36..64]),
        ([Shard { offset: 0, vocab: 64 }, Shard { offset: 28, vocab: 64 }], [0..32, 28..64]),
    ] {
        for (r, (result, _)) in run_ranks(&cuda, &b, &shards, &ranges, |_, b| b.clone(), |_| 2).into_iter().enumerate()
        {
            let got = result.unwrap_or_else(|e| panic!("rank {r}: {e}"));
            assert!(flagged_all(&got), "{shards:?} rank {r}: {got:?}");
        }
    }

    // A rank whose workspace holds no messages for two ranks sends none: an error on every rank, and none waits.
    let got = run_ranks(&cuda, &b, &halves, &[0..32, 32..64], |_, b| b.clone(), |r| if r == 1 { 1 } else { 2 });
    assert!(matches!(&got[1].0, Err(Error::WorkspaceRanks { needed: 2, capacity: 1 })), "{:?}", got[1].0);
    assert!(matches!(&got[0].0, Err(Error::Exchange(_))), "{:?}", got[0].0);

    // NaN on one rank's ids only: flagged as the unsharded call flags it.
    let mut nan = b.clone();
    nan.logits.set_f32(3 * 64 + 40, f32::NAN);
    let want = nan.clone().run(&specdec::Backend::cpu()).expect("the CPU call");
    assert_ne!(want.row_status[3] & NAN_LOGITS, 0);
    for (r, (result, _)) in run_sharded(&cuda, &nan, &halves).into_iter().enumerate() {
        assert_eq!(result.unwrap_or_else(|e| panic!("rank {r}: {e}")), want, "rank {r}");
    }
}

/// SPEC §6's chi-square rule on draws of one row at `P = 2` (the ranks'
/// tokens, which are also the unsharded call's): 50,000 draws of a peaked,
/// flat and masked row of 999 ids, at two (dtype, T).
#[test]
fn sharded_draws_pass_the_chi_square_rule() {
    let cuda = specdec_suite::cuda_device();
    let row = mixed_logits(999, 0xF17);
    let shards = [Shard { offset: 0, vocab: 999 }, Shard { offset: 500, vocab: 999 }];
    for (i, (dtype, t)) in [(DType::F32, 1.0f32), (DType::BF16, 0.6)].into_iter().enumerate() {
        let b = Batch::broadcast(&row, dtype, 50_000, t, 0x5EED_5A4D, (i as u64) << 40);
        let ctx = format!("{dtype:?} T {t}");
        let want = b.clone().run_device(&cuda, &mut cuda.workspace(b.rows).expect("a workspace")).expect("unsharded");
        for (r, (result, _)) in run_sharded(&cuda, &b, &shards).into_iter().enumerate() {
            assert_eq!(result.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}")), want, "{ctx} rank {r}");
        }
        // The probabilities the backends sample from: the row as its dtype
        // rounds it, scaled by `1/T` rounded to f32.
        let probs = softmax(&b.row(0), 1.0 / f64::from(1.0 / t));
        chi_square(&histogram(&want.tokens, row.len()), &probs).assert_pass(&ctx);
    }
}
