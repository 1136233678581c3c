//! Log-probabilities of emitted tokens (REFERENCE §8) on both backends:
//! against an f64 reference of each row's log-softmax (filtered or not)
//! within the documented tolerance, top-n ids and ranks exactly (ties
//! included), the positions past a request's emitted tokens, and the
//! checks on the outputs' shapes.

use specdec::filter::Filter;
use specdec::{
    DType, Distribution, Error, GumbelOutput, GumbelSample, Logits, Logprobs, MAX_TOP_LOGPROBS, RejectionOutput,
    RejectionSample, SamplingParams, Verification,
};
use specdec_suite::batch::Values;
use specdec_suite::filters::{FilterTable, filtered_log_probs};
use specdec_suite::inputs::{Rng, mixed_logits};
use specdec_suite::test_device;
use specdec_suite::verify::Verify;

/// REFERENCE §8.3: a log-probability is within `2^-18 · max(1, |LSE|)` of the
/// f64 value, `LSE` the f64 log-sum-exp of its distribution.
fn tolerance(lse: f64) -> f64 {
    2f64.powi(-18) * lse.abs().max(1.0)
}

/// The f64 log-sum-exp of `row` (raw values) under temperature `t` and `filter`:
/// what [`filtered_log_probs`] normalises by.
fn lse_f64(row: &[f32], t: f32, filter: Filter) -> f64 {
    let lp = filtered_log_probs(row, t, filter);
    // Any kept id: its scaled value less its log-probability.
    let at = lp.iter().position(|v| v.is_finite()).expect("a kept id");
    f64::from(row[at] * (1.0 / t)) - lp[at]
}

/// The f64 reference of one emitted position: its distribution's
/// log-probabilities and log-sum-exp, by how its token was drawn (greedy:
/// the raw row, at `T = 1`).
fn reference(row: &[f32], t: f32, filter: Filter, dist: Distribution) -> (Vec<f64>, f64) {
    let (t, filter) = if t == 0.0 || dist == Distribution::Raw { (1.0, Filter::OFF) } else { (t, filter) };
    (filtered_log_probs(row, t, filter), lse_f64(row, t, filter))
}

/// Outputs of one call's log-probabilities, owned.
struct Got {
    processed: Vec<f32>,
    raw: Vec<f32>,
    top: Vec<f32>,
    ids: Vec<i32>,
    ranks: Vec<i32>,
}

impl Got {
    fn new(positions: usize, n: usize) -> Self {
        Got {
            processed: vec![0.5; positions],
            raw: vec![0.5; positions],
            top: vec![0.5; positions * n],
            ids: vec![i32::MIN; positions * n],
            ranks: vec![i32::MIN; positions],
        }
    }

    fn outputs(&mut self, n: usize, dist: Distribution) -> Logprobs<'_, specdec::Host> {
        Logprobs::none().with_processed(&mut self.processed).with_raw(&mut self.raw).with_top(
            n,
            dist,
            &mut self.top,
            &mut self.ids,
            &mut self.ranks,
        )
    }
}

