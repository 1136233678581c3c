//! `cargo xtask bench-gpu [--bundle DIR [--against REV]]`: build the GPU benchmark
//! (`benches/gpu.rs`) and run it here beside the PyTorch baseline
//! (`benches/torch_baseline.py`), then write the report; or bundle both, with a
//! `bench.sh` that runs them, for a GPU machine without a Rust toolchain. With
//! `--against REV`, the bundle also holds the benchmark of revision REV (built in a
//! git worktree) and `ab.sh`, which runs the two alternately, with any variant
//! copied in beside them (see [`crate::ab`]).
//!
//! ```text
//! DIR/gpu-bench               the benchmark binary (PTX embedded, stripped)
//! DIR/torch_baseline.py       the PyTorch baseline
//! DIR/bench.sh                runs both (see src/bench.sh), writing to ${OUT:-DIR}
//! DIR/gpu-bench-base          with --against: REV's benchmark binary
//! DIR/ab.sh, DIR/base.txt     with --against: the A/B runner (src/ab.sh), REV's commit
//! DIR/gpu-bench-<LABEL>       copied in by hand: a variant (another tree's gpu-bench), a further side
//! DIR/.specdec-bench-bundle   marks DIR as ours (so it may be deleted next time)
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Result, ab, cmd, report};

const BENCH_SH: &str = include_str!("bench.sh");
const MARKER: &str = ".specdec-bench-bundle";
const BINARY: &str = "gpu-bench";
const TORCH_SCRIPT: &str = "benches/torch_baseline.py";
/// Where a local run writes its JSON (then the report goes to `benches/results/`).
const LOCAL_OUT: &str = "target/bench-gpu";

/// `bench-gpu` options.
#[derive(Debug, Default, PartialEq)]
pub struct Options {
    bundle: Option<PathBuf>,
    against: Option<String>,
}

/// `--bundle DIR` (or `--bundle=DIR`) and `--against REV` (or `--against=REV`,
/// with a bundle only), nothing else.
pub fn parse(options: &[String]) -> Result<Options> {
    let mut parsed = Options::default();
    let mut iter = options.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| -> Result<Option<String>> {
            if arg == name {
                return iter.next().cloned().map(Some).ok_or_else(|| format!("`{name}` needs a value"));
            }
            Ok(arg.strip_prefix(name).and_then(|v| v.strip_prefix('=')).map(str::to_string))
        };
        if let Some(dir) = value("--bundle")? {
            parsed.bundle = Some(PathBuf::from(dir));
        } else if let Some(rev) = value("--against")? {
            parsed.against = Some(rev);
        } else {
            return Err(format!("`bench-gpu` takes only `--bundle DIR` and `--against REV`, not `{arg}`"));
        }
    }
    if parsed.against.is_some() && parsed.bundle.is_none() {
        return Err("`--against REV` builds an A/B bundle: give `--bundle DIR` too".into());
    }
    Ok(parsed)
}

pub fn bench_gpu(root: &Path, options: &Options) -> Result<()> {
    let binary = build(root, root, None)?;
    match &options.bundle {
        Some(dir) => make_bundle(root, dir, &binary, options.against.as_deref()),
        None => run_here(root, &binary),
    }
}

/// REV's benchmark, built in a git worktree at `target/ab/worktree` (target
/// directory `target/ab/target`, kept between runs); returns it and REV's
/// commit.
fn build_revision(root: &Path, rev: &str) -> Result<(PathBuf, String)> {
    let git = |args: &[&str]| {
        let mut git = Command::new("git");
        git.current_dir(root).args(args);
        git
    };
    let spec = format!("{rev}^{{commit}}");
    let output = cmd::output(&mut git(&["rev-parse", "--verify", "--quiet", &spec]))?;
    if !output.status.success() {
        return Err(format!("`{rev}` names no commit here"));
    }
    let commit = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let ab = root.join("target").join("ab");
    let worktree = ab.join("worktree");
    let tree = worktree.to_string_lossy().into_owned();
    // A fresh checkout each time: the worktree may be stale or half-made.
    let _ = cmd::output(&mut git(&["worktree", "remove", "--force", &tree]));
    if worktree.exists() {
        std::fs::remove_dir_all(&worktree).map_err(|e| format!("rm -r {tree}: {e}"))?;
    }
    cmd::run_ok(&mut git(&["worktree", "prune"]))?;
    cmd::run_ok(&mut git(&["worktree", "add", "--detach", &tree, &commit]))?;
    Ok((build(root, &worktree, Some(&ab.join("target")))?, commit))
}

