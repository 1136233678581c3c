//! `specdec sample` and `specdec verify` on files written with the
//! `safetensors` crate give exactly what the library gives for the same
//! inputs (`specdec::Backend::cpu()`), bit for bit.

mod common;

use common::*;
use half::{bf16, f16};
use safetensors::tensor::Dtype;
use specdec::{
    Backend, Column, DraftLogits, DraftLogitsMut, DraftLogitsShape, GumbelOutput, GumbelSample, Logits,
    RejectionOutput, RejectionSample, SamplingParams, Verification,
};
use std::collections::BTreeMap;
use std::path::Path;

fn le_i32(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}
fn le_u32(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Runs `specdec <op> --backend <backend>` on `input` and returns the output file's tensors.
fn run(op: &str, backend: &str, input: &Path) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let output = input.with_file_name(format!("{op}-{backend}-out.safetensors"));
    let out = specdec(&[op, "--input", path_str(input), "--output", path_str(&output), "--backend", backend]);
    assert!(out.status.success(), "specdec {op} failed: {}", String::from_utf8_lossy(&out.stderr));
    read(&output)
}

#[test]
fn sample_f32_without_draft_logits_matches_the_library() {
    let dir = scratch("sample-f32");
    let (rows, width, vocab) = (5, 1003, 1000);
    let mut logits = common::logits(rows * width, 1);
    logits[4 * width + 10] = f32::NAN; // flagged in row_status
    let slots = [0, 1, -1, 2, 1];
    let positions = [7u64, 8, 0, 1 << 40, 9];
    let (temperature, seed) = ([0.0f32, 0.7, 1.3], [11u64, u64::MAX, 42]);
    let input = dir.join("in.safetensors");
    write(
        &input,
        BTreeMap::from([
            ("logits", f32s(&[rows, width], &logits)),
            ("vocab", i32s(&[], &[vocab as i32])),
            ("slots", i32s(&[rows], &slots)),
            ("positions", u64s(&[rows], &positions)),
            ("temperature", f32s(&[3], &temperature)),
            ("seed", u64s(&[3], &seed)),
        ]),
    );

    let mut tokens = vec![0i32; rows];
    let mut row_status = vec![0u32; rows];
    let logits = Logits::new(&logits, rows, vocab).with_row_stride(width);
    let call = GumbelSample::new(logits, &slots, &positions, SamplingParams::new(&temperature, &seed));
    let mut out = GumbelOutput::new(&mut tokens).with_row_status(&mut row_status);
    Backend::cpu().gumbel_sample(&call, &mut out).unwrap();

    for backend in ["cpu", "auto"] {
        let got = run("sample", backend, &input);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["row_status", "tokens"]);
        assert_eq!((got["tokens"].0, &got["tokens"].1), (Dtype::I32, &vec![rows]));
        assert_eq!(le_i32(&got["tokens"].2), tokens, "{backend}");
        assert_eq!((got["row_status"].0, &got["row_status"].1), (Dtype::U32, &vec![rows]));
        assert_eq!(le_u32(&got["row_status"].2), row_status, "{backend}");
    }
    assert_eq!(row_status[4], specdec::status::NAN_LOGITS);
}

