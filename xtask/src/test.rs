//! `cargo xtask test` (CI: CPU tests and the PTX check) and `cargo xtask test-gpu`
//! (the GPU suite, on a machine with an NVIDIA GPU).

use std::path::Path;
use std::process::Command;

use crate::{GPU_FEATURE, Result, cmd, ptx};

/// `cargo test --workspace EXTRA...`, then `ptx --deny-spills` for both archs.
/// Both steps run even if the first fails; the last line sums them up.
pub fn test(root: &Path, extra: &[String]) -> Result<()> {
    println!(
        "note: GPU tests are not built in this run (they need feature {GPU_FEATURE}); \
         run `cargo xtask test-gpu` on a machine with an NVIDIA GPU"
    );
    let mut cargo_test = cmd::cargo();
    cargo_test.current_dir(root).args(["test", "--workspace"]).args(extra);
    let tests_passed = match cmd::run(&mut cargo_test) {
        Ok(status) => status.success(),
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };

    let options = ptx::Options { archs: ptx::DEFAULT_ARCHS.map(String::from).to_vec(), deny_spills: true };
    let ptx_passed = match ptx::run(root, &options) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };

    let python_passed = match crate::python::test(root) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };

    let word = |passed| if passed { "ok" } else { "FAILED" };
    println!(
        "\nxtask test: cargo test --workspace {}; PTX check ({}, --deny-spills) {}; Python package (wheel, pytest) {}",
        word(tests_passed),
        ptx::DEFAULT_ARCHS.join(", "),
        word(ptx_passed),
        word(python_passed)
    );
    if tests_passed && ptx_passed && python_passed { Ok(()) } else { Err("xtask test failed (see above)".into()) }
}

/// Checks for a GPU, then `cargo test --workspace --features specdec-suite/gpu EXTRA...`.
pub fn test_gpu(root: &Path, extra: &[String]) -> Result<()> {
    find_gpu()?;
    let mut cargo_test = cmd::cargo();
    crate::cuda_toolkit::configure(root, &mut cargo_test)?;
    cargo_test.current_dir(root).args(["test", "--workspace", "--features", GPU_FEATURE]).args(extra);
    cmd::run_ok(&mut cargo_test)
}

/// The compute-sanitizer tools `run.sh --sanitize=...` knows.
pub const SANITIZER_TOOLS: [&str; 4] = ["memcheck", "racecheck", "initcheck", "synccheck"];

/// `memcheck,racecheck` or `all` → the tools, each once, in order.
pub fn sanitizer_tools(list: &str) -> Result<Vec<String>> {
    let mut tools: Vec<String> = Vec::new();
    for tool in list.split(',') {
        let named: Vec<&str> = match tool {
            "all" => SANITIZER_TOOLS.to_vec(),
            t if SANITIZER_TOOLS.contains(&t) => vec![t],
            _ => {
                return Err(format!(
                    "unknown compute-sanitizer tool `{tool}` (expected {} or all)",
                    SANITIZER_TOOLS.join(", ")
                ));
            }
        };
        tools.extend(named.into_iter().map(String::from).filter(|t| !tools.contains(t)).collect::<Vec<_>>());
    }
    Ok(tools)
}

/// Checks for a GPU, builds the GPU test binaries into `target/gpu-sanitize` (a
/// bundle) and runs its `run.sh --sanitize=TOOLS -- TEST ARGS`. `extra` is
/// `CARGO ARGS [-- TEST ARGS]`.
pub fn test_gpu_sanitized(root: &Path, tools: &[String], extra: &[String]) -> Result<()> {
    find_gpu()?;
    let (cargo_args, test_args) = match extra.iter().position(|a| a == "--") {
        Some(i) => (&extra[..i], &extra[i + 1..]),
        None => (extra, &[][..]),
    };
    let dir = root.join("target").join("gpu-sanitize");
    crate::bundle::bundle(root, &dir, cargo_args)?;
    let mut run = Command::new("bash");
    run.arg(dir.join("run.sh")).arg(format!("--sanitize={}", tools.join(","))).arg("--").args(test_args);
    cmd::run_ok(&mut run)
}

/// A GPU is there if `nvidia-smi -L` lists one, or failing that if `/dev/nvidia0` exists.
fn find_gpu() -> Result<()> {
    let reason = match cmd::output(Command::new("nvidia-smi").arg("-L")) {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => {
            print!("{}", String::from_utf8_lossy(&out.stdout));
            return Ok(());
        }
        Ok(out) => format!("`nvidia-smi -L` failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => e,
    };
    if Path::new("/dev/nvidia0").exists() {
        println!("{reason}; /dev/nvidia0 exists, so going ahead");
        return Ok(());
    }
    Err(format!(
        "no NVIDIA GPU found ({reason}; no /dev/nvidia0).\n\
         Run `cargo xtask test-gpu` on a machine with an NVIDIA GPU, or build the tests here with \
         `cargo xtask test-gpu --bundle DIR` and run `DIR/run.sh` there (no Rust toolchain needed)."
    ))
}
