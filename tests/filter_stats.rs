//! Statistical exactness with sampling filters (SPEC §7, §6's rule): the
//! tokens of `gumbel_sample` and, at every output position, of
//! `rejection_sample` follow the filtered target `p'` (the suite's
//! sort-based reference, `filters::filtered_probs`), whatever the draft:
//! unfiltered `q`, the drafter's filtered `q'`, one-hot, or a draft living
//! outside the kept set. And the negative control: drafts drawn from a
//! filtered `q'` but verified as if drawn from the unfiltered `q` (the field
//! bug SPEC §7.3 rules out) must fail the same test.
//!
//! Each test runs on the CPU and, with feature `gpu`, on CUDA, where the
//! drafts are drawn by the GPU's own `gumbel_sample(drafting)` and every
//! sample is `$scale` times larger (a stricter fit). Seeds and positions are
//! fixed: each test always passes or always fails.

use specdec::filter::Filter;
use specdec::{Backend, DType};
use specdec_suite::drafting::{
    Drafted, FixedPositions, MIN_POSITION_DRAWS, check_filtered_positions, emitted_at, perturbed, run_split,
    zipf_logits,
};
use specdec_suite::filters::{FilterTable, SETTINGS, filtered_probs, reference_kept};
use specdec_suite::inputs::histogram;
use specdec_suite::{Batch, chi_square, test_device};

const SEED: u64 = 0x5EED_F117_E125_0001;

/// The vocabulary of both suites: `(K + 1) | V` for K ∈ {1, 3, 7}.
const VOCAB: usize = 1024;

fn f(top_k: u32, top_p: f32, min_p: f32) -> Filter {
    Filter { top_k, top_p, min_p }
}

/// The target: Zipf over a random permutation (mass spread over the row),
/// one id in 64 masked.
fn base() -> Vec<f32> {
    zipf_logits(VOCAB, 1.0, 64, 0xF1)
}

// --- gumbel_sample ----------------------------------------------------------

/// Draws per fit (× scale): p' has at most a few hundred bins that expect 5 draws.
const DRAWS: usize = 20_000;

test_device!(gumbel_sample_follows_the_filtered_target, |backend, scale| {
    let row = base();
    for (s, filter) in SETTINGS.into_iter().enumerate() {
        for (c, (dtype, t, drafting)) in
            [(DType::F32, 1.0f32, false), (DType::BF16, 0.6, false), (DType::F32, 1.5, true)].into_iter().enumerate()
        {
            let pos0 = (s as u64) << 40 | (c as u64) << 32;
            let mut b = Batch::broadcast(&row, dtype, DRAWS * scale, t, SEED, pos0);
            b.drafting = drafting;
            b.filters = FilterTable::uniform(filter, 1);
            let counts = histogram(&b.run_parallel(&backend).tokens, VOCAB);
            let ctx = format!("{filter:?} {dtype:?} T {t} drafting {drafting} pos0 {pos0:#x}");
            chi_square(&counts, &filtered_probs(&b.row(0), t, filter)).assert_pass(&ctx);
        }
    }
});

// --- rejection_sample -------------------------------------------------------

/// Requests per case (× scale).
const REQUESTS: usize = 6_000;

/// How a case's drafts are drawn and declared.
#[derive(Clone, Copy, Debug)]
enum Draft {
    /// The draft model, unfiltered.
    Unfiltered,
    /// The draft model sampled with the target's filters, declared so.
    Filtered,
    /// The draft model's tokens only.
    OneHot,
    /// A draft model living on the ids the target's filters drop.
    OutsideS,
}

/// The draft model: the target perturbed, so that most drafts are accepted.
fn near(i: usize, target: &[f32]) -> Vec<f32> {
    perturbed(i, target, 1.0)
}

/// A draft model that proposes the target's least likely ids.
fn negated(_: usize, target: &[f32]) -> Vec<f32> {
    target.iter().map(|&x| if x == f32::NEG_INFINITY { 0.0 } else { -x }).collect()
}

/// One case of `requests` requests: `k` drafts of `dtype` at temperature `t`,
/// rows from position `pos0`.
#[derive(Clone, Copy, Debug)]
struct Case {
    filter: Filter,
    draft: Draft,
    k: usize,
    t: f32,
    dtype: DType,
    pos0: u64,
    requests: usize,
}

/// Builds (drafting on `backend`) and verifies one case; returns the
/// verified batch's outputs and targets.
fn run_case(backend: &Backend, c: Case) -> (Drafted, specdec_suite::Verified) {
    let Case { filter, draft, k, t, dtype, pos0, requests } = c;
    let case = FixedPositions {
        draft_dtype: dtype,
        one_hot: matches!(draft, Draft::OneHot),
        pos0,
        target_filter: filter,
        draft_filter: if matches!(draft, Draft::Filtered) { filter } else { Filter::OFF },
        declared_draft_filter: if matches!(draft, Draft::Filtered) { filter } else { Filter::OFF },
        ..FixedPositions::new(VOCAB, k, t, requests)
    };
    let drafted = case.build(backend, &base(), if matches!(draft, Draft::OutsideS) { negated } else { near });
    let out = run_split(&drafted.verify, backend);
    (drafted, out)
}