/// Checks position `at` of `got` (token `token`, drawn from `row` under
/// `t` and `filter`) against the f64 reference: the token's two
/// log-probabilities (the processed alone where `got` has no raw ones), then the top-n (each within tolerance of its id's
/// reference, in the argmax's order, none left out that is clearly larger
/// than the last listed) and the rank (within the ids clearly larger or smaller).
#[allow(clippy::too_many_arguments)]
fn check_position(
    got: &Got,
    at: usize,
    n: usize,
    dist: Distribution,
    row: &[f32],
    t: f32,
    filter: Filter,
    token: usize,
    ctx: &str,
) {
    let raw = (!got.raw.is_empty()).then(|| (Distribution::Raw, got.raw[at]));
    for (d, value) in [(Distribution::Processed, got.processed[at])].into_iter().chain(raw) {
        let (lp, lse) = reference(row, t, filter, d);
        let tol = tolerance(lse);
        assert!(lp[token] > f64::NEG_INFINITY, "{ctx}: the emitted token {token} is possible ({d:?})");
        assert!(
            (f64::from(value) - lp[token]).abs() <= tol,
            "{ctx}, position {at}, {d:?}: logprob {value} against {} (tolerance {tol:e})",
            lp[token]
        );
    }
    let (lp, lse) = reference(row, t, filter, dist);
    let tol = tolerance(lse);
    let (top, ids) = (&got.top[at * n..(at + 1) * n], &got.ids[at * n..(at + 1) * n]);
    for k in 0..n {
        let id = ids[k] as usize;
        assert!(id < row.len(), "{ctx}: top id {id}");
        let (v, want) = (f64::from(top[k]), lp[id]);
        assert!(v == want || (v - want).abs() <= tol, "{ctx}: top {k} (id {id}) is {v}, reference {want}");
        if k > 0 {
            let (prev, prev_id) = (top[k - 1], ids[k - 1]);
            assert!(prev > top[k] || (prev == top[k] && prev_id < ids[k]), "{ctx}: top {k} out of order");
        }
    }
    let last = f64::from(top[n - 1]);
    for (id, &v) in lp.iter().enumerate() {
        assert!(ids.contains(&(id as i32)) || v <= last + 2.0 * tol, "{ctx}: id {id} ({v}) left out of the top {n}");
    }
    let mine = lp[token];
    let (surely, maybe) = (
        lp.iter().filter(|&&v| v > mine + 2.0 * tol).count() as i32,
        lp.iter().filter(|&&v| v > mine - 2.0 * tol).count() as i32,
    );
    let rank = got.ranks[at];
    assert!((1 + surely..=maybe).contains(&rank), "{ctx}: rank {rank} outside {}..={maybe}", 1 + surely);
}

/// Greedy, random and filtered slots.
const SLOTS: [(f32, Filter); 5] = [
    (0.0, Filter::OFF),
    (0.7, Filter::OFF),
    (1.3, Filter::OFF),
    (0.8, Filter { top_k: 50, top_p: 1.0, min_p: 0.0 }),
    (1.0, Filter { top_k: 0, top_p: 0.9, min_p: 0.05 }),
];

// `gumbel_sample`'s log-probabilities, every slot kind, every dtype, rows
// with `-inf` entries, against the f64 reference.
test_device!(gumbel_logprobs_match_the_f64_reference, |backend, scale| {
    for vocab in [1usize, 999, 4097, 151_936] {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for dist in [Distribution::Processed, Distribution::Raw] {
                let rows = SLOTS.len();
                let raw: Vec<f32> = (0..rows).flat_map(|r| mixed_logits(vocab, 7 + r as u64)).collect();
                let logits = Values::from_f32(dtype, &raw);
                let widened = logits.f32s(0..raw.len());
                let slots: Vec<i32> = (0..rows as i32).collect();
                let pos: Vec<u64> = (0..rows as u64).map(|r| 40 + r).collect();
                let temperature: Vec<f32> = SLOTS.iter().map(|s| s.0).collect();
                let seed: Vec<u64> = (0..rows as u64).map(|r| 77 + r).collect();
                let table = FilterTable::per_slot(&SLOTS.map(|s| s.1));
                let params = SamplingParams::new(&temperature, &seed).with_filters(table.view());
                let call = GumbelSample::new(
                    Logits { data: logits.view(), rows, vocab, row_stride: vocab },
                    &slots,
                    &pos,
                    params,
                );
                let n = MAX_TOP_LOGPROBS.min(vocab);
                let mut tokens = vec![0i32; rows];
                let mut got = Got::new(rows, n);
                let mut out = GumbelOutput::new(&mut tokens).with_logprobs(got.outputs(n, dist));
                backend.gumbel_sample(&call, &mut out).expect("a valid call");
                for (r, &(t, filter)) in SLOTS.iter().enumerate() {
                    let row = &widened[r * vocab..(r + 1) * vocab];
                    let ctx = format!("V {vocab}, {dtype:?}, {dist:?}, slot {r} (T {t}, {filter:?})");
                    check_position(&got, r, n, dist, row, t, filter, tokens[r] as usize, &ctx);
                }
            }
        }
    }
});

