//! Statistical exactness of `rejection_sample` (SPEC §4's theorem, §6's
//! rule): the token emitted at every position `i` follows the target `p_i`
//! of that position, whatever the draft. Every request of a case verifies
//! drafts sampled from the draft model by the backend's own
//! `gumbel_sample(drafting)` at the verification's `(seed, pos)`; the tokens
//! of the requests that emitted more than `i` tokens are fit at position `i`
//! against `softmax(target_i / T)` (f64, from the logits as the backend sees
//! them). Seeds and positions are fixed: each test always passes or always fails.
//!
//! Cost: the CPU backend spends ~10 ns per element touched, and a request at
//! V = 4096 touches up to ~(K + 1)·3·V elements plus K·V to draft it, so the
//! CPU runs a quarter of the 40,960 requests per case; `$scale` (8 on
//! the GPU) takes it past them.

use specdec::{Backend, DType};
use specdec_suite::drafting::{
    Drafted, FixedPositions, MIN_POSITION_DRAWS, check_positions, perturbed, run_split, zipf_logits,
};
use specdec_suite::{Verified, Verify, test_device};

/// The vocabulary of the per-position suite.
const VOCAB: usize = 4096;
/// Requests per case, × scale: 10,240 on the CPU (this file takes ~45 s on
/// two cores), 81,920 on the GPU (the issue asks for 40,960).
const REQUESTS: usize = 10_240;
/// The target: Zipf with this exponent (at T = 1 the top id holds ~11%; at
/// position 0, ~230 bins keep 5 expected draws on the CPU, ~1800 on the
/// GPU), one id in 64 masked.
const ZIPF_EXPONENT: f32 = 1.0;
const MASK_EVERY: usize = 64;
/// The draft model perturbs each target logit by up to this much (uniform),
/// proposes some target-masked ids and masks some target ids, so that 60–80%
/// of drafts are accepted in full-draft mode.
const DRAFT_NOISE: f32 = 1.5;
/// Acceptance of one draft in full-draft mode, as designed (checked, so a
/// change of inputs that would leave later positions empty is caught).
const FULL_ACCEPTANCE: std::ops::Range<f64> = 0.3..0.9;

/// The draft model of the per-position suite.
fn noisy_draft(i: usize, target: &[f32]) -> Vec<f32> {
    perturbed(i, target, DRAFT_NOISE)
}

/// One-hot verification accepts a draft `d` with probability `p(d)`, so a
/// draft model that proposes the head of the target gets further: the
/// noisy draft, sharpened by this factor.
const ONE_HOT_SHARPEN: f32 = 3.0;

fn sharp_draft(i: usize, target: &[f32]) -> Vec<f32> {
    noisy_draft(i, target).into_iter().map(|x| x * ONE_HOT_SHARPEN).collect()
}

/// How a case's requests are verified: `run_split` (one call on the GPU) or
/// `drafting::run_per_request`.
type Run = fn(&Verify, &Backend) -> Verified;

/// Runs one case and fits every position; returns the fraction of drafts
/// accepted and the draws at each position.
fn check_case(
    backend: &Backend,
    case: &FixedPositions,
    base: &[f32],
    draft: fn(usize, &[f32]) -> Vec<f32>,
    run: Run,
) -> (f64, Vec<usize>) {
    let ctx = format!("{case:?}");
    let Drafted { verify, targets } = case.build(backend, base, draft);
    let out = run(&verify, backend);
    let draws = check_positions(&out, &targets, case.t, &ctx);
    let accepted: i64 = out.accepted.iter().map(|&a| a as i64).sum();
    let rate =
        accepted as f64 / (accepted + out.num_emitted.iter().filter(|&&e| e as usize <= case.k).count() as i64) as f64;
    eprintln!("{ctx}: acceptance {rate:.3}, draws per position {draws:?}");
    (rate, draws)
}

/// The (K, T) grid of the issue, each over draft dtypes {f32, bf16} × {draft
/// logits, one-hot}. Positions are disjoint between cases. One-hot
/// verification accepts a draft with probability p(d), at most the target's
/// largest probability (~2% at T = 1.5), so its deeper positions get few
/// draws: those are reported, not fit (`check_positions`).
fn check_grid(backend: &Backend, k: usize, t: f32, requests: usize, run: Run) {
    let base = zipf_logits(VOCAB, ZIPF_EXPONENT, MASK_EVERY, 0x21F);
    for (c, (draft_dtype, one_hot)) in
        [(DType::F32, false), (DType::BF16, false), (DType::F32, true), (DType::BF16, true)].into_iter().enumerate()
    {
        let pos0 = (k as u64) << 48 | ((t * 10.0) as u64) << 40 | (c as u64) << 36;
        let case = FixedPositions { draft_dtype, one_hot, pos0, ..FixedPositions::new(VOCAB, k, t, requests) };
        let (rate, draws) = check_case(backend, &case, &base, if one_hot { sharp_draft } else { noisy_draft }, run);
        if !one_hot {
            assert!(FULL_ACCEPTANCE.contains(&rate), "{case:?}: acceptance {rate:.3} outside {FULL_ACCEPTANCE:?}");
            assert!(draws[k] >= MIN_POSITION_DRAWS, "{case:?}: draws per position {draws:?}: the last is not fit");
        }
    }
}

