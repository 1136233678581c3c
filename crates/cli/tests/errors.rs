//! Bad inputs: one `Error: ...` line naming the problem, exit code 2, and no
//! output file (nor a temporary one) left behind.

mod common;

use common::*;
use std::collections::BTreeMap;

/// A valid `specdec sample` input: 3 rows of V = 10, 2 slots.
fn sample_input() -> BTreeMap<&'static str, T> {
    BTreeMap::from([
        ("logits", f32s(&[3, 10], &common::logits(30, 9))),
        ("slots", i32s(&[3], &[0, 1, -1])),
        ("positions", u64s(&[3], &[1, 2, 3])),
        ("temperature", f32s(&[2], &[1.0, 0.0])),
        ("seed", u64s(&[2], &[5, 6])),
    ])
}

/// A valid `specdec verify` input: 2 requests (1 and 0 drafts), V = 10, K = 1.
fn verify_input() -> BTreeMap<&'static str, T> {
    BTreeMap::from([
        ("target", f32s(&[3, 10], &common::logits(30, 10))),
        ("offsets", i32s(&[3], &[0, 2, 3])),
        ("drafts", i32s(&[3], &[4, -1, -1])),
        ("slots", i32s(&[2], &[0, 1])),
        ("positions", u64s(&[3], &[1, 2, 7])),
        ("temperature", f32s(&[2], &[1.0, 0.0])),
        ("seed", u64s(&[2], &[5, 6])),
        ("max_drafts", i32s(&[], &[1])),
    ])
}

