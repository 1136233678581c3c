//! `cargo xtask bench-gpu [--bundle DIR]`: build the GPU benchmark (`benches/gpu.rs`)
//! and run it here beside the PyTorch baseline (`benches/torch_baseline.py`), then
//! write the report; or bundle both, with a `bench.sh` that runs them, for a GPU
//! machine without a Rust toolchain.
//!
//! ```text
//! DIR/gpu-bench               the benchmark binary (PTX embedded, stripped)
//! DIR/torch_baseline.py       the PyTorch baseline
//! DIR/bench.sh                runs both (see src/bench.sh), writing to ${OUT:-DIR}
//! DIR/.specdec-bench-bundle   marks DIR as ours (so it may be deleted next time)
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Result, cmd, report};

const BENCH_SH: &str = include_str!("bench.sh");
const MARKER: &str = ".specdec-bench-bundle";
const BINARY: &str = "gpu-bench";
const TORCH_SCRIPT: &str = "benches/torch_baseline.py";
/// Where a local run writes its JSON (then the report goes to `benches/results/`).
const LOCAL_OUT: &str = "target/bench-gpu";

/// `bench-gpu` options: `--bundle DIR` or `--bundle=DIR`, nothing else.
pub fn parse(options: &[String]) -> Result<Option<PathBuf>> {
    let mut dir = None;
    let mut iter = options.iter();
    while let Some(arg) = iter.next() {
        let value = if arg == "--bundle" {
            iter.next().ok_or("`--bundle` needs a directory")?.clone()
        } else if let Some(value) = arg.strip_prefix("--bundle=") {
            value.to_string()
        } else {
            return Err(format!("`bench-gpu` takes only `--bundle DIR`, not `{arg}`"));
        };
        dir = Some(PathBuf::from(value));
    }
    Ok(dir)
}

pub fn bench_gpu(root: &Path, bundle: Option<&Path>) -> Result<()> {
    let binary = build(root)?;
    match bundle {
        Some(dir) => make_bundle(root, dir, &binary),
        None => run_here(root, &binary),
    }
}

/// `cargo bench -p specdec-suite --features gpu --bench gpu --no-run` without debug
/// info and stripped; returns the benchmark executable cargo reports.
fn build(root: &Path) -> Result<PathBuf> {
    let mut cargo = cmd::cargo();
    cargo
        .current_dir(root)
        .env("CARGO_PROFILE_BENCH_DEBUG", "false")
        .env("CARGO_PROFILE_BENCH_STRIP", "true")
        .args([
            "bench",
            "-p",
            "specdec-suite",
            "--features",
            "gpu",
            "--bench",
            "gpu",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped());
    cmd::print(&cargo);
    let mut child = cargo.spawn().map_err(|e| format!("could not start cargo: {e}"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut executable = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading cargo's output: {e}"))?;
        if let Some(path) = bench_executable(&line, "gpu") {
            executable = Some(path);
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for cargo: {e}"))?;
    if !status.success() {
        return Err(format!("`{}` failed ({status})", cmd::display(&cargo)));
    }
    executable.ok_or_else(|| "cargo reported no executable for the `gpu` bench target".to_string())
}

/// The executable of a `compiler-artifact` message for bench target `name`.
fn bench_executable(line: &str, name: &str) -> Option<PathBuf> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["target"]["name"] != name {
        return None;
    }
    let kinds = message["target"]["kind"].as_array()?;
    if !kinds.iter().any(|k| k == "bench") {
        return None;
    }
    Some(PathBuf::from(message["executable"].as_str()?))
}

/// Runs the benchmark, the baseline when this `python3` has torch, and the report.
fn run_here(root: &Path, binary: &Path) -> Result<()> {
    let out = root.join(LOCAL_OUT);
    std::fs::create_dir_all(&out).map_err(|e| format!("mkdir {}: {e}", out.display()))?;
    for stale in ["bench.json", "bench.md", "torch.json"] {
        let path = out.join(stale);
        if path.exists() {
            std::fs::remove_file(&path).map_err(|e| format!("rm {}: {e}", path.display()))?;
        }
    }
    cmd::run_ok(Command::new(binary).env("OUT", &out)).map_err(|e| {
        format!(
            "{e}\nthe GPU benchmark needs an NVIDIA GPU and driver here; \
             on a machine without one, use `cargo xtask bench-gpu --bundle DIR`"
        )
    })?;

    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)";
    let has_torch = Command::new(&python).args(["-c", probe]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if has_torch {
        cmd::run_ok(Command::new(&python).arg(root.join(TORCH_SCRIPT)).arg("--out").arg(&out))?;
    } else {
        println!("note: `{python}` has no torch with CUDA: no PyTorch baseline in this report");
    }
    report::report(&out, &root.join(report::RESULTS))
}

fn make_bundle(root: &Path, dir: &Path, binary: &Path) -> Result<()> {
    crate::bundle::recreate(root, dir, MARKER)?;
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to).map(|_| ()).map_err(|e| format!("cp {} {}: {e}", from.display(), to.display()))
    };
    copy(binary, &dir.join(BINARY))?;
    copy(&root.join(TORCH_SCRIPT), &dir.join("torch_baseline.py"))?;
    let bench_sh = dir.join("bench.sh");
    std::fs::write(&bench_sh, BENCH_SH).map_err(|e| format!("write {}: {e}", bench_sh.display()))?;
    cmd::make_executable(&bench_sh)?;

    println!();
    let mut total = 0;
    for name in [BINARY, "torch_baseline.py", "bench.sh"] {
        let size = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        total += size;
        println!("  {:>8.1} MiB  {}", size as f64 / (1024.0 * 1024.0), dir.join(name).display());
    }
    println!("bundle: {} ({:.1} MiB)", dir.display(), total as f64 / (1024.0 * 1024.0));
    println!("run it on a GPU machine: OUT=<dir> {}/bench.sh [--no-torch | --torch-only]", dir.display());
    println!("then here: cargo xtask bench-report <dir holding the fetched bench.json and torch.json>");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_bench_executable() {
        let bench = r#"{"reason":"compiler-artifact","package_id":"path+file:///w#specdec-suite@0.1.0","target":{"kind":["bench"],"name":"gpu"},"profile":{"test":false},"executable":"/w/target/release/deps/gpu-1"}"#;
        let lib = r#"{"reason":"compiler-artifact","package_id":"path+file:///w#specdec-suite@0.1.0","target":{"kind":["lib"],"name":"gpu"},"profile":{"test":false},"executable":null}"#;
        let other = r#"{"reason":"compiler-artifact","target":{"kind":["bench"],"name":"cpu"},"executable":"/w/target/release/deps/cpu-1"}"#;
        assert_eq!(bench_executable(bench, "gpu"), Some(PathBuf::from("/w/target/release/deps/gpu-1")));
        assert_eq!(bench_executable(lib, "gpu"), None);
        assert_eq!(bench_executable(other, "gpu"), None);
        assert_eq!(bench_executable(r#"{"reason":"build-finished","success":true}"#, "gpu"), None);
        assert_eq!(bench_executable("not json", "gpu"), None);
    }
}
