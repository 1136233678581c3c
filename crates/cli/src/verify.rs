//! `specdec verify`: `rejection_sample` on the tensors of a safetensors file.

use crate::backend::BackendArg;
use crate::error::{CallNames, Failure, Result};
use crate::files::{InputFile, Output, check_output};
use crate::text::count;
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
    let max_drafts = t.required_int_scalar("max_drafts")?;
    let max_drafts = usize::try_from(max_drafts).ok().filter(|&k| k <= specdec::MAX_DRAFTS).ok_or_else(|| {
        Failure::input(format!("tensor `max_drafts`: value {max_drafts}, expected 0 ..= {}", specdec::MAX_DRAFTS))
    })?;
    check_offsets(&offsets, rows, max_drafts)?;
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
    let names = CallNames { call: "rejection_sample", cache: "draft_logits" };
    backend.rejection_sample(&call, out).map_err(|e| Failure::call(e, &names))?;

    Output::default()
        .i32s("tokens", &[requests, width_out], &tokens)
        .i32s("num_emitted", &[requests], &num_emitted)
        .i32s("accepted", &[requests], &accepted)
        .u32s("row_status", &[rows], &row_status)
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

/// The offset rules of `rejection_sample` (`offsets[0] = 0`, increasing,
/// `offsets[requests] = rows`, at most `max_drafts` drafts per request),
/// checked entry by entry from the first so that the message names the first
/// entry that breaks one. `offsets` has at least one entry.
fn check_offsets(offsets: &[i32], rows: usize, max_drafts: usize) -> Result<()> {
    let bad = |what: String| Err(Failure::input(format!("tensor `offsets`: {what}")));
    if offsets[0] != 0 {
        return bad(format!("entry 0 is {}, expected 0", offsets[0]));
    }
    for (r, pair) in offsets.windows(2).enumerate() {
        let (start, end) = (pair[0] as i64, pair[1] as i64);
        if end <= start {
            return bad(format!(
                "entry {} is {end}, expected more than entry {r} ({start}): offsets increase, \
                 each request has at least its bonus row",
                r + 1
            ));
        }
        if end > rows as i64 {
            return bad(format!("entry {} is {end}, expected at most {rows} (the rows of `target`)", r + 1));
        }
        let drafts = (end - start - 1) as u64;
        if drafts > max_drafts as u64 {
            return bad(format!(
                "request {r} (rows {start}..{end}) has {}, more than `max_drafts` = {max_drafts}",
                count(drafts, "draft")
            ));
        }
    }
    let last = offsets.len() - 1;
    if offsets[last] as i64 != rows as i64 {
        return bad(format!("entry {last} (the last) is {}, expected {rows} (the rows of `target`)", offsets[last]));
    }
    Ok(())
}
