//! Vocab-parallel `gumbel_sample` on the CPU backend (`docs/VOCAB_PARALLEL.md`):
//! `P` ranks, one thread each with an in-process exchange, each holding a
//! shard of every row's ids, return exactly the unsharded call's tokens and
//! row statuses, and together write exactly its draft logits.

use specdec::filter::Filter;
use specdec::shard::{Exchange, Shard};
use specdec::{Cpu, DType, Error, GumbelOutput, GumbelSample, Host, Logits, SamplingParams};
use specdec_suite::batch::{ColumnSpec, DraftLogitsSpec, Values};
use specdec_suite::inputs::Rng;
use specdec_suite::sharding::{ASKS, columns, drafting_into, gumbel_rows, ids, in_ranks, shards};
use specdec_suite::verify::{Asked, LogprobBits, LogprobBuffers};
use specdec_suite::{Batch, FilterTable};

/// What every rank returned: tokens and statuses, and its draft logits.
type RankOut = (specdec::Result<(Vec<i64>, Vec<u32>)>, Option<Values>);

/// Runs `batch` sharded over `shards`, one thread a rank; each rank's draft
/// logits are its own `[slots, k, ids]` buffer.
fn run_sharded(batch: &Batch, shards: &[Shard]) -> Vec<RankOut> {
    let ranges: Vec<_> = (0..shards.len()).map(|r| ids(shards, r)).collect();
    run_sharded_with(batch, shards, &ranges, |_, b| b.clone())
}

/// [`run_sharded`], rank `r` passing ids `ranges[r]` of `rank_batch(r, batch)`
/// (to make ranks leave ids out, or disagree).
fn run_sharded_with(
    batch: &Batch,
    shards: &[Shard],
    ranges: &[std::ops::Range<usize>],
    rank_batch: impl Fn(usize, &Batch) -> Batch + Sync,
) -> Vec<RankOut> {
    in_ranks(shards.len(), |r, exchange| run_rank(&rank_batch(r, batch), shards[r], ranges[r].clone(), exchange))
}

fn run_rank(batch: &Batch, shard: Shard, range: std::ops::Range<usize>, exchange: &mut dyn Exchange<Host>) -> RankOut {
    let (result, draft) =
        run_call(batch, range, None, |call, out| Cpu.sharded_gumbel_sample(shard, exchange, call, out));
    (result.map(|(tokens, status, _)| (tokens, status)), draft)
}

/// Tokens, statuses and `asked` log-probabilities of a call on ids `range`
/// of `batch` through `call_fn`, and its draft logits.
type CallOut = (specdec::Result<(Vec<i64>, Vec<u32>, LogprobBits)>, Option<Values>);

fn run_call(
    batch: &Batch,
    range: std::ops::Range<usize>,
    asked: Option<Asked>,
    call_fn: impl FnOnce(&GumbelSample<'_, Host>, &mut GumbelOutput<'_, Host>) -> specdec::Result<()>,
) -> CallOut {
    let width = range.len();
    let logits = columns(&batch.logits, batch.rows, batch.row_stride, range.clone());
    let mut draft = batch.draft_logits.as_ref().map(|d| {
        let mut mine = DraftLogitsSpec::dense(d.data.dtype(), d.slots, d.k, width, d.column.clone());
        mine.data = columns(&d.data, d.slots * d.k, d.width, range.clone());
        mine
    });
    let params = SamplingParams::new(&batch.temperature, &batch.seed).with_filters(batch.filters.view());
    let call = GumbelSample {
        drafting: batch.drafting,
        ..GumbelSample::new(
            Logits { data: logits.view(), rows: batch.rows, vocab: width, row_stride: width },
            &batch.slots,
            &batch.pos,
            params,
        )
    };
    let (mut tokens, mut status) = (vec![i64::MIN; batch.rows], vec![u32::MAX; batch.rows]);
    let mut logprobs = LogprobBuffers::new(batch.rows, asked);
    let result = {
        let mut out = GumbelOutput::new(&mut tokens).with_row_status(&mut status).with_logprobs(logprobs.outputs());
        if let Some(d) = &mut draft {
            let (data, column) = d.draft_logits_mut();
            out = out.with_draft_logits(data, column);
        }
        call_fn(&call, &mut out)
    };
    (result.map(|()| (tokens, status, logprobs.bits())), draft.map(|d| d.data))
}