/// Runs `specdec <op>` on `input` (written unless `None`) in a fresh
/// directory and checks the failure: exit code 2, one line naming `expected`,
/// and nothing but the input in the directory afterwards.
fn fails(case: &str, op: &str, input: Option<BTreeMap<&str, T>>, expected: &str) {
    let dir = scratch(&format!("errors-{case}"));
    let (input_path, output) = (dir.join("in.safetensors"), dir.join("out.safetensors"));
    if let Some(tensors) = input {
        write(&input_path, tensors);
    }
    let before = files_in(&dir);
    let out = specdec(&[op, "--input", path_str(&input_path), "--output", path_str(&output), "--backend", "cpu"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{case}: exit code (stderr: {stderr})");
    assert!(stderr.starts_with("Error: ") && stderr.lines().count() == 1, "{case}: one error line, got {stderr:?}");
    assert!(stderr.contains(expected), "{case}: expected {expected:?} in {stderr:?}");
    assert!(out.stdout.is_empty(), "{case}: nothing on stdout");
    assert!(!output.exists(), "{case}: an output file was written");
    assert_eq!(files_in(&dir), before, "{case}: files were left behind");
}

fn with(mut tensors: BTreeMap<&'static str, T>, name: &'static str, t: T) -> BTreeMap<&'static str, T> {
    tensors.insert(name, t);
    tensors
}

fn without(mut tensors: BTreeMap<&'static str, T>, name: &str) -> BTreeMap<&'static str, T> {
    tensors.remove(name);
    tensors
}

#[test]
fn missing_and_corrupt_files() {
    fails("no-file", "sample", None, "cannot read");
    let dir = scratch("errors-corrupt");
    let (input, output) = (dir.join("in.safetensors"), dir.join("out.safetensors"));
    for (name, bytes) in [("garbage", b"not a safetensors file at all".to_vec()), ("empty", vec![])] {
        std::fs::write(&input, &bytes).unwrap();
        let out = specdec(&["verify", "--input", path_str(&input), "--output", path_str(&output)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains("is not a valid safetensors file"), "{name}: {stderr}");
        assert!(!output.exists());
    }
    // A valid file cut short: its header promises more data than it holds.
    write(&input, sample_input());
    let mut bytes = std::fs::read(&input).unwrap();
    bytes.truncate(bytes.len() - 4);
    std::fs::write(&input, &bytes).unwrap();
    let out = specdec(&["sample", "--input", path_str(&input), "--output", path_str(&output)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "truncated: {stderr}");
    assert!(stderr.contains("is not a valid safetensors file"), "truncated: {stderr}");
    assert!(!output.exists());
}

#[test]
fn missing_tensors() {
    fails("no-positions", "sample", Some(without(sample_input(), "positions")), "missing tensor `positions`");
    fails("no-logits", "sample", Some(without(sample_input(), "logits")), "missing tensor `logits`");
    fails("no-seed", "verify", Some(without(verify_input(), "seed")), "missing tensor `seed`");
    fails("no-max-drafts", "verify", Some(without(verify_input(), "max_drafts")), "missing tensor `max_drafts`");
    let cache = with(sample_input(), "cache", f32s(&[2, 1, 10], &[0.0; 20]));
    fails("no-cache-column", "sample", Some(cache), "missing tensor `cache_column`");
    let column = with(sample_input(), "cache_column", i32s(&[], &[0]));
    fails("column-without-cache", "sample", Some(column), "without a `cache` tensor");
}

#[test]
fn wrong_dtypes() {
    let slots = with(sample_input(), "slots", i64s(&[3], &[0, 1, -1]));
    fails("slots-i64", "sample", Some(slots), "tensor `slots`: expected dtype I32, found I64");
    let logits = with(sample_input(), "logits", i32s(&[3, 10], &[0; 30]));
    fails("logits-i32", "sample", Some(logits), "tensor `logits`: expected dtype F32 or BF16 or F16, found I32");
    let temperature = with(verify_input(), "temperature", u64s(&[2], &[1, 0]));
    fails("temperature-u64", "verify", Some(temperature), "tensor `temperature`: expected dtype F32, found U64");
    let positions = with(verify_input(), "positions", f32s(&[3], &[1.0, 2.0, 7.0]));
    fails("positions-f32", "verify", Some(positions), "tensor `positions`: expected dtype U64 or I64, found F32");
}

#[test]
fn wrong_shapes_and_values() {
    let logits = with(sample_input(), "logits", f32s(&[30], &[0.0; 30]));
    fails("logits-1d", "sample", Some(logits), "tensor `logits`: expected a 2-D shape [rows, width], found [30]");
    let max = with(verify_input(), "max_drafts", i32s(&[2], &[1, 1]));
    fails("max-drafts-vector", "verify", Some(max), "tensor `max_drafts`: expected a scalar");
    let max = with(verify_input(), "max_drafts", i32s(&[], &[-1]));
    fails("max-drafts-negative", "verify", Some(max), "tensor `max_drafts`: value -1");
    let vocab = with(sample_input(), "vocab", i32s(&[], &[11]));
    fails("vocab-too-wide", "sample", Some(vocab), "tensor `vocab`: value 11, expected 1 ..= 10");
    let positions = with(sample_input(), "positions", i64s(&[3], &[1, -2, 3]));
    fails("positions-negative", "sample", Some(positions), "tensor `positions`: entry 1 is -2");
    let drafting = with(sample_input(), "drafting", u8_scalar(2));
    fails("drafting-2", "sample", Some(drafting), "tensor `drafting`: value 2, expected 0 or 1");
    let cache = with(sample_input(), "cache", f32s(&[20], &[0.0; 20]));
    let cache = with(cache, "cache_column", i32s(&[], &[0]));
    fails("cache-1d", "sample", Some(cache), "tensor `cache`: expected a 3-D shape [slots, K, width]");
}

#[test]
fn inconsistent_sizes() {
    let slots = with(sample_input(), "slots", i32s(&[4], &[0, 1, -1, 0]));
    fails("slots-vs-rows", "sample", Some(slots), "tensor `slots`: expected shape [rows] = [3], found [4]");
    let seed = with(sample_input(), "seed", u64s(&[3], &[5, 6, 7]));
    fails("seed-vs-temperature", "sample", Some(seed), "tensor `seed`: expected shape [slots]");
    let offsets = with(verify_input(), "offsets", i32s(&[2], &[0, 3]));
    fails("offsets-vs-requests", "verify", Some(offsets), "tensor `offsets`: expected shape [requests + 1] = [3]");
    let drafts = with(verify_input(), "drafts", i32s(&[2], &[4, -1]));
    fails("drafts-vs-rows", "verify", Some(drafts), "tensor `drafts`: expected shape [rows] = [3], found [2]");
    let column = with(sample_input(), "cache", f32s(&[2, 1, 10], &[0.0; 20]));
    let column = with(column, "cache_column", i32s(&[2], &[0, 0]));
    fails(
        "column-vs-rows",
        "sample",
        Some(column),
        "tensor `cache_column`: expected shape [] (one for all rows) or [rows]",
    );
}

/// Errors the library finds (`specdec::Error`), reported as input errors.
#[test]
fn library_errors() {
    let slots = with(sample_input(), "slots", i32s(&[3], &[0, 7, -1]));
    fails("slot-out-of-range", "sample", Some(slots), "gumbel_sample: entry 1 of the slot list has slot 7");
    let cache = with(sample_input(), "cache", f32s(&[2, 1, 9], &[0.0; 18]));
    let cache = with(cache, "cache_column", i32s(&[], &[0]));
    fails("cache-narrow", "sample", Some(cache), "narrower than the vocabulary");
    let column = with(sample_input(), "cache", f32s(&[2, 1, 10], &[0.0; 20]));
    let column = with(column, "cache_column", i32s(&[], &[1]));
    fails("column-out-of-range", "sample", Some(column), "cache column 1 is out of range 0..1");
    let temperature = with(sample_input(), "temperature", f32s(&[2], &[-1.0, 0.0]));
    fails("negative-temperature", "sample", Some(temperature), "has temperature -1");
    let offsets = with(verify_input(), "offsets", i32s(&[3], &[0, 3, 3]));
    fails("offsets-too-many-drafts", "verify", Some(offsets), "request offsets are invalid at request 0: 2 drafts");
    let drafts = with(verify_input(), "drafts", i32s(&[3], &[10, -1, -1]));
    fails("draft-out-of-vocab", "verify", Some(drafts), "proposes draft token 10");
    let draft_logits = with(verify_input(), "draft_logits", f32s(&[2, 1, 8], &[0.0; 16]));
    fails("draft-logits-narrow", "verify", Some(draft_logits), "narrower than the vocabulary");
}