// A drafter storing f32 logits as bf16 samples the stored values (SPEC
// §3.3) and reports their log-probabilities: within tolerance of the f64
// reference over the rounded row, and apart from the unrounded row's.
test_device!(drafting_into_rounding_draft_logits_reports_the_stored_values, |backend, scale| {
    use specdec::{Column, DraftLogitsMut, DraftLogitsShape};
    let vocab = 4097;
    let row: Vec<f32> = mixed_logits(vocab, 21).iter().map(|x| x * 1.37 + 0.001).collect();
    let stored: Vec<f32> = row.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect();
    let (temperature, seed) = ([0.8f32], [3u64]);
    let call =
        GumbelSample::new(Logits::new(&row, 1, vocab), &[0], &[5], SamplingParams::new(&temperature, &seed)).drafting();
    let mut cache = vec![half::bf16::ZERO; 2 * vocab];
    let (mut tokens, mut processed) = ([0i32], [0f32]);
    let draft = DraftLogitsMut::new(&mut cache[..], DraftLogitsShape::dense(1, 2, vocab));
    let mut out = GumbelOutput::new(&mut tokens)
        .with_draft_logits(draft, Column::All(1))
        .with_logprobs(Logprobs::none().with_processed(&mut processed));
    backend.gumbel_sample(&call, &mut out).expect("a valid call");
    let token = tokens[0] as usize;
    let (lp, lse) = reference(&stored, 0.8, Filter::OFF, Distribution::Processed);
    let got = f64::from(processed[0]);
    assert!((got - lp[token]).abs() <= tolerance(lse), "{got} against the stored row's {}", lp[token]);
    let (unrounded, _) = reference(&row, 0.8, Filter::OFF, Distribution::Processed);
    assert!((got - unrounded[token]).abs() > 10.0 * tolerance(lse), "the stored row's, not the logits'");
});

// A drafting batch into rounding draft logits, per-row columns: the rows of
// a slot (sampling or greedy) report the stored values they were sampled
// from, a padding row (slot -1, nothing stored) its logits; every output
// against the reference of those values (on CUDA, two launches of the
// log-probability kernels, one for each kind of row).
test_device!(a_rounding_drafting_batch_reports_each_rows_own_values, |backend, scale| {
    use specdec::{Column, DraftLogitsMut, DraftLogitsShape};
    let (vocab, n) = (999usize, 5usize);
    let slots = [-1i32, 0, 1, 0];
    let columns = [0i32, 1, 0, 2];
    let rows = slots.len();
    let raw: Vec<f32> =
        (0..rows).flat_map(|r| mixed_logits(vocab, 60 + r as u64).into_iter().map(|x| x * 1.37 + 0.001)).collect();
    let (temperature, seed) = ([0.8f32, 0.0], [3u64, 4]);
    let pos: Vec<u64> = (0..rows as u64).map(|r| 9 + r).collect();
    let call =
        GumbelSample::new(Logits::new(&raw, rows, vocab), &slots, &pos, SamplingParams::new(&temperature, &seed))
            .drafting();
    let mut cache = vec![half::bf16::ZERO; 2 * 3 * vocab];
    let mut tokens = vec![0i32; rows];
    let mut got = Got::new(rows, n);
    let draft = DraftLogitsMut::new(&mut cache[..], DraftLogitsShape::dense(2, 3, vocab));
    let mut out = GumbelOutput::new(&mut tokens)
        .with_draft_logits(draft, Column::per_row(&columns[..]))
        .with_logprobs(got.outputs(n, Distribution::Processed));
    backend.gumbel_sample(&call, &mut out).expect("a valid call");
    for (r, &slot) in slots.iter().enumerate() {
        let logits = &raw[r * vocab..(r + 1) * vocab];
        let values: Vec<f32> = if slot >= 0 {
            logits.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect()
        } else {
            logits.to_vec()
        };
        let t = if slot >= 0 { temperature[slot as usize] } else { 0.0 };
        let ctx = format!("row {r} (slot {slot}, T {t})");
        check_position(&got, r, n, Distribution::Processed, &values, t, Filter::OFF, tokens[r] as usize, &ctx);
    }
});

