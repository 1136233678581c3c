//! Block verification (REFERENCE §4.11): the rule of
//! `specdec_core::block_verification` enumerated exactly on tiny
//! vocabularies (every draft block weighted by its draft probability: the
//! emitted sequences follow the target to 1e-12, and accept at least as many
//! drafts as the draft-by-draft rule), then `rejection_sample` with
//! `Verification::Block`: the chi-square of every position at V = 4096 as for
//! the draft-by-draft rule, and the mean accepted drafts of a case whose
//! expectation is known exactly.

use specdec::filter::Filter;
use specdec::{DType, Verification};
use specdec_core::block_verification::{next_weight, stop_probability};
use specdec_suite::agreement::{MAX_NEAR_RATE, NEAR, block_decisions};
use specdec_suite::drafting::{
    Drafted, FixedPositions, MIN_POSITION_DRAWS, RandomSpec, check_filtered_positions, check_positions, perturbed,
    random_verify, run_split, target_row, zipf_logits,
};
use specdec_suite::inputs::Rng;
use specdec_suite::test_device;
use std::collections::HashMap;

/// A model's next-token distribution after each prefix (of ids `< v`).
struct Model {
    v: usize,
    rows: HashMap<Vec<usize>, Vec<f64>>,
}

impl Model {
    /// Random distributions after every prefix up to length `k`, some ids at 0.
    fn random(rng: &mut Rng, v: usize, k: usize) -> Model {
        let mut rows = HashMap::new();
        let mut prefixes = vec![Vec::new()];
        for _ in 0..=k {
            let mut next = Vec::new();
            for prefix in prefixes {
                let mut w: Vec<f64> = (0..v).map(|_| if rng.below(4) == 0 { 0.0 } else { rng.unit() }).collect();
                if w.iter().all(|&x| x == 0.0) {
                    w[rng.below(v)] = 1.0;
                }
                let s: f64 = w.iter().sum();
                rows.insert(prefix.clone(), w.into_iter().map(|x| x / s).collect());
                next.extend((0..v).map(|x| [prefix.as_slice(), &[x]].concat()));
            }
            prefixes = next;
        }
        Model { v, rows }
    }

    fn at(&self, prefix: &[usize]) -> &[f64] {
        &self.rows[prefix]
    }

    /// The probability of `seq` drawn token by token.
    fn prob(&self, seq: &[usize]) -> f64 {
        (0..seq.len()).map(|i| self.at(&seq[..i])[seq[i]]).product()
    }
}

/// Every sequence of `len` ids `< v`.
fn sequences(v: usize, len: usize) -> Vec<Vec<usize>> {
    (0..len).fold(vec![Vec::new()], |acc, _| {
        acc.into_iter().flat_map(|s| (0..v).map(move |x| [s.as_slice(), &[x]].concat())).collect()
    })
}

/// The law of `τ` (the drafts accepted) for draft block `x` and the
/// normalised distribution of the token after them, by the block rule
/// (`block = true`: `next_weight`, `stop_probability`, `τ` the last stop) or
/// the draft-by-draft rule.
fn verify_law(p: &Model, q: &Model, x: &[usize], block: bool) -> Vec<(f64, Vec<f64>)> {
    let k = x.len();
    let residual = |i: usize, w: f64| -> Vec<f64> {
        let (pi, qi) = (p.at(&x[..i]), q.at(&x[..i]));
        (0..p.v).map(|y| (w * pi[y] - qi[y]).max(0.0)).collect()
    };
    let normalised = |r: Vec<f64>| {
        let s: f64 = r.iter().sum();
        assert!(s > 0.0, "an empty residual is reached");
        r.into_iter().map(|v| v / s).collect::<Vec<f64>>()
    };
    let ratio = |i: usize| p.at(&x[..i])[x[i]] / q.at(&x[..i])[x[i]];
    let mut law = Vec::new();
    if block {
        let mut weights = vec![1.0];
        for i in 0..k {
            weights.push(next_weight(weights[i], ratio(i)));
        }
        // h_i for i = 1..k (h_k = p_k), and the chance that no later step stopped.
        let h: Vec<f64> = (0..=k)
            .map(|i| match i {
                0 => 1.0,
                i if i == k => weights[k],
                i => stop_probability(weights[i], residual(i, weights[i]).iter().sum()),
            })
            .collect();
        let mut later = 1.0;
        let mut by_tau = vec![(0.0, Vec::new()); k + 1];
        for i in (0..=k).rev() {
            let pr = later * h[i];
            later *= 1.0 - h[i];
            let next = if i == k {
                p.at(x).to_vec()
            } else if pr > 0.0 {
                normalised(residual(i, weights[i]))
            } else {
                Vec::new()
            };
            by_tau[i] = (pr, next);
        }
        law = by_tau;
    } else {
        let mut reached = 1.0;
        for i in 0..k {
            let a = ratio(i).min(1.0);
            let pr = reached * (1.0 - a);
            law.push((pr, if pr > 0.0 { normalised(residual(i, 1.0)) } else { Vec::new() }));
            reached *= a;
        }
        law.push((reached, p.at(x).to_vec()));
    }
    law
}

