//! Sampling filters (`top_k`, `top_p`, `min_p`; `draft_top_k`, ... for the
//! draft logits) in `specdec sample` and `specdec verify` files: the kept set
//! decides the tokens, and the results are the library's for the same
//! filters, bit for bit.

mod common;

use common::*;
use specdec::{
    Backend, DraftLogits, DraftLogitsShape, Filters, GumbelOutput, GumbelSample, Logits, RejectionOutput,
    RejectionSample, SamplingParams, Verification,
};
use std::collections::BTreeMap;

/// The first largest value's index (the argmax).
fn argmax(row: &[f32]) -> usize {
    (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best })
}

/// `top_k = 1` keeps only a row's maximum: a slot sampling at T = 1 with it
/// emits every row's argmax, while the same rows and noise without it do not.
#[test]
fn sample_with_top_k_1_emits_the_argmax() {
    let dir = scratch("filters-sample-top-k");
    let (rows, vocab) = (32, 50);
    let logits = common::logits(rows * vocab, 21);
    // Even rows on slot 0 (top_k 1), odd rows on slot 1 (no filter): both at T = 1, one seed.
    let slots: Vec<i32> = (0..rows as i32).map(|r| r % 2).collect();
    let positions: Vec<u64> = (0..rows as u64).map(|r| 100 + r).collect();
    let (temperature, seed, top_k) = ([1.0f32, 1.0], [77u64, 77], [1i32, 0]);
    let input = |top_k: Option<&[i32]>| {
        let mut tensors = BTreeMap::from([
            ("logits", f32s(&[rows, vocab], &logits)),
            ("slots", i32s(&[rows], &slots)),
            ("positions", u64s(&[rows], &positions)),
            ("temperature", f32s(&[2], &temperature)),
            ("seed", u64s(&[2], &seed)),
        ]);
        if let Some(k) = top_k {
            tensors.insert("top_k", i32s(&[2], k));
        }
        tensors
    };
    let filtered = le_i32(&run_cpu("sample", &dir, "top-k-1", input(Some(&top_k)))["tokens"].2);
    let unfiltered = le_i32(&run_cpu("sample", &dir, "no-filter", input(None))["tokens"].2);

    let argmaxes: Vec<i32> = logits.chunks(vocab).map(|row| argmax(row) as i32).collect();
    for (r, row) in logits.chunks(vocab).enumerate() {
        assert_eq!(row.iter().filter(|&&x| x == row[argmaxes[r] as usize]).count(), 1, "row {r}: one maximum");
        if r % 2 == 0 {
            assert_eq!(filtered[r], argmaxes[r], "row {r} (top_k 1) emits the argmax");
        } else {
            assert_eq!(filtered[r], unfiltered[r], "row {r} (no filter) is sampled as without the tensor");
        }
    }
    let not_argmax = (0..rows).step_by(2).filter(|&r| unfiltered[r] != argmaxes[r]).count();
    assert!(not_argmax > 0, "without top_k, some even row samples another token than its argmax");

    // The library, with the same filters, gives the same tokens.
    let mut tokens = vec![0i32; rows];
    let params = SamplingParams::new(&temperature, &seed).with_filters(Filters::none().with_top_k(&top_k));
    let call = GumbelSample::new(Logits::new(&logits, rows, vocab), &slots, &positions, params);
    Backend::cpu().gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens)).unwrap();
    assert_eq!(filtered, tokens);
}

const V: usize = 50;
/// The favoured id of the draft rows (their maximum) and the draft proposed there, a close second.
const BEST: usize = 3;
const DRAFT: i32 = 7;

/// `requests` requests with one draft each, `DRAFT`, on a row where it is
/// a close second to `BEST` (`p(DRAFT)` ≈ 0.47 at T = 1); one slot per
/// request, at T = 1. Without `one_hot`, the draft logits hold the draft rows
/// themselves (`q = p`: every draft is accepted unless filters intervene).
fn close_second(requests: usize, one_hot: bool) -> BTreeMap<&'static str, T> {
    let rows = 2 * requests;
    let mut target = common::logits(rows * V, 31);
    for r in 0..requests {
        target[2 * r * V + BEST] = 10.0;
        target[2 * r * V + DRAFT as usize] = 9.9;
    }
    let draft_rows: Vec<f32> = (0..requests).flat_map(|r| target[2 * r * V..][..V].to_vec()).collect();
    let drafts: Vec<i32> = (0..rows).map(|row| if row % 2 == 0 { DRAFT } else { -1 }).collect();
    let mut tensors = BTreeMap::from([
        ("target", f32s(&[rows, V], &target)),
        ("offsets", i32s(&[requests + 1], &(0..=requests as i32).map(|r| 2 * r).collect::<Vec<_>>())),
        ("drafts", i32s(&[rows], &drafts)),
        ("slots", i32s(&[requests], &(0..requests as i32).collect::<Vec<_>>())),
        ("positions", u64s(&[rows], &(0..rows as u64).map(|row| 500 + row).collect::<Vec<_>>())),
        ("temperature", f32s(&[requests], &vec![1.0; requests])),
        ("seed", u64s(&[requests], &(0..requests as u64).map(|r| 1000 + r).collect::<Vec<_>>())),
        ("max_drafts", i32s(&[], &[1])),
    ]);
    if !one_hot {
        tensors.insert("draft_logits", f32s(&[requests, 1, V], &draft_rows));
    }
    tensors
}

