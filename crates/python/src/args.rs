//! What both calls share: where a call runs, its per-slot parameter tensors,
//! and running the core call in host or device memory.

use crate::raise;
use crate::stream::{Target, with_engine};
use crate::tensor::{Arg, DType, Place};
use pyo3::prelude::*;
use specdec::{
    Cpu, Device, Distribution, Error, Filters, GumbelOutput, GumbelSample, Host, Logprobs, MAX_DRAFTS, RejectionOutput,
    RejectionSample, Result, SamplingParams, Tokens, TopLogprobs,
};

/// Where a call whose first tensor is `first` runs: the host for a CPU
/// tensor, its CUDA device on `stream` (a raw `CUstream`, 0 the legacy
/// default stream) for a CUDA one.
pub fn target_of(what: &'static str, first: &Bound<'_, PyAny>, stream: usize) -> PyResult<Target> {
    let (kind, ordinal): (i32, i32) = first.call_method0("__dlpack_device__")?.extract()?;
    match kind {
        1 => Ok(Target::Host),
        2 => Target::cuda(ordinal, stream).map_err(raise),
        other => Err(raise(Error::TensorDevice {
            what,
            expected: "cpu or cuda".into(),
            got: format!("DLPack device type {other}"),
        })),
    }
}

/// An optional argument, imported where given.
fn import_opt(what: &'static str, obj: Option<&Bound<'_, PyAny>>, target: &Target) -> PyResult<Option<Arg>> {
    obj.map(|o| Arg::import(what, o, target)).transpose()
}

/// Per-slot filters (REFERENCE §7): top-k `int32`, top-p and min-p `float32`, each `[slots]`.
pub struct FilterArgs {
    pub top_k: Option<Arg>,
    pub top_p: Option<Arg>,
    pub min_p: Option<Arg>,
}

impl FilterArgs {
    pub fn import(
        top_k: Option<&Bound<'_, PyAny>>,
        top_p: Option<&Bound<'_, PyAny>>,
        min_p: Option<&Bound<'_, PyAny>>,
        target: &Target,
    ) -> PyResult<FilterArgs> {
        Ok(FilterArgs {
            top_k: import_opt("top_k", top_k, target)?,
            top_p: import_opt("top_p", top_p, target)?,
            min_p: import_opt("min_p", min_p, target)?,
        })
    }

    pub fn views<M: Place>(&self) -> Result<Filters<'_, M>> {
        fn read<'a, M: Place, T>(arg: &'a Option<Arg>, dtype: DType) -> Result<Option<M::Ref<'a, T>>> {
            arg.as_ref().map(|a| a.vector(&[dtype]).and_then(|_| M::read::<T>(a))).transpose()
        }
        Ok(Filters {
            top_k: read::<M, i32>(&self.top_k, DType::I32)?,
            top_p: read::<M, f32>(&self.top_p, DType::F32)?,
            min_p: read::<M, f32>(&self.min_p, DType::F32)?,
        })
    }

    pub fn all(&self) -> impl Iterator<Item = &Arg> {
        [&self.top_k, &self.top_p, &self.min_p].into_iter().flatten()
    }
}

/// The per-slot parameter table: temperature `float32 [slots]`, seed `int64
/// [slots]` (its bits are the `u64` seed), filters.
pub struct ParamArgs {
    pub temperature: Arg,
    pub seed: Arg,
    pub filters: FilterArgs,
}

impl ParamArgs {
    pub fn import(
        temperature: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
        filters: FilterArgs,
        target: &Target,
    ) -> PyResult<ParamArgs> {
        Ok(ParamArgs {
            temperature: Arg::import("temperature", temperature, target)?,
            seed: Arg::import("seed", seed, target)?,
            filters,
        })
    }

    pub fn views<M: Place>(&self) -> Result<SamplingParams<'_, M>> {
        self.temperature.vector(&[DType::F32])?;
        self.seed.vector(&[DType::I64])?;
        Ok(SamplingParams::from_parts(M::read::<f32>(&self.temperature)?, M::read::<u64>(&self.seed)?)
            .with_filters(self.filters.views()?))
    }

    pub fn all(&self) -> impl Iterator<Item = &Arg> {
        [&self.temperature, &self.seed].into_iter().chain(self.filters.all())
    }
}

/// A call's imported arguments, run in host or device memory.
pub trait Call: Send {
    fn run<M: Run>(&mut self, target: &Target) -> Result<()>;
}

/// Runs `call` where `target` says: the CPU backend without the GIL (a
/// launch is too short to be worth releasing it).
pub fn dispatch(py: Python<'_>, call: &mut impl Call, target: &Target) -> PyResult<()> {
    match target {
        Target::Host => py.detach(|| call.run::<Host>(target)),
        Target::Cuda { .. } => call.run::<Device>(target),
    }
    .map_err(raise)
}

/// Runs a core call in memory `M`: the CPU backend on host memory, the CUDA
/// backend of the target's stream on device memory.
pub trait Run: Place {
    fn gumbel(target: &Target, args: &GumbelSample<'_, Self>, out: &mut GumbelOutput<'_, Self>) -> Result<()>;
    fn rejection(target: &Target, args: &RejectionSample<'_, Self>, out: &mut RejectionOutput<'_, Self>) -> Result<()>;
}

