//! `cargo xtask`: the project's tasks (PTX check, CI tests, GPU tests and bundles).
//!
//! Every external command is printed (`$ cargo test ...`) before it runs, and every
//! failure ends the process with a non-zero status and an `error:` line.

mod bundle;
mod cmd;
mod ptx;
mod ptxas;
mod resource_usage;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Errors are messages for a person: each says what failed and what to do.
pub type Result<T, E = String> = std::result::Result<T, E>;

const HELP: &str = "\
Usage: cargo xtask <COMMAND> [OPTIONS] [-- EXTRA...]

Commands:
  ptx [--arch sm_80,sm_90] [--deny-spills]
        Build the kernels to PTX for each arch (default sm_80,sm_90), assemble each with
        ptxas and print registers / spills / stack / shared memory per kernel.
        --deny-spills fails if any kernel spills at sm_90.
  test [-- EXTRA...]
        CI: `cargo test --workspace EXTRA...` (CPU tests), then `ptx --deny-spills`.
  test-gpu [-- EXTRA...]
        On a machine with an NVIDIA GPU: `cargo test --workspace --features specdec-suite/gpu EXTRA...`.
  test-gpu --bundle DIR [-- EXTRA...]
        Build the GPU test binaries here (no GPU needed) into DIR/bin and write DIR/run.sh,
        which runs them on a GPU machine without a Rust toolchain
        (`DIR/run.sh [--sanitize] [TEST ARGS...]`; logs in ${OUT:-DIR}/logs).
  help  Print this message.

Environment:
  SPECDEC_PTXAS   ptxas to use (default: .tools/ptxas/bin/ptxas, installed from PyPI on first use)";

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
        "test-gpu" => match parse_bundle(options)? {
            Some(dir) => bundle::bundle(&root, &dir, extra),
            None => test::test_gpu(&root, extra),
        },
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

/// `test-gpu` options: `--bundle DIR` or `--bundle=DIR`, nothing else.
fn parse_bundle(options: &[String]) -> Result<Option<PathBuf>> {
    let mut dir = None;
    let mut iter = options.iter();
    while let Some(arg) = iter.next() {
        let value = if arg == "--bundle" {
            iter.next().ok_or("`--bundle` needs a directory")?.clone()
        } else if let Some(value) = arg.strip_prefix("--bundle=") {
            value.to_string()
        } else {
            return Err(format!(
                "`test-gpu` takes only `--bundle DIR`, not `{arg}`; pass extra cargo arguments after `--`"
            ));
        };
        dir = Some(PathBuf::from(value));
    }
    Ok(dir)
}