#[test]
fn sample_bf16_drafting_into_f16_draft_logits_matches_the_library() {
    let dir = scratch("sample-bf16-draft-logits");
    let (rows, width, k, draft_width) = (4, 777, 2, 780);
    let logits: Vec<bf16> = common::logits(rows * width, 2).into_iter().map(bf16::from_f32).collect();
    let slots = [0, 0, 1, 2];
    let columns = [0, 1, 0, 1]; // distinct (slot, column) per row
    let positions = [3i64, 4, 100, 5];
    let temperature = [1.0f32, 0.0, 0.6];
    let seed = [-5i64, 6, 7];
    let draft0: Vec<f16> = common::logits(3 * k * draft_width, 3).into_iter().map(f16::from_f32).collect();
    let input = dir.join("in.safetensors");
    write(
        &input,
        BTreeMap::from([
            ("logits", bf16s(&[rows, width], &logits)),
            ("slots", i32s(&[rows], &slots)),
            ("positions", i64s(&[rows], &positions)),
            ("temperature", f32s(&[3], &temperature)),
            ("seed", i64s(&[3], &seed)),
            ("drafting", u8_scalar(1)),
            ("draft_logits", f16s(&[3, k, draft_width], &draft0)),
            ("draft_column", i32s(&[rows], &columns)),
        ]),
    );

    let (pos, seed_bits): (Vec<u64>, Vec<u64>) =
        (positions.iter().map(|&p| p as u64).collect(), seed.iter().map(|&s| s as u64).collect());
    let mut draft = draft0.clone();
    let mut tokens = vec![0i32; rows];
    let mut row_status = vec![0u32; rows];
    let params = SamplingParams::new(&temperature, &seed_bits);
    let call = GumbelSample::new(Logits::new(&logits, rows, width), &slots, &pos, params).drafting();
    let mut out = GumbelOutput::new(&mut tokens).with_row_status(&mut row_status).with_draft_logits(
        DraftLogitsMut::new(&mut draft, DraftLogitsShape::dense(3, k, draft_width)),
        Column::per_row(&columns),
    );
    Backend::cpu().gumbel_sample(&call, &mut out).unwrap();

    let got = run("sample", "cpu", &input);
    assert_eq!(le_i32(&got["tokens"].2), tokens);
    assert_eq!(le_u32(&got["row_status"].2), row_status);
    let (dtype, shape, bytes) = &got["draft_logits"];
    assert_eq!((*dtype, shape), (Dtype::F16, &vec![3, k, draft_width]));
    let want: Vec<u8> = draft.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
    assert_eq!(bytes, &want, "the draft logits differ");
    assert_ne!(draft, draft0, "the call wrote the draft logits");
}

/// Three requests with 2, 0 and 3 drafts (K = 3), one a placeholder; mixed temperatures.
struct VerifyCase {
    rows: usize,
    width: usize,
    offsets: Vec<i32>,
    drafts: Vec<i32>,
    slots: Vec<i32>,
    positions: Vec<u64>,
    temperature: Vec<f32>,
    seed: Vec<u64>,
}

/// Target logits that favour each draft (so drafts are accepted as well as rejected).
fn verify_target(c: &VerifyCase, salt: u64) -> Vec<f32> {
    let mut target = common::logits(c.rows * c.width, salt);
    for (row, &d) in c.drafts.iter().enumerate() {
        if d >= 0 {
            target[row * c.width + d as usize] += 6.0;
        }
    }
    target
}

fn verify_case(width: usize) -> VerifyCase {
    VerifyCase {
        rows: 8,
        width,
        offsets: vec![0, 3, 4, 8],
        drafts: vec![5, 17, -1, -1, 3, -1, 9, -1],
        slots: vec![1, 0, 2],
        positions: vec![20, 21, 22, 40, 60, 61, 62, 63],
        temperature: vec![0.9, 0.0, 1.2],
        seed: vec![1, 2, 3],
    }
}

fn verify_inputs(c: &VerifyCase, target: T) -> BTreeMap<&'static str, T> {
    BTreeMap::from([
        ("target", target),
        ("offsets", i32s(&[4], &c.offsets)),
        ("drafts", i32s(&[c.rows], &c.drafts)),
        ("slots", i32s(&[3], &c.slots)),
        ("positions", u64s(&[c.rows], &c.positions)),
        ("temperature", f32s(&[3], &c.temperature)),
        ("seed", u64s(&[3], &c.seed)),
        ("max_drafts", i32s(&[], &[3])),
    ])
}

/// The library's outputs: tokens, num_emitted, accepted, row_status.
/// (One lifetime for all: the argument structs are invariant in theirs.)
fn verify_with_library<'a>(
    c: &'a VerifyCase,
    target: Logits<'a, specdec::Host>,
    draft_logits: Option<DraftLogits<'a, specdec::Host>>,
) -> (Vec<i32>, Vec<i32>, Vec<i32>, Vec<u32>) {
    let (mut tokens, mut emitted, mut accepted, mut status) = (vec![0; 3 * 4], vec![0; 3], vec![0; 3], vec![0; c.rows]);
    let call = RejectionSample {
        target,
        offsets: &c.offsets[..],
        drafts: &c.drafts[..],
        slots: &c.slots[..],
        pos: &c.positions[..],
        params: SamplingParams::new(&c.temperature, &c.seed),
        max_drafts: 3,
        verification: Verification::Token,
        draft_logits,
    };
    let mut out =
        RejectionOutput::new(&mut tokens, &mut emitted).with_accepted(&mut accepted).with_row_status(&mut status);
    Backend::cpu().rejection_sample(&call, &mut out).unwrap();
    (tokens, emitted, accepted, status)
}

