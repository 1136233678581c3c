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
    assert_refused(case, &out, expected);
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
    let draft = with(sample_input(), "draft_logits", f32s(&[2, 1, 10], &[0.0; 20]));
    fails("no-draft-column", "sample", Some(draft), "missing tensor `draft_column`");
    let column = with(sample_input(), "draft_column", i32s(&[], &[0]));
    fails("column-without-draft-logits", "sample", Some(column), "without a `draft_logits` tensor");
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
    // A U64 above i64::MAX is printed and compared with the range, like any other.
    let max = with(verify_input(), "max_drafts", u64s(&[], &[u64::MAX]));
    fails(
        "max-drafts-huge",
        "verify",
        Some(max),
        "tensor `max_drafts`: value 18446744073709551615, expected 0 ..= 65536",
    );
    let vocab = with(sample_input(), "vocab", u64s(&[1], &[1 << 63]));
    fails("vocab-huge", "sample", Some(vocab), "tensor `vocab`: value 9223372036854775808, expected 1 ..= 10");
    let vocab = with(sample_input(), "vocab", i32s(&[], &[11]));
    fails("vocab-too-wide", "sample", Some(vocab), "tensor `vocab`: value 11, expected 1 ..= 10");
    let positions = with(sample_input(), "positions", i64s(&[3], &[1, -2, 3]));
    fails("positions-negative", "sample", Some(positions), "tensor `positions`: entry 1 is -2");
    let drafting = with(sample_input(), "drafting", u8_scalar(2));
    fails("drafting-2", "sample", Some(drafting), "tensor `drafting`: value 2, expected 0 or 1");
    let draft = with(sample_input(), "draft_logits", f32s(&[20], &[0.0; 20]));
    let draft = with(draft, "draft_column", i32s(&[], &[0]));
    fails("draft-logits-1d", "sample", Some(draft), "tensor `draft_logits`: expected a 3-D shape [slots, K, width]");
}

#[test]
fn inconsistent_sizes() {
    let slots = with(sample_input(), "slots", i32s(&[4], &[0, 1, -1, 0]));
    fails(
        "slots-vs-rows",
        "sample",
        Some(slots),
        "tensor `slots`: expected shape [rows] (the rows of `logits`) = [3], found [4]",
    );
    let seed = with(sample_input(), "seed", u64s(&[3], &[5, 6, 7]));
    fails("seed-vs-temperature", "sample", Some(seed), "tensor `seed`: expected shape [slots]");
    let offsets = with(verify_input(), "offsets", i32s(&[2], &[0, 3]));
    fails(
        "offsets-vs-requests",
        "verify",
        Some(offsets),
        "tensors `slots` and `offsets` disagree on the number of requests: `slots` has shape [2] (2 requests), \
         `offsets` has shape [2] (1 request); expected `slots` [requests] and `offsets` [requests + 1]",
    );
    let drafts = with(verify_input(), "drafts", i32s(&[2], &[4, -1]));
    fails(
        "drafts-vs-rows",
        "verify",
        Some(drafts),
        "tensor `drafts`: expected shape [rows] (the rows of `target`) = [3], found [2]",
    );
    let column = with(sample_input(), "draft_logits", f32s(&[2, 1, 10], &[0.0; 20]));
    let column = with(column, "draft_column", i32s(&[2], &[0, 0]));
    fails(
        "column-vs-rows",
        "sample",
        Some(column),
        "tensor `draft_column`: expected shape [] (one for all rows) or [rows]",
    );
}

/// `slots` of the wrong length is named (it once blamed `offsets`), and so is `offsets` with no entry.
#[test]
fn slots_and_offsets_of_different_lengths() {
    let slots = with(verify_input(), "slots", i32s(&[3], &[0, 1, 0]));
    fails(
        "slots-vs-offsets",
        "verify",
        Some(slots),
        "tensors `slots` and `offsets` disagree on the number of requests: `slots` has shape [3] (3 requests), \
         `offsets` has shape [3] (2 requests)",
    );
    let offsets = with(verify_input(), "offsets", i32s(&[0], &[]));
    fails("offsets-empty", "verify", Some(offsets), "tensor `offsets`: expected shape [requests + 1] (at least one");
}

/// Each offsets rule names the first entry that breaks it (decreasing
/// offsets once blamed `offsets[last]` at a request that does not exist).
/// A file written for the old tensor names is refused, not run as if it had
/// no draft logits.
#[test]
fn renamed_tensors_are_refused() {
    let cache = f32s(&[2, 1, 10], &[0.0; 20]);
    fails(
        "renamed-cache",
        "sample",
        Some(with(sample_input(), "cache", cache)),
        "tensor `cache` is now named `draft_logits`",
    );
    let column = i32s(&[], &[0]);
    fails(
        "renamed-cache-column",
        "sample",
        Some(with(sample_input(), "cache_column", column)),
        "tensor `cache_column` is now named `draft_column`",
    );
}

