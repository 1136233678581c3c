//! `specdec verify`: `rejection_sample` on the tensors of a safetensors file.

use crate::backend::BackendArg;
use crate::error::{Failure, Result};
use crate::files::{DRAFT_FILTERS, FILTERS, InputFile, Output, check_output};
use crate::logprobs::Asked;
use crate::text::count;
use specdec::{DraftLogits, DraftLogitsShape, Logits, RejectionOutput, RejectionSample, SamplingParams, Verification};
use std::path::PathBuf;

/// Verify drafts against the target, from a safetensors file (`rejection_sample`)
///
/// Exact speculative-sampling verification without a softmax, with full draft
/// logits or one-hot drafts, against each slot's filtered target when the
/// file gives filters (top_k, top_p, min_p; draft_top_k, ... for the filters
/// the draft logits were sampled with). The file format is in crates/cli/FORMAT.md.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// safetensors file with `target`, `offsets`, `drafts`, `slots`, `positions`, ...
    #[arg(long)]
    input: PathBuf,
    /// safetensors file to write: `tokens`, `num_emitted`, `accepted`, `row_status`.
    #[arg(long)]
    output: PathBuf,
    /// Block verification: the drafts decided jointly (more accepted in
    /// expectation, as exact; docs/REFERENCE.md section 4.11).
    #[arg(long)]
    block: bool,
    #[command(flatten)]
    backend: BackendArg,
}

/// The shape of the per-row tensors, as errors name it.
const ROWS: &str = "[rows] (the rows of `target`)";

pub fn run(args: &VerifyArgs) -> Result<()> {
    let file = InputFile::read(&args.input)?;
    check_output(&args.input, &args.output)?;
    let t = file.tensors()?;
    let (target, rows, width) = t.float_matrix("target")?;
    let vocab = t.vocab(width, "target")?;
    let drafts = t.i32s("drafts", ROWS, &[rows])?;
    let positions = t.u64s("positions", ROWS, &[rows], false)?;
    let offsets = t.i32s_any("offsets", "[requests + 1]")?;
    let slots = t.i32s_any("slots", "[requests]")?;
    let requests = slots.len();
    if offsets.is_empty() {
        return Err(Failure::input("tensor `offsets`: expected shape [requests + 1] (at least one entry), found [0]"));
    }
    if offsets.len() != requests + 1 {
        return Err(Failure::input(format!(
            "tensors `slots` and `offsets` disagree on the number of requests: `slots` has shape [{}] ({}), \
             `offsets` has shape [{}] ({}); expected `slots` [requests] and `offsets` [requests + 1]",
            slots.len(),
            count(slots.len() as u64, "request"),
            offsets.len(),
            count(offsets.len() as u64 - 1, "request"),
        )));
    }
    let (temperature, seed) = t.slot_table()?;
    let filters = t.filters(FILTERS, temperature.len())?;
    let max_drafts = t.required_int_scalar("max_drafts")?;
    let max_drafts = usize::try_from(max_drafts).ok().filter(|&k| k <= specdec::MAX_DRAFTS).ok_or_else(|| {
        Failure::input(format!("tensor `max_drafts`: value {max_drafts}, expected 0 ..= {}", specdec::MAX_DRAFTS))
    })?;
    let draft_logits = t.float_cube("draft_logits")?;
    // The draft logits' filters say how those rows were sampled: without them they describe nothing.
    if draft_logits.is_none()
        && let Some(name) = DRAFT_FILTERS.iter().find(|name| t.has(name))
    {
        return Err(Failure::input(format!(
            "tensor `{name}` is given without a `draft_logits` tensor (it says how the draft logits were sampled)"
        )));
    }
    let draft_filters = t.filters(DRAFT_FILTERS, temperature.len())?;
    let mut logprobs = Asked::read(&t, requests * (max_drafts + 1))?;
    let backend = args.backend.open()?.backend;

    let width_out = max_drafts + 1;
    let mut tokens = vec![0i32; requests * width_out];
    let mut num_emitted = vec![0i32; requests];
    let mut accepted = vec![0i32; requests];
    let mut row_status = vec![0u32; rows];
    let call = RejectionSample {
        target: Logits { data: target.values(), rows, vocab, row_stride: width },
        offsets: &offsets[..],
        drafts: &drafts[..],
        slots: &slots[..],
        pos: &positions[..],
        params: SamplingParams::new(&temperature, &seed).with_filters(filters.view()),
        max_drafts,
        verification: if args.block { Verification::Block } else { Verification::Token },
        draft_logits: draft_logits.as_ref().map(|(data, [slots, k, width])| DraftLogits {
            data: data.values(),
            shape: DraftLogitsShape::dense(*slots, *k, *width),
            filters: draft_filters.view(),
        }),
    };
    let mut out = RejectionOutput::new(&mut tokens, &mut num_emitted)
        .with_accepted(&mut accepted)
        .with_row_status(&mut row_status);
    if let Some(asked) = logprobs.as_mut() {
        out = out.with_logprobs(asked.outputs());
    }
    backend.rejection_sample(&call, &mut out).map_err(|e| Failure::call("rejection_sample", e))?;

    let output = Output::default()
        .i32s("tokens", &[requests, width_out], &tokens)
        .i32s("num_emitted", &[requests], &num_emitted)
        .i32s("accepted", &[requests], &accepted)
        .u32s("row_status", &[rows], &row_status);
    match &logprobs {
        Some(asked) => asked.write(output, &[requests, width_out]),
        None => output,
    }
    .write(&args.output)?;
    let mode = if draft_logits.is_some() { "draft logits" } else { "one-hot drafts" };
    println!(
        "verified {} ({}, {mode}) on {}: wrote {}",
        count(requests as u64, "request"),
        count(rows as u64, "row"),
        backend.describe(),
        args.output.display()
    );
    Ok(())
}
