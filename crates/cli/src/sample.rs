//! `specdec sample`: `gumbel_sample` on the tensors of a safetensors file.

use crate::backend::BackendArg;
use crate::error::{Failure, Result};
use crate::files::{FILTERS, InputFile, Output, ScalarOrRows, check_output};
use crate::logprobs::Asked;
use crate::text::count;
use specdec::{Column, DraftLogitsMut, DraftLogitsShape, GumbelOutput, GumbelSample, Logits, SamplingParams};
use std::path::PathBuf;

/// Sample one token per row of a safetensors file (`gumbel_sample`)
///
/// Gumbel-max sampling at each slot's temperature (greedy at T = 0), noise
/// keyed by (seed, position, token), over each slot's kept set when the file
/// gives filters (top_k, top_p, min_p); optionally stores the raw logits in
/// the draft logits. The file format is in crates/cli/FORMAT.md.
#[derive(Debug, clap::Args)]
pub struct SampleArgs {
    /// safetensors file with `logits`, `slots`, `temperature`, `seed`, `positions`, ...
    #[arg(long)]
    input: PathBuf,
    /// safetensors file to write: `tokens`, `row_status`, and `draft_logits` when given.
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArg,
}

/// The shape of the per-row tensors, as errors name it.
const ROWS: &str = "[rows] (the rows of `logits`)";

pub fn run(args: &SampleArgs) -> Result<()> {
    let file = InputFile::read(&args.input)?;
    check_output(&args.input, &args.output)?;
    let t = file.tensors()?;
    t.renamed("cache", "draft_logits")?;
    t.renamed("cache_column", "draft_column")?;
    let (logits, rows, width) = t.float_matrix("logits")?;
    let vocab = t.vocab(width, "logits")?;
    let slots = t.i32s("slots", ROWS, &[rows])?;
    let positions = t.u64s("positions", ROWS, &[rows], false)?;
    let (temperature, seed) = t.slot_table()?;
    let filters = t.filters(FILTERS, temperature.len())?;
    let drafting = t.flag("drafting")?;
    let mut draft_logits = t.float_cube("draft_logits")?;
    let column = t.i32_scalar_or_rows("draft_column", rows)?;
    let column = match (&draft_logits, column) {
        (None, None) => None,
        (Some((_, [_, k, _])), Some(ScalarOrRows::Scalar(c))) if c < 0 => {
            return Err(Failure::input(format!(
                "tensor `draft_column`: value {c}, expected a column in 0..{k} (`draft_logits` has {})",
                count(*k as u64, "column")
            )));
        }
        (Some(_), Some(c)) => Some(c),
        (Some(_), None) => {
            return Err(Failure::input("missing tensor `draft_column` (I32 [] or [rows]), needed with `draft_logits`"));
        }
        (None, Some(_)) => {
            return Err(Failure::input("tensor `draft_column` is given without a `draft_logits` tensor"));
        }
    };
    let mut logprobs = Asked::read(&t, rows)?;
    let backend = args.backend.open()?.backend;

    let mut tokens = vec![0i32; rows];
    let mut row_status = vec![0u32; rows];
    let logits = Logits { data: logits.values(), rows, vocab, row_stride: width };
    let params = SamplingParams::new(&temperature, &seed).with_filters(filters.view());
    let call = GumbelSample::new(logits, &slots, &positions, params);
    let call = if drafting { call.drafting() } else { call };
    let mut out = GumbelOutput::new(&mut tokens).with_row_status(&mut row_status);
    if let (Some((data, [slots, k, width])), Some(column)) = (draft_logits.as_mut(), &column) {
        let column = match column {
            ScalarOrRows::Scalar(c) => Column::All(*c as usize),
            ScalarOrRows::Rows(c) => Column::per_row(c),
        };
        let draft = DraftLogitsMut { data: data.values_mut(), shape: DraftLogitsShape::dense(*slots, *k, *width) };
        out = out.with_draft_logits(draft, column);
    }
    if let Some(asked) = logprobs.as_mut() {
        out = out.with_logprobs(asked.outputs());
    }
    backend.gumbel_sample(&call, &mut out).map_err(|e| Failure::call("gumbel_sample", e))?;

    let mut output = Output::default().i32s("tokens", &[rows], &tokens).u32s("row_status", &[rows], &row_status);
    if let Some((data, dims)) = &draft_logits {
        output = output.floats("draft_logits", dims, data);
    }
    if let Some(asked) = &logprobs {
        output = asked.write(output, &[rows]);
    }
    output.write(&args.output)?;
    println!("sampled {} on {}: wrote {}", count(rows as u64, "row"), backend.describe(), args.output.display());
    Ok(())
}
