//! Vocab-parallel `gumbel_sample` on the GPU (`docs/VOCAB_PARALLEL.md` §6
//! step 5), with the `gpu` feature: `P` ranks on device 0, a stream and a
//! thread each, meeting through `shard::InProcessCuda`, each holding a shard
//! of every row's ids, return exactly the unsharded GPU call's tokens and
//! row statuses and together write exactly its draft logits, with filters
//! with a top-k too; ranks that disagree flag the rows concerned on every
//! rank.
#![cfg(feature = "gpu")]

use specdec::filter::Filter;
use specdec::shard::{MAX_TOP_K, Shard};
use specdec::status::{INVALID_FILTER, INVALID_SHARD, NAN_LOGITS};
use specdec::{Cuda, DType, Error};
use specdec_suite::batch::{DraftLogitsSpec, Sampled};
use specdec_suite::inputs::{Rng, histogram, mixed_logits};
use specdec_suite::sharding::{
    columns, drafting_into, gumbel_rows, ids, in_device_ranks, random_filter, rank_batch, shards,
};
use specdec_suite::stats::softmax;
use specdec_suite::{Batch, FilterTable, chi_square};

/// What a rank returned: its outputs, and its draft logits.
type RankOut = (specdec::Result<Sampled>, Option<DraftLogitsSpec>);

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
    in_device_ranks(cuda, shards.len(), |r, rank, exchange| {
        let mut ws = rank.sharded_workspace(batch.rows, workspace_ranks(r)).expect("a workspace");
        let mut mine = rank_batch(&rank_of(r, batch), ranges[r].clone());
        let result =
            mine.run_device_with(rank, |call, out| rank.sharded_gumbel_sample(&mut ws, shards[r], exchange, call, out));
        (result, mine.draft_logits)
    })
}

fn run_sharded(cuda: &Cuda, batch: &Batch, shards: &[Shard]) -> Vec<RankOut> {
    let ranges: Vec<_> = (0..shards.len()).map(|r| ids(shards, r)).collect();
    run_ranks(cuda, batch, shards, &ranges, |_, b| b.clone(), |_| shards.len())
}

/// Every rank's outputs are the unsharded GPU call's (which are the CPU's),
/// and its draft logits that call's columns of them.
fn check_equal(cuda: &Cuda, batch: &Batch, shards: &[Shard], ctx: &str) {
    let mut whole = batch.clone();
    let mut ws = cuda.workspace(batch.rows).expect("a workspace");
    let want = whole.run_device(cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: unsharded: {e}"));
    let cpu = batch.clone().run(&specdec::Backend::cpu()).expect("the CPU call");
    assert_eq!(want, cpu, "{ctx}: the unsharded GPU call is the CPU's");
    for (r, (result, draft)) in run_sharded(cuda, batch, shards).into_iter().enumerate() {
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
                    check_equal(&cuda, &b, &shards, &format!("{dtype:?} V {vocab} P {ranks} drafting {drafting}"));
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
        check_equal(&cuda, &b, &shards, &format!("V {vocab} rows {rows}"));
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
            check_equal(&cuda, &b, &shards, &format!("{logits:?} into {draft:?} P {ranks}"));
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
                for row in (0..rows).filter(|_| rng.below(2) == 0) {
                    for i in row * vocab..(row + 1) * vocab {
                        b.logits.set_f32(i, (b.logits.get(i) * 2.0).round() / 2.0);
                    }
                }
                let filters: Vec<Filter> = (0..4).map(|_| random_filter(&mut rng, vocab, MAX_TOP_K)).collect();
                b.filters = FilterTable::per_slot(&filters);
                if let Some(d) = draft {
                    b = drafting_into(b, d);
                }
                let shards = shards(vocab, ranks, &mut rng);
                let ctx = format!("{logits:?} into {draft:?}, V {vocab}, P {ranks}, {filters:?}");
                check_equal(&cuda, &b, &shards, &ctx);
            }
        }
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