fn check_equal(batch: &Batch, shards: &[Shard], ctx: &str) {
    let want = batch.clone().run(&specdec::Backend::cpu()).unwrap();
    let got = run_sharded(batch, shards);
    for (r, (result, draft)) in got.iter().enumerate() {
        let (tokens, status) = result.as_ref().unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}"));
        assert_eq!(tokens, &want.tokens, "{ctx} rank {r}: tokens");
        assert_eq!(status, &want.row_status, "{ctx} rank {r}: row status");
        if let (Some(mine), Some(whole)) = (draft, &batch.draft_logits) {
            let range = ids(shards, r);
            let expected = columns(&unsharded_draft(batch), whole.slots * whole.k, whole.width, range);
            assert_eq!(mine.len(), expected.len(), "{ctx} rank {r}: draft logits' length");
            let same = (0..mine.len()).all(|i| mine.bits(i) == expected.bits(i));
            assert!(same, "{ctx} rank {r}: draft logits");
        }
    }
}

/// The draft logits the unsharded call writes.
fn unsharded_draft(batch: &Batch) -> Values {
    let mut b = batch.clone();
    b.run(&specdec::Backend::cpu()).unwrap();
    b.draft_logits.expect("the batch has draft logits").data
}

#[test]
fn sharded_tokens_are_the_unsharded_ones() {
    let mut rng = Rng::new(31);
    for dtype in DType::ALL {
        for (vocab, rows) in [(37, 21), (1000, 14), (4097, 7), (151_936, 2)] {
            for ranks in [1, 2, 3, 8] {
                for drafting in [false, true] {
                    let mut b = gumbel_rows(vocab, rows, dtype, &mut rng);
                    b.drafting = drafting;
                    let shards = shards(vocab, ranks, &mut rng);
                    check_equal(&b, &shards, &format!("{dtype:?} V {vocab} P {ranks} drafting {drafting}"));
                }
            }
        }
    }
}

#[test]
fn sharded_draft_logits_are_the_unsharded_ones() {
    let mut rng = Rng::new(32);
    // f32 logits into bf16 draft logits round them: the rows are sampled as stored.
    for (logits, draft) in [(DType::F32, DType::F32), (DType::F32, DType::BF16), (DType::BF16, DType::F16)] {
        for ranks in [2, 3, 8] {
            let (vocab, rows) = (1001, 12);
            let b = drafting_into(gumbel_rows(vocab, rows, logits, &mut rng), draft);
            let shards = shards(vocab, ranks, &mut rng);
            check_equal(&b, &shards, &format!("{logits:?} into {draft:?} P {ranks}"));
        }
    }
}

