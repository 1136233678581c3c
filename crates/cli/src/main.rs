//! `specdec`: the command-line face of the specdec library.
//!
//! - `specdec demo`: a synthetic speculative-decoding loop (drafting with
//!   `gumbel_sample`, verification with `rejection_sample`): acceptance,
//!   tokens per verify, time per call, and an exactness check.
//! - `specdec sample` / `specdec verify`: one call on the tensors of a
//!   safetensors file, results to another (format: `FORMAT.md`).
//! - `specdec info`: the backends of this machine and the build.
//!
//! Errors print one line, `Error: ...`, on stderr; the exit code is 2 for
//! bad input and 1 for a failure while running.

mod backend;
mod demo;
mod error;
mod files;
mod filters;
mod info;
mod logprobs;
mod model;
mod report;
mod sample;
mod text;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "specdec", version, about = "Exact sampling and verification kernels for speculative decoding")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Demo(demo::DemoArgs),
    Sample(sample::SampleArgs),
    Verify(verify::VerifyArgs),
    Info(info::InfoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Info(args) => info::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            e.exit_code()
        }
    }
}
