//! Exact (non-statistical) properties of `rejection_sample` (SPEC §4): cases
//! where every decision is certain (`q == p`, point masses, masked drafts,
//! greedy chains, placeholders, requests without drafts, padding), NaN rows,
//! and invariance under chunking, permutation and token width. A token that
//! must be "a target sample" is checked against what `gumbel_sample` (not
//! drafting) returns for the same row, slot, seed and position on the backend
//! under test. Inputs come from fixed seeds: each test always passes or always fails.

use specdec::rng::Stream::Accept;
use specdec::status::NAN_LOGITS;
use specdec::{Backend, DType, DraftLogitsShape};
use specdec_suite::batch::Values;
use specdec_suite::drafting::{
    RandomSpec, concat, draft_logits_like, proposing_rows, random_verify, request_of_rows, select_requests, set_target,
    slice_requests, target_row, target_samples,
};
use specdec_suite::inputs::{Rng, first_argmax};
use specdec_suite::{Verified, Verify, test_device};

/// Runs `v`, panicking with `ctx` on an error.
fn run(backend: &Backend, v: &Verify, ctx: &str) -> Verified {
    v.run(backend).unwrap_or_else(|e| panic!("{ctx}: {e}"))
}

/// The outputs of `v` when every decision is certain. A sampling request's
/// draft `d` at row `j` passes iff `accept(j, d)`; a greedy one's iff it is
/// the row's first argmax; a placeholder stops. The last token is the first
/// argmax (greedy) or `samples[row]`: the target sample that a bonus row, a
/// placeholder, and every rejection in these cases must emit (SPEC §4).
fn certain_outputs(v: &Verify, samples: &[i64], accept: impl Fn(usize, i32) -> bool) -> Verified {
    let k1 = v.max_drafts + 1;
    let mut want = Verified {
        tokens: vec![-1; v.requests() * k1],
        num_emitted: vec![0; v.requests()],
        accepted: vec![0; v.requests()],
        row_status: vec![0; v.rows],
    };
    for r in 0..v.requests() {
        let (row0, n) = (v.offsets[r] as usize, (v.offsets[r + 1] - v.offsets[r] - 1) as usize);
        let argmax = |j: usize| first_argmax(&target_row(v, j)) as i64;
        let passes = |i: usize| {
            let d = v.drafts[row0 + i];
            d != -1 && if v.is_greedy(r) { d as i64 == argmax(row0 + i) } else { accept(row0 + i, d) }
        };
        let j = (0..n).find(|&i| !passes(i)).unwrap_or(n);
        for i in 0..j {
            want.tokens[r * k1 + i] = v.drafts[row0 + i] as i64;
        }
        want.tokens[r * k1 + j] = if v.is_greedy(r) { argmax(row0 + j) } else { samples[row0 + j] };
        (want.num_emitted[r], want.accepted[r]) = (j as i32 + 1, j as i32);
    }
    want
}

/// Asserts `got == want`, naming the first differing request.
fn assert_outputs(v: &Verify, got: &Verified, want: &Verified, ctx: &str) {
    for r in 0..v.requests() {
        let row0 = v.offsets[r] as usize;
        assert!(
            got.request(r) == want.request(r) && got.num_emitted[r] == want.num_emitted[r],
            "{ctx}: request {r} (slot {}, drafts {:?}): got {:?} ({} emitted), want {:?} ({} emitted)",
            v.slots[r],
            &v.drafts[row0..v.offsets[r + 1] as usize - 1],
            got.request(r),
            got.num_emitted[r],
            want.request(r),
            want.num_emitted[r],
        );
    }
    assert_eq!(got.accepted, want.accepted, "{ctx}: accepted counts");
    assert_eq!(got.row_status, want.row_status, "{ctx}: row status");
}

/// How many requests with drafts accepted them all, and how many stopped early.
fn outcomes(v: &Verify, out: &Verified) -> (usize, usize) {
    let n = |r: usize| v.offsets[r + 1] - v.offsets[r] - 1;
    let with_drafts: Vec<usize> = (0..v.requests()).filter(|&r| n(r) > 0).collect();
    let all = with_drafts.iter().filter(|&&r| out.accepted[r] == n(r)).count();
    (all, with_drafts.len() - all)
}

/// Logits on this grid in `[-6, 6]` are exact in f32, bf16 and f16, so a
/// draft-logits copy of a target row in any dtype gives `q == p` exactly.
const GRID: f32 = 16.0;

