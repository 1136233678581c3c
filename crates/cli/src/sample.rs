//! `specdec sample`: `gumbel_sample` on the tensors of a safetensors file.

use crate::backend::BackendArg;
use crate::error::{CallNames, Failure, Result};
use crate::files::{InputFile, Output, ScalarOrRows, check_output};
use crate::text::count;
use specdec::{CacheShape, Column, DraftCache, GumbelOutput, GumbelSample, Logits, SlotTable, Tokens};
use std::path::PathBuf;

/// Sample one token per row of a safetensors file (`gumbel_sample`)
///
/// Gumbel-max sampling at each slot's temperature (greedy at T = 0), noise
/// keyed by (seed, position, token); optionally stores the raw logits in a
/// draft-logits cache. The file format is in crates/cli/FORMAT.md.
#[derive(Debug, clap::Args)]
pub struct SampleArgs {
    /// safetensors file with `logits`, `slots`, `temperature`, `seed`, `positions`, ...
    #[arg(long)]
    input: PathBuf,
    /// safetensors file to write: `tokens`, `row_status`, and `cache` when one was given.
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
    let (logits, rows, width) = t.float_matrix("logits")?;
    let vocab = t.vocab(width, "logits")?;
    let slots = t.i32s("slots", ROWS, &[rows])?;
    let positions = t.u64s("positions", ROWS, &[rows], false)?;
    let (temperature, seed) = t.slot_table()?;
    let drafting = t.flag("drafting")?;
    let mut cache = t.float_cube("cache")?;
    let column = t.i32_scalar_or_rows("cache_column", rows)?;
    let column = match (&cache, column) {
        (None, None) => None,
        (Some((_, [_, k, _])), Some(ScalarOrRows::Scalar(c))) if c < 0 => {
            return Err(Failure::input(format!(
                "tensor `cache_column`: value {c}, expected a column in 0..{k} (`cache` has {})",
                count(*k as u64, "column")
            )));
        }
        (Some(_), Some(c)) => Some(c),
        (Some(_), None) => {
            return Err(Failure::input("missing tensor `cache_column` (I32 [] or [rows]), needed with `cache`"));
        }
        (None, Some(_)) => return Err(Failure::input("tensor `cache_column` is given without a `cache` tensor")),
    };
    let backend = args.backend.open()?.backend;

    let mut tokens = vec![0i32; rows];
    let mut row_status = vec![0u32; rows];
    let mut call = GumbelSample {
        logits: Logits { data: logits.logits(), rows, vocab, row_stride: width },
        slots: &slots[..],
        pos: &positions[..],
        table: SlotTable { temperature: &temperature[..], seed: &seed[..] },
        drafting,
        cache: match (cache.as_mut(), &column) {
            (Some((data, [slots, k, width])), Some(column)) => Some((
                DraftCache {
                    data: data.cache(),
                    shape: CacheShape { slots: *slots, k: *k, width: *width, stride0: *k * *width, stride1: *width },
                },
                match column {
                    ScalarOrRows::Scalar(c) => Column::All(*c as usize),
                    ScalarOrRows::Rows(c) => Column::PerRow(&c[..]),
                },
            )),
            _ => None,
        },
    };
    let out = GumbelOutput { tokens: Tokens::I32(&mut tokens[..]), row_status: Some(&mut row_status[..]) };
    let names = CallNames { call: "gumbel_sample", cache: "cache" };
    backend.gumbel_sample(&mut call, out).map_err(|e| Failure::call(e, &names))?;

    let mut output = Output::default().i32s("tokens", &[rows], &tokens).u32s("row_status", &[rows], &row_status);
    if let Some((data, dims)) = &cache {
        output = output.floats("cache", dims, data);
    }
    output.write(&args.output)?;
    println!("sampled {} on {}: wrote {}", count(rows as u64, "row"), backend.describe(), args.output.display());
    Ok(())
}