// Rows of a few levels, each tied many times, and `-inf`: the top-n ids
// are the levels' ids in order, the smaller id first within a level, and
// the rank counts the ids of larger levels; exactly, for both
// distributions, filtered or not (`T = 0.5` scales exactly).
test_device!(top_ids_and_ranks_are_exact_with_ties, |backend, scale| {
    let levels = [2.0f32, 1.0, 0.5, -1.0, f32::NEG_INFINITY];
    for vocab in [7usize, 999, 4097] {
        let mut rng = Rng::new(vocab as u64);
        let row: Vec<f32> = (0..vocab).map(|_| levels[rng.below(levels.len())]).collect();
        for (t, filter) in
            [(1.0f32, Filter::OFF), (0.5, Filter::OFF), (0.5, Filter { top_k: 3, ..Filter::OFF }), (0.0, Filter::OFF)]
        {
            for dist in [Distribution::Processed, Distribution::Raw] {
                let n = MAX_TOP_LOGPROBS.min(vocab);
                let (temperature, seed, table) = ([t], [5u64], FilterTable::per_slot(&[filter]));
                let params = SamplingParams::new(&temperature, &seed).with_filters(table.view());
                let call = GumbelSample::new(Logits::new(&row, 1, vocab), &[0], &[9], params);
                let mut tokens = [0i32];
                let mut got = Got::new(1, n);
                backend
                    .gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens).with_logprobs(got.outputs(n, dist)))
                    .expect("a valid call");
                // The distribution's key of each id: its level, or -inf off the kept set.
                let (lp, _) = reference(&row, t, filter, dist);
                let key = |i: usize| if lp[i] == f64::NEG_INFINITY { f32::NEG_INFINITY } else { row[i] };
                let mut order: Vec<usize> = (0..vocab).collect();
                order.sort_by(|&a, &b| key(b).partial_cmp(&key(a)).unwrap().then(a.cmp(&b)));
                let want: Vec<i32> = order[..n].iter().map(|&i| i as i32).collect();
                let ctx = format!("V {vocab}, T {t}, {filter:?}, {dist:?}");
                assert_eq!(got.ids, want, "{ctx}: top ids");
                let token = tokens[0] as usize;
                let rank = 1 + (0..vocab).filter(|&i| key(i) > key(token)).count() as i32;
                assert_eq!(got.ranks[0], rank, "{ctx}: rank of {token}");
            }
        }
    }
});

