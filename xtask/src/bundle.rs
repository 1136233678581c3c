//! `cargo xtask test-gpu --bundle DIR`: build the GPU test binaries here (no GPU
//! needed) and put them, with a `run.sh` that runs them all, into DIR, to be
//! copied to a GPU machine that has no Rust toolchain.
//!
//! ```text
//! DIR/bin/<name>        one test binary per test target (name: target name, or package-target on a clash)
//! DIR/run.sh            runs them all: `run.sh [--sanitize[=TOOL,...]] [--] [TEST ARGS...]` (see src/run.sh)
//! DIR/bin/python-package  the Python package's tests, on its wheel, as one more test binary
//! DIR/python/           the package's wheel and pytest's (wheels/), and its tests (tests/)
//! DIR/cuda-libs.sh      what run.sh sources to find the machine's CUDA 13 libraries
//! DIR/.specdec-bundle   marks DIR as ours (so it may be deleted next time); lists the binaries
//! DIR.tar.xz            DIR packed, when DIR is over the 64 MiB a GPU machine can be sent
//! ```
//!
//! Every binary embeds the same PTX (ours, several MiB, and candle's CUDA
//! kernels, tens of MiB), so the bundle outgrows 64 MiB while xz, given a
//! dictionary that spans binaries, packs it to ~42 MiB.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::{GPU_FEATURE, Result, cmd};

const RUN_SH: &str = include_str!("run.sh");
/// Packages whose tests stay out of a bundle: they run the CLI binary or read
/// the source tree by the paths they were built with, which a GPU machine
/// does not have, and none touches a GPU (`cargo xtask test` runs them).
const NOT_BUNDLED: [&str; 3] = ["specdec-cli", "xtask", "specdec-ptx-builder"];
const MARKER: &str = ".specdec-bundle";
const WARN_BYTES: u64 = 48 << 20;
const LIMIT_BYTES: u64 = 64 << 20;

/// A test binary cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestBinary {
    package: String,
    target: String,
    kind: String,
    executable: PathBuf,
}

pub fn bundle(root: &Path, dir: &Path, extra: &[String]) -> Result<()> {
    let binaries = build_tests(root, extra)?;
    if binaries.is_empty() {
        return Err("cargo built no test binaries, so there is nothing to bundle".into());
    }
    recreate(root, dir, MARKER)?;

    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("mkdir {}: {e}", bin.display()))?;
    let mut listing = String::new();
    for (name, binary) in file_names(&binaries).into_iter().zip(&binaries) {
        let dest = bin.join(&name);
        std::fs::copy(&binary.executable, &dest)
            .map_err(|e| format!("cp {} {}: {e}", binary.executable.display(), dest.display()))?;
        listing.push_str(&format!("{name}\t{} {} `{}`\n", binary.package, binary.kind, binary.target));
    }

    let run_sh = dir.join("run.sh");
    std::fs::write(&run_sh, RUN_SH).map_err(|e| format!("write {}: {e}", run_sh.display()))?;
    cmd::make_executable(&run_sh)?;
    let (libs_name, libs_sh) = crate::cuda_toolkit::LIBS_SH;
    let libs = dir.join(libs_name);
    std::fs::write(&libs, libs_sh).map_err(|e| format!("write {}: {e}", libs.display()))?;
    crate::python::bundle(root, dir)?;
    listing.push_str("python-package\tthe Python package's tests (python/tests), on its wheel (python/wheels)\n");
    let marker = dir.join(MARKER);
    std::fs::write(&marker, listing).map_err(|e| format!("write {}: {e}", marker.display()))?;

    if report(dir, &bin)? > LIMIT_BYTES { pack(dir) } else { Ok(()) }
}

