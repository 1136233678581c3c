//! `cargo xtask`: the project's tasks (PTX check, CI tests, GPU tests and bundles).
//!
//! Every external command is printed (`$ cargo test ...`) before it runs, and every
//! failure ends the process with a non-zero status and an `error:` line.

mod ab;
mod bench;
mod bundle;
mod cmd;
mod cubin;
mod cuda_toolkit;
mod ptx;
mod ptxas;
mod python;
mod report;
mod resource_usage;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Errors are messages for a person: each says what failed and what to do.
pub type Result<T, E = String> = std::result::Result<T, E>;

/// The feature that builds the GPU tests (`test-gpu`, and its bundles).
pub const GPU_FEATURE: &str = "specdec-suite/gpu";

const HELP: &str = "\
Usage: cargo xtask <COMMAND> [OPTIONS] [-- EXTRA...]

Commands:
  ptx [--arch sm_80,sm_90] [--deny-spills]
        Build the kernels to PTX for each arch (default sm_80,sm_90), assemble each with
        ptxas and print registers / spills / stack / shared memory / code size per kernel.
        --deny-spills fails if any kernel spills at sm_90 (its own PTX, and an earlier arch's PTX
        assembled for sm_90, as the driver's JIT does with the default sm_80 build on Hopper).
  test [-- EXTRA...]
        CI: `cargo test --workspace EXTRA...` (CPU tests), then `ptx --deny-spills`, then the
        Python package: its wheel built by maturin, pip-installed, and its CPU tests run by pytest
        (in .tools/python, a virtual environment made from crates/python/requirements-test.txt).
  test-gpu [-- EXTRA...]
        On a machine with an NVIDIA GPU: `cargo test --workspace --features specdec-suite/gpu EXTRA...`.
  test-gpu --sanitize[=TOOL[,TOOL...]] [-- CARGO ARGS... [-- TEST ARGS...]]
        On a machine with an NVIDIA GPU and compute-sanitizer: build the GPU test binaries into
        target/gpu-sanitize (as --bundle does) and run every binary under compute-sanitizer,
        one pass per TOOL: memcheck (the default), racecheck, initcheck, synccheck, or all.
        A pass fails on any error the tool reports. TEST ARGS (e.g. a test name filter) go to
        every binary.
  test-gpu --bundle DIR [-- EXTRA...]
        Build the GPU test binaries here (no GPU needed) into DIR/bin, and the Python package's
        wheel and tests into DIR/python (run as DIR/bin/python-package, on the machine's torch),
        and write DIR/run.sh, which runs them on a GPU machine without a Rust toolchain
        (`DIR/run.sh [--sanitize[=TOOL[,TOOL...]]] [--] [TEST ARGS...]`, the same tools;
        logs in ${OUT:-DIR}/logs).
  bench-gpu [--bundle DIR]
        Build the GPU benchmark (benches/gpu.rs). Without --bundle: run it here (needs a GPU),
        then benches/torch_baseline.py if python3 has torch with CUDA, then bench-report
        (JSON in target/bench-gpu). With --bundle: put the binary, torch_baseline.py and bench.sh
        into DIR for a GPU machine (`OUT=<dir> DIR/bench.sh [--no-torch | --torch-only]`).
  bench-gpu --bundle DIR --against REV
        The same bundle, plus REV's benchmark (built in a git worktree under target/ab) and
        ab.sh, which runs the two alternately on the GPU machine
        (`OUT=<dir> DIR/ab.sh [ROUNDS] [-- GPU-BENCH ARGS...]`, e.g. `-- --only rows=1`),
        and with them any variant copied in as DIR/gpu-bench-<LABEL> (another tree's
        gpu-bench; a label of letters, digits, '_' and '.').
  bench-ab DIR [--min-change PCT]
        The A/B table of an ab.sh run (DIR holds the fetched ab/ and base.txt): each case's best
        time over the rounds, base, new and each variant, and their change against base; into
        DIR/ab.md and printed. --min-change lists only cases that changed by at least PCT percent.
  bench-report DIR [--results DIR] [--previous FILE]
        Join DIR/bench.json and DIR/torch.json into benches/results/<date>-<gpu>.md (table) and
        .svg (bandwidth against batch), and copy the JSON beside them (--results: elsewhere).
        Each case is held to the memory-floor target, time <= max(bytes / (0.85 x copy bandwidth),
        bytes / copy bandwidth + 10 us), with the run's copy bandwidth; the report and this command
        print how many cases meet it, the worst and the median time / target.
        --previous FILE adds a column of each case's time over its time in FILE, an earlier run's
        bench.json (e.g. benches/results/2026-12-02-nvidia-h200.bench.json), matched by case name;
        none unless given.
  help  Print this message.

Environment:
  SPECDEC_PTXAS   ptxas to use (default: .tools/ptxas/bin/ptxas, installed from PyPI on first use)
  PYTHON          python for the PyTorch baseline of bench-gpu (default: python3)
  CUDA_COMPUTE_CAP  the GPU candle's kernels are built for in GPU builds (default: 90). GPU builds
                  (test-gpu, bench-gpu) build candle's CUDA backend with the CUDA 13.0 toolkit in
                  .tools/cuda-13.0, installed from NVIDIA's PyPI wheels on first use";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let (options, extra) = split_extra(rest);
    match command {
        "ptx" => {
            no_extra(command, extra)?;
            let options = ptx::Options::parse(options)?;
            ptx::run(&root, &options)
        }
        "test" => {
            no_options(command, options)?;
            test::test(&root, extra)
        }
        "test-gpu" => match parse_test_gpu(options)? {
            GpuRun::Bundle(dir) => bundle::bundle(&root, &dir, extra),
            GpuRun::Sanitize(tools) => test::test_gpu_sanitized(&root, &tools, extra),
            GpuRun::Test => test::test_gpu(&root, extra),
        },
        "bench-gpu" => {
            no_extra(command, extra)?;
            bench::bench_gpu(&root, &bench::parse(options)?)
        }
        "bench-ab" => {
            no_extra(command, extra)?;
            let (dir, min_change) = ab::parse(options)?;
            ab::ab(&dir, min_change)
        }
        "bench-report" => {
            no_extra(command, extra)?;
            let options = report::parse(options)?;
            let results = options.results.unwrap_or_else(|| root.join(report::RESULTS));
            report::report_against(&options.dir, &results, options.previous.as_deref())
        }
        "help" | "-h" | "--help" => {
            println!("{HELP}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{HELP}")),
    }
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().expect("xtask lives inside the workspace").to_path_buf()
}

/// Splits `OPTIONS -- EXTRA` at the first `--`.
fn split_extra(args: &[String]) -> (&[String], &[String]) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[]),
    }
}