// `rejection_sample`'s log-probabilities: each emitted position's token
// under its own target row, greedy requests at `T = 1` (processed equal to
// raw), NaN and `-1` past `num_emitted`; under every verification rule.
test_device!(rejection_logprobs_cover_the_emitted_positions, |backend, scale| {
    let (vocab, k) = (4097usize, 3usize);
    for dtype in [DType::F32, DType::BF16] {
        let n_r = [3usize, 0, 2, 3, 1];
        let rows: usize = n_r.iter().map(|n| n + 1).sum();
        let raw: Vec<f32> = (0..rows).flat_map(|r| mixed_logits(vocab, 300 + r as u64)).collect();
        let mut v = Verify::new(Values::from_f32(dtype, &raw), vocab, &n_r, k, 1.0);
        v.temperature = SLOTS.iter().map(|s| s.0).collect();
        v.filters = FilterTable::per_slot(&SLOTS.map(|s| s.1));
        let widened = v.target.f32s(0..raw.len());
        // Drafts: each row's argmax half the time (so some are accepted), else a random id.
        let mut rng = Rng::new(11);
        for (r, &n) in n_r.iter().enumerate() {
            for i in 0..n {
                let row = v.offsets[r] as usize + i;
                let values = &widened[row * vocab..(row + 1) * vocab];
                let best = specdec_suite::inputs::first_argmax(values);
                v.drafts[row] = if rng.below(2) == 0 { best as i32 } else { rng.below(vocab) as i32 };
            }
        }
        let k1 = k + 1;
        let positions = n_r.len() * k1;
        let rates = [0.9f32; 3];
        let rules = [Verification::Token, Verification::Block, Verification::Synthetic(&rates)];
        for (dist, verification) in
            [Distribution::Processed, Distribution::Raw].into_iter().flat_map(|d| rules.map(|v| (d, v)))
        {
            let n = 5;
            let (mut tokens, mut emitted) = (vec![0i32; positions], vec![0i32; n_r.len()]);
            let mut got = Got::new(positions, n);
            let call = RejectionSample { verification, ..v.call() };
            let mut out = RejectionOutput::new(&mut tokens, &mut emitted).with_logprobs(got.outputs(n, dist));
            backend.rejection_sample(&call, &mut out).expect("a valid call");
            let mut drawn = 0;
            for r in 0..n_r.len() {
                let (t, filter) = SLOTS[r];
                for i in 0..k1 {
                    let at = r * k1 + i;
                    let ctx =
                        format!("{dtype:?}, {dist:?}, {verification:?}, request {r} (T {t}, {filter:?}), position {i}");
                    if i as i32 >= emitted[r] {
                        assert!(got.processed[at].is_nan() && got.raw[at].is_nan(), "{ctx}: past the emitted tokens");
                        assert!(got.ids[at * n..(at + 1) * n].iter().all(|&id| id == -1), "{ctx}: top ids past");
                        assert_eq!(got.ranks[at], -1, "{ctx}: rank past");
                        continue;
                    }
                    drawn += 1;
                    let row = v.offsets[r] as usize + i;
                    let values = &widened[row * vocab..(row + 1) * vocab];
                    check_position(&got, at, n, dist, values, t, filter, tokens[at] as usize, &ctx);
                    if t == 0.0 {
                        assert_eq!(got.processed[at].to_bits(), got.raw[at].to_bits(), "{ctx}: greedy is raw");
                    }
                }
            }
            assert!(drawn > n_r.len(), "some drafts were accepted ({drawn} positions)");
            // The processed distribution alone (on CUDA, the verifier's own
            // passes write the log-probabilities and their log-sum-exps, and
            // the top-n kernel alone runs after the call): the processed
            // log-probabilities, then with the top-n of the processed
            // distribution; the same tokens, every position against the
            // reference, NaN and -1 past the emitted tokens.
            for top in [false, true] {
                let (mut alone_tokens, mut alone_emitted) = (vec![0i32; positions], vec![0i32; n_r.len()]);
                let mut alone = Got { raw: Vec::new(), ..Got::new(positions, n) };
                let Got { processed, top: top_logprobs, ids, ranks, .. } = &mut alone;
                let mut outputs = Logprobs::none().with_processed(processed);
                if top {
                    outputs = outputs.with_top(n, Distribution::Processed, top_logprobs, ids, ranks);
                }
                let mut out = RejectionOutput::new(&mut alone_tokens, &mut alone_emitted).with_logprobs(outputs);
                backend.rejection_sample(&call, &mut out).expect("a valid call");
                assert_eq!((&alone_tokens, &alone_emitted), (&tokens, &emitted), "{dtype:?}, {verification:?}: tokens");
                for at in 0..positions {
                    let (r, i) = (at / k1, at % k1);
                    let ctx =
                        format!("{dtype:?}, {verification:?}, processed alone (top {top}), request {r}, position {i}");
                    if i as i32 >= emitted[r] {
                        assert!(alone.processed[at].is_nan(), "{ctx}: past the emitted tokens");
                        if top {
                            assert!(alone.ids[at * n..(at + 1) * n].iter().all(|&id| id == -1), "{ctx}: top ids past");
                            assert_eq!(alone.ranks[at], -1, "{ctx}: rank past");
                        }
                        continue;
                    }
                    let (t, filter) = SLOTS[r];
                    let row = v.offsets[r] as usize + i;
                    let values = &widened[row * vocab..(row + 1) * vocab];
                    if top {
                        check_position(
                            &alone,
                            at,
                            n,
                            Distribution::Processed,
                            values,
                            t,
                            filter,
                            tokens[at] as usize,
                            &ctx,
                        );
                    } else {
                        let (lp, lse) = reference(values, t, filter, Distribution::Processed);
                        let (got, want) = (f64::from(alone.processed[at]), lp[tokens[at] as usize]);
                        assert!((got - want).abs() <= tolerance(lse), "{ctx}: {got} against {want}");
                    }
                }
            }
        }
    }
});