/// `cargo bench -p specdec-suite --features gpu --bench gpu --no-run` in `tree` (the
/// repository at `root`, or a worktree of it) without debug info and stripped; returns the
/// benchmark executable cargo reports.
fn build(root: &Path, tree: &Path, target_dir: Option<&Path>) -> Result<PathBuf> {
    let mut cargo = cmd::cargo();
    crate::cuda_toolkit::configure(root, &mut cargo)?;
    if let Some(dir) = target_dir {
        cargo.env("CARGO_TARGET_DIR", dir);
    }
    cargo
        .current_dir(tree)
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

fn make_bundle(root: &Path, dir: &Path, binary: &Path, against: Option<&str>) -> Result<()> {
    // Built before the bundle is made, so a failed build leaves no half bundle.
    let base =
        against.map(|rev| build_revision(root, rev).map(|(binary, commit)| (binary, commit, rev))).transpose()?;
    crate::bundle::recreate(root, dir, MARKER)?;
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to).map(|_| ()).map_err(|e| format!("cp {} {}: {e}", from.display(), to.display()))
    };
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))
    };
    copy(binary, &dir.join(BINARY))?;
    copy(&root.join(TORCH_SCRIPT), &dir.join("torch_baseline.py"))?;
    write("bench.sh", BENCH_SH)?;
    cmd::make_executable(&dir.join("bench.sh"))?;
    let (libs_name, libs_sh) = crate::cuda_toolkit::LIBS_SH;
    write(libs_name, libs_sh)?;
    let mut names = vec![BINARY, "torch_baseline.py", "bench.sh", libs_name];
    if let Some((binary, commit, rev)) = &base {
        copy(binary, &dir.join(ab::BASE_BINARY))?;
        write(ab::BASE_FILE, &format!("{} ({rev})\n", &commit[..commit.len().min(12)]))?;
        write("ab.sh", ab::AB_SH)?;
        cmd::make_executable(&dir.join("ab.sh"))?;
        names.extend([ab::BASE_BINARY, "ab.sh"]);
    }

    println!();
    let mut total = 0;
    for name in names {
        let size = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        total += size;
        println!("  {:>8.1} MiB  {}", size as f64 / (1024.0 * 1024.0), dir.join(name).display());
    }
    println!("bundle: {} ({:.1} MiB)", dir.display(), total as f64 / (1024.0 * 1024.0));
    println!("run it on a GPU machine: OUT=<dir> {}/bench.sh [--no-torch | --torch-only]", dir.display());
    println!("then here: cargo xtask bench-report <dir holding the fetched bench.json and torch.json>");
    if let Some((_, _, rev)) = &base {
        println!("A/B against {rev}: OUT=<dir> {}/ab.sh [ROUNDS] [-- GPU-BENCH ARGS...]", dir.display());
        println!("then here: cargo xtask bench-ab <dir holding the fetched ab/ and base.txt> [--min-change PCT]");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let parse = |args: &[&str]| parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(parse(&[]), Ok(Options::default()));
        assert_eq!(parse(&["--bundle", "b"]), Ok(Options { bundle: Some("b".into()), against: None }));
        let ab = Options { bundle: Some("b".into()), against: Some("HEAD~1".into()) };
        assert_eq!(parse(&["--bundle=b", "--against", "HEAD~1"]), Ok(ab));
        assert!(parse(&["--against=HEAD"]).is_err(), "an A/B needs a bundle");
        assert!(parse(&["--bundle"]).is_err());
        assert!(parse(&["--bundle", "b", "--against"]).is_err());
        assert!(parse(&["--bundled", "b"]).is_err());
    }

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