/// `tar -cf - DIR | xz -6e --lzma2=dict=128MiB > DIR.tar.xz`, run beside DIR;
/// unpack with `tar -xJf DIR.tar.xz`.
fn pack(dir: &Path) -> Result<()> {
    let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(format!("cannot pack {}: it has no parent directory", dir.display()));
    };
    let archive = parent.join(format!("{}.tar.xz", name.to_string_lossy()));
    let file = std::fs::File::create(&archive).map_err(|e| format!("create {}: {e}", archive.display()))?;
    println!("packing {} into {} (tar | xz)", dir.display(), archive.display());
    let mut tar = std::process::Command::new("tar")
        .arg("-cf")
        .arg("-")
        .arg("-C")
        .arg(parent)
        .arg(name)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start tar: {e}"))?;
    let tar_out = tar.stdout.take().expect("stdout is piped");
    let xz = std::process::Command::new("xz")
        .args(["-T0", "-6e", "--lzma2=dict=128MiB"])
        .stdin(tar_out)
        .stdout(file)
        .status()
        .map_err(|e| format!("could not start xz (install it, or pack {} yourself): {e}", dir.display()))?;
    let tar = tar.wait().map_err(|e| format!("waiting for tar: {e}"))?;
    if !tar.success() || !xz.success() {
        return Err(format!("packing {} failed (tar: {tar}, xz: {xz})", archive.display()));
    }
    let size = std::fs::metadata(&archive).map(|m| m.len()).unwrap_or(0);
    println!(
        "packed: {} ({}); unpack it there with tar -xJf {}",
        archive.display(),
        mib(size),
        archive.file_name().unwrap_or_default().to_string_lossy()
    );
    Ok(())
}

