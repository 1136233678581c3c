//! `specdec verify`: `rejection_sample` on the tensors of a safetensors file.

use crate::backend::BackendArg;
use crate::error::{Failure, Result};
use crate::files::{InputFile, Output};
use specdec::{CacheShape, DraftLogits, Logits, RejectionOutput, RejectionSample, SlotTable, Tokens};
use std::path::PathBuf;

/// Verify drafts against the target, from a safetensors file (`rejection_sample`)
///
/// Exact speculative-sampling verification without a softmax, with full draft
/// logits or one-hot drafts. The file format is in crates/cli/FORMAT.md.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// safetensors file with `target`, `offsets`, `drafts`, `slots`, `positions`, ...
    #[arg(long)]
    input: PathBuf,
    /// safetensors file to write: `tokens`, `num_emitted`, `accepted`, `row_status`.
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArg,
}

pub fn run(args: &VerifyArgs) -> Result<()> {
    let file = InputFile::read(&args.input)?;
    let t = file.tensors()?;
    let (target, rows, width) = t.float_matrix("target")?;
    let vocab = t.vocab(width, "target")?;
    let drafts = t.i32s("drafts", "[rows]", &[rows])?;
    let positions = t.u64s("positions", "[rows]", &[rows], false)?;
    let slots = t.i32s_any("slots", "[requests]")?;
    let requests = slots.len();
    let offsets = t.i32s("offsets", "[requests + 1]", &[requests + 1])?;
    let (temperature, seed) = t.slot_table()?;
    let max_drafts = t.required_int_scalar("max_drafts")?;
    let max_drafts = usize::try_from(max_drafts).ok().filter(|&k| k <= specdec::MAX_DRAFTS).ok_or_else(|| {
        Failure::input(format!("tensor `max_drafts`: value {max_drafts}, expected 0 ..= {}", specdec::MAX_DRAFTS))
    })?;
    let draft_logits = t.float_cube("draft_logits")?;
    let backend = args.backend.open()?.backend;

    let width_out = max_drafts + 1;
    let mut tokens = vec![0i32; requests * width_out];
    let mut num_emitted = vec![0i32; requests];
    let mut accepted = vec![0i32; requests];
    let mut row_status = vec![0u32; rows];
    let call = RejectionSample {
        target: Logits { data: target.logits(), rows, vocab, row_stride: width },
        offsets: &offsets[..],
        drafts: &drafts[..],
        slots: &slots[..],
        pos: &positions[..],
        table: SlotTable { temperature: &temperature[..], seed: &seed[..] },
        max_drafts,
        draft_logits: draft_logits.as_ref().map(|(data, [slots, k, width])| DraftLogits {
            data: data.logits(),
            shape: CacheShape { slots: *slots, k: *k, width: *width, stride0: k * width, stride1: *width },
        }),
    };
    let out = RejectionOutput {
        tokens: Tokens::I32(&mut tokens[..]),
        num_emitted: &mut num_emitted[..],
        accepted: Some(&mut accepted[..]),
        row_status: Some(&mut row_status[..]),
    };
    backend.rejection_sample(&call, out).map_err(|e| Failure::library("rejection_sample", e))?;

    Output::default()
        .i32s("tokens", &[requests, width_out], &tokens)
        .i32s("num_emitted", &[requests], &num_emitted)
        .i32s("accepted", &[requests], &accepted)
        .u32s("row_status", &[rows], &row_status)
        .write(&args.output)?;
    let mode = if draft_logits.is_some() { "draft logits" } else { "one-hot drafts" };
    println!(
        "verified {requests} requests ({rows} rows, {mode}) on {}: wrote {}",
        backend.describe(),
        args.output.display()
    );
    Ok(())
}