// A request's processed log-probabilities are the same bits whatever else
// the call asks for (raw ones, a top-n of either distribution): on CUDA they
// come from the verifier's own `LSE(S)` in every case, where a call asking
// for raw ones once took them from the raw kernel's sums, which differ in
// the last bits for a top-k request (its kept set summed a term a kept
// value in pass 1; the two differ where a run of 16 ids holds several kept
// values, so each row also holds a block of its top-k's size of large,
// consecutive values). Filtered requests of every kind, greedy and
// unfiltered ones among them, one-hot drafts and draft logits; the top-n of
// the processed distribution the same bits too.
test_device!(processed_logprobs_do_not_depend_on_what_else_is_asked, |backend, scale| {
    use specdec_suite::drafting::draft_logits_like;
    use specdec_suite::verify::Asked;
    let filters = [
        Filter { top_k: 50, ..Filter::OFF },
        Filter { top_k: 1, ..Filter::OFF },
        Filter { top_k: 256, top_p: 0.9, min_p: 0.0 },
        Filter { top_k: 1000, top_p: 1.0, min_p: 0.02 },
        Filter { top_k: 7, top_p: 0.5, min_p: 0.1 },
        Filter { top_k: 0, top_p: 0.9, min_p: 0.0 },
        Filter { top_k: 0, top_p: 1.0, min_p: 0.05 },
        Filter::OFF,
    ];
    let temperatures = [0.8f32, 1.0, 0.6, 1.3, 0.9, 1.1, 0.7, 0.0];
    let (vocab, k) = (if scale > 1 { 151_936 } else { 32_000 }, 3usize);
    let mut rng = Rng::new(91);
    for dtype in [DType::F32, DType::BF16] {
        for draft_logits in [false, true] {
            let requests = 8 * filters.len();
            let n_r: Vec<usize> = (0..requests).map(|_| rng.below(k + 1)).collect();
            let rows: usize = n_r.iter().map(|n| n + 1).sum();
            let mut raw: Vec<f32> = (0..rows).flat_map(|r| mixed_logits(vocab, 500 + r as u64)).collect();
            for (r, &n) in n_r.iter().enumerate() {
                let width = (filters[r % filters.len()].top_k as usize).clamp(64, 1000);
                let row0 = (0..r).map(|q| n_r[q] + 1).sum::<usize>();
                for row in row0..=row0 + n {
                    let start = row * vocab + 16 * rng.below((vocab - width) / 16);
                    for x in &mut raw[start..start + width] {
                        *x = 6.0 + rng.uniform(-1.0, 1.0);
                    }
                }
            }
            let mut v = Verify::new(Values::from_f32(dtype, &raw), vocab, &n_r, k, 1.0);
            v.temperature = (0..requests).map(|r| temperatures[r % filters.len()]).collect();
            v.filters = FilterTable::per_slot(&(0..requests).map(|r| filters[r % filters.len()]).collect::<Vec<_>>());
            let widened = v.target.f32s(0..raw.len());
            // Drafts: each row's argmax half the time (so some are accepted), else a random id.
            for (r, &n) in n_r.iter().enumerate() {
                for i in 0..n {
                    let row = v.offsets[r] as usize + i;
                    let best = specdec_suite::inputs::first_argmax(&widened[row * vocab..(row + 1) * vocab]);
                    v.drafts[row] = if rng.below(2) == 0 { best as i32 } else { rng.below(vocab) as i32 };
                }
            }
            if draft_logits {
                v.draft = Some(draft_logits_like(&mut rng, &v, DType::BF16, 0.5));
            }
            let ctx = format!("{dtype:?}, draft logits {draft_logits}");
            let asked = |raw: bool, top: Option<Distribution>| Asked { processed: true, raw, top: top.map(|d| (5, d)) };
            let (alone_tokens, alone) = v.run_logprobs(&backend, Some(asked(false, None))).expect("a valid call");
            let (_, alone_top) =
                v.run_logprobs(&backend, Some(asked(false, Some(Distribution::Processed)))).expect("a valid call");
            assert_eq!(alone_top.processed, alone.processed, "{ctx}: with a processed top-n");
            for (raw, top) in [(true, None), (true, Some(Distribution::Processed)), (false, Some(Distribution::Raw))] {
                let (tokens, got) = v.run_logprobs(&backend, Some(asked(raw, top))).expect("a valid call");
                let ctx = format!("{ctx}, raw {raw}, top {top:?}");
                assert_eq!(tokens, alone_tokens, "{ctx}: tokens");
                for (at, (&a, &b)) in alone.processed.iter().zip(&got.processed).enumerate() {
                    assert_eq!(a, b, "{ctx}, position {at}: {} against {} alone", f32::from_bits(b), f32::from_bits(a));
                }
                if top == Some(Distribution::Processed) {
                    assert_eq!(
                        (&got.top, &got.ids, &got.ranks),
                        (&alone_top.top, &alone_top.ids, &alone_top.ranks),
                        "{ctx}: top-n"
                    );
                }
            }
            assert!(alone_tokens.num_emitted.iter().sum::<i32>() as usize > requests, "{ctx}: some drafts accepted");
        }
    }
});