/// `cargo test --workspace --features specdec-suite/gpu --no-run --message-format=json-render-diagnostics`
/// without debug info and stripped; returns the test executables cargo reports.
fn build_tests(root: &Path, extra: &[String]) -> Result<Vec<TestBinary>> {
    let mut cargo = cmd::cargo();
    crate::cuda_toolkit::configure(root, &mut cargo)?;
    cargo
        .current_dir(root)
        .env("CARGO_PROFILE_TEST_DEBUG", "false")
        .env("CARGO_PROFILE_TEST_STRIP", "true")
        .args([
            "test",
            "--workspace",
            "--features",
            GPU_FEATURE,
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(NOT_BUNDLED.iter().flat_map(|package| ["--exclude", *package]))
        .args(extra)
        .stdout(Stdio::piped());
    cmd::print(&cargo);
    let mut child = cargo.spawn().map_err(|e| format!("could not start cargo: {e}"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut binaries = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading cargo's output: {e}"))?;
        if let Some(binary) = test_binary(&line)
            && !binaries.contains(&binary)
        {
            binaries.push(binary);
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for cargo: {e}"))?;
    if !status.success() {
        return Err(format!("`{}` failed ({status})", cmd::display(&cargo)));
    }
    Ok(binaries)
}

/// A `compiler-artifact` message for a test-profile target that has an executable.
fn test_binary(line: &str) -> Option<TestBinary> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    Some(TestBinary {
        package: package_name(message["package_id"].as_str()?),
        target: message["target"]["name"].as_str()?.to_string(),
        kind: message["target"]["kind"][0].as_str().unwrap_or("test").to_string(),
        executable: PathBuf::from(message["executable"].as_str()?),
    })
}

/// The package name in a cargo package id: `path+file:///p/core#specdec-core@0.1.0`,
/// `path+file:///p/xtask#0.1.0` (name = last path segment), or the old `name 0.1.0 (source)`.
fn package_name(id: &str) -> String {
    match id.split_once('#') {
        Some((_, fragment)) if fragment.contains('@') => fragment.split('@').next().unwrap_or(fragment).to_string(),
        Some((url, _)) => url.rsplit('/').next().unwrap_or(url).to_string(),
        None => id.split_whitespace().next().unwrap_or(id).to_string(),
    }
}

/// One file name per binary: the target name, `package-target` where target names
/// clash, and a `-2`, `-3`... suffix if that still clashes.
fn file_names(binaries: &[TestBinary]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for binary in binaries {
        let clashes = binaries.iter().filter(|b| b.target == binary.target).count() > 1;
        let base = if clashes { format!("{}-{}", binary.package, binary.target) } else { binary.target.clone() };
        let mut name = base.clone();
        let mut n = 2;
        while names.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        names.push(name);
    }
    names
}

/// Deletes DIR (only if it is empty or an earlier bundle of this kind, marked
/// by the file `marker`) and creates it again, marked at once, so a run that
/// stops half-way still leaves a directory the next run may delete.
pub fn recreate(root: &Path, dir: &Path, marker: &str) -> Result<()> {
    if dir.exists() {
        let absolute = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
        let root = root.canonicalize().map_err(|e| format!("{}: {e}", root.display()))?;
        if root.starts_with(&absolute) {
            return Err(format!("--bundle {} would delete the workspace; pick another directory", dir.display()));
        }
        let is_ours = dir.join(marker).is_file();
        let is_empty = dir.read_dir().map(|mut entries| entries.next().is_none()).unwrap_or(false);
        if !(is_ours || is_empty) {
            return Err(format!(
                "{} exists and is not a bundle from an earlier run (no {marker} in it); \
                 refusing to delete it: pick another --bundle directory or remove it yourself",
                dir.display()
            ));
        }
        println!("rm -r {}", dir.display());
        std::fs::remove_dir_all(dir).map_err(|e| format!("rm -r {}: {e}", dir.display()))?;
    }
    println!("mkdir -p {}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let marker = dir.join(marker);
    std::fs::write(&marker, "").map_err(|e| format!("write {}: {e}", marker.display()))
}

/// Lists the binaries and the bundle's size, which it returns; warns when it
/// gets close to 64 MiB.
fn report(dir: &Path, bin: &Path) -> Result<u64> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(bin)
        .map_err(|e| format!("read {}: {e}", bin.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .map_err(|e| format!("read {}: {e}", bin.display()))?;
    entries.sort();
    println!();
    for path in &entries {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("  {:>8}  {}", mib(size), path.display());
    }
    let total = dir_size(dir)?;
    println!("bundle: {} ({} test binaries, {} in all)", dir.display(), entries.len(), mib(total));
    println!("run it on a GPU machine: {}/run.sh [--sanitize[=TOOL,...]] [--] [TEST ARGS...]", dir.display());
    if total > LIMIT_BYTES {
        println!("the bundle is {}, over the 64 MiB that can be carried to a GPU machine: packing it", mib(total));
    } else if total > WARN_BYTES {
        println!("warning: the bundle is {}, close to the 64 MiB that can be carried to a GPU machine", mib(total));
    }
    Ok(total)
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
        let meta = entry.metadata().map_err(|e| format!("stat {}: {e}", entry.path().display()))?;
        total += if meta.is_dir() { dir_size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_ids() {
        assert_eq!(package_name("path+file:///w/crates/core#specdec-core@0.1.0"), "specdec-core");
        assert_eq!(package_name("path+file:///w/xtask#0.1.0"), "xtask");
        assert_eq!(package_name("specdec-core 0.1.0 (path+file:///w/crates/core)"), "specdec-core");
    }

    #[test]
    fn picks_test_artifacts() {
        let test = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/core#specdec-core@0.1.0","target":{"kind":["lib"],"name":"specdec_core"},"profile":{"test":true},"executable":"/w/target/debug/deps/specdec_core-1"}"#;
        let lib = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/core#specdec-core@0.1.0","target":{"kind":["lib"],"name":"specdec_core"},"profile":{"test":false},"executable":null}"#;
        let bin = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/cli#specdec-cli@0.1.0","target":{"kind":["bin"],"name":"specdec"},"profile":{"test":false},"executable":"/w/target/debug/specdec"}"#;
        let binary = test_binary(test).unwrap();
        assert_eq!(binary.package, "specdec-core");
        assert_eq!(binary.target, "specdec_core");
        assert_eq!(binary.executable, PathBuf::from("/w/target/debug/deps/specdec_core-1"));
        assert_eq!(test_binary(lib), None);
        assert_eq!(test_binary(bin), None);
        assert_eq!(test_binary(r#"{"reason":"build-finished","success":true}"#), None);
        assert_eq!(test_binary("not json"), None);
    }

    #[test]
    fn clashing_names_get_the_package() {
        let b = |package: &str, target: &str| TestBinary {
            package: package.into(),
            target: target.into(),
            kind: "test".into(),
            executable: PathBuf::new(),
        };
        let binaries = [b("a", "smoke"), b("b", "smoke"), b("a", "gumbel"), b("c", "c"), b("c", "c")];
        assert_eq!(file_names(&binaries), ["a-smoke", "b-smoke", "gumbel", "c-c", "c-c-2"]);
    }
}