/// Filters with a top-k (top-p and min-p on top of it too), each slot its
/// own, on rows with ties at the `k`-th value, NaN and `±inf`, sampled and
/// drafting (into draft logits that round them: the kept set is the stored
/// rows'), over 1, 2, 3 and 8 uneven shards: the unsharded call's tokens.
#[test]
fn sharded_filtered_tokens_are_the_unsharded_ones() {
    let mut rng = Rng::new(34);
    let filters = [
        Filter { top_k: 1, ..Filter::OFF },
        Filter { top_k: 5, ..Filter::OFF },
        Filter { top_k: 40, top_p: 0.8, ..Filter::OFF },
        Filter { top_k: 300, min_p: 0.3, top_p: 0.95 },
        // Top-p near 1 over a small top-k: the k-th value's whole tie group
        // (on every rank) is in the masses that decide τ.
        Filter { top_k: 6, top_p: 0.97, ..Filter::OFF },
        // Top-k V − 1: a kept set too large for a rank to list its ids.
        Filter { top_k: u32::MAX, ..Filter::OFF },
        Filter::OFF,
    ];
    for (logits, draft) in
        [(DType::F32, None), (DType::BF16, None), (DType::F32, Some(DType::BF16)), (DType::F16, Some(DType::F32))]
    {
        for (vocab, rows) in [(37, 21), (1000, 14), (4097, 7), (20_000, 5)] {
            for ranks in [1, 2, 3, 8] {
                let mut b = gumbel_rows(vocab, rows, logits, &mut rng);
                // Half the rows' values rounded to multiples of 1/2: ties that straddle the k-th value.
                for r in (0..rows).filter(|r| r % 2 == 0) {
                    for i in r * vocab..(r + 1) * vocab {
                        b.logits.set_f32(i, (b.logits.get(i) * 2.0).round() / 2.0);
                    }
                }
                let slot_filters: Vec<Filter> = (0..4)
                    .map(|_| rng.pick(&filters))
                    .map(|f| Filter { top_k: f.top_k.min(vocab as u32 - 1), ..f })
                    .collect();
                b.filters = FilterTable::per_slot(&slot_filters);
                if let Some(draft) = draft {
                    b.drafting = true;
                    let columns = (0..rows as i32).map(|r| r % 3).collect();
                    b.draft_logits = Some(DraftLogitsSpec::dense(draft, 4, 3, vocab, ColumnSpec::PerRow(columns)));
                    b.slots = (0..rows).map(|r| if r % 5 == 4 { -1 } else { (r / 3 % 4) as i32 }).collect();
                }
                let shards = shards(vocab, ranks, &mut rng);
                check_equal(
                    &b,
                    &shards,
                    &format!("filtered {logits:?} into {draft:?}, V {vocab}, P {ranks}, {slot_filters:?}"),
                );
            }
        }
    }
}

#[test]
fn a_rank_that_fails_its_checks_or_a_group_that_does_not_fit_fails_every_rank() {
    let mut rng = Rng::new(33);
    let b = gumbel_rows(64, 5, DType::F32, &mut rng);
    // Rank 1 starts at id 30, not a multiple of 4: it reports why, the others that it failed.
    let shards = [Shard { offset: 0, vocab: 64 }, Shard { offset: 30, vocab: 64 }];
    let got = run_sharded(&b, &shards);
    assert!(matches!(&got[1].0, Err(Error::InvalidShard { .. })), "{:?}", got[1].0);
    assert!(matches!(&got[0].0, Err(Error::PeerFailed { rank: 1 })), "{:?}", got[0].0);
    // Greedy rows ignore filters, those without a top-k too.
    let mut greedy = b.clone();
    greedy.temperature.iter_mut().for_each(|t| *t = 0.0);
    greedy.filters = FilterTable::uniform(Filter { top_p: 0.9, ..Filter::OFF }, 4);
    check_equal(&greedy, &[Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }], "greedy with top-p");
    // Top-p or min-p without a top-k are not sharded: every rank says so.
    for filter in [Filter { top_p: 0.9, ..Filter::OFF }, Filter { min_p: 0.2, top_k: 64, ..Filter::OFF }] {
        let mut filtered = b.clone();
        filtered.filters = FilterTable::uniform(filter, 4);
        for (result, _) in run_sharded(&filtered, &[Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }]) {
            assert!(matches!(result, Err(Error::NotSharded { .. })), "{filter:?}: {result:?}");
        }
    }

    // Shards that leave ids to no rank, or calls that differ between ranks: the same error on every rank.
    let gap = [Shard { offset: 0, vocab: 64 }, Shard { offset: 36, vocab: 64 }];
    let got = run_sharded_with(&b, &gap, &[0..32, 36..64], |_, batch| batch.clone());
    assert!(got.iter().all(|(r, _)| matches!(r, Err(Error::InvalidShard { .. }))), "{:?}", got[0].0);
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    let got = run_sharded_with(&b, &halves, &[0..32, 32..64], |rank, batch| {
        let mut mine = batch.clone();
        mine.seed[1] += rank as u64;
        mine
    });
    assert!(got.iter().all(|(r, _)| matches!(r, Err(Error::InvalidShard { .. }))), "{:?}", got[0].0);
    // A rank whose logits and tokens hold a row fewer than its positions: its
    // checks refuse the call, and its message still has a row for every
    // position (the others' length), so the others learn that it failed
    // rather than that the exchange did.
    let got = run_sharded_with(&b, &halves, &[0..32, 32..64], |rank, batch| {
        let mut mine = batch.clone();
        if rank == 1 {
            mine.rows -= 1;
        }
        mine
    });
    assert!(
        matches!(&got[1].0, Err(e) if !matches!(e, Error::PeerFailed { .. } | Error::Exchange(_))),
        "{:?}",
        got[1].0
    );
    assert!(matches!(&got[0].0, Err(Error::PeerFailed { rank: 1 })), "{:?}", got[0].0);
}