fn assert_verify_output(
    got: &BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>,
    want: (Vec<i32>, Vec<i32>, Vec<i32>, Vec<u32>),
) {
    assert_eq!(got["tokens"].1, vec![3, 4]);
    assert_eq!(le_i32(&got["tokens"].2), want.0, "tokens");
    assert_eq!(le_i32(&got["num_emitted"].2), want.1, "num_emitted");
    assert_eq!(le_i32(&got["accepted"].2), want.2, "accepted");
    assert_eq!(got["row_status"].0, Dtype::U32);
    assert_eq!(le_u32(&got["row_status"].2), want.3, "row_status");
    assert!(want.2.iter().any(|&a| a > 0), "some draft is accepted: {:?}", want.2);
}

#[test]
fn verify_with_bf16_draft_logits_matches_the_library() {
    let dir = scratch("verify-draft-logits");
    let c = verify_case(999);
    let target = verify_target(&c, 4);
    // The draft logits [slots, K, W]: draft i of a request is column i of its
    // slot; here the target row scaled, or noise where no draft row maps.
    let mut draft: Vec<bf16> = common::logits(3 * 3 * c.width, 5).into_iter().map(bf16::from_f32).collect();
    for r in 0..3 {
        let (o0, o1, slot) = (c.offsets[r] as usize, c.offsets[r + 1] as usize, c.slots[r] as usize);
        for i in 0..o1 - o0 - 1 {
            let (src, dst) = ((o0 + i) * c.width, (slot * 3 + i) * c.width);
            for x in 0..c.width {
                draft[dst + x] = bf16::from_f32(target[src + x] * 0.8);
            }
        }
    }
    let input = dir.join("in.safetensors");
    let mut tensors = verify_inputs(&c, f32s(&[c.rows, c.width], &target));
    tensors.insert("draft_logits", bf16s(&[3, 3, c.width], &draft));
    write(&input, tensors);

    let want = verify_with_library(
        &c,
        Logits::new(&target, c.rows, c.width),
        Some(DraftLogits::new(&draft, DraftLogitsShape::dense(3, 3, c.width))),
    );
    assert_verify_output(&run("verify", "cpu", &input), want);
}

#[test]
fn verify_one_hot_f16_matches_the_library() {
    let dir = scratch("verify-one-hot");
    let c = verify_case(4097);
    let target: Vec<f16> = verify_target(&c, 6).into_iter().map(f16::from_f32).collect();
    let input = dir.join("in.safetensors");
    write(&input, verify_inputs(&c, f16s(&[c.rows, c.width], &target)));
    let want = verify_with_library(&c, Logits::new(&target, c.rows, c.width), None);
    assert_verify_output(&run("verify", "cpu", &input), want.clone());
    assert_verify_output(&run("verify", "auto", &input), want);
}

/// One row, one request: the summary lines are singular.
#[test]
fn one_row_and_one_request_are_singular() {
    let dir = scratch("singular");
    let (input, output) = (dir.join("sample.safetensors"), dir.join("out.safetensors"));
    write(
        &input,
        BTreeMap::from([
            ("logits", f32s(&[1, 10], &common::logits(10, 7))),
            ("slots", i32s(&[1], &[0])),
            ("positions", u64s(&[1], &[3])),
            ("temperature", f32s(&[1], &[1.0])),
            ("seed", u64s(&[1], &[9])),
        ]),
    );
    let out = specdec(&["sample", "--input", path_str(&input), "--output", path_str(&output), "--backend", "cpu"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("sampled 1 row on cpu: wrote "), "{stdout}");

    let input = dir.join("verify.safetensors");
    write(
        &input,
        BTreeMap::from([
            ("target", f32s(&[1, 10], &common::logits(10, 8))),
            ("offsets", i32s(&[2], &[0, 1])),
            ("drafts", i32s(&[1], &[-1])),
            ("slots", i32s(&[1], &[0])),
            ("positions", u64s(&[1], &[3])),
            ("temperature", f32s(&[1], &[1.0])),
            ("seed", u64s(&[1], &[9])),
            ("max_drafts", i32s(&[], &[0])),
        ]),
    );
    let out = specdec(&["verify", "--input", path_str(&input), "--output", path_str(&output), "--backend", "cpu"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("verified 1 request (1 row, one-hot drafts) on cpu: wrote "), "{stdout}");
}
