//! Vocab-parallel `rejection_sample` on the CPU backend (REFERENCE §9,
//! `docs/VOCAB_PARALLEL.md`): `P` ranks, one thread each with an in-process
//! exchange, each holding a shard of every target row's ids and of every
//! draft row's, return exactly the unsharded call's tokens, counts and row
//! statuses; and a sharded call's emitted tokens follow the target, by
//! chi-square at every position.

use specdec::filter::Filter;
use specdec::shard::Shard;
use specdec::{Backend, DType, Error, Verification};
use specdec_suite::drafting::{
    Drafted, FixedPositions, RandomSpec, check_positions, emitted_at, perturbed, probs, random_verify, zipf_logits,
};
use specdec_suite::inputs::{Rng, histogram};
use specdec_suite::sharding::{run_sharded_verify, shards};
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

/// A NaN (or, more rarely, a `+inf`) at a random id of some target rows and
/// some draft rows.
fn add_specials(v: &mut Verify, rng: &mut Rng) {
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

/// How often requests stopped short of their bonus row, and ran to it.
#[derive(Default)]
struct Coverage {
    stopped: usize,
    bonus: usize,
}

impl Coverage {
    fn add(&mut self, v: &Verify, out: &Verified) {
        for r in 0..v.requests() {
            let n = v.offsets[r + 1] - v.offsets[r] - 1;
            if out.accepted[r] < n { self.stopped += 1 } else { self.bonus += 1 }
        }
    }
}

/// Random ragged batches (greedy, sampling and padding requests, placeholders,
/// `-inf`, `+inf` and NaN logits, drafts that are accepted and rejected) over 1, 2,
/// 3 and 8 uneven shards, for every target dtype, one-hot and draft-logits
/// verification, the token rule and block verification, `V` up to 151,936.
#[test]
fn sharded_verification_is_the_unsharded_one() {
    let mut rng = Rng::new(0x31_5A);
    let mut coverage = Coverage::default();
    let kinds = [
        (DType::F32, None),
        (DType::F32, Some(DType::F32)),
        (DType::BF16, Some(DType::BF16)),
        (DType::F16, Some(DType::F32)),
        (DType::F32, Some(DType::F16)),
        (DType::BF16, None),
    ];
    for (target, draft) in kinds {
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
    let mut filtered = v.clone();
    filtered.filters = FilterTable { top_k: Some(vec![2; v.temperature.len()]), ..FilterTable::none() };
    every(&filtered, |e| matches!(e, Error::NotSharded { .. }));
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
    let cases =
        [(false, 1.0f32, Verification::Token), (true, 3.0, Verification::Token), (false, 1.0, Verification::Block)];
    for (c, (one_hot, sharpen, verification)) in cases.into_iter().enumerate() {
        let pos0 = 0x5AD << 40 | (c as u64) << 32;
        let case = FixedPositions { one_hot, pos0, ..FixedPositions::new(VOCAB, 3, 1.0, 8000) };
        let draft = |i: usize, target: &[f32]| perturbed(i, target, 1.5).into_iter().map(|x| x * sharpen).collect();
        let Drafted { mut verify, targets } = case.build(&Backend::cpu(), &base, draft);
        verify.verification = verification;
        let ctx = format!("{verification:?} {case:?}");
        let out = check_equal(&verify, &halves, &ctx);
        let draws = check_positions(&out, &targets, case.t, &format!("{ctx} at P = 2"));
        assert!(draws[0] == 8000 && draws[1] >= 1000, "{ctx}: draws per position {draws:?}");
        // The fit can fail: position 1's tokens are not position 0's target, nor its draft's.
        let counts = histogram(&emitted_at(&out, 1), VOCAB);
        for wrong in [probs(&targets[0], case.t), probs(&draft(1, &targets[1]), case.t)] {
            let fit = chi_square(&counts, &wrong);
            assert!(fit.p_value < 1e-6, "{ctx}: position 1 fits a wrong distribution, p = {}", fit.p_value);
        }
    }
}