/// Rounds `v`'s target to the [`GRID`] (keeping `-inf` and row padding).
fn snap_to_grid(v: &mut Verify) {
    let all: Vec<f32> = v.target.f32s(0..v.target.len()).iter().map(|&x| (x * GRID).round() / GRID).collect();
    v.target = Values::from_f32(v.target.dtype(), &all);
}

/// Masks draft `d`'s target logit at some rows (1 in `every`), so that
/// `p(d) = 0` there: such drafts must be rejected.
fn mask_some_drafts(rng: &mut Rng, v: &mut Verify, every: usize) {
    for j in proposing_rows(v) {
        if rng.below(every) == 0 {
            set_target(v, j, v.drafts[j] as usize, f32::NEG_INFINITY);
        }
    }
}

/// Vocabularies of the exact cases: one id, ragged quads, several tiles.
const VOCABS: [usize; 3] = [1, 999, 4097];
/// Requests per batch (× scale on GPU) and the most drafts per request.
const REQUESTS: usize = 48;
const MAX_DRAFTS: usize = 4;
/// One draft in this many has its target logit masked.
const MASK_DRAFT_EVERY: usize = 6;

test_device!(equal_distributions_accept_all_but_masked_drafts, |backend, scale| {
    // Draft logits that copy the target (q == p exactly): every draft with
    // p(d) > 0 passes (log u < 0 = log q - log p); one with p(d) = 0 fails,
    // its residual max(p - q, 0) is empty, and the target is sampled. Ragged
    // requests, placeholders, no-draft requests, greedy and padding requests
    // mixed; every dtype pair; both token widths.
    let mut rng = Rng::new(0xE0A1);
    for vocab in VOCABS {
        for target in DType::ALL {
            for draft in DType::ALL {
                let mut v = random_verify(&mut rng, RandomSpec::new(vocab, REQUESTS * scale, MAX_DRAFTS, target, None));
                snap_to_grid(&mut v);
                mask_some_drafts(&mut rng, &mut v, MASK_DRAFT_EVERY);
                v.draft = Some(draft_logits_like(&mut rng, &v, draft, 0.0));
                v.tokens_i64 = rng.below(2) == 0;
                let ctx = format!("V {vocab} target {target:?} draft {draft:?} i64 {}", v.tokens_i64);
                let live = |j: usize, d: i32| target_row(&v, j)[d as usize] != f32::NEG_INFINITY;
                let want = certain_outputs(&v, &target_samples(&v, &backend), live);
                assert_outputs(&v, &run(&backend, &v, &ctx), &want, &ctx);
                if vocab > 1 {
                    let (all, some) = outcomes(&v, &want);
                    assert!(all > 0 && some > 0, "{ctx}: {all} all-accepted, {some} stopped early; inputs broke");
                }
            }
        }
    }
});

test_device!(one_hot_point_masses_accept_and_masked_drafts_resample_the_target, |backend, scale| {
    // One-hot drafts: a draft row whose target is a point mass on the draft
    // passes (p(d) = 1); a draft the target masks fails, and the residual
    // (p without d) is p itself, so the token is the target sample.
    let mut rng = Rng::new(0x0E07);
    for vocab in VOCABS {
        for dtype in DType::ALL {
            let mut v = random_verify(&mut rng, RandomSpec::new(vocab, REQUESTS * scale, MAX_DRAFTS, dtype, None));
            for j in proposing_rows(&v) {
                let d = v.drafts[j] as usize;
                if rng.below(2) == 0 {
                    // A point mass on d.
                    let top = target_row(&v, j)[d].max(-5.0);
                    (0..vocab).for_each(|x| set_target(&mut v, j, x, if x == d { top } else { f32::NEG_INFINITY }));
                } else {
                    set_target(&mut v, j, d, f32::NEG_INFINITY);
                }
            }
            let ctx = format!("one-hot V {vocab} {dtype:?}");
            let point_mass = |j: usize, d: i32| {
                target_row(&v, j).iter().filter(|&&l| l != f32::NEG_INFINITY).count() == 1
                    && target_row(&v, j)[d as usize] != f32::NEG_INFINITY
            };
            let want = certain_outputs(&v, &target_samples(&v, &backend), point_mass);
            assert_outputs(&v, &run(&backend, &v, &ctx), &want, &ctx);
        }
    }
});

/// Greedy logits: multiples of 1/2 in `[-3, 3]`, so maxima tie often and the
/// first argmax must win.
fn tied_logits(rng: &mut Rng, v: &mut Verify) {
    let all: Vec<f32> = (0..v.target.len()).map(|_| rng.below(13) as f32 / 2.0 - 3.0).collect();
    v.target = Values::from_f32(v.target.dtype(), &all);
}