/// The law of the first `k + 1` tokens when every call's emitted tokens are
/// continued by the target (so both rules' outputs compare with the
/// target's law of `k + 1` tokens), and the mean drafts accepted.
fn emitted_law(p: &Model, q: &Model, k: usize, block: bool) -> (HashMap<Vec<usize>, f64>, f64) {
    let mut law: HashMap<Vec<usize>, f64> = HashMap::new();
    let mut accepted = 0.0;
    for x in sequences(p.v, k) {
        let qx = q.prob(&x);
        if qx == 0.0 {
            continue;
        }
        for (tau, (pr, next)) in verify_law(p, q, &x, block).into_iter().enumerate() {
            if pr == 0.0 {
                continue;
            }
            accepted += qx * pr * tau as f64;
            for (y, &py) in next.iter().enumerate() {
                let emitted = [&x[..tau], &[y]].concat();
                for rest in sequences(p.v, k - tau) {
                    let mut seq = emitted.clone();
                    let mut w = qx * pr * py;
                    for &z in &rest {
                        w *= p.at(&seq)[z];
                        seq.push(z);
                    }
                    if w > 0.0 {
                        *law.entry(seq).or_default() += w;
                    }
                }
            }
        }
    }
    (law, accepted)
}

/// Every emitted sequence has its target probability to 1e-12, for random
/// context-dependent target and draft models with zeros, V <= 6, K <= 3; and
/// the block rule accepts at least as many drafts in expectation.
#[test]
fn exact_enumeration_gives_the_target() {
    let mut rng = Rng::new(2403_10444);
    let mut gains = 0;
    for (v, k) in [(2, 1), (2, 2), (2, 3), (3, 2), (3, 3), (4, 2), (5, 2), (6, 1), (6, 2)] {
        for trial in 0..12 {
            let (p, q) = (Model::random(&mut rng, v, k), Model::random(&mut rng, v, k));
            let ctx = format!("V {v}, K {k}, trial {trial}");
            let (block, block_accepted) = emitted_law(&p, &q, k, true);
            let (token, token_accepted) = emitted_law(&p, &q, k, false);
            for seq in sequences(v, k + 1) {
                let want = p.prob(&seq);
                for (rule, law) in [("block", &block), ("token", &token)] {
                    let got = law.get(&seq).copied().unwrap_or(0.0);
                    assert!((got - want).abs() <= 1e-12, "{ctx}, {rule}: {seq:?} has {got}, the target {want}");
                }
            }
            assert!(block_accepted >= token_accepted - 1e-12, "{ctx}: block {block_accepted} < token {token_accepted}");
            gains += (block_accepted > token_accepted + 1e-9) as usize;
        }
    }
    assert!(gains > 20, "the block rule accepts more in {gains} cases");
}