#[test]
fn offsets_errors_name_the_entry_at_fault() {
    for (case, offsets, expected) in [
        ("offsets-start", [1, 2, 3], "tensor `offsets`: entry 0 is 1, expected 0"),
        ("offsets-decreasing", [0, 2, 1], "tensor `offsets`: entry 2 is 1, expected more than entry 1 (2)"),
        ("offsets-equal", [0, 2, 2], "tensor `offsets`: entry 2 is 2, expected more than entry 1 (2)"),
        ("offsets-past-rows", [0, 4, 3], "tensor `offsets`: entry 1 is 4, expected at most 3 (the target's rows)"),
        ("offsets-short", [0, 1, 2], "tensor `offsets`: entry 2 (the last) is 2, expected 3 (the target's rows)"),
        (
            "offsets-too-many-drafts",
            [0, 3, 3],
            "tensor `offsets`: request 0 (rows 0..3) has 2 drafts, more than max_drafts = 1",
        ),
    ] {
        fails(case, "verify", Some(with(verify_input(), "offsets", i32s(&[3], &offsets))), expected);
    }
}

/// Errors the library finds (`specdec::Error`), reported as input errors
/// naming the tensor of the file and what it had to be.
#[test]
fn library_errors() {
    let slots = with(sample_input(), "slots", i32s(&[3], &[0, 7, -1]));
    fails(
        "slot-out-of-range",
        "sample",
        Some(slots),
        "tensor `slots`: entry 1 is 7, expected -1 (padding) or a slot in 0..2 (`temperature` and `seed` have 2 slots)",
    );
    let slots = with(verify_input(), "slots", i32s(&[2], &[0, 2]));
    fails("request-slot-out-of-range", "verify", Some(slots), "tensor `slots`: entry 1 is 2, expected -1 (padding)");
    let draft = with(sample_input(), "draft_logits", f32s(&[2, 1, 9], &[0.0; 18]));
    let draft = with(draft, "draft_column", i32s(&[], &[0]));
    fails(
        "sample-draft-logits-narrow",
        "sample",
        Some(draft),
        "tensor `draft_logits`: width 9 is narrower than the vocabulary (10), expected a shape [slots, K, width] with width >= 10",
    );
    let draft = with(sample_input(), "draft_logits", f32s(&[1, 1, 10], &[0.0; 10]));
    let draft = with(draft, "draft_column", i32s(&[], &[0]));
    fails(
        "sample-draft-logits-slots",
        "sample",
        Some(draft),
        "tensor `draft_logits`: 1 slot, fewer than the 2 of `temperature` and `seed`",
    );
    let column = with(sample_input(), "draft_logits", f32s(&[2, 1, 10], &[0.0; 20]));
    let column = with(column, "draft_column", i32s(&[], &[1]));
    fails(
        "column-out-of-range",
        "sample",
        Some(column),
        "tensor `draft_column`: value 1, expected a column in 0..1 (`draft_logits` has 1 column)",
    );
    let column = with(sample_input(), "draft_logits", f32s(&[2, 2, 10], &[0.0; 40]));
    let column = with(column, "draft_column", i32s(&[3], &[0, 5, 0]));
    fails(
        "row-column-out-of-range",
        "sample",
        Some(column),
        "tensor `draft_column`: entry 1 is 5, expected a column in 0..2 (`draft_logits` has 2 columns)",
    );
    let column = with(sample_input(), "draft_logits", f32s(&[2, 2, 10], &[0.0; 40]));
    let column = with(column, "draft_column", i32s(&[], &[-1]));
    fails(
        "column-negative",
        "sample",
        Some(column),
        "tensor `draft_column`: value -1, expected a column in 0..2 (`draft_logits` has 2 columns)",
    );
    let temperature = with(sample_input(), "temperature", f32s(&[2], &[-1.0, 0.0]));
    fails(
        "negative-temperature",
        "sample",
        Some(temperature),
        "tensor `temperature`: entry 0 is -1, expected 0 (greedy) or a positive, finite, normal value",
    );
    let drafts = with(verify_input(), "drafts", i32s(&[3], &[10, -1, -1]));
    fails(
        "draft-out-of-vocab",
        "verify",
        Some(drafts),
        "tensor `drafts`: entry 0 is 10, expected -1 (placeholder) or a token id in 0..10",
    );
    let draft_logits = with(verify_input(), "draft_logits", f32s(&[2, 1, 8], &[0.0; 16]));
    fails("draft-logits-narrow", "verify", Some(draft_logits), "tensor `draft_logits`: width 8 is narrower");
    let draft_logits = with(verify_input(), "draft_logits", f32s(&[1, 1, 10], &[0.0; 10]));
    fails("draft-logits-slots", "verify", Some(draft_logits), "tensor `draft_logits`: 1 slot, fewer than the 2");
    let k2 = with(verify_input(), "max_drafts", i32s(&[], &[2]));
    let k2 = with(k2, "draft_logits", f32s(&[2, 1, 10], &[0.0; 20]));
    fails(
        "draft-logits-columns",
        "verify",
        Some(k2),
        "tensor `draft_logits`: 1 column per slot, fewer than `max_drafts` = 2, expected a shape [slots, K, width] with K >= 2",
    );
}