test_device!(greedy_output_is_the_target_argmax_chain, |backend, scale| {
    // T = 0 (and padding): drafts equal the argmax up to a random point, then
    // one mismatch, then argmaxes again that must not be accepted. Draft
    // logits (random ones) must not matter.
    let mut rng = Rng::new(0x6EED);
    for vocab in VOCABS {
        for (dtype, draft) in [(DType::F32, None), (DType::BF16, Some(DType::F32)), (DType::F16, Some(DType::BF16))] {
            let mut spec = RandomSpec::new(vocab, REQUESTS * scale, MAX_DRAFTS, dtype, draft);
            spec.temperatures = &[0.0];
            let mut v = random_verify(&mut rng, spec);
            tied_logits(&mut rng, &mut v);
            for r in 0..v.requests() {
                let (row0, n) = (v.offsets[r] as usize, (v.offsets[r + 1] - v.offsets[r] - 1) as usize);
                let mismatch = rng.below(n + 1);
                for i in 0..n {
                    let argmax = first_argmax(&target_row(&v, row0 + i));
                    v.drafts[row0 + i] = if i == mismatch { ((argmax + 1) % vocab) as i32 } else { argmax as i32 };
                }
            }
            let ctx = format!("greedy V {vocab} {dtype:?} draft {draft:?}");
            let want = certain_outputs(&v, &[], |_, _| unreachable!("every request is greedy"));
            let got = run(&backend, &v, &ctx);
            if vocab > 1 {
                let chains: Vec<usize> = (0..v.requests()).map(|r| got.num_emitted[r] as usize).collect();
                assert!(chains.iter().any(|&e| e > 2), "{ctx}: no chain longer than 2 ({chains:?}); inputs broke");
            }
            assert_outputs(&v, &got, &want, &ctx);
        }
    }
});

/// Drafts per request in the placeholder test (every sixth request has none),
/// and where its placeholders go, by request.
const PLACEHOLDER_K: usize = 5;
const PLACEHOLDERS: [[bool; PLACEHOLDER_K]; 5] = [
    [true; PLACEHOLDER_K],
    [false, false, false, true, true],
    [false, true, false, false, false],
    [true, false, false, false, false],
    [false; PLACEHOLDER_K],
];

test_device!(placeholders_stop_verification_and_sample_their_row, |backend, scale| {
    // q == p, so every real draft passes: placeholders everywhere, at the end,
    // in the middle with real drafts after them. Nothing after a placeholder
    // is accepted, and the placeholder's row emits the target sample; a
    // request without drafts emits its bonus row's target sample.
    let mut rng = Rng::new(0x91AC);
    for dtype in [DType::F32, DType::BF16] {
        let mut spec = RandomSpec::new(999, 60 * scale, PLACEHOLDER_K, dtype, None);
        spec.drafts_of = Some(|r| if r % 6 == 5 { 0 } else { PLACEHOLDER_K });
        let mut v = random_verify(&mut rng, spec);
        snap_to_grid(&mut v);
        for r in 0..v.requests() {
            let row0 = v.offsets[r] as usize;
            let pattern = &PLACEHOLDERS[r % PLACEHOLDERS.len()][..v.offsets[r + 1] as usize - row0 - 1];
            for (i, &placeholder) in pattern.iter().enumerate() {
                let argmax = first_argmax(&target_row(&v, row0 + i)) as i32;
                v.drafts[row0 + i] = if placeholder { -1 } else { argmax };
            }
        }
        v.draft = Some(draft_logits_like(&mut rng, &v, dtype, 0.0));
        let ctx = format!("placeholders {dtype:?}");
        let want = certain_outputs(&v, &target_samples(&v, &backend), |_, _| true);
        let got = run(&backend, &v, &ctx);
        assert_outputs(&v, &got, &want, &ctx);
        for (r, e) in got.num_emitted.iter().enumerate() {
            let stop = PLACEHOLDERS[r % PLACEHOLDERS.len()].iter().position(|&p| p).unwrap_or(PLACEHOLDER_K);
            let n = v.offsets[r + 1] - v.offsets[r] - 1;
            assert!(*e as usize == stop.min(n as usize) + 1, "{ctx}: request {r} emitted {e}");
        }
    }
});