/// The paper's example: context-free target (1/3, 2/3), drafter (2/3, 1/3),
/// two drafts: 10/9 drafts accepted a call draft by draft, 11/9 as a block.
#[test]
fn the_papers_example_enumerates_to_its_figures() {
    let model = |w: [f64; 2]| Model {
        v: 2,
        rows: sequences(2, 0)
            .into_iter()
            .chain(sequences(2, 1))
            .chain(sequences(2, 2))
            .map(|s| (s, w.to_vec()))
            .collect(),
    };
    let (p, q) = (model([1.0 / 3.0, 2.0 / 3.0]), model([2.0 / 3.0, 1.0 / 3.0]));
    let ((_, token), (_, block)) = (emitted_law(&p, &q, 2, false), emitted_law(&p, &q, 2, true));
    assert!((token - 10.0 / 9.0).abs() < 1e-12 && (block - 11.0 / 9.0).abs() < 1e-12, "token {token}, block {block}");
}

// The paper's example through `rejection_sample`: drafts sampled by
// `gumbel_sample(drafting)` from the drafter's logits, 40,000 requests of
// two drafts. The mean accepted drafts is within 6 standard errors of
// 10/9 draft by draft and of 11/9 as a block, on the same drafts.
test_device!(mean_accepted_drafts_match_the_exact_gain, |backend, _scale| {
    let requests = 40_000;
    let ln = |x: f64| x.ln() as f32;
    let target = [ln(1.0 / 3.0), ln(2.0 / 3.0)];
    let case = FixedPositions { distinct_targets: false, ..FixedPositions::new(2, 2, 1.0, requests) };
    let Drafted { mut verify, .. } = case.build(&backend, &target, |_, _| vec![ln(2.0 / 3.0), ln(1.0 / 3.0)]);
    for (verification, want) in [(Verification::Token, 10.0 / 9.0), (Verification::Block, 11.0 / 9.0)] {
        verify.verification = verification;
        let out = run_split(&verify, &backend);
        let accepted: Vec<f64> = out.accepted.iter().map(|&a| f64::from(a)).collect();
        let mean = accepted.iter().sum::<f64>() / requests as f64;
        let var = accepted.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (requests - 1) as f64;
        let se = (var / requests as f64).sqrt();
        assert!(
            (mean - want).abs() <= 6.0 * se,
            "{verification:?}: mean accepted {mean:.4} against {want:.4} (se {se:.4})"
        );
    }
});

// Every position's tokens follow its target under block verification (the
// chi-square of `rejection_stats.rs`, its inputs: Zipf targets, noisy
// drafters, f32 and bf16 draft logits and one-hot drafts), and the block
// accepts at least as many drafts as the draft-by-draft rule on the same drafts.
test_device!(every_position_follows_the_target, |backend, _scale| {
    let (vocab, requests) = (4096, 10_240);
    let base = zipf_logits(vocab, 1.0, 64, 0x21F);
    for (k, t) in [(3usize, 1.0f32), (7, 0.6)] {
        for (c, (draft_dtype, one_hot)) in
            [(DType::F32, false), (DType::BF16, false), (DType::F32, true)].into_iter().enumerate()
        {
            let pos0 = 0xB10C << 32 | (k as u64) << 24 | (c as u64) << 20;
            let case = FixedPositions { draft_dtype, one_hot, pos0, ..FixedPositions::new(vocab, k, t, requests) };
            let sharpen = if one_hot { 3.0 } else { 1.0 };
            let Drafted { mut verify, targets } =
                case.build(&backend, &base, |i, row| perturbed(i, row, 1.5).into_iter().map(|x| x * sharpen).collect());
            let token: i64 = run_split(&verify, &backend).accepted.iter().map(|&a| i64::from(a)).sum();
            verify.verification = Verification::Block;
            let out = run_split(&verify, &backend);
            let ctx = format!("block, {case:?}");
            let draws = check_positions(&out, &targets, t, &ctx);
            let block: i64 = out.accepted.iter().map(|&a| i64::from(a)).sum();
            eprintln!("{ctx}: accepted {block} (draft by draft {token}), draws per position {draws:?}");
            assert!(draws[1] >= MIN_POSITION_DRAWS, "{ctx}: position 1 is fit");
            // Its expectation is at least the token rule's: allow 4 standard errors of the difference.
            let slack = 4.0 * (2.0 * token.max(1) as f64).sqrt();
            assert!(block as f64 >= token as f64 - slack, "{ctx}: block accepted {block}, token {token}");
        }
    }
});