/// A draft outside the target's kept set has `p'(d) = 0` and is always
/// rejected, whatever its unfiltered probability; the token emitted instead
/// comes from the kept set (here `BEST` alone). Without the filter the same
/// drafts are accepted (every one with `q = p`, some one-hot).
#[test]
fn verify_rejects_a_draft_outside_the_kept_set() {
    let dir = scratch("filters-verify-kept-set");
    let requests = 16;
    for one_hot in [false, true] {
        let mode = if one_hot { "one-hot" } else { "draft-logits" };
        let unfiltered = run_cpu("verify", &dir, &format!("{mode}-no-filter"), close_second(requests, one_hot));
        let accepted = le_i32(&unfiltered["accepted"].2);
        if one_hot {
            assert!(accepted.contains(&1), "{mode}: some draft is accepted without filters: {accepted:?}");
        } else {
            assert_eq!(accepted, vec![1; requests], "{mode}: q = p accepts every draft");
        }
        // top_k 2 keeps BEST and DRAFT (accepted as before); top_k 1 and a
        // min_p above p(DRAFT)/p(BEST) = e^-0.1 drop DRAFT.
        for (filter, t, keeps_draft) in [
            ("top_k", i32s(&[requests], &vec![2; requests]), true),
            ("top_k", i32s(&[requests], &vec![1; requests]), false),
            ("min_p", f32s(&[requests], &vec![0.95; requests]), false),
        ] {
            let mut tensors = close_second(requests, one_hot);
            tensors.insert(filter, t);
            let case = format!("{mode}-{filter}-{}", if keeps_draft { "keeps" } else { "drops" });
            let out = run_cpu("verify", &dir, &case, tensors);
            let accepted = le_i32(&out["accepted"].2);
            if keeps_draft {
                // p'(DRAFT) > p(DRAFT) >= q(DRAFT) with draft logits: still all accepted.
                assert!(
                    if one_hot { accepted.contains(&1) } else { accepted == vec![1; requests] },
                    "{case}: {accepted:?}"
                );
                continue;
            }
            assert_eq!(accepted, vec![0; requests], "{case}: every draft is rejected");
            assert_eq!(le_i32(&out["num_emitted"].2), vec![1; requests], "{case}");
            let tokens = le_i32(&out["tokens"].2);
            assert_eq!(tokens, [BEST as i32, -1].repeat(requests), "{case}: the kept set's only token");
        }
    }
}

/// Three requests (2, 0 and 3 drafts; K = 3; the second greedy, which
/// ignores filters), one slot each, with draft logits.
struct Case {
    target: Vec<f32>,
    draft_rows: Vec<f32>,
    drafts: [i32; 8],
    positions: [u64; 8],
    temperature: [f32; 3],
    seed: [u64; 3],
    top_k: [i32; 3],
    top_p: [f32; 3],
    min_p: [f32; 3],
    draft_top_k: [i32; 3],
    draft_top_p: [f32; 3],
}

const ROWS: usize = 8;
const OFFSETS: [i32; 4] = [0, 3, 4, 8];
const SLOTS: [i32; 3] = [0, 1, 2];