// A NaN logit is an impossible id (log-probability `-inf`, as for the
// argmax): the row's log-probabilities are those of the row without it.
test_device!(a_nan_logit_is_an_impossible_id, |backend, scale| {
    let mut row = mixed_logits(999, 3);
    row[17] = f32::NAN;
    let (temperature, seed) = ([0.9f32], [1u64]);
    let call = GumbelSample::new(Logits::new(&row, 1, 999), &[0], &[2], SamplingParams::new(&temperature, &seed));
    let mut tokens = [0i32];
    let mut got = Got::new(1, 0);
    let mut out = GumbelOutput::new(&mut tokens).with_logprobs(got.outputs(0, Distribution::Raw));
    backend.gumbel_sample(&call, &mut out).expect("a valid call");
    let token = tokens[0] as usize;
    for (d, value) in [(Distribution::Processed, got.processed[0]), (Distribution::Raw, got.raw[0])] {
        let (lp, lse) = reference(&row, 0.9, Filter::OFF, d);
        assert!((f64::from(value) - lp[token]).abs() <= tolerance(lse), "{d:?}: {value} against {}", lp[token]);
    }
    let mut top = (vec![0f32; 999], vec![0i32; 999], [0i32]);
    let out =
        Logprobs::none().with_top(MAX_TOP_LOGPROBS, Distribution::Raw, &mut top.0[..20], &mut top.1[..20], &mut top.2);
    backend.gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens).with_logprobs(out)).expect("a valid call");
    assert!(!top.1[..20].contains(&17), "the NaN id is not among the most likely");
});

// More than `MAX_TOP_LOGPROBS`, and outputs of the wrong length, are
// typed errors before anything is written; `n = 0` gives the ranks alone.
test_device!(logprob_outputs_are_checked, |backend, scale| {
    let row = mixed_logits(999, 4);
    let (temperature, seed) = ([0.9f32], [1u64]);
    let call = GumbelSample::new(Logits::new(&row, 1, 999), &[0], &[2], SamplingParams::new(&temperature, &seed));
    let n = MAX_TOP_LOGPROBS + 1;
    let (mut tokens, mut top, mut ids, mut ranks) = ([-7i32], vec![0f32; n], vec![0i32; n], [0i32]);
    let out = Logprobs::none().with_top(n, Distribution::Raw, &mut top, &mut ids, &mut ranks);
    let err = backend.gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens).with_logprobs(out)).unwrap_err();
    assert!(matches!(err, Error::TopLogprobs { n: 21, max: 20 }), "{err}");
    assert_eq!(tokens[0], -7, "nothing written");

    let mut short = [0f32; 0];
    let err = backend
        .gumbel_sample(
            &call,
            &mut GumbelOutput::new(&mut tokens).with_logprobs(Logprobs::none().with_processed(&mut short[..])),
        )
        .unwrap_err();
    assert!(matches!(err, Error::LengthMismatch { what: "processed logprobs", expected: 1, got: 0 }), "{err}");

    let (mut top, mut ids) = (Vec::<f32>::new(), Vec::<i32>::new());
    let out = Logprobs::none().with_top(0, Distribution::Processed, &mut top, &mut ids, &mut ranks);
    backend.gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens).with_logprobs(out)).expect("ranks alone");
    assert!(ranks[0] >= 1, "rank {}", ranks[0]);
});
