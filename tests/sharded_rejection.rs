//! Vocab-parallel `rejection_sample` on the CPU backend (REFERENCE §9,
//! `docs/VOCAB_PARALLEL.md`): `P` ranks, one thread each with an in-process
//! exchange, each holding a shard of every target row's ids and of every
//! draft row's, return exactly the unsharded call's tokens, counts and row
//! statuses, with filters that have a top-k too, and its log-probabilities;
//! and a sharded call's emitted tokens follow the target, by chi-square at
//! every position.

use specdec::filter::Filter;
use specdec::shard::Shard;
use specdec::{Backend, DType, Distribution, Error, Verification};
use specdec_suite::drafting::{
    Drafted, FixedPositions, RandomSpec, check_filtered_positions, emitted_at, perturbed, probs, random_verify,
    zipf_logits,
};
use specdec_suite::filters::filtered_probs;
use specdec_suite::inputs::{Rng, histogram};
use specdec_suite::sharding::{
    ASKS, Coverage, VERIFY_DTYPES, add_empty_rows, add_specials, random_filter, run_sharded_logprobs,
    run_sharded_verify, shards, tied_verify,
};
use specdec_suite::verify::Asked;
use specdec_suite::{FilterTable, Verified, Verify, chi_square};

/// Every rank's outputs equal the unsharded call's; returns those.
fn check_equal(v: &Verify, shards: &[Shard], ctx: &str) -> Verified {
    let want = v.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    for (r, got) in run_sharded_verify(v, shards, |_, mine| mine).into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}"));
        assert_eq!(got, want, "{ctx} rank {r}");
    }
    want
}

/// Random ragged batches (greedy, sampling and padding requests, placeholders,
/// `-inf`, `+inf` and NaN logits, drafts that are accepted and rejected) over 1, 2,
/// 3 and 8 uneven shards, for every target dtype, one-hot and draft-logits
/// verification, the token rule and block verification, `V` up to 151,936.
#[test]
fn sharded_verification_is_the_unsharded_one() {
    let mut rng = Rng::new(0x31_5A);
    let mut coverage = Coverage::default();
    for (target, draft) in VERIFY_DTYPES {
        for (vocab, requests) in [(37, 24), (1000, 16), (4097, 8), (151_936, 3)] {
            for ranks in [1, 2, 3, 8] {
                for verification in [Verification::Token, Verification::Block] {
                    let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, 4, target, draft));
                    v.verification = verification;
                    add_specials(&mut v, &mut rng);
                    let shards = shards(vocab, ranks, &mut rng);
                    let ctx = format!("{verification:?}, {target:?} target, {draft:?} draft, V {vocab}, P {ranks}");
                    let out = check_equal(&v, &shards, &ctx);
                    coverage.add(&v, &out);
                }
            }
        }
    }
    assert!(coverage.stopped >= 50 && coverage.bonus >= 50, "stopped {}, bonus {}", coverage.stopped, coverage.bonus);
}

/// Filters with a top-k (top-p and min-p on top of it too), on the target
/// and on the draft logits, each slot its own: random ragged batches with
/// ties at the `k`-th value, `-inf`, `+inf` and NaN, over 1, 2, 3 and 8
/// uneven shards give the unsharded call's outputs.
#[test]
fn sharded_filtered_verification_is_the_unsharded_one() {
    let mut rng = Rng::new(0x31_5D);
    let mut coverage = Coverage::default();
    let kinds =
        [(DType::F32, None), (DType::F32, Some(DType::F32)), (DType::BF16, Some(DType::BF16)), (DType::F16, None)];
    for (target, draft) in kinds {
        // V = 20,000 with a top-k of V − 1: kept sets too large for a rank to list its ids.
        for (vocab, requests) in [(37, 24), (1000, 16), (4097, 8), (20_000, 3)] {
            for ranks in [1, 2, 3, 8] {
                for verification in [Verification::Token, Verification::Block] {
                    let mut v = tied_verify(&mut rng, RandomSpec::new(vocab, requests, 4, target, draft), verification);
                    let filters: Vec<Filter> =
                        (0..v.temperature.len()).map(|_| random_filter(&mut rng, vocab, u32::MAX)).collect();
                    v.filters = FilterTable::per_slot(&filters);
                    if draft.is_some() {
                        // The drafter's filters: the target's, or others.
                        let drafted: Vec<Filter> = filters
                            .iter()
                            .map(|&f| if rng.below(2) == 0 { f } else { random_filter(&mut rng, vocab, u32::MAX) })
                            .collect();
                        v.draft_filters = FilterTable::per_slot(&drafted);
                    }
                    let shards = shards(vocab, ranks, &mut rng);
                    let ctx =
                        format!("filtered {verification:?}, {target:?} target, {draft:?} draft, V {vocab}, P {ranks}");
                    let out = check_equal(&v, &shards, &ctx);
                    coverage.add(&v, &out);
                }
            }
        }
    }
    assert!(coverage.stopped >= 50 && coverage.bonus >= 50, "stopped {}, bonus {}", coverage.stopped, coverage.bonus);
}