test_device!(requests_without_drafts_emit_the_gumbel_sample_token, |backend, scale| {
    // n_r = 0 (plain decoding) beside K = 3: the bonus token is exactly
    // gumbel_sample's token for the row (SPEC §4), whatever the mode.
    let mut rng = Rng::new(0xB0B);
    for (vocab, dtype, draft) in [(1, DType::F32, None), (999, DType::BF16, Some(DType::F32)), (4097, DType::F16, None)]
    {
        let mut spec = RandomSpec::new(vocab, REQUESTS * scale, 3, dtype, draft);
        spec.drafts_of = Some(|_| 0);
        let v = random_verify(&mut rng, spec);
        let ctx = format!("no drafts V {vocab} {dtype:?} draft {draft:?}");
        let want = certain_outputs(&v, &target_samples(&v, &backend), |_, _| unreachable!("no drafts"));
        assert_outputs(&v, &run(&backend, &v, &ctx), &want, &ctx);
    }
});

/// A tail logit so low that `e^(x - max)` underflows to exactly 0 in the
/// log-sum-exp (below -87.3), and the draft model's, one higher.
const TAIL_TARGET: f32 = -100.0;
const TAIL_DRAFT: f32 = -99.0;

test_device!(a_residual_rounded_to_nothing_falls_back_to_the_target, |backend, scale| {
    // Draft logits equal to the target but for one tail id y, one higher;
    // both rows' log-sum-exps ignore y (its term underflows), so they are
    // equal, and log q - log p is 0 at every other id and 1 at y. Proposing y
    // is rejected iff the acceptance variate E <= 1 (63%), and then the
    // residual max(p - q, 0), positive in exact arithmetic, rounds to -inf
    // everywhere. The fallback samples the target (the target sample), never
    // the masked id 0 (which an all -inf Gumbel-max would return).
    let (vocab, y) = (64, 63);
    let mut rng = Rng::new(0xFA11);
    let mut spec = RandomSpec::new(vocab, 256 * scale, 1, DType::F32, None);
    spec.drafts_of = Some(|_| 1);
    spec.temperatures = &[1.0];
    let mut v = random_verify(&mut rng, spec);
    for j in 0..v.rows {
        set_target(&mut v, j, 0, f32::NEG_INFINITY);
        set_target(&mut v, j, y, TAIL_TARGET);
    }
    v.slots.iter_mut().enumerate().for_each(|(r, s)| *s = r as i32);
    v.draft = Some(draft_logits_like(&mut rng, &v, DType::F32, 0.0));
    for r in 0..v.requests() {
        v.drafts[v.offsets[r] as usize] = y as i32;
        let (values, shape) = v.draft.as_mut().expect("draft logits");
        values.store_converted(r * shape.stride0 + y, &Values::F32(vec![TAIL_DRAFT]), 0);
    }
    let accept = |j: usize, _| {
        let word = specdec::rng::random_u32(v.seed[v.slots[request_of_rows(&v)[j]] as usize], v.pos[j], Accept, 0);
        f64::from(specdec::noise::exponential(word)) > f64::from(TAIL_DRAFT - TAIL_TARGET)
    };
    let want = certain_outputs(&v, &target_samples(&v, &backend), accept);
    let got = run(&backend, &v, "empty residual");
    let rejected = got.num_emitted.iter().filter(|&&e| e == 1).count();
    assert!(rejected > v.requests() / 3, "only {rejected} of {} rejections; inputs broke", v.requests());
    if let Some(r) = (0..v.requests()).find(|&r| got.request(r).contains(&0)) {
        panic!("request {r} emitted the masked id 0: {:?}", got.request(r));
    }
    assert_outputs(&v, &got, &want, "empty residual");
});

/// SPEC §4: a request whose drafts are all accepted samples its bonus row,
/// which has no draft logits. Regression: the CPU backend's `resample` once
/// evaluated `rejected.and(self.draft_row(i))`, eagerly slicing draft column
/// `n_r` for the bonus row: with `n_r = k` that column is past the slot, and
/// past the buffer for the last slot of a dense layout, so a valid call panicked.
#[test]
fn cpu_bonus_row_reads_past_the_draft_logits() {
    let row = [0.0f32, 1.0, 2.0, 3.0];
    let mut v = Verify::new(Values::F32([row, row].concat()), 4, &[1], 1, 1.0);
    v.drafts[0] = 2;
    // q == p: the draft is accepted and the bonus row sampled.
    v.draft = Some((Values::F32(row.to_vec()), DraftLogitsShape::dense(1, 1, 4)));
    let out = v.run(&Backend::cpu()).expect("a valid call");
    assert_eq!(out.num_emitted, [2]);
}