// A small vocabulary, a drafter far from the target, many requests: every
// bin is large, so a residual drawn without the block's weight `p_τ` (the
// draft-by-draft residual at row `τ`) fails the chi-square.
test_device!(small_vocabulary_positions_follow_the_target, |backend, _scale| {
    let (vocab, requests) = (8, 40_000);
    let base: Vec<f32> = (0..vocab).map(|i| ((i * 5) % 8) as f32 * 0.4).collect();
    for (k, t, one_hot) in [(3usize, 1.0f32, false), (3, 0.8, true)] {
        let case = FixedPositions {
            one_hot,
            pos0: 0x5A11 << 32 | (k as u64) << 8,
            ..FixedPositions::new(vocab, k, t, requests)
        };
        let Drafted { mut verify, targets } = case.build(&backend, &base, |i, row| perturbed(i + 11, row, 3.0));
        verify.verification = Verification::Block;
        let out = run_split(&verify, &backend);
        let draws = check_positions(&out, &targets, t, &format!("block, {case:?}"));
        assert!(draws[2] >= MIN_POSITION_DRAWS, "positions 0..=2 are fit: {draws:?}");
    }
});

// A block of one draft is the draft-by-draft rule (`h_1 = min(p/q, 1)`,
// the same acceptance word), at K = 1 and where a placeholder follows the
// first of K = 3 drafts (on CUDA the block kernel decides the latter), and
// greedy requests verify as they always do: the same outputs, bit for bit,
// either way.
test_device!(one_draft_blocks_and_greedy_requests_are_the_token_rule, |backend, _scale| {
    let base = zipf_logits(1024, 1.0, 64, 7);
    for (k, t, cut) in [(1usize, 1.0f32, false), (3, 1.0, true), (3, 0.0, false)] {
        for one_hot in [false, true] {
            let case =
                FixedPositions { one_hot, pos0: 0x1D << 40 | (k as u64) << 8, ..FixedPositions::new(1024, k, t, 2000) };
            let Drafted { mut verify, .. } = case.build(&backend, &base, |i, row| perturbed(i, row, 1.5));
            if t == 0.0 {
                // Greedy requests: each row's argmax as its draft half the time.
                let best: Vec<i32> = (0..verify.rows)
                    .map(|j| specdec_suite::inputs::first_argmax(&target_row(&verify, j)) as i32)
                    .collect();
                for (j, d) in verify.drafts.iter_mut().enumerate() {
                    if j % 2 == 0 && *d >= 0 {
                        *d = best[j];
                    }
                }
            }
            if cut {
                // Each request's second draft a placeholder: blocks of one draft.
                for r in 0..verify.requests() {
                    verify.drafts[verify.offsets[r] as usize + 1] = -1;
                }
            }
            let token = run_split(&verify, &backend);
            verify.verification = Verification::Block;
            let block = run_split(&verify, &backend);
            let ctx = format!("K {k}, T {t}, one-hot {one_hot}, cut {cut}");
            // Both outcomes occur: some drafts accepted, some rejected.
            let accepted: i32 = token.accepted.iter().sum();
            assert!(accepted > 0 && (accepted as usize) < 2000 * k, "{ctx}: {accepted} drafts accepted");
            assert_eq!(block.tokens, token.tokens, "{ctx}: tokens");
            assert_eq!(block.num_emitted, token.num_emitted, "{ctx}: emitted");
        }
    }
});

// Block verification against filtered targets (SPEC §7.3): every position
// follows the target renormalised on its kept set, with drafts sampled
// unfiltered or with the same filters (and declared so), draft logits or one-hot.
test_device!(filtered_positions_follow_the_filtered_target, |backend, _scale| {
    let (vocab, requests, k, t) = (4096, 10_240, 3, 1.0);
    let base = zipf_logits(vocab, 1.0, 64, 0x21F);
    let filters = [Filter { top_k: 50, ..Filter::OFF }, Filter { top_p: 0.8, min_p: 0.01, ..Filter::OFF }];
    for (f, filter) in filters.into_iter().enumerate() {
        for (c, (one_hot, drafter_filters)) in [(false, false), (false, true), (true, false)].into_iter().enumerate() {
            let draft_filter = if drafter_filters { filter } else { Filter::OFF };
            let case = FixedPositions {
                one_hot,
                pos0: 0xF17 << 32 | (f as u64) << 12 | (c as u64) << 8,
                target_filter: filter,
                draft_filter,
                declared_draft_filter: draft_filter,
                ..FixedPositions::new(vocab, k, t, requests)
            };
            let sharpen = if one_hot { 3.0 } else { 1.0 };
            let Drafted { mut verify, targets } =
                case.build(&backend, &base, |i, row| perturbed(i, row, 1.0).into_iter().map(|x| x * sharpen).collect());
            verify.verification = Verification::Block;
            let out = run_split(&verify, &backend);
            let draws = check_filtered_positions(&out, &targets, t, filter, &format!("block, {case:?}"));
            assert!(draws[1] >= MIN_POSITION_DRAWS, "position 1 is fit: {draws:?}");
        }
    }
});