/// Synthetic acceptance decides from the acceptance words alone; the token
/// after it still needs the rows (the residual at a rejection).
#[test]
fn sharded_synthetic_acceptance_is_the_unsharded_one() {
    static RATES: [f32; 4] = [0.9, 0.6, 0.3, 1.0];
    let mut rng = Rng::new(0x31_5B);
    for draft in [None, Some(DType::BF16)] {
        for ranks in [2, 3] {
            let mut v = random_verify(&mut rng, RandomSpec::new(999, 20, 4, DType::F32, draft));
            v.verification = Verification::Synthetic(&RATES);
            let shards = shards(999, ranks, &mut rng);
            check_equal(&v, &shards, &format!("synthetic, {draft:?} draft, P {ranks}"));
        }
    }
}

/// What the sharded call refuses, and calls that do not fit together: the
/// same error on every rank (or the failing rank's own, and `PeerFailed`).
#[test]
fn sharded_calls_that_cannot_run_fail_on_every_rank() {
    let mut rng = Rng::new(0x31_5C);
    let v = random_verify(&mut rng, RandomSpec::new(64, 6, 3, DType::F32, Some(DType::F32)));
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    let every = |v: &Verify, f: fn(&Error) -> bool| {
        for (r, got) in run_sharded_verify(v, &halves, |_, mine| mine).into_iter().enumerate() {
            assert!(got.as_ref().is_err_and(f), "rank {r}: {got:?}");
        }
    };
    // Top-p or min-p without a top-k, on the target or the draft: kept sets of any size.
    for (target, drafted) in
        [(Filter { top_p: 0.9, ..Filter::OFF }, Filter::OFF), (Filter::OFF, Filter { min_p: 0.1, ..Filter::OFF })]
    {
        let mut filtered = v.clone();
        filtered.filters = FilterTable::of_slots(target, v.temperature.len());
        filtered.draft_filters = FilterTable::of_slots(drafted, v.temperature.len());
        every(&filtered, |e| matches!(e, Error::NotSharded { .. }));
    }
    // Rank 1's filters differ: InvalidShard everywhere; where its top-k
    // differs, so do the lengths of its lists, and the exchange fails on
    // every rank (the in-process one checks lengths).
    let mut filtered = v.clone();
    filtered.filters = FilterTable::uniform(Filter { top_k: 3, top_p: 0.9, ..Filter::OFF }, v.temperature.len());
    check_equal(&filtered, &halves, "top-k 3, top-p 0.9");
    let got = run_sharded_verify(&filtered, &halves, |r, mut mine| {
        mine.filters.top_p.as_mut().expect("a top-p array").iter_mut().for_each(|p| *p -= 0.1 * r as f32);
        mine
    });
    assert!(got.iter().all(|g| matches!(g, Err(Error::InvalidShard { .. }))), "{got:?}");
    let got = run_sharded_verify(&filtered, &halves, |r, mut mine| {
        mine.filters.top_k.as_mut().expect("a top-k array").iter_mut().for_each(|k| *k += r as i32);
        mine
    });
    assert!(got.iter().all(|g| matches!(g, Err(Error::Exchange(_)))), "{got:?}");
    // A rank whose row length is out of range sizes no lists: its own error, and the exchange fails for the other.
    let bad = [Shard { offset: 0, vocab: usize::MAX }, Shard { offset: 32, vocab: 64 }];
    let got = run_sharded_verify(&filtered, &bad, |_, mine| mine);
    assert!(matches!(&got[0], Err(Error::InvalidShard { .. })), "{:?}", got[0]);
    assert!(matches!(&got[1], Err(Error::Exchange(_))), "{:?}", got[1]);
    // Greedy requests ignore filters, those without a top-k too: the unsharded call's outputs.
    let mut greedy = v.clone();
    greedy.temperature.iter_mut().for_each(|t| *t = 0.0);
    greedy.filters = FilterTable::uniform(Filter { top_p: 0.5, min_p: 0.2, ..Filter::OFF }, v.temperature.len());
    check_equal(&greedy, &halves, "greedy requests with top-p and min-p");
    // Arrays whose values keep every id are no filter: the unsharded call's outputs.
    let mut off = v.clone();
    off.filters = FilterTable::uniform(Filter { top_k: 64, ..Filter::OFF }, v.temperature.len());
    off.draft_filters = FilterTable::uniform(Filter::OFF, v.temperature.len());
    check_equal(&off, &halves, "filter arrays that keep every id");

    // A draft id is checked against the whole row: 40 is past rank 0's ids
    // but valid; 64 is past the row.
    let mut far = v.clone();
    let with_draft = (0..far.requests()).find(|&r| far.offsets[r + 1] - far.offsets[r] >= 2);
    let row = far.offsets[with_draft.expect("a request with a draft")] as usize;
    far.drafts[row] = 40;
    check_equal(&far, &halves, "a draft on rank 1");
    far.drafts[row] = 64;
    every(&far, |e| matches!(e, Error::InvalidDraft { token: 64, vocab: 64, .. }));

    // Rank 1 disagrees on a seed: InvalidShard everywhere.
    let got = run_sharded_verify(&v, &halves, |r, mut mine| {
        mine.seed[0] += r as u64;
        mine
    });
    assert!(got.iter().all(|g| matches!(g, Err(Error::InvalidShard { .. }))), "{got:?}");
    // Rank 1 claims more rows than its buffers hold: its own error, and
    // PeerFailed on rank 0 (its message is no longer, so the exchange works).
    let got = run_sharded_verify(&v, &halves, |r, mut mine| {
        mine.rows += 1000 * r;
        mine
    });
    assert!(matches!(&got[0], Err(Error::PeerFailed { rank: 1 })), "{:?}", got[0]);
    assert!(got[1].is_err() && !matches!(&got[1], Err(Error::Exchange(_))), "{:?}", got[1]);
    // Rank 1 starts off a noise word: its own error, and PeerFailed on rank 0.
    let odd = [Shard { offset: 0, vocab: 64 }, Shard { offset: 30, vocab: 64 }];
    let got = run_sharded_verify(&v, &odd, |_, mine| mine);
    assert!(matches!(&got[0], Err(Error::PeerFailed { rank: 1 })), "{:?}", got[0]);
    assert!(matches!(&got[1], Err(Error::InvalidShard { .. })), "{:?}", got[1]);
}