impl Run for Host {
    fn gumbel(_: &Target, args: &GumbelSample<'_, Host>, out: &mut GumbelOutput<'_, Host>) -> Result<()> {
        Cpu.gumbel_sample(args, out)
    }

    fn rejection(_: &Target, args: &RejectionSample<'_, Host>, out: &mut RejectionOutput<'_, Host>) -> Result<()> {
        Cpu.rejection_sample(args, out)
    }
}

impl Run for Device {
    fn gumbel(target: &Target, args: &GumbelSample<'_, Device>, out: &mut GumbelOutput<'_, Device>) -> Result<()> {
        with_engine(target, |engine| {
            let (cuda, ws) = engine.cuda(args.logits.rows)?;
            cuda.gumbel_sample(ws, args, out)
        })
    }

    fn rejection(
        target: &Target,
        args: &RejectionSample<'_, Device>,
        out: &mut RejectionOutput<'_, Device>,
    ) -> Result<()> {
        // Checked here too, as the workspace is sized from it before the call checks it.
        if args.max_drafts > MAX_DRAFTS {
            return Err(Error::MaxDrafts { max_drafts: args.max_drafts, max: MAX_DRAFTS });
        }
        with_engine(target, |engine| {
            // The workspace holds a call's rows and its requests' token slots.
            let positions = args.slots.len().saturating_mul(args.max_drafts + 1);
            let (cuda, ws) = engine.cuda(args.target.rows.max(positions))?;
            cuda.rejection_sample(ws, args, out)
        })
    }
}

/// A token output, `int64` or `int32`.
pub fn tokens<M: Place>(arg: &mut Arg) -> Result<Tokens<'_, M>> {
    match arg.dtype() {
        DType::I64 => Ok(Tokens::I64(M::write(arg)?)),
        DType::I32 => Ok(Tokens::I32(M::write(arg)?)),
        _ => Err(arg.expect_dtype(&[DType::I64, DType::I32]).expect_err("not a token dtype")),
    }
}

/// The log-probability outputs a call writes (REFERENCE §8), each optional:
/// `float32` per position, and the top-n (`float32`, `int32 [positions, n]`)
/// with the emitted token's rank (`int32 [positions]`). Each is contiguous,
/// of any shape holding the call's positions.
pub struct LogprobArgs {
    pub processed: Option<Arg>,
    pub raw: Option<Arg>,
    pub top: Option<TopArgs>,
}

pub struct TopArgs {
    pub n: usize,
    pub distribution: Distribution,
    pub logprobs: Arg,
    pub ids: Arg,
    pub ranks: Arg,
}

impl LogprobArgs {
    /// Imports the outputs given: `top` is `(logprobs, ids, ranks)`, `n` the
    /// last dimension of `logprobs`; `top_raw` picks its distribution.
    pub fn import(
        processed: Option<&Bound<'_, PyAny>>,
        raw: Option<&Bound<'_, PyAny>>,
        top: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)>,
        top_raw: bool,
        target: &Target,
    ) -> PyResult<LogprobArgs> {
        let top = match top {
            Some((logprobs, ids, ranks)) => {
                let logprobs = Arg::import_written("top_logprobs", &logprobs, target)?;
                let n = logprobs.last_dim();
                Some(TopArgs {
                    n,
                    distribution: if top_raw { Distribution::Raw } else { Distribution::Processed },
                    logprobs,
                    ids: Arg::import_written("top_token_ids", &ids, target)?,
                    ranks: Arg::import_written("ranks", &ranks, target)?,
                })
            }
            None => None,
        };
        let written =
            |what, obj: Option<&Bound<'_, PyAny>>| obj.map(|o| Arg::import_written(what, o, target)).transpose();
        Ok(LogprobArgs { processed: written("logprobs", processed)?, raw: written("raw_logprobs", raw)?, top })
    }

    pub fn written(&self) -> impl Iterator<Item = &Arg> {
        let top = self.top.iter().flat_map(|t| [&t.logprobs, &t.ids, &t.ranks]);
        [&self.processed, &self.raw].into_iter().flatten().chain(top)
    }

    pub fn views<M: Place>(&mut self) -> Result<Logprobs<'_, M>> {
        fn floats<'a, M: Place>(arg: &'a mut Option<Arg>) -> Result<Option<M::Mut<'a, f32>>> {
            arg.as_mut().map(|a| a.dense(&[DType::F32]).and_then(|_| M::write::<f32>(a))).transpose()
        }
        let mut logprobs = Logprobs::none();
        logprobs.processed = floats::<M>(&mut self.processed)?;
        logprobs.raw = floats::<M>(&mut self.raw)?;
        if let Some(t) = &mut self.top {
            t.logprobs.dense(&[DType::F32])?;
            t.ids.dense(&[DType::I32])?;
            t.ranks.dense(&[DType::I32])?;
            logprobs.top = Some(TopLogprobs::from_parts(
                t.n,
                t.distribution,
                M::write::<f32>(&mut t.logprobs)?,
                M::write::<i32>(&mut t.ids)?,
                M::write::<i32>(&mut t.ranks)?,
            ));
        }
        Ok(logprobs)
    }
}