/// The filter tensors: a wrong dtype or shape is named like any tensor's, a
/// value out of range (at a slot the call uses) as the entry of the tensor
/// it is in, and draft logits' filters need draft logits.
#[test]
fn filter_errors() {
    let top_p = with(sample_input(), "top_p", f32s(&[2], &[1.5, 1.0]));
    fails("top-p-1.5", "sample", Some(top_p), "tensor `top_p`: entry 0 is 1.5, expected a value in (0, 1] (1: off)");
    let top_k = with(sample_input(), "top_k", f32s(&[2], &[1.0, 0.0]));
    fails("top-k-f32", "sample", Some(top_k), "tensor `top_k`: expected dtype I32, found F32");
    let top_k = with(sample_input(), "top_k", i32s(&[3], &[1, 0, 0]));
    fails(
        "top-k-vs-slots",
        "sample",
        Some(top_k),
        "tensor `top_k`: expected shape [slots] (the length of `temperature`) = [2], found [3]",
    );
    let min_p = with(sample_input(), "min_p", f32s(&[], &[0.1]));
    fails(
        "min-p-scalar",
        "sample",
        Some(min_p),
        "tensor `min_p`: expected shape [slots] (the length of `temperature`)",
    );
    let top_k = with(verify_input(), "top_k", i32s(&[2], &[-1, 0]));
    fails(
        "top-k-negative",
        "verify",
        Some(top_k),
        "tensor `top_k`: entry 0 is -1, expected 0 (off) or a positive count",
    );
    // Slot 1 is greedy: its filters are checked all the same.
    let min_p = with(verify_input(), "min_p", f32s(&[2], &[0.0, 2.0]));
    fails("min-p-2", "verify", Some(min_p), "tensor `min_p`: entry 1 is 2, expected a value in [0, 1] (0: off)");
    let top_p = with(verify_input(), "top_p", f32s(&[2], &[f32::NAN, 1.0]));
    fails("top-p-nan", "verify", Some(top_p), "tensor `top_p`: entry 0 is NaN, expected a value in (0, 1]");

    let draft_top_k = with(verify_input(), "draft_top_k", i32s(&[2], &[1, 0]));
    fails(
        "draft-top-k-without-draft-logits",
        "verify",
        Some(draft_top_k),
        "tensor `draft_top_k` is given without a `draft_logits` tensor",
    );
    let draft = with(verify_input(), "draft_logits", f32s(&[2, 1, 10], &[0.0; 20]));
    let draft_top_p = with(draft, "draft_top_p", f32s(&[2], &[0.0, 1.0]));
    fails(
        "draft-top-p-0",
        "verify",
        Some(draft_top_p),
        "tensor `draft_top_p`: entry 0 is 0, expected a value in (0, 1] (1: off)",
    );
    let draft = with(verify_input(), "draft_logits", f32s(&[2, 1, 10], &[0.0; 20]));
    let draft_min_p = with(draft, "draft_min_p", i32s(&[2], &[0, 0]));
    fails("draft-min-p-i32", "verify", Some(draft_min_p), "tensor `draft_min_p`: expected dtype F32, found I32");
}

/// A temperature too small to divide by is printed short (`1e-40`, not 40
/// digits) and named as an entry of `temperature`.
#[test]
fn subnormal_temperature_is_printed_short() {
    let temperature = with(sample_input(), "temperature", f32s(&[2], &[1e-40, 0.0]));
    let dir = scratch("errors-subnormal");
    let (input, output) = (dir.join("in.safetensors"), dir.join("out.safetensors"));
    write(&input, temperature);
    let out = specdec(&["sample", "--input", path_str(&input), "--output", path_str(&output), "--backend", "cpu"]);
    assert_refused("subnormal", &out, "tensor `temperature`: entry 0 is 1e-40, expected 0 (greedy) or a positive");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("00000"), "{:?}", out.stderr);
}