impl Case {
    fn new() -> Self {
        let drafts = [5, 17, -1, -1, 3, 9, 11, -1];
        // Target rows where each draft is the largest value but at row 1,
        // where id 30 is larger (outside slot 0's kept set of top_k 1, the
        // draft is rejected); slot 0's drafter adds noise, slot 2's has the
        // target's rows (unfiltered, q = p).
        let mut target = common::logits(ROWS * V, 41);
        for (row, &d) in drafts.iter().enumerate() {
            if d >= 0 {
                target[row * V + d as usize] = 4.5;
            }
        }
        target[V + 30] = 5.0;
        let noise = common::logits(3 * 3 * V, 42);
        let noise_scale = [0.5, 0.0, 0.0];
        let mut draft_rows = vec![0.0f32; 3 * 3 * V];
        for r in 0..3 {
            let (o0, o1, slot) = (OFFSETS[r] as usize, OFFSETS[r + 1] as usize, SLOTS[r] as usize);
            for i in 0..o1 - o0 - 1 {
                for x in 0..V {
                    let at = (slot * 3 + i) * V + x;
                    draft_rows[at] = target[(o0 + i) * V + x] + noise_scale[slot] * noise[at];
                }
            }
        }
        Case {
            target,
            draft_rows,
            drafts,
            positions: [20, 21, 22, 40, 60, 61, 62, 63],
            temperature: [0.9, 0.0, 1.2],
            seed: [1, 2, 3],
            // Slot 0: all three filters on the target, top_p on its drafter;
            // slot 1 (greedy): ignores its top_k; slot 2: drafted with top_k 1
            // (q a point mass), verified unfiltered.
            top_k: [1, 1, 0],
            top_p: [0.9, 1.0, 1.0],
            min_p: [0.02, 0.0, 0.0],
            draft_top_k: [0, 0, 1],
            draft_top_p: [0.8, 1.0, 1.0],
        }
    }

    fn tensors(&self) -> BTreeMap<&'static str, T> {
        BTreeMap::from([
            ("target", f32s(&[ROWS, V], &self.target)),
            ("offsets", i32s(&[4], &OFFSETS)),
            ("drafts", i32s(&[ROWS], &self.drafts)),
            ("slots", i32s(&[3], &SLOTS)),
            ("positions", u64s(&[ROWS], &self.positions)),
            ("temperature", f32s(&[3], &self.temperature)),
            ("seed", u64s(&[3], &self.seed)),
            ("max_drafts", i32s(&[], &[3])),
            ("draft_logits", f32s(&[3, 3, V], &self.draft_rows)),
            ("top_k", i32s(&[3], &self.top_k)),
            ("top_p", f32s(&[3], &self.top_p)),
            ("min_p", f32s(&[3], &self.min_p)),
            ("draft_top_k", i32s(&[3], &self.draft_top_k)),
            ("draft_top_p", f32s(&[3], &self.draft_top_p)),
        ])
    }

    /// The library's tokens, num_emitted, accepted and row_status, with the
    /// target's filters and the draft logits' filters when asked for.
    fn library(&self, target_filters: bool, draft_filters: bool) -> (Vec<i32>, Vec<i32>, Vec<i32>, Vec<u32>) {
        let (mut tokens, mut emitted, mut accepted, mut status) =
            (vec![0; 3 * 4], vec![0; 3], vec![0; 3], vec![0; ROWS]);
        let mut target = Filters::none();
        if target_filters {
            target = target.with_top_k(&self.top_k).with_top_p(&self.top_p).with_min_p(&self.min_p);
        }
        let mut draft = Filters::none();
        if draft_filters {
            draft = draft.with_top_k(&self.draft_top_k).with_top_p(&self.draft_top_p);
        }
        let call = RejectionSample {
            target: Logits::new(&self.target, ROWS, V),
            offsets: &OFFSETS[..],
            drafts: &self.drafts[..],
            slots: &SLOTS[..],
            pos: &self.positions[..],
            params: SamplingParams::new(&self.temperature, &self.seed).with_filters(target),
            max_drafts: 3,
            verification: Verification::Token,
            draft_logits: Some(
                DraftLogits::new(&self.draft_rows, DraftLogitsShape::dense(3, 3, V)).with_filters(draft),
            ),
        };
        let mut out =
            RejectionOutput::new(&mut tokens, &mut emitted).with_accepted(&mut accepted).with_row_status(&mut status);
        Backend::cpu().rejection_sample(&call, &mut out).unwrap();
        (tokens, emitted, accepted, status)
    }
}

/// With filters on the target and on the draft logits, mixed per slot,
/// `specdec verify` gives what the library gives for the same filters, and
/// each table changes the result (so both reached the call).
#[test]
fn verify_with_target_and_draft_filters_matches_the_library() {
    let dir = scratch("filters-verify-roundtrip");
    let case = Case::new();
    let got = run_cpu("verify", &dir, "filters", case.tensors());
    let want = case.library(true, true);
    assert_eq!(got["tokens"].1, vec![3, 4]);
    assert_eq!(le_i32(&got["tokens"].2), want.0, "tokens");
    assert_eq!(le_i32(&got["num_emitted"].2), want.1, "num_emitted");
    assert_eq!(le_i32(&got["accepted"].2), want.2, "accepted");
    assert_eq!(le_u32(&got["row_status"].2), want.3, "row_status");
    assert!(want.2.iter().any(|&a| a > 0), "some draft is accepted: {:?}", want.2);
    assert_ne!(case.library(false, true), want, "the target's filters matter here");
    assert_ne!(case.library(true, false), want, "the draft logits' filters matter here");
}