/// A sharded call's log-probabilities are the unsharded call's, bit for
/// bit: rows of every kind, filters with a top-k on some slots, sampled and
/// drafting into draft logits (that round the values: log-probabilities of
/// the stored rows), over 1, 2, 3 and 8 uneven shards.
#[test]
fn sharded_logprobs_are_the_unsharded_ones() {
    let mut rng = Rng::new(35);
    let (mut finite, mut ranked) = (0, 0);
    let kinds =
        [(DType::F32, None), (DType::BF16, None), (DType::F32, Some(DType::BF16)), (DType::F16, Some(DType::F32))];
    for (c, (logits, draft)) in kinds.into_iter().enumerate() {
        for (vocab, rows) in [(37, 21), (1000, 14), (4097, 7), (151_936, 2)] {
            for ranks in [1, 2, 3, 8] {
                let mut b = gumbel_rows(vocab, rows, logits, &mut rng);
                if rng.below(2) == 0 {
                    let f = |k: u32| Filter { top_k: k.min(vocab as u32 - 1), top_p: 0.9, ..Filter::OFF };
                    b.filters = FilterTable::per_slot(&[Filter::OFF, f(3), Filter::OFF, f(40)]);
                }
                if let Some(draft) = draft {
                    // Each row its own draft row (rows that store over one another's are REFERENCE §9's exception).
                    b.drafting = true;
                    let columns = (0..rows as i32).collect();
                    b.draft_logits = Some(DraftLogitsSpec::dense(draft, 4, rows, vocab, ColumnSpec::PerRow(columns)));
                }
                let asked = ASKS[(c + ranks + vocab) % ASKS.len()];
                let ctx = format!("{asked:?}, {logits:?} into {draft:?}, V {vocab}, P {ranks}, {:?}", b.filters);
                let (want, _) = run_call(&b, 0..vocab, Some(asked), |call, out| Cpu.gumbel_sample(call, out));
                let want = want.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let shards = shards(vocab, ranks, &mut rng);
                let got = in_ranks(ranks, |r, exchange| {
                    run_call(&b, ids(&shards, r), Some(asked), |call, out| {
                        Cpu.sharded_gumbel_sample(shards[r], exchange, call, out)
                    })
                });
                for (r, (got, _)) in got.into_iter().enumerate() {
                    assert_eq!(got.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}")), want, "{ctx} rank {r}");
                }
                let lp = &want.2;
                finite += lp.processed.iter().chain(&lp.raw).filter(|&&b| f32::from_bits(b).is_finite()).count();
                ranked += lp.ranks.iter().filter(|&&rank| rank > 1).count();
            }
        }
    }
    // Not a comparison of NaNs: many finite values, many sampled tokens below the argmax.
    assert!(finite >= 300 && ranked >= 50, "finite log-probabilities {finite}, ranks above 1 {ranked}");
}

/// Without an NCCL library, `shard::Nccl` is a typed error, not a panic
/// (CI; with the `gpu` feature candle links NCCL: `tests/nccl.rs` runs it).
#[cfg(not(feature = "gpu"))]
#[test]
fn nccl_without_a_library_is_an_error() {
    let id = specdec::shard::Nccl::unique_id();
    // SAFETY: only tries to open the library.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        let note = "note: an NCCL library loads here; its absence is tested where it does not (CI)";
        // Straight to stderr: the harness captures only print!/eprint!.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{note}\n").as_bytes());
        return;
    }
    assert!(matches!(id, Err(specdec::Error::Exchange(_))), "{id:?}");
}