/// Empty dimensions the library would report in its own words (a
/// vocabulary of 0, a draft column out of 0..0) are named in the file's.
#[test]
fn empty_dimensions() {
    let logits = with(sample_input(), "logits", f32s(&[3, 0], &[]));
    fails(
        "logits-width-0",
        "sample",
        Some(logits),
        "tensor `logits`: width 0, expected a shape [rows, width] with width >= 1",
    );
    let target = with(verify_input(), "target", f32s(&[3, 0], &[]));
    fails("target-width-0", "verify", Some(target), "tensor `target`: width 0, expected");
    let draft = with(sample_input(), "draft_logits", f32s(&[2, 0, 10], &[]));
    let draft = with(draft, "draft_column", i32s(&[], &[0]));
    fails(
        "sample-draft-logits-k-0",
        "sample",
        Some(draft),
        "tensor `draft_logits`: expected a shape [slots, K, width] with K >= 1, found [2, 0, 10]",
    );
    let draft_logits = with(verify_input(), "draft_logits", f32s(&[2, 0, 10], &[]));
    fails(
        "draft-logits-k-0",
        "verify",
        Some(draft_logits),
        "tensor `draft_logits`: expected a shape [slots, K, width] with K >= 1",
    );
}

/// `--output` naming the input file, by the same path or another, is refused
/// before anything is written: the input keeps its bytes and nothing is added.
#[test]
fn output_naming_the_input_is_refused() {
    for op in ["sample", "verify"] {
        let dir = scratch(&format!("errors-same-file-{op}"));
        let input = dir.join("same.st");
        write(&input, if op == "sample" { sample_input() } else { verify_input() });
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::os::unix::fs::symlink("same.st", dir.join("link.st")).unwrap();
        std::fs::hard_link(&input, dir.join("hard.st")).unwrap();
        let bytes = std::fs::read(&input).unwrap();
        let before = files_in(&dir);
        let absolute = path_str(&input).to_owned();
        // (--input, --output), relative to `dir`.
        for (from, to) in [
            ("same.st", "same.st"),
            ("same.st", "./same.st"),
            ("./same.st", "same.st"),
            ("same.st", "sub/../same.st"),
            ("same.st", absolute.as_str()),
            ("same.st", "link.st"),
            ("link.st", "same.st"),
            ("same.st", "hard.st"),
        ] {
            let case = format!("{op} --input {from} --output {to}");
            let out = specdec_command()
                .current_dir(&dir)
                .args([op, "--input", from, "--output", to, "--backend", "cpu"])
                .output()
                .unwrap();
            assert_refused(&case, &out, &format!("--output {to}: is the input file (--input {from})"));
            assert_eq!(std::fs::read(&input).unwrap(), bytes, "{case}: the input changed");
            assert_eq!(files_in(&dir), before, "{case}: files were written");
        }
        // Another file of the same name, in another directory, is fine.
        let out = specdec_command()
            .current_dir(&dir)
            .args([op, "--input", "same.st", "--output", "sub/same.st", "--backend", "cpu"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{op}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read(&input).unwrap(), bytes);
    }
}

/// An `--output` that cannot be a file to write is refused before the call runs (exit 2).
#[test]
fn output_that_is_not_a_file_path() {
    let dir = scratch("errors-output-path");
    let input = dir.join("in.safetensors");
    write(&input, sample_input());
    std::fs::create_dir(dir.join("sub")).unwrap();
    let before = files_in(&dir);
    let (sub, missing) = (dir.join("sub"), dir.join("missing").join("out.st"));
    for (case, output, expected) in [
        ("directory", path_str(&sub).to_owned(), "is a directory, expected the path of a file to write"),
        ("dot-dot", format!("{}/..", path_str(&sub)), "names no file"),
        ("missing-directory", path_str(&missing).to_owned(), "does not exist, expected the path of a file to write"),
    ] {
        let out = specdec(&["sample", "--input", path_str(&input), "--output", &output, "--backend", "cpu"]);
        assert_refused(case, &out, &format!("--output {output}: "));
        assert_refused(case, &out, expected);
        assert_eq!(files_in(&dir), before, "{case}: files were written");
        assert!(files_in(&sub).is_empty(), "{case}: files were written in sub/");
    }
}
