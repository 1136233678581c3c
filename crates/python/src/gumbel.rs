//! `gumbel_sample` on DLPack tensors (REFERENCE §3), with the engine-style
//! argument names of the Python package.

use crate::args::{Call, FilterArgs, LogprobArgs, ParamArgs, Run, dispatch, target_of, tokens};
use crate::stream::Target;
use crate::tensor::{Arg, DType, check_written};
use pyo3::prelude::*;
use pyo3::types::PyInt;
use specdec::{Column, DraftLogitsMut, Error, GumbelOutput, GumbelSample, Logits, Result};

/// Which draft-logits column each row writes: one for all, or `int32 [rows]`.
enum ColumnArg {
    All(i64),
    PerRow(Arg),
}

struct GumbelArgs {
    logits: Arg,
    slots: Arg,
    pos: Arg,
    params: ParamArgs,
    drafting: bool,
    cache: Option<(Arg, ColumnArg)>,
    sampled: Arg,
    logprobs: LogprobArgs,
}

/// One token per row of `logits` into `sampled` (REFERENCE §3): see the
/// Python package's `specdec.gumbel_sample` for the arguments.
#[pyfunction]
#[pyo3(signature = (
    logits, expanded_idx_mapping, temperature, seed, pos, sampled, *,
    top_k=None, top_p=None, min_p=None, is_drafting=false, logits_cache=None, logits_cache_col=None,
    logprobs=None, raw_logprobs=None, top_logprobs=None, top_logprobs_raw=false, stream=0
))]
#[allow(clippy::too_many_arguments, reason = "the Python signature")]
pub fn gumbel_sample(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    expanded_idx_mapping: &Bound<'_, PyAny>,
    temperature: &Bound<'_, PyAny>,
    seed: &Bound<'_, PyAny>,
    pos: &Bound<'_, PyAny>,
    sampled: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    is_drafting: bool,
    logits_cache: Option<&Bound<'_, PyAny>>,
    logits_cache_col: Option<&Bound<'_, PyAny>>,
    logprobs: Option<&Bound<'_, PyAny>>,
    raw_logprobs: Option<&Bound<'_, PyAny>>,
    top_logprobs: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)>,
    top_logprobs_raw: bool,
    stream: usize,
) -> PyResult<()> {
    let target = target_of("logits", logits, stream)?;
    let import = |what, obj| Arg::import(what, obj, &target);
    let cache = match (logits_cache, logits_cache_col) {
        (None, None) => None,
        (Some(cache), Some(col)) => {
            // A Python int is one column for all rows; anything else a tensor (even of one
            // element: reading it would synchronise, and break a CUDA-graph capture).
            let column = match col.cast::<PyInt>() {
                Ok(c) => ColumnArg::All(c.extract::<i64>()?),
                Err(_) => ColumnArg::PerRow(import("logits_cache_col", col)?),
            };
            Some((Arg::import_written("logits_cache", cache, &target)?, column))
        }
        _ => {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "logits_cache and logits_cache_col go together: give both or neither",
            ));
        }
    };
    let mut call = GumbelArgs {
        logits: import("logits", logits)?,
        slots: import("expanded_idx_mapping", expanded_idx_mapping)?,
        pos: import("pos", pos)?,
        params: ParamArgs::import(temperature, seed, FilterArgs::import(top_k, top_p, min_p, &target)?, &target)?,
        drafting: is_drafting,
        cache,
        sampled: Arg::import_written("sampled", sampled, &target)?,
        logprobs: LogprobArgs::import(logprobs, raw_logprobs, top_logprobs, top_logprobs_raw, &target)?,
    };
    dispatch(py, &mut call, &target)
}

impl Call for GumbelArgs {
    fn run<M: Run>(&mut self, target: &Target) -> Result<()> {
        let GumbelArgs { logits, slots, pos, params, drafting, cache, sampled, logprobs } = self;
        {
            let columns = cache.iter().filter_map(|(_, c)| match c {
                ColumnArg::PerRow(a) => Some(a),
                ColumnArg::All(_) => None,
            });
            let read: Vec<&Arg> = [&*logits, &*slots, &*pos].into_iter().chain(params.all()).chain(columns).collect();
            let written: Vec<&Arg> =
                [&*sampled].into_iter().chain(cache.iter().map(|(c, _)| c)).chain(logprobs.written()).collect();
            check_written(&written, &read)?;
        }
        let (rows, vocab, row_stride) = logits.matrix()?;
        slots.vector(&[DType::I32])?;
        pos.vector(&[DType::I64])?;
        let args = GumbelSample {
            logits: Logits { data: logits.values::<M>()?, rows, vocab, row_stride },
            slots: M::read::<i32>(slots)?,
            pos: M::read::<u64>(pos)?,
            params: params.views::<M>()?,
            drafting: *drafting,
        };
        sampled.vector(&[DType::I64, DType::I32])?;
        let mut out = GumbelOutput::from_tokens(tokens::<M>(sampled)?);
        out.logprobs = logprobs.views::<M>()?;
        if let Some((cache, column)) = cache {
            let shape = cache.cache()?;
            let column = match column {
                &mut ColumnArg::All(c) if c < 0 => {
                    return Err(Error::ColumnOutOfRange { row: None, column: c, k: shape.k });
                }
                &mut ColumnArg::All(c) => Column::All(c as usize),
                ColumnArg::PerRow(a) => {
                    a.vector(&[DType::I32])?;
                    Column::PerRow(M::read::<i32>(a)?)
                }
            };
            out.draft_logits = Some((DraftLogitsMut { data: cache.values_mut::<M>()?, shape }, column));
        }
        M::gumbel(target, &args, &mut out)
    }
}
