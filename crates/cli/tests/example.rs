//! The worked example of `FORMAT.md`, in Rust: draft K = 2 tokens for two
//! requests with `specdec sample` (drafting, filling the draft logits),
//! then verify them with `specdec verify`. The Python snippet in FORMAT.md
//! writes the same input files, byte for byte in their tensors, and so gets
//! the same tokens.

mod common;

use common::{path_str, read, specdec};
use safetensors::tensor::{Dtype, TensorView};
use std::path::Path;

const V: usize = 1000;
const K: usize = 2;
/// The position of each request's next token.
const START: [u64; 2] = [10, 20];

/// The target model's logits at a position (exact in f32).
fn target_row(pos: u64) -> Vec<f32> {
    (0..V as u64).map(|x| ((x * 37 + pos * 101) % 97) as f32 / 16.0 - 3.0).collect()
}

/// The draft model's: the target's, perturbed.
fn draft_row(pos: u64) -> Vec<f32> {
    let t = target_row(pos);
    (0..V as u64).map(|x| t[x as usize] + (((x * 13 + pos) % 5) as f32 / 8.0 - 0.25)).collect()
}

fn bytes<T: Copy, const N: usize>(v: &[T], to: fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| to(x)).collect()
}

/// Writes tensors given as (name, dtype, shape, bytes).
fn save(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views = tensors.iter().map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()));
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn run(args: &[&str]) {
    let out = specdec(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn draft_then_verify() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("specdec-cli-example");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| dir.join(name);
    // Slot 0 samples at T = 0.8, slot 1 is greedy.
    let temperature = ("temperature", Dtype::F32, vec![2], bytes(&[0.8f32, 0.0], f32::to_le_bytes));
    let seed = ("seed", Dtype::U64, vec![2], bytes(&[1234u64, 5678], u64::to_le_bytes));

    // 1. Draft K tokens per request: one row per draft, its logits written to
    //    column i of the request's slot in the draft logits.
    let draft_pos: Vec<u64> = START.iter().flat_map(|&p| (0..K as u64).map(move |i| p + i)).collect();
    let logits: Vec<f32> = draft_pos.iter().flat_map(|&p| draft_row(p)).collect();
    save(
        &file("draft_in.safetensors"),
        &[
            ("logits", Dtype::F32, vec![4, V], bytes(&logits, f32::to_le_bytes)),
            ("slots", Dtype::I32, vec![4], bytes(&[0, 0, 1, 1], i32::to_le_bytes)),
            ("positions", Dtype::U64, vec![4], bytes(&draft_pos, u64::to_le_bytes)),
            ("drafting", Dtype::U8, vec![], vec![1]),
            ("draft_logits", Dtype::F32, vec![2, K, V], vec![0; 2 * K * V * 4]),
            ("draft_column", Dtype::I32, vec![4], bytes(&[0, 1, 0, 1], i32::to_le_bytes)),
            temperature.clone(),
            seed.clone(),
        ],
    );
    let (draft_in, draft_out) = (file("draft_in.safetensors"), file("draft_out.safetensors"));
    run(&["sample", "--input", path_str(&draft_in), "--output", path_str(&draft_out)]);
    let drafted = read(&draft_out);
    let d = i32s(&drafted["tokens"].2);

    // 2. Verify: K draft rows and a bonus row per request, against the target.
    let verify_pos: Vec<u64> = START.iter().flat_map(|&p| (0..=K as u64).map(move |i| p + i)).collect();
    let target: Vec<f32> = verify_pos.iter().flat_map(|&p| target_row(p)).collect();
    // What `sample` wrote as `draft_logits` is what `verify` reads as `draft_logits`.
    let (draft_dtype, draft_shape, draft_logits) = drafted["draft_logits"].clone();
    let (k1, rows) = (K as i32 + 1, verify_pos.len());
    save(
        &file("verify_in.safetensors"),
        &[
            ("target", Dtype::F32, vec![rows, V], bytes(&target, f32::to_le_bytes)),
            ("offsets", Dtype::I32, vec![3], bytes(&[0, k1, 2 * k1], i32::to_le_bytes)),
            ("drafts", Dtype::I32, vec![rows], bytes(&[d[0], d[1], -1, d[2], d[3], -1], i32::to_le_bytes)),
            ("slots", Dtype::I32, vec![2], bytes(&[0, 1], i32::to_le_bytes)),
            ("positions", Dtype::U64, vec![rows], bytes(&verify_pos, u64::to_le_bytes)),
            ("max_drafts", Dtype::I32, vec![], bytes(&[K as i32], i32::to_le_bytes)),
            ("draft_logits", draft_dtype, draft_shape, draft_logits),
            temperature,
            seed,
        ],
    );
    let (verify_in, verify_out) = (file("verify_in.safetensors"), file("verify_out.safetensors"));
    run(&["verify", "--input", path_str(&verify_in), "--output", path_str(&verify_out)]);
    let out = read(&verify_out);
    let (tokens, num_emitted) = (i32s(&out["tokens"].2), i32s(&out["num_emitted"].2));
    assert_eq!(out["tokens"].1, vec![2, K + 1]);

    // The values FORMAT.md shows (the Python snippet prints the same).
    assert_eq!(d, [628, 819, 433, 446], "drafts");
    // Request 0 (T = 0.8) accepts both drafts and adds a bonus token; greedy
    // request 1's first draft is not the target's argmax: it emits the argmax.
    assert_eq!(tokens, [628, 819, 845, 45, -1, -1], "tokens");
    assert_eq!(num_emitted, [3, 1], "num_emitted");
    assert_eq!(i32s(&out["accepted"].2), [2, 0], "accepted");
}