test_device!(every_position_k1_t06, |backend, scale| {
    check_grid(&backend, 1, 0.6, REQUESTS * scale, run_split);
});

test_device!(every_position_k3_t06, |backend, scale| {
    check_grid(&backend, 3, 0.6, REQUESTS * scale, run_split);
});

test_device!(every_position_k1_t1, |backend, scale| {
    check_grid(&backend, 1, 1.0, REQUESTS * scale, run_split);
});

test_device!(every_position_k3_t1, |backend, scale| {
    check_grid(&backend, 3, 1.0, REQUESTS * scale, run_split);
});

test_device!(every_position_k7_t15, |backend, scale| {
    check_grid(&backend, 7, 1.5, REQUESTS * scale, run_split);
});

/// Calls of one request: on the GPU, where a call's chunks are a few tiles
/// (here 4 rows of one tile each), pass 1 is its small kernel (the host's
/// `Workspace::small`), a loop of its own, fitted here like the one above.
/// GPU only: the CPU has no such path.
#[cfg(feature = "gpu")]
mod one_request_a_call_k3_t1 {
    use super::*;

    #[test]
    fn cuda() {
        check_grid(&specdec_suite::cuda(), 3, 1.0, REQUESTS, specdec_suite::drafting::run_per_request);
    }
}

// --- The salt test (SPEC §2.2) -------------------------------------------------

/// A small vocabulary makes every bin large, so a bias from shared noise
/// between drafting and verification shows at once.
const SALT_VOCAB: usize = 16;
/// Requests per case, × scale. With the draft drawn from the target's stream
/// (the bug this test is for), the first case already fails at chi2 = 132
/// against a threshold of 69.8 and the one-hot cases at over 2000; 25,000 keeps
/// the case short under racecheck, which checks it at scale 1.
const SALT_REQUESTS: usize = 25_000;

/// The draft model is the target negated: it favours exactly the ids the
/// target disfavours, the worst case for noise shared with the resample.
fn negated(_: usize, target: &[f32]) -> Vec<f32> {
    target.iter().map(|&t| -t).collect()
}

test_device!(drafts_sampled_at_the_verification_key_are_unbiased, |backend, scale| {
    let base = zipf_logits(SALT_VOCAB, 1.5, MASK_EVERY, 0x5A17);
    for k in [1, 3] {
        for one_hot in [false, true] {
            let pos0 = 0x5A17 << 40 | (k as u64) << 32 | (one_hot as u64) << 30;
            let case =
                FixedPositions { one_hot, pos0, ..FixedPositions::new(SALT_VOCAB, k, 1.0, SALT_REQUESTS * scale) };
            check_case(&backend, &case, &base, negated, run_split);
        }
    }
});

// --- Disjoint supports (SPEC §6) ---------------------------------------------

/// A vocabulary from SPEC §6's list.
const DISJOINT_VOCAB: usize = 1024;
/// Requests, × scale; all emit one token (position 0).
const DISJOINT_REQUESTS: usize = 20_000;

/// A draft model living only where the target is masked.
fn off_support(_: usize, target: &[f32]) -> Vec<f32> {
    let live = |x: usize| target[x] != f32::NEG_INFINITY;
    (0..target.len()).map(|x| if live(x) { f32::NEG_INFINITY } else { -((x % 7) as f32) }).collect()
}

test_device!(disjoint_supports_reject_at_once_and_resample_the_target, |backend, scale| {
    let base: Vec<f32> = zipf_logits(DISJOINT_VOCAB, ZIPF_EXPONENT, usize::MAX, 0xD15)
        .into_iter()
        .enumerate()
        .map(|(x, l)| if x % 3 != 0 { l } else { f32::NEG_INFINITY }) // the target lives on 2/3 of the ids
        .collect();
    for (t, one_hot) in [(0.6, false), (1.5, false), (1.0, true)] {
        let pos0 = 0xD15 << 40 | ((t * 10.0) as u64) << 32 | (one_hot as u64) << 30;
        let case = FixedPositions {
            draft_dtype: DType::BF16,
            one_hot,
            pos0,
            ..FixedPositions::new(DISJOINT_VOCAB, 3, t, DISJOINT_REQUESTS * scale)
        };
        let (rate, _) = check_case(&backend, &case, &base, off_support, run_split);
        assert_eq!(rate, 0.0, "{case:?}: a draft outside the target's support was accepted");
    }
});