// A draft whose target or draft logit is NaN is rejected (SPEC §4.10) under
// the block rule too: its weight is 0, so no block reaches past it.
test_device!(a_draft_with_a_nan_logit_is_never_accepted, |backend, _scale| {
    let base = zipf_logits(256, 1.0, 64, 5);
    for nan_in_draft in [false, true] {
        let case = FixedPositions { pos0: 0x4A4E << 32, ..FixedPositions::new(256, 3, 1.0, 400) };
        // The drafter is the target itself: every draft would be accepted.
        let Drafted { mut verify, .. } = case.build(&backend, &base, |_, row| row.to_vec());
        verify.verification = Verification::Block;
        let before: i32 = run_split(&verify, &backend).accepted.iter().sum();
        for r in 0..verify.requests() {
            let row = verify.offsets[r] as usize;
            let d = verify.drafts[row] as usize;
            if nan_in_draft {
                let (values, shape) = verify.draft.as_mut().expect("draft logits");
                let slot = verify.slots[r] as usize;
                values.set_f32(slot * shape.stride0 + d, f32::NAN);
            } else {
                specdec_suite::drafting::set_target(&mut verify, row, d, f32::NAN);
            }
        }
        let out = run_split(&verify, &backend);
        assert!(before > 1000, "without NaN the drafts are accepted ({before})");
        let what = if nan_in_draft { "draft" } else { "target" };
        assert!(out.accepted.iter().all(|&a| a == 0), "{what} NaN at the draft: accepted {:?}", &out.accepted[..16]);
    }
});

// The rule recomputed in f64 from the logits (`agreement::block_decisions`,
// its own arithmetic) accepts as many drafts as the backend in every
// sampling request of random ragged batches (placeholders, padding, every
// temperature of the harness, one-hot drafts and draft logits), except where
// one of the block's decisions at or above the smaller of the two is within
// `NEAR` of its threshold; such decisions stay rare.
test_device!(accepted_drafts_match_the_f64_rule, |backend, _scale| {
    let mut rng = Rng::new(0x0B10_CF64);
    let (mut decisions, mut near, mut differ) = (0usize, 0usize, 0usize);
    for (vocab, requests, k) in [(999, 4096, 4), (4097, 1024, 7), (32_000, 64, 4)] {
        for draft in [None, Some(DType::F32), Some(DType::BF16)] {
            let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, DType::F32, draft));
            v.verification = Verification::Block;
            let out = run_split(&v, &backend);
            for r in (0..requests).filter(|&r| !v.is_greedy(r)) {
                let Some(b) = block_decisions(&v, r) else { continue };
                decisions += b.margins.len();
                near += b.margins.iter().filter(|m| m.1 < NEAR).count();
                let accepted = out.accepted[r].max(0) as usize;
                if b.tau != accepted {
                    differ += 1;
                    assert!(
                        b.near_at_or_above(b.tau.min(accepted)),
                        "V {vocab} draft {draft:?}, request {r}: f64 rule tau {} ({:?}), backend {accepted}",
                        b.tau,
                        b.margins
                    );
                }
            }
        }
    }
    eprintln!("{decisions} decisions, {near} near their thresholds, {differ} requests differ");
    assert!(decisions >= 10_000, "{decisions} decisions: too few");
    assert!((near as f64) < MAX_NEAR_RATE * decisions as f64, "{near} of {decisions} decisions near their thresholds");
});