/// The chi-square suite's rule at `P = 2` (uneven shards): requests verify
/// drafts sampled by the draft model at the verification's keys, and the
/// tokens emitted at every position fit the target's softmax; the sharded
/// outputs are also the unsharded ones.
#[test]
fn sharded_tokens_follow_the_target() {
    const VOCAB: usize = 64;
    let base = zipf_logits(VOCAB, 1.0, 16, 0x5AD);
    let halves = [Shard { offset: 0, vocab: VOCAB }, Shard { offset: 20, vocab: VOCAB }];
    let top = Filter { top_k: 24, top_p: 0.9, ..Filter::OFF };
    let cases = [
        (false, 1.0f32, Verification::Token, Filter::OFF),
        (true, 3.0, Verification::Token, Filter::OFF),
        (false, 1.0, Verification::Block, Filter::OFF),
        (false, 1.0, Verification::Token, top),
        (true, 1.0, Verification::Block, top),
    ];
    for (c, (one_hot, sharpen, verification, filter)) in cases.into_iter().enumerate() {
        let pos0 = 0x5AD << 40 | (c as u64) << 32;
        let case = FixedPositions {
            one_hot,
            pos0,
            target_filter: filter,
            draft_filter: filter,
            declared_draft_filter: filter,
            ..FixedPositions::new(VOCAB, 3, 1.0, 8000)
        };
        let draft = |i: usize, target: &[f32]| perturbed(i, target, 1.5).into_iter().map(|x| x * sharpen).collect();
        let Drafted { mut verify, targets } = case.build(&Backend::cpu(), &base, draft);
        verify.verification = verification;
        let ctx = format!("{verification:?} {case:?}");
        let out = check_equal(&verify, &halves, &ctx);
        let draws = check_filtered_positions(&out, &targets, case.t, filter, &format!("{ctx} at P = 2"));
        assert!(draws[0] == 8000 && draws[1] >= 1000, "{ctx}: draws per position {draws:?}");
        // The fit can fail: position 1's tokens are not position 0's target,
        // nor its draft's, nor (filtered) its unfiltered target.
        let counts = histogram(&emitted_at(&out, 1), VOCAB);
        let p =
            |row: &[f32]| if filter == Filter::OFF { probs(row, case.t) } else { filtered_probs(row, case.t, filter) };
        let mut wrongs = vec![p(&targets[0]), p(&draft(1, &targets[1]))];
        if filter != Filter::OFF {
            wrongs.push(probs(&targets[1], case.t));
        }
        for wrong in wrongs {
            let fit = chi_square(&counts, &wrong);
            assert!(fit.p_value < 1e-6, "{ctx}: position 1 fits a wrong distribution, p = {}", fit.p_value);
        }
    }
}