fn check(backend: &Backend, c: Case) {
    let Case { filter, draft, k, t, dtype, pos0, requests } = c;
    let ctx = format!("{filter:?}, {draft:?} draft, K {k}, T {t}, {dtype:?}, pos0 {pos0:#x}, {requests} requests");
    let (drafted, out) = run_case(backend, c);
    let draws = check_filtered_positions(&out, &drafted.targets, t, filter, &ctx);
    assert!(draws[0] == requests, "{ctx}: every request emits a first token");
    if matches!(draft, Draft::Unfiltered | Draft::Filtered) && k > 1 {
        assert!(draws[1] >= MIN_POSITION_DRAWS, "{ctx}: draws per position {draws:?}: position 1 is not fit");
    }
}

// Every setting once, the draft mode, K, T and dtype cycling through
// theirs; then one combined setting under every draft mode and K.
test_device!(rejection_sample_follows_the_filtered_target_at_every_position, |backend, scale| {
    let modes = [Draft::Unfiltered, Draft::Filtered, Draft::OneHot, Draft::OutsideS];
    let requests = REQUESTS * scale;
    for (s, filter) in SETTINGS.into_iter().enumerate() {
        let (k, t, dtype) = ([1, 3, 7][s % 3], [0.6f32, 1.0, 1.5][s / 4 % 3], [DType::F32, DType::BF16][s % 2]);
        let (draft, pos0) = (modes[s % 4], (s as u64) << 40);
        check(&backend, Case { filter, draft, k, t, dtype, pos0, requests });
    }
    for (m, draft) in modes.into_iter().enumerate() {
        for k in [1, 3, 7] {
            let pos0 = 1 << 48 | (m as u64) << 40 | (k as u64) << 32;
            check(&backend, Case { filter: f(50, 0.9, 0.0), draft, k, t: 1.0, dtype: DType::BF16, pos0, requests });
        }
    }
});

// A draft outside the target's kept set is never accepted: every request
// whose first draft is outside S (by the reference) accepts none.
test_device!(drafts_outside_the_kept_set_are_always_rejected, |backend, scale| {
    let requests = REQUESTS * scale;
    for (c, filter) in [f(20, 1.0, 0.0), f(0, 0.5, 0.0), f(0, 1.0, 0.3)].into_iter().enumerate() {
        let pos0 = 2 << 48 | (c as u64) << 40;
        let case = Case { filter, draft: Draft::OutsideS, k: 3, t: 1.0, dtype: DType::F32, pos0, requests };
        let (drafted, out) = run_case(&backend, case);
        let kept = reference_kept(&drafted.targets[0], 1.0, filter);
        let v = &drafted.verify;
        let outside: Vec<usize> =
            (0..v.requests()).filter(|&r| !kept[v.drafts[v.offsets[r] as usize] as usize]).collect();
        assert!(outside.len() > requests / 2, "{filter:?}: the negated draft model proposes outside S");
        for r in outside {
            assert_eq!(out.accepted[r], 0, "{filter:?}: request {r}'s draft outside S was accepted");
        }
    }
});

// The negative control (SPEC §7.3): the drafter samples with top-k = 20,
// the verifier is told the drafts are unfiltered. The emitted first tokens
// then over-represent the drafter's kept set, and the chi-square that the
// correct verification passes must fail (on the GPU's larger sample all the
// more surely).
test_device!(verifying_filtered_drafts_as_unfiltered_fails, |backend, scale| {
    let draft_filter = f(20, 1.0, 0.0);
    let mut failed = Vec::new();
    for declared in [draft_filter, Filter::OFF] {
        let case = FixedPositions {
            pos0: 3 << 48,
            draft_filter,
            declared_draft_filter: declared,
            ..FixedPositions::new(VOCAB, 1, 1.0, REQUESTS * scale)
        };
        let drafted = case.build(&backend, &base(), near);
        let out = run_split(&drafted.verify, &backend);
        let tokens = emitted_at(&out, 0);
        let fit = chi_square(&histogram(&tokens, VOCAB), &filtered_probs(&drafted.targets[0], 1.0, Filter::OFF));
        eprintln!("declared {declared:?}: chi2 {:.1} df {} p {:.2e}", fit.chi2, fit.df, fit.p_value);
        failed.push(!fit.passed);
    }
    assert_eq!(failed, [false, true], "declared correctly: passes; declared unfiltered: must fail");
});