fn no_options(command: &str, options: &[String]) -> Result<()> {
    match options.first() {
        None => Ok(()),
        Some(arg) => Err(format!("`{command}` takes no option `{arg}`; pass extra cargo arguments after `--`")),
    }
}

fn no_extra(command: &str, extra: &[String]) -> Result<()> {
    match extra.first() {
        None => Ok(()),
        Some(arg) => Err(format!("`{command}` takes no extra arguments (got `{arg}` after `--`)")),
    }
}

/// What `test-gpu` does.
#[derive(Debug, PartialEq)]
enum GpuRun {
    /// `cargo test` with the GPU feature, here.
    Test,
    /// Build a bundle into DIR.
    Bundle(PathBuf),
    /// Run every GPU test binary here under these compute-sanitizer tools.
    Sanitize(Vec<String>),
}

/// `test-gpu` options: `--bundle DIR` (or `--bundle=DIR`), or `--sanitize[=TOOL,...]`.
fn parse_test_gpu(options: &[String]) -> Result<GpuRun> {
    let mut run = GpuRun::Test;
    let mut iter = options.iter();
    while let Some(arg) = iter.next() {
        let next = if arg == "--bundle" {
            GpuRun::Bundle(PathBuf::from(iter.next().ok_or("`--bundle` needs a directory")?))
        } else if let Some(value) = arg.strip_prefix("--bundle=") {
            GpuRun::Bundle(PathBuf::from(value))
        } else if arg == "--sanitize" {
            GpuRun::Sanitize(vec!["memcheck".into()])
        } else if let Some(value) = arg.strip_prefix("--sanitize=") {
            GpuRun::Sanitize(test::sanitizer_tools(value)?)
        } else {
            return Err(format!(
                "`test-gpu` takes only `--bundle DIR` or `--sanitize[=TOOL,...]`, not `{arg}`; \
                 pass extra cargo arguments after `--`"
            ));
        };
        run = match (run, next) {
            (GpuRun::Test, next) => next,
            (GpuRun::Sanitize(mut a), GpuRun::Sanitize(b)) => {
                a.extend(b.into_iter().filter(|t| !a.contains(t)).collect::<Vec<_>>());
                GpuRun::Sanitize(a)
            }
            (GpuRun::Bundle(_), GpuRun::Bundle(dir)) => GpuRun::Bundle(dir),
            _ => {
                return Err("`--sanitize` runs the tests here; a bundle takes it at run time: \
                            `DIR/run.sh --sanitize[=TOOL,...]`"
                    .into());
            }
        };
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<GpuRun> {
        parse_test_gpu(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn test_gpu_options() {
        assert_eq!(parse(&[]), Ok(GpuRun::Test));
        assert_eq!(parse(&["--bundle", "b"]), Ok(GpuRun::Bundle("b".into())));
        assert_eq!(parse(&["--bundle=b"]), Ok(GpuRun::Bundle("b".into())));
        assert_eq!(parse(&["--sanitize"]), Ok(GpuRun::Sanitize(vec!["memcheck".into()])));
        let all = ["memcheck", "racecheck", "initcheck", "synccheck"].map(String::from).to_vec();
        assert_eq!(parse(&["--sanitize=all"]), Ok(GpuRun::Sanitize(all)));
        assert_eq!(
            parse(&["--sanitize=synccheck,memcheck", "--sanitize"]),
            Ok(GpuRun::Sanitize(vec!["synccheck".into(), "memcheck".into()]))
        );
        assert!(parse(&["--sanitize=leakcheck"]).is_err());
        assert!(parse(&["--sanitize="]).is_err());
        assert!(parse(&["--bundle", "b", "--sanitize"]).is_err());
        assert!(parse(&["--bundle"]).is_err());
        assert!(parse(&["--release"]).is_err());
    }
}