/// A sharded call's log-probabilities (processed, raw, top-n and ranks) are
/// the unsharded call's, bit for bit: random ragged batches (greedy,
/// sampling and padding requests, accepted and rejected drafts, bonus
/// tokens), with ties, NaN and `±inf`, filters with a top-k on half of
/// them, one-hot and draft logits, the token rule and block verification,
/// over 1, 2, 3 and 8 uneven shards.
#[test]
fn sharded_logprobs_are_the_unsharded_ones() {
    let mut rng = Rng::new(0x31_5E);
    let (mut finite, mut ranked) = (0usize, 0usize);
    let kinds =
        [(DType::F32, None), (DType::BF16, Some(DType::BF16)), (DType::F32, Some(DType::F16)), (DType::F16, None)];
    for (c, (target, draft)) in kinds.into_iter().enumerate() {
        for (vocab, requests) in [(37, 16), (1000, 10), (4097, 4), (151_936, 2)] {
            for ranks in [1, 2, 3, 8] {
                for verification in [Verification::Token, Verification::Block] {
                    let mut v = tied_verify(&mut rng, RandomSpec::new(vocab, requests, 4, target, draft), verification);
                    add_empty_rows(&mut v, &mut rng);
                    let filtered = rng.below(2) == 0;
                    if filtered {
                        let filters: Vec<Filter> =
                            (0..v.temperature.len()).map(|_| random_filter(&mut rng, vocab, u32::MAX)).collect();
                        v.filters = FilterTable::per_slot(&filters);
                        if draft.is_some() {
                            v.draft_filters = FilterTable::per_slot(&filters);
                        }
                    }
                    let asked = ASKS[(c + ranks + vocab) % ASKS.len()];
                    let ctx = format!(
                        "{asked:?}, {verification:?}, {target:?} target, {draft:?} draft, filtered {filtered}, V {vocab}, P {ranks}"
                    );
                    let want = v.run_logprobs(&Backend::cpu(), Some(asked)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    let shards = shards(vocab, ranks, &mut rng);
                    for (r, got) in run_sharded_logprobs(&v, &shards, |_| Some(asked)).into_iter().enumerate() {
                        let got = got.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}"));
                        assert_eq!(got, want, "{ctx} rank {r}");
                    }
                    let lp = &want.1;
                    finite += lp.processed.iter().chain(&lp.raw).filter(|&&b| f32::from_bits(b).is_finite()).count();
                    ranked += lp.ranks.iter().filter(|&&rank| rank > 1).count();
                }
            }
        }
    }
    // Not a comparison of NaNs: most positions have finite values, and many drawn tokens are not the argmax.
    assert!(finite >= 500 && ranked >= 100, "finite log-probabilities {finite}, ranks above 1 {ranked}");
}

/// Ranks that ask for different log-probabilities: the same error on every
/// rank (their headers differ, or their messages' lengths do).
#[test]
fn sharded_logprobs_asked_alike_or_not_at_all() {
    let mut rng = Rng::new(0x31_5F);
    let v = random_verify(&mut rng, RandomSpec::new(64, 6, 3, DType::F32, Some(DType::F32)));
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    let (processed, raw) = (ASKS[0], ASKS[1]);
    let top = |n| Asked { top: Some((n, Distribution::Raw)), ..processed };
    for (theirs, invalid) in [(raw, true), (top(3), true), (top(4), false)] {
        let got = run_sharded_logprobs(&v, &halves, |r| Some(if r == 0 { top(4) } else { theirs }));
        if invalid {
            assert!(got.iter().all(|g| matches!(g, Err(Error::InvalidShard { .. }))), "{theirs:?}: {got:?}");
        } else {
            assert!(got.iter().all(|g| g.is_ok()), "{theirs:?}: {got:?}");
        }
    }
    let got = run_sharded_logprobs(&v, &halves, |r| (r == 0).then_some(processed));
    assert!(got.iter().all(|g| matches!(g, Err(Error::Exchange(_)))), "{got:?}");
}
