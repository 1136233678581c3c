//! Log-probabilities in `specdec sample` and `specdec verify` files (the
//! `logprobs` and `top_logprobs_raw` scalars) and `specdec verify --block`:
//! the outputs are the library's for the same call, bit for bit, and bad
//! requests are refused.

mod common;

use common::*;
use specdec::{
    Backend, Distribution, GumbelOutput, GumbelSample, Logits, Logprobs, RejectionOutput, RejectionSample,
    SamplingParams, Verification,
};
use std::collections::BTreeMap;

/// The library's log-probabilities, owned, in the file's tensors' order.
struct Want {
    processed: Vec<f32>,
    raw: Vec<f32>,
    top: Vec<f32>,
    ids: Vec<i32>,
    ranks: Vec<i32>,
}

impl Want {
    fn new(positions: usize, n: usize) -> Self {
        Want {
            processed: vec![0.0; positions],
            raw: vec![0.0; positions],
            top: vec![0.0; positions * n],
            ids: vec![0; positions * n],
            ranks: vec![0; positions],
        }
    }

    fn outputs(&mut self, n: usize, d: Distribution) -> Logprobs<'_, specdec::Host> {
        Logprobs::none().with_processed(&mut self.processed).with_raw(&mut self.raw).with_top(
            n,
            d,
            &mut self.top,
            &mut self.ids,
            &mut self.ranks,
        )
    }

    /// The file's tensors equal these, bit for bit, with `dims` the positions' shape.
    fn check(&self, got: &Tensors, dims: &[usize], n: usize) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let top_dims: Vec<usize> = dims.iter().copied().chain([n]).collect();
        assert_eq!(got["logprobs"].1, dims);
        assert_eq!(le_u32(&got["logprobs"].2), bits(&self.processed), "logprobs");
        assert_eq!(le_u32(&got["raw_logprobs"].2), bits(&self.raw), "raw_logprobs");
        assert_eq!(got["top_logprobs"].1, top_dims);
        assert_eq!(le_u32(&got["top_logprobs"].2), bits(&self.top), "top_logprobs");
        assert_eq!(le_i32(&got["top_ids"].2), self.ids, "top_ids");
        assert_eq!(le_i32(&got["ranks"].2), self.ranks, "ranks");
    }
}

#[test]
fn sample_writes_the_library_logprobs() {
    let dir = scratch("logprobs-sample");
    let (rows, vocab, n) = (6, 300, 4);
    let logits = common::logits(rows * vocab, 5);
    let slots: Vec<i32> = vec![0, 1, -1, 0, 1, 1];
    let positions: Vec<u64> = (0..rows as u64).map(|r| 10 + r).collect();
    let (temperature, seed) = ([0.7f32, 0.0], [3u64, 4]);
    for raw_top in [false, true] {
        let mut tensors = BTreeMap::from([
            ("logits", f32s(&[rows, vocab], &logits)),
            ("slots", i32s(&[rows], &slots)),
            ("positions", u64s(&[rows], &positions)),
            ("temperature", f32s(&[2], &temperature)),
            ("seed", u64s(&[2], &seed)),
            ("logprobs", i32s(&[], &[n as i32])),
        ]);
        if raw_top {
            tensors.insert("top_logprobs_raw", u8_scalar(1));
        }
        let got = run_cpu("sample", &dir, &format!("raw-top-{raw_top}"), tensors);
        let d = if raw_top { Distribution::Raw } else { Distribution::Processed };
        let mut tokens = vec![0i32; rows];
        let mut want = Want::new(rows, n);
        let call = GumbelSample::new(
            Logits::new(&logits, rows, vocab),
            &slots,
            &positions,
            SamplingParams::new(&temperature, &seed),
        );
        let mut out = GumbelOutput::new(&mut tokens).with_logprobs(want.outputs(n, d));
        Backend::cpu().gumbel_sample(&call, &mut out).unwrap();
        assert_eq!(le_i32(&got["tokens"].2), tokens);
        want.check(&got, &[rows], n);
    }
}

