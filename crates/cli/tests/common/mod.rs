//! Helpers for the CLI tests: the built binary, scratch directories, and
//! safetensors files written and read with the `safetensors` crate.
#![allow(dead_code)] // each test file uses a part

use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `specdec` binary, to run with a working directory or environment of its own.
pub fn specdec_command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_specdec"))
}

/// Runs the `specdec` binary with `args`.
pub fn specdec(args: &[&str]) -> Output {
    specdec_command().args(args).output().expect("the specdec binary runs")
}

/// Checks a refused command: exit code 2, one `Error: ` line on stderr
/// containing `expected`, nothing on stdout.
pub fn assert_refused(case: &str, out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{case}: exit code (stderr: {stderr})");
    assert!(stderr.starts_with("Error: ") && stderr.lines().count() == 1, "{case}: one error line, got {stderr:?}");
    assert!(stderr.contains(expected), "{case}: expected {expected:?} in {stderr:?}");
    assert!(out.stdout.is_empty(), "{case}: nothing on stdout, got {:?}", String::from_utf8_lossy(&out.stdout));
}

/// A fresh, empty directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("specdec-cli").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// A tensor to write: dtype, shape, little-endian bytes.
pub struct T(pub Dtype, pub Vec<usize>, pub Vec<u8>);

pub fn i32s(shape: &[usize], v: &[i32]) -> T {
    T(Dtype::I32, shape.to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect())
}
pub fn i64s(shape: &[usize], v: &[i64]) -> T {
    T(Dtype::I64, shape.to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect())
}
pub fn u64s(shape: &[usize], v: &[u64]) -> T {
    T(Dtype::U64, shape.to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect())
}
pub fn f32s(shape: &[usize], v: &[f32]) -> T {
    T(Dtype::F32, shape.to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect())
}
pub fn bf16s(shape: &[usize], v: &[bf16]) -> T {
    T(Dtype::BF16, shape.to_vec(), v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect())
}
pub fn f16s(shape: &[usize], v: &[f16]) -> T {
    T(Dtype::F16, shape.to_vec(), v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect())
}
pub fn u8_scalar(v: u8) -> T {
    T(Dtype::U8, vec![], vec![v])
}

/// Writes `tensors` to `path` as a safetensors file.
pub fn write(path: &Path, tensors: BTreeMap<&str, T>) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, T(dtype, shape, bytes))| (*name, TensorView::new(*dtype, shape.clone(), bytes).expect("view")))
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write the input file");
}

/// The tensors of a safetensors file: name → (dtype, shape, bytes).
pub fn read(path: &Path) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).expect("read the output file");
    let st = SafeTensors::deserialize(&bytes).expect("a valid safetensors file");
    st.tensors().into_iter().map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec()))).collect()
}

/// Deterministic logits in about [-4, 4], from the project's RNG.
pub fn logits(n: usize, salt: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let w = specdec::rng::random_u32(salt, i as u64, specdec::rng::Stream::Accept, 0);
            (w % 8001) as f32 / 1000.0 - 4.0
        })
        .collect()
}

/// The files in `dir`, sorted (to check that nothing was left behind).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list the scratch directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// An output file's tensors: name → (dtype, shape, little-endian bytes).
pub type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

pub fn le_i32(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn le_u32(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Writes `tensors` to `dir/name.safetensors`, runs `specdec <op> --backend cpu`
/// on it and returns the output file's tensors.
pub fn run_cpu(op: &str, dir: &Path, name: &str, tensors: BTreeMap<&str, T>) -> Tensors {
    run_cpu_with(op, dir, name, tensors, &[])
}

/// [`run_cpu`] with `extra` arguments.
pub fn run_cpu_with(op: &str, dir: &Path, name: &str, tensors: BTreeMap<&str, T>, extra: &[&str]) -> Tensors {
    let (input, output) = (dir.join(format!("{name}.safetensors")), dir.join(format!("{name}-out.safetensors")));
    write(&input, tensors);
    let mut args = vec![op, "--input", path_str(&input), "--output", path_str(&output), "--backend", "cpu"];
    args.extend_from_slice(extra);
    let out = specdec(&args);
    assert!(out.status.success(), "specdec {op} ({name}) failed: {}", String::from_utf8_lossy(&out.stderr));
    read(&output)
}

/// Request offsets of requests with `drafts[r]` drafts each (a bonus row each).
pub fn offsets_of(drafts: &[usize]) -> Vec<i32> {
    let mut offsets = vec![0i32];
    for &k in drafts {
        offsets.push(offsets.last().unwrap() + k as i32 + 1);
    }
    offsets
}