// --- NaN rows (SPEC §4 outputs, `specdec::status::NAN_LOGITS`) ----------------

test_device!(nan_rows_are_flagged_and_emit_ids_in_range, |backend, scale| {
    // One row in four all NaN, one in four with a single NaN: every emitted
    // id is in 0..V (and never a NaN id of a row that has other values),
    // padding is -1, and exactly the NaN rows are flagged.
    let mut rng = Rng::new(0x4A4);
    for vocab in [1, 999, 4097] {
        for (target, draft) in [(DType::F32, None), (DType::BF16, Some(DType::F32)), (DType::F16, Some(DType::BF16))] {
            let mut v = random_verify(&mut rng, RandomSpec::new(vocab, REQUESTS * scale, MAX_DRAFTS, target, draft));
            let mut nan = vec![false; v.rows];
            for (j, flag) in nan.iter_mut().enumerate() {
                let one = rng.below(vocab);
                let ids = match rng.below(4) {
                    0 => 0..vocab,
                    1 => one..one + 1,
                    _ => continue,
                };
                ids.for_each(|x| set_target(&mut v, j, x, f32::NAN));
                *flag = true;
            }
            let ctx = format!("NaN rows V {vocab} {target:?} draft {draft:?}");
            let got = run(&backend, &v, &ctx);
            for r in 0..v.requests() {
                let (row0, n) = (v.offsets[r] as usize, (v.offsets[r + 1] - v.offsets[r] - 1) as usize);
                let e = got.num_emitted[r] as usize;
                assert!((1..=n + 1).contains(&e), "{ctx}: request {r} emitted {e} of {}", n + 1);
                for (i, &t) in got.request(r).iter().enumerate() {
                    if i >= e {
                        assert_eq!(t, -1, "{ctx}: request {r} position {i} past the emitted tokens");
                        continue;
                    }
                    assert!((0..vocab as i64).contains(&t), "{ctx}: request {r} position {i}: id {t}");
                    let row = target_row(&v, row0 + i);
                    let other_values = row.iter().any(|x| !x.is_nan());
                    assert!(!other_values || !row[t as usize].is_nan(), "{ctx}: request {r} emitted NaN id {t}");
                }
            }
            let want: Vec<u32> = nan.iter().map(|&f| if f { NAN_LOGITS } else { 0 }).collect();
            assert_eq!(got.row_status, want, "{ctx}: row status");
        }
    }
});

// --- Batch composition and token width (SPEC §2.1) ----------------------------

/// Cut points splitting the composition batch into several calls (× scale).
const CHUNK_CUTS: [usize; 3] = [1, 7, 20];

test_device!(chunking_permutation_and_token_width_change_nothing, |backend, scale| {
    let mut rng = Rng::new(0xC4A1);
    let requests = 40 * scale;
    for (vocab, target, draft) in
        [(999, DType::F32, Some(DType::BF16)), (4097, DType::BF16, None), (1000, DType::F16, Some(DType::F32))]
    {
        let v = random_verify(&mut rng, RandomSpec::new(vocab, requests, MAX_DRAFTS, target, draft));
        let ctx = format!("V {vocab} {target:?} draft {draft:?}");
        let full = run(&backend, &v, &ctx);

        let cuts: Vec<usize> = [0].into_iter().chain(CHUNK_CUTS.map(|c| c * scale)).chain([requests]).collect();
        let parts = cuts.windows(2).map(|w| run(&backend, &slice_requests(&v, w[0]..w[1]), &ctx)).collect();
        assert_eq!(concat(parts), full, "{ctx}: split at {cuts:?}");

        let mut order: Vec<usize> = (0..requests).collect();
        rng.shuffle(&mut order);
        let permuted = run(&backend, &select_requests(&v, &order), &ctx);
        let want =
            concat(order.iter().map(|&r| slice_requests(&v, r..r + 1)).map(|one| run(&backend, &one, &ctx)).collect());
        assert_eq!(permuted, want, "{ctx}: permuted requests");
        for (k, &r) in order.iter().enumerate() {
            assert_eq!(permuted.request(k), full.request(r), "{ctx}: request {r} moved to {k}");
        }

        let mut wide = v.clone();
        wide.tokens_i64 = !v.tokens_i64;
        assert_eq!(run(&backend, &wide, &ctx), full, "{ctx}: i64 tokens {}", wide.tokens_i64);
    }
});