#[test]
fn verify_writes_the_library_logprobs() {
    let dir = scratch("logprobs-verify");
    let (vocab, n) = (300, 3);
    let n_r = [2usize, 0, 1];
    let rows: usize = n_r.iter().map(|k| k + 1).sum();
    let target = common::logits(rows * vocab, 8);
    let offsets = offsets_of(&n_r);
    let drafts: Vec<i32> = (0..rows as i32).map(|r| (r * 37) % vocab as i32).collect();
    let (slots, positions) = ([0i32, 1, -1], (0..rows as u64).collect::<Vec<_>>());
    let (temperature, seed) = ([0.9f32, 1.2], [5u64, 6]);
    let tensors = BTreeMap::from([
        ("target", f32s(&[rows, vocab], &target)),
        ("offsets", i32s(&[4], &offsets)),
        ("drafts", i32s(&[rows], &drafts)),
        ("slots", i32s(&[3], &slots)),
        ("positions", u64s(&[rows], &positions)),
        ("temperature", f32s(&[2], &temperature)),
        ("seed", u64s(&[2], &seed)),
        ("max_drafts", i32s(&[], &[2])),
        ("logprobs", i32s(&[], &[n as i32])),
    ]);
    let got = run_cpu("verify", &dir, "one-hot", tensors);
    let (mut tokens, mut emitted) = (vec![0i32; 9], vec![0i32; 3]);
    let mut want = Want::new(9, n);
    let call = RejectionSample {
        target: Logits::new(&target, rows, vocab),
        offsets: &offsets,
        drafts: &drafts,
        slots: &slots,
        pos: &positions,
        params: SamplingParams::new(&temperature, &seed),
        max_drafts: 2,
        verification: Verification::Token,
        draft_logits: None,
    };
    let mut out =
        RejectionOutput::new(&mut tokens, &mut emitted).with_logprobs(want.outputs(n, Distribution::Processed));
    Backend::cpu().rejection_sample(&call, &mut out).unwrap();
    assert_eq!(le_i32(&got["tokens"].2), tokens);
    want.check(&got, &[3, 3], n);
    assert!(want.processed.iter().any(|x| x.is_nan()), "some positions are past the emitted tokens");
}

#[test]
fn bad_logprob_requests_are_refused() {
    let dir = scratch("logprobs-refused");
    let (rows, vocab) = (2, 40);
    let base = || {
        BTreeMap::from([
            ("logits", f32s(&[rows, vocab], &common::logits(rows * vocab, 2))),
            ("slots", i32s(&[rows], &[0, 0])),
            ("positions", u64s(&[rows], &[1, 2])),
            ("temperature", f32s(&[1], &[1.0])),
            ("seed", u64s(&[1], &[9])),
        ])
    };
    for (case, extra, expected) in [
        ("too many", vec![("logprobs", i32s(&[], &[21]))], "tensor `logprobs`: value 21, expected 0 ..= 20"),
        ("negative", vec![("logprobs", i32s(&[], &[-1]))], "tensor `logprobs`: value -1"),
        ("raw without count", vec![("top_logprobs_raw", u8_scalar(1))], "without a `logprobs` scalar"),
    ] {
        let mut tensors = base();
        tensors.extend(extra);
        let input = dir.join(format!("{}.safetensors", case.replace(' ', "-")));
        write(&input, tensors);
        let output = dir.join("out.safetensors");
        let out = specdec(&["sample", "--input", path_str(&input), "--output", path_str(&output), "--backend", "cpu"]);
        assert_refused(case, &out, expected);
    }
}

/// `verify --block` is the library's block verification, bit for bit.
#[test]
fn verify_block_is_the_library_block_verification() {
    let dir = scratch("verify-block");
    let (vocab, n_r) = (64usize, [3usize, 2, 3]);
    let rows: usize = n_r.iter().map(|k| k + 1).sum();
    let target = common::logits(rows * vocab, 12);
    let offsets = offsets_of(&n_r);
    let drafts: Vec<i32> = (0..rows as i32).map(|r| (r * 29) % vocab as i32).collect();
    let draft_logits = common::logits(3 * 3 * vocab, 13);
    let (slots, positions) = ([0i32, 1, 2], (0..rows as u64).map(|r| 70 + r).collect::<Vec<_>>());
    let (temperature, seed) = ([0.9f32, 1.2, 0.7], [5u64, 6, 7]);
    let tensors = BTreeMap::from([
        ("target", f32s(&[rows, vocab], &target)),
        ("offsets", i32s(&[4], &offsets)),
        ("drafts", i32s(&[rows], &drafts)),
        ("slots", i32s(&[3], &slots)),
        ("positions", u64s(&[rows], &positions)),
        ("temperature", f32s(&[3], &temperature)),
        ("seed", u64s(&[3], &seed)),
        ("max_drafts", i32s(&[], &[3])),
        ("draft_logits", f32s(&[3, 3, vocab], &draft_logits)),
    ]);
    let got = run_cpu_with("verify", &dir, "block", tensors, &["--block"]);
    let (mut tokens, mut emitted) = (vec![0i32; 12], vec![0i32; 3]);
    let call = RejectionSample {
        target: Logits::new(&target, rows, vocab),
        offsets: &offsets,
        drafts: &drafts,
        slots: &slots,
        pos: &positions,
        params: SamplingParams::new(&temperature, &seed),
        max_drafts: 3,
        verification: Verification::Block,
        draft_logits: Some(specdec::DraftLogits::new(&draft_logits, specdec::DraftLogitsShape::dense(3, 3, vocab))),
    };
    Backend::cpu().rejection_sample(&call, &mut RejectionOutput::new(&mut tokens, &mut emitted)).unwrap();
    assert_eq!(le_i32(&got["tokens"].2), tokens);
    assert_eq!(le_i32(&got["num_emitted"].2), emitted);
}
