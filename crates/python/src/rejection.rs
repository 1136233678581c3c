//! `rejection_sample` on DLPack tensors (REFERENCE §4), with the engine-style
//! argument names of the Python package.

use crate::args::{Call, FilterArgs, LogprobArgs, ParamArgs, Run, dispatch, target_of, tokens};
use crate::stream::Target;
use crate::tensor::{Arg, DType, check_written};
use pyo3::prelude::*;
use specdec::{DraftLogits, Logits, RejectionOutput, RejectionSample, Result, Verification};

struct RejectionArgs {
    target: Arg,
    /// With the filters the drafts were sampled with.
    draft: Option<(Arg, FilterArgs)>,
    drafts: Arg,
    offsets: Arg,
    pos: Arg,
    slots: Arg,
    params: ParamArgs,
    max_drafts: usize,
    block: bool,
    synthetic: Option<Vec<f32>>,
    sampled: Arg,
    num_sampled: Arg,
    logprobs: LogprobArgs,
}

/// Verify each request's drafts into `sampled` and `num_sampled` (REFERENCE
/// §4): see the Python package's `specdec.rejection_sample` for the arguments.
#[pyfunction]
#[pyo3(signature = (
    target_logits, draft_logits, draft_tokens, cu_num_logits, pos, idx_mapping, temperature, seed,
    num_speculative_steps, sampled, num_sampled, *,
    top_k=None, top_p=None, min_p=None, draft_top_k=None, draft_top_p=None, draft_min_p=None,
    use_block_verification=false, synthetic_conditional_rates=None,
    logprobs=None, raw_logprobs=None, top_logprobs=None, top_logprobs_raw=false, stream=0
))]
#[allow(clippy::too_many_arguments, reason = "the Python signature")]
pub fn rejection_sample(
    py: Python<'_>,
    target_logits: &Bound<'_, PyAny>,
    draft_logits: Option<&Bound<'_, PyAny>>,
    draft_tokens: &Bound<'_, PyAny>,
    cu_num_logits: &Bound<'_, PyAny>,
    pos: &Bound<'_, PyAny>,
    idx_mapping: &Bound<'_, PyAny>,
    temperature: &Bound<'_, PyAny>,
    seed: &Bound<'_, PyAny>,
    num_speculative_steps: usize,
    sampled: &Bound<'_, PyAny>,
    num_sampled: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    draft_top_k: Option<&Bound<'_, PyAny>>,
    draft_top_p: Option<&Bound<'_, PyAny>>,
    draft_min_p: Option<&Bound<'_, PyAny>>,
    use_block_verification: bool,
    synthetic_conditional_rates: Option<Vec<f32>>,
    logprobs: Option<&Bound<'_, PyAny>>,
    raw_logprobs: Option<&Bound<'_, PyAny>>,
    top_logprobs: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)>,
    top_logprobs_raw: bool,
    stream: usize,
) -> PyResult<()> {
    if use_block_verification && synthetic_conditional_rates.is_some() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "use_block_verification and synthetic_conditional_rates are two verification rules: give one",
        ));
    }
    let target = target_of("target_logits", target_logits, stream)?;
    let import = |what, obj| Arg::import(what, obj, &target);
    let draft = match draft_logits {
        Some(d) => {
            Some((import("draft_logits", d)?, FilterArgs::import(draft_top_k, draft_top_p, draft_min_p, &target)?))
        }
        None if draft_top_k.or(draft_top_p).or(draft_min_p).is_some() => {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "draft filters describe draft logits: one-hot drafts (draft_logits=None) have none",
            ));
        }
        None => None,
    };
    let mut call = RejectionArgs {
        target: import("target_logits", target_logits)?,
        draft,
        drafts: import("draft_tokens", draft_tokens)?,
        offsets: import("cu_num_logits", cu_num_logits)?,
        pos: import("pos", pos)?,
        slots: import("idx_mapping", idx_mapping)?,
        params: ParamArgs::import(temperature, seed, FilterArgs::import(top_k, top_p, min_p, &target)?, &target)?,
        max_drafts: num_speculative_steps,
        block: use_block_verification,
        synthetic: synthetic_conditional_rates,
        sampled: Arg::import_written("sampled", sampled, &target)?,
        num_sampled: Arg::import_written("num_sampled", num_sampled, &target)?,
        logprobs: LogprobArgs::import(logprobs, raw_logprobs, top_logprobs, top_logprobs_raw, &target)?,
    };
    dispatch(py, &mut call, &target)
}

impl Call for RejectionArgs {
    fn run<M: Run>(&mut self, on: &Target) -> Result<()> {
        let RejectionArgs {
            target, draft, drafts, offsets, pos, slots, params, sampled, num_sampled, logprobs, ..
        } = self;
        {
            let draft_args = draft.iter().flat_map(|(d, f)| std::iter::once(d).chain(f.all()));
            let read: Vec<&Arg> = [&*target, &*drafts, &*offsets, &*pos, &*slots]
                .into_iter()
                .chain(params.all())
                .chain(draft_args)
                .collect();
            let written: Vec<&Arg> = [&*sampled, &*num_sampled].into_iter().chain(logprobs.written()).collect();
            check_written(&written, &read)?;
        }
        let (rows, vocab, row_stride) = target.matrix()?;
        for (arg, dtype) in
            [(&*drafts, DType::I32), (&*offsets, DType::I32), (&*slots, DType::I32), (&*pos, DType::I64)]
        {
            arg.vector(&[dtype])?;
        }
        let draft_logits = match draft {
            Some((logits, filters)) => Some(DraftLogits {
                shape: logits.cache()?,
                data: logits.values::<M>()?,
                filters: filters.views::<M>()?,
            }),
            None => None,
        };
        let verification = match (&self.synthetic, self.block) {
            (Some(rates), _) => Verification::Synthetic(rates),
            (None, true) => Verification::Block,
            (None, false) => Verification::Token,
        };
        let args = RejectionSample {
            target: Logits { data: target.values::<M>()?, rows, vocab, row_stride },
            offsets: M::read::<i32>(offsets)?,
            drafts: M::read::<i32>(drafts)?,
            slots: M::read::<i32>(slots)?,
            pos: M::read::<u64>(pos)?,
            params: params.views::<M>()?,
            max_drafts: self.max_drafts,
            verification,
            draft_logits,
        };
        sampled.dense(&[DType::I64, DType::I32])?;
        num_sampled.vector(&[DType::I32])?;
        let mut out = RejectionOutput::from_parts(tokens::<M>(sampled)?, M::write::<i32>(num_sampled)?);
        out.logprobs = logprobs.views::<M>()?;
        M::rejection(on, &args, &mut out)
    }
}
