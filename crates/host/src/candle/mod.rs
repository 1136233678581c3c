//! `gumbel_sample` and `rejection_sample` on [`candle_core::Tensor`]s
//! (feature `candle`; tensors on CUDA with `candle-cuda`).
//!
//! A [`Sampler`] is made for a candle device. On the CPU it runs the CPU
//! backend on the tensors' host memory; on CUDA it runs the kernels on the
//! tensors' own `CudaSlice`s, on the device's stream, with no copy and no
//! host synchronisation (candle 0.11 and specdec share one `cudarc`). Dtypes,
//! shapes and strides come from each tensor's layout: logits rows may be
//! strided (last stride 1), the draft logits `[slots, k, width]` any strides
//! with last stride 1; vectors must have stride 1. Anything else is a typed
//! [`Error`] before launch, as are values the host can see (REFERENCE §5);
//! values in device memory are flagged, in the returned row status and in
//! [`Sampler::take_status`].
//!
//! Dtypes: logits and draft logits f32, bf16 or f16; drafts, slots, offsets,
//! draft-logits columns and top-k `i32`, or `i64` (candle's index dtype, and
//! the only integer dtype candle's CUDA kernels compute with), narrowed to
//! `i32` on the device first, a value outside the `i32` range staying out of
//! range for the call's checks; positions and seeds `i64` holding the `u64`
//! of the core API (candle has no `u64`); temperature, top-p and min-p `f32`.
//! Tokens come back `i64`, `-1` where the core API writes `-1`.
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use specdec::candle::{GumbelCall, Params, Sampler};
//! let device = Device::Cpu;
//! let logits = Tensor::new(&[[0.5f32, 2.0, -1.0], [0.0, 3.0, 1.0]], &device)?;
//! let slots = Tensor::new(&[0i32, -1], &device)?; // row 1 is padding (greedy)
//! let pos = Tensor::new(&[17i64, 4], &device)?;
//! let (temperature, seed) = (Tensor::new(&[0.8f32], &device)?, Tensor::new(&[1234i64], &device)?);
//! let mut sampler = Sampler::new(&device)?;
//! let out = sampler.gumbel_sample(&GumbelCall::new(&logits, &slots, &pos, Params::new(&temperature, &seed)))?;
//! assert_eq!(out.tokens.to_vec1::<i64>()?[1], 1);
//! # Ok::<(), specdec::Error>(())
//! ```

mod tensors;

use crate::cpu::Cpu;
use crate::error::{Error, Result};
use crate::gumbel::{GumbelOutput, GumbelSample};
use crate::logprobs::{Distribution, Logprobs, TopLogprobs};
use crate::memory::Host;
use crate::params::{self, SamplingParams};
use crate::rejection::{RejectionOutput, RejectionSample, Verification};
use crate::tensor::{Column, DraftLogits, DraftLogitsMut, Logits, Tokens};
use candle_core::{CpuStorage, DType, InplaceOp1, Layout, Tensor};
use std::borrow::Cow;
use std::cell::RefCell;
use tensors::{CacheLayout, CacheMut, Locked, Num, Place, ints};

/// Runs the operations on one candle device: the CPU backend for
/// `Device::Cpu`, the CUDA backend on the device's stream for `Device::Cuda`
/// (with a workspace it grows as calls need).
pub struct Sampler {
    device: candle_core::Device,
    engine: Engine,
}

enum Engine {
    Cpu,
    #[cfg(feature = "candle-cuda")]
    Cuda {
        cuda: crate::Cuda,
        workspace: Option<Box<crate::Workspace>>,
        /// Workspaces outgrown since the last `take_status`, kept for their status words.
        retired: Vec<crate::Workspace>,
    },
}

impl Sampler {
    /// A sampler for tensors on `device`.
    ///
    /// # Errors
    /// [`Error::TensorDevice`] for a device other than the CPU and (with
    /// `candle-cuda`) CUDA; [`Error::PtxLoad`] if the driver cannot load the kernels.
    pub fn new(device: &candle_core::Device) -> Result<Self> {
        let engine = match device {
            candle_core::Device::Cpu => Engine::Cpu,
            #[cfg(feature = "candle-cuda")]
            candle_core::Device::Cuda(d) => {
                Engine::Cuda { cuda: crate::Cuda::new(d.cuda_stream())?, workspace: None, retired: Vec::new() }
            }
            other => {
                return Err(Error::TensorDevice {
                    what: "the sampler",
                    expected: if cfg!(feature = "candle-cuda") {
                        "cpu or cuda"
                    } else {
                        "cpu (feature candle-cuda: cuda)"
                    }
                    .into(),
                    got: format!("{:?}", other.location()),
                });
            }
        };
        Ok(Sampler { device: device.clone(), engine })
    }

    pub fn device(&self) -> &candle_core::Device {
        &self.device
    }

    /// The OR of the [`crate::status`] flags raised in device memory by this
    /// sampler's calls since the last call of this (REFERENCE §5.4: an
    /// invalid request's rows keep their status; its flags land here). On
    /// CUDA it synchronises with the stream to read them; on the CPU, whose
    /// checks are typed errors, it is 0.
    pub fn take_status(&mut self) -> Result<u32> {
        match &mut self.engine {
            Engine::Cpu => Ok(0),
            #[cfg(feature = "candle-cuda")]
            Engine::Cuda { workspace, retired, .. } => {
                let mut flags = 0;
                for mut ws in retired.drain(..) {
                    flags |= ws.take_status()?;
                }
                if let Some(ws) = workspace {
                    flags |= ws.take_status()?;
                }
                Ok(flags)
            }
        }
    }
}

/// Per-slot sampling parameters (the core API's [`SamplingParams`]).
#[derive(Clone, Copy)]
pub struct Params<'t> {
    /// `f32 [slots]`: `0` greedy.
    pub temperature: &'t Tensor,
    /// `i64 [slots]`: each slot's seed (its bits are the `u64` seed).
    pub seed: &'t Tensor,
    pub filters: Filters<'t>,
}

impl<'t> Params<'t> {
    pub fn new(temperature: &'t Tensor, seed: &'t Tensor) -> Self {
        Params { temperature, seed, filters: Filters::default() }
    }

    #[must_use]
    pub fn with_filters(self, filters: Filters<'t>) -> Self {
        Params { filters, ..self }
    }
}

/// Per-slot filters (REFERENCE §7), each optional: top-k `i32` (or `i64`)
/// `[slots]`, top-p and min-p `f32 [slots]`.
#[derive(Clone, Copy, Default)]
pub struct Filters<'t> {
    pub top_k: Option<&'t Tensor>,
    pub top_p: Option<&'t Tensor>,
    pub min_p: Option<&'t Tensor>,
}

impl<'t> Filters<'t> {
    /// The top-k tensor as `i32`, where it is given.
    fn int_top_k(&self) -> Result<Option<Cow<'t, Tensor>>> {
        self.top_k.map(|t| ints("top_k", t)).transpose()
    }
}

impl<'t> Params<'t> {
    /// The same parameters with `top_k` in place of the filters' top-k.
    fn with_top_k<'a>(&self, top_k: Option<&'a Tensor>) -> Params<'a>
    where
        't: 'a,
    {
        Params { filters: Filters { top_k, ..self.filters }, ..*self }
    }
}

/// Which log-probabilities a call returns (REFERENCE §8).
#[derive(Clone, Copy, Debug, Default)]
pub struct LogprobsRequest {
    /// Each emitted token's under the processed distribution.
    pub processed: bool,
    /// Each emitted token's under the raw one.
    pub raw: bool,
    /// The top `n` (≤ [`crate::MAX_TOP_LOGPROBS`]) of each position under a
    /// distribution, and the emitted token's rank.
    pub top: Option<(usize, Distribution)>,
}

/// The log-probabilities asked for; each tensor's first dimension is the
/// call's positions (`gumbel_sample`'s rows, `rejection_sample`'s `requests × (max_drafts + 1)`).
#[derive(Debug)]
pub struct LogprobsTensors {
    /// `f32 [positions]`.
    pub processed: Option<Tensor>,
    /// `f32 [positions]`.
    pub raw: Option<Tensor>,
    /// `f32 [positions, n]`, `i32 [positions, n]`, `i32 [positions]`: the
    /// top log-probabilities, their ids and the emitted token's rank.
    pub top: Option<(Tensor, Tensor, Tensor)>,
}

/// A `gumbel_sample` call (REFERENCE §3).
pub struct GumbelCall<'t> {
    /// `[rows, >= vocab]` raw logits: f32, bf16 or f16, last stride 1.
    pub logits: &'t Tensor,
    /// `i32` or `i64 [rows]`: each row's slot, `-1` for padding.
    pub slots: &'t Tensor,
    /// `i64 [rows]`: each row's position.
    pub pos: &'t Tensor,
    pub params: Params<'t>,
    /// Noise from the draft stream (a draft model proposing tokens).
    pub drafting: bool,
    /// Draft logits `[slots, k, width]` to store each row's raw logits into,
    /// written in place, and the column each row writes.
    pub draft_logits: Option<(&'t Tensor, DraftColumn<'t>)>,
    pub logprobs: LogprobsRequest,
}

/// Which draft-logits column each row of `gumbel_sample` writes.
#[derive(Clone, Copy)]
pub enum DraftColumn<'t> {
    All(usize),
    /// `i32` or `i64 [rows]`.
    PerRow(&'t Tensor),
}

impl<'t> GumbelCall<'t> {
    pub fn new(logits: &'t Tensor, slots: &'t Tensor, pos: &'t Tensor, params: Params<'t>) -> Self {
        GumbelCall {
            logits,
            slots,
            pos,
            params,
            drafting: false,
            draft_logits: None,
            logprobs: LogprobsRequest::default(),
        }
    }

    /// A draft model's call: draft-stream noise, each row's raw logits stored
    /// into `draft_logits` at its slot and `column`.
    #[must_use]
    pub fn drafting(self, draft_logits: &'t Tensor, column: DraftColumn<'t>) -> Self {
        GumbelCall { drafting: true, draft_logits: Some((draft_logits, column)), ..self }
    }

    #[must_use]
    pub fn with_logprobs(self, logprobs: LogprobsRequest) -> Self {
        GumbelCall { logprobs, ..self }
    }
}

/// What `gumbel_sample` returns.
#[derive(Debug)]
pub struct GumbelTensors {
    /// `i64 [rows]`: the sampled ids (`-1`: the row's device-side values were invalid).
    pub tokens: Tensor,
    /// `u32 [rows]`: each row's status flags ([`crate::status`]).
    pub row_status: Tensor,
    pub logprobs: LogprobsTensors,
}

/// A `rejection_sample` call (REFERENCE §4).
pub struct RejectionCall<'t> {
    /// `[rows, >= vocab]` raw target logits: f32, bf16 or f16, last stride 1.
    pub target: &'t Tensor,
    /// `i32` or `i64 [requests + 1]`: row offsets.
    pub offsets: &'t Tensor,
    /// `i32` or `i64 [rows]`: the draft at each draft row, `-1` a placeholder.
    pub drafts: &'t Tensor,
    /// `i32` or `i64 [requests]`: each request's slot, `-1` padding.
    pub slots: &'t Tensor,
    /// `i64 [rows]`: each row's position.
    pub pos: &'t Tensor,
    pub params: Params<'t>,
    /// K: the most drafts any request has.
    pub max_drafts: usize,
    pub verification: Verification<'t>,
    /// The draft logits `[slots, k, width]` the drafts were sampled from, and
    /// the filters they were sampled with; `None`: one-hot drafts.
    pub draft_logits: Option<(&'t Tensor, Filters<'t>)>,
    pub logprobs: LogprobsRequest,
}

impl<'t> RejectionCall<'t> {
    pub fn new(
        target: &'t Tensor,
        offsets: &'t Tensor,
        drafts: &'t Tensor,
        slots: &'t Tensor,
        pos: &'t Tensor,
        params: Params<'t>,
        max_drafts: usize,
    ) -> Self {
        RejectionCall {
            target,
            offsets,
            drafts,
            slots,
            pos,
            params,
            max_drafts,
            verification: Verification::Token,
            draft_logits: None,
            logprobs: LogprobsRequest::default(),
        }
    }

    /// Drafts sampled from `draft_logits` (with `filters`), not one-hot.
    #[must_use]
    pub fn with_draft_logits(self, draft_logits: &'t Tensor, filters: Filters<'t>) -> Self {
        RejectionCall { draft_logits: Some((draft_logits, filters)), ..self }
    }

    #[must_use]
    pub fn with_verification(self, verification: Verification<'t>) -> Self {
        RejectionCall { verification, ..self }
    }

    #[must_use]
    pub fn with_logprobs(self, logprobs: LogprobsRequest) -> Self {
        RejectionCall { logprobs, ..self }
    }
}

/// What `rejection_sample` returns.
#[derive(Debug)]
pub struct RejectionTensors {
    /// `i64 [requests, max_drafts + 1]`: accepted drafts, then the resampled
    /// or bonus token, then `-1`.
    pub tokens: Tensor,
    /// `i32 [requests]`: tokens emitted.
    pub num_emitted: Tensor,
    /// `i32 [requests]`: drafts accepted.
    pub accepted: Tensor,
    /// `u32 [rows]`: each row's status flags.
    pub row_status: Tensor,
    pub logprobs: LogprobsTensors,
}

/// The read-locked inputs of a call's parameters.
struct LockedParams<'t> {
    temperature: Locked<'t>,
    seed: Locked<'t>,
    filters: LockedFilters<'t>,
}

struct LockedFilters<'t> {
    top_k: Option<Locked<'t>>,
    top_p: Option<Locked<'t>>,
    min_p: Option<Locked<'t>>,
}

impl<'t> LockedFilters<'t> {
    fn new(f: &Filters<'t>, device: &candle_core::Device) -> Result<Self> {
        let lock = |what, t: Option<&'t Tensor>| t.map(|t| Locked::new(what, t, device)).transpose();
        Ok(LockedFilters {
            top_k: lock("top_k", f.top_k)?,
            top_p: lock("top_p", f.top_p)?,
            min_p: lock("min_p", f.min_p)?,
        })
    }

    fn all(&self) -> impl Iterator<Item = &Locked<'t>> {
        [&self.top_k, &self.top_p, &self.min_p].into_iter().flatten()
    }

    fn views<M: Place>(&self) -> Result<params::Filters<'_, M>> {
        fn read<'l, M: Place, T: Num>(l: &'l Option<Locked<'_>>, dtype: DType) -> Result<Option<M::Ref<'l, T>>> {
            l.as_ref().map(|l| vector::<M, T>(l, dtype)).transpose()
        }
        Ok(params::Filters {
            top_k: read::<M, i32>(&self.top_k, DType::I32)?,
            top_p: read::<M, f32>(&self.top_p, DType::F32)?,
            min_p: read::<M, f32>(&self.min_p, DType::F32)?,
        })
    }
}

impl<'t> LockedParams<'t> {
    fn new(p: &Params<'t>, device: &candle_core::Device) -> Result<Self> {
        Ok(LockedParams {
            temperature: Locked::new("temperature", p.temperature, device)?,
            seed: Locked::new("seed", p.seed, device)?,
            filters: LockedFilters::new(&p.filters, device)?,
        })
    }

    fn all(&self) -> impl Iterator<Item = &Locked<'t>> {
        [&self.temperature, &self.seed].into_iter().chain(self.filters.all())
    }

    fn views<M: Place>(&self) -> Result<SamplingParams<'_, M>> {
        Ok(SamplingParams {
            temperature: M::read(&self.temperature, self.temperature.vector(DType::F32)?)?,
            seed: M::read_u64(&self.seed, self.seed.vector(DType::I64)?)?,
            filters: self.filters.views()?,
        })
    }
}

/// A vector input's elements.
fn vector<'l, M: Place, T: Num>(l: &'l Locked<'_>, dtype: DType) -> Result<M::Ref<'l, T>> {
    M::read(l, l.vector(dtype)?)
}

/// The outputs of a call's log-probabilities, before they become tensors.
struct LogprobBufs<M: Place> {
    processed: Option<M::Buf<f32>>,
    raw: Option<M::Buf<f32>>,
    top: Option<TopBufs<M>>,
}

/// The top-n outputs: `n`, the distribution, log-probabilities, ids and ranks.
type TopBufs<M> = (usize, Distribution, <M as Place>::Buf<f32>, <M as Place>::Buf<i32>, <M as Place>::Buf<i32>);

impl<M: Place> LogprobBufs<M> {
    fn alloc(request: LogprobsRequest, positions: usize, device: &candle_core::Device) -> Result<Self> {
        let f32s = |on: bool| on.then(|| M::alloc::<f32>(device, positions)).transpose();
        let top = match request.top {
            Some((n, distribution)) => Some((
                n,
                distribution,
                M::alloc::<f32>(device, positions * n)?,
                M::alloc::<i32>(device, positions * n)?,
                M::alloc::<i32>(device, positions)?,
            )),
            None => None,
        };
        Ok(LogprobBufs { processed: f32s(request.processed)?, raw: f32s(request.raw)?, top })
    }

    fn views(&mut self) -> Logprobs<'_, M> {
        Logprobs {
            processed: self.processed.as_mut().map(M::buf_mut),
            raw: self.raw.as_mut().map(M::buf_mut),
            top: self.top.as_mut().map(|(n, distribution, logprobs, ids, ranks)| TopLogprobs {
                n: *n,
                distribution: *distribution,
                logprobs: M::buf_mut(logprobs),
                ids: M::buf_mut(ids),
                ranks: M::buf_mut(ranks),
            }),
        }
    }

    fn into_tensors(self, positions: usize, device: &candle_core::Device) -> Result<LogprobsTensors> {
        let vector = |b: Option<M::Buf<f32>>| b.map(|b| M::into_tensor(b, &[positions], device)).transpose();
        let top = match self.top {
            Some((n, _, logprobs, ids, ranks)) => Some((
                M::into_tensor(logprobs, &[positions, n], device)?,
                M::into_tensor(ids, &[positions, n], device)?,
                M::into_tensor(ranks, &[positions], device)?,
            )),
            None => None,
        };
        Ok(LogprobsTensors { processed: vector(self.processed)?, raw: vector(self.raw)?, top })
    }
}

/// Runs a call in memory `M` on the sampler's backend.
trait Run: Place {
    fn gumbel(engine: &mut Engine, args: &GumbelSample<'_, Self>, out: &mut GumbelOutput<'_, Self>) -> Result<()>;
    fn rejection(
        engine: &mut Engine,
        args: &RejectionSample<'_, Self>,
        out: &mut RejectionOutput<'_, Self>,
    ) -> Result<()>;
}

impl Run for Host {
    fn gumbel(_: &mut Engine, args: &GumbelSample<'_, Host>, out: &mut GumbelOutput<'_, Host>) -> Result<()> {
        Cpu.gumbel_sample(args, out)
    }

    fn rejection(_: &mut Engine, args: &RejectionSample<'_, Host>, out: &mut RejectionOutput<'_, Host>) -> Result<()> {
        Cpu.rejection_sample(args, out)
    }
}

#[cfg(feature = "candle-cuda")]
impl Run for crate::memory::Device {
    fn gumbel(engine: &mut Engine, args: &GumbelSample<'_, Self>, out: &mut GumbelOutput<'_, Self>) -> Result<()> {
        let (cuda, ws) = engine.cuda(args.logits.rows)?;
        cuda.gumbel_sample(ws, args, out)
    }

    fn rejection(
        engine: &mut Engine,
        args: &RejectionSample<'_, Self>,
        out: &mut RejectionOutput<'_, Self>,
    ) -> Result<()> {
        // The workspace holds a call's rows and its requests' token slots.
        let positions = args.slots.len() * (args.max_drafts + 1);
        let (cuda, ws) = engine.cuda(args.target.rows.max(positions))?;
        cuda.rejection_sample(ws, args, out)
    }
}

#[cfg(feature = "candle-cuda")]
impl Engine {
    /// The CUDA backend and a workspace of at least `rows` rows (made anew,
    /// twice as large, when the last was too small; see `Workspace` for what a call counts).
    fn cuda(&mut self, rows: usize) -> Result<(&crate::Cuda, &mut crate::Workspace)> {
        let Engine::Cuda { cuda, workspace, retired } = self else {
            unreachable!("Device memory runs on the CUDA engine")
        };
        let capacity = workspace.as_ref().map_or(0, |w| w.max_rows());
        if rows > capacity {
            let grown = Box::new(cuda.workspace(rows.max(2 * capacity).max(64))?);
            retired.extend(workspace.replace(grown).map(|w| *w));
        }
        Ok((cuda, workspace.as_deref_mut().expect("made above")))
    }
}

/// A call, given the storage of the draft logits it writes.
type CallWithCache<'f, T> = &'f mut dyn FnMut(CacheMut<'_>) -> Result<T>;

/// Runs a call with the storage of the draft logits it writes: candle hands
/// out a tensor's storage for writing only to an in-place op.
struct WriteDraftLogits<'f, T> {
    run: RefCell<CallWithCache<'f, T>>,
    result: RefCell<Option<Result<T>>>,
}

impl<T> InplaceOp1 for WriteDraftLogits<'_, T> {
    fn name(&self) -> &'static str {
        "specdec-gumbel-sample"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, _: &Layout) -> candle_core::Result<()> {
        *self.result.borrow_mut() = Some((self.run.borrow_mut())(CacheMut::Cpu(storage)));
        Ok(())
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(&self, storage: &mut candle_core::CudaStorage, _: &Layout) -> candle_core::Result<()> {
        *self.result.borrow_mut() = Some((self.run.borrow_mut())(CacheMut::Cuda(storage)));
        Ok(())
    }
}

impl Sampler {
    /// `gumbel_sample` (REFERENCE §3) on `call`'s tensors; in drafting mode
    /// the draft logits are written in place.
    ///
    /// # Errors
    /// Tensor errors (dtype, shape, layout, device, draft logits sharing an
    /// input's memory) and every error of the core call, before launch.
    pub fn gumbel_sample(&mut self, call: &GumbelCall<'_>) -> Result<GumbelTensors> {
        let device = &self.device;
        let (slots, top_k) = (ints("slots", call.slots)?, call.params.filters.int_top_k()?);
        let columns = match call.draft_logits {
            Some((_, DraftColumn::PerRow(c))) => Some(ints("draft-logits columns", c)?),
            _ => None,
        };
        let logits = Locked::new("logits", call.logits, device)?;
        let slots = Locked::new("slots", &slots, device)?;
        let pos = Locked::new("positions", call.pos, device)?;
        let params = LockedParams::new(&call.params.with_top_k(top_k.as_deref()), device)?;
        let columns = columns.as_deref().map(|c| Locked::new("draft-logits columns", c, device)).transpose()?;
        let inputs = Inputs { logits: &logits, slots: &slots, pos: &pos, params: &params, columns: columns.as_ref() };
        let Some((cache, column)) = call.draft_logits else {
            return self.gumbel_in(&inputs, call, None);
        };
        let layout = CacheLayout::of(cache)?;
        // Locking checks the device too; the lock is released before the write takes it.
        let cache_addr = Locked::new("draft logits", cache, device)?.storage_addr();
        let mut read = [&logits, &slots, &pos].into_iter().chain(params.all()).chain(columns.as_ref());
        if let Some(input) = read.find(|l| l.storage_addr() == cache_addr) {
            return Err(Error::TensorAliased { what: "draft logits", other: input.what() });
        }
        let column = match column {
            DraftColumn::All(c) => Some(c),
            DraftColumn::PerRow(_) => None,
        };
        let mut run = |storage: CacheMut<'_>| self.gumbel_in(&inputs, call, Some((storage, &layout, column)));
        let op = WriteDraftLogits { run: RefCell::new(&mut run), result: RefCell::new(None) };
        cache.inplace_op1(&op)?;
        op.result.into_inner().expect("the in-place op ran")
    }

    fn gumbel_in(
        &mut self,
        inputs: &Inputs<'_, '_>,
        call: &GumbelCall<'_>,
        cache: Option<(CacheMut<'_>, &CacheLayout, Option<usize>)>,
    ) -> Result<GumbelTensors> {
        match self.engine {
            Engine::Cpu => gumbel::<Host>(&mut self.engine, &self.device, inputs, call, cache),
            #[cfg(feature = "candle-cuda")]
            Engine::Cuda { .. } => gumbel::<crate::memory::Device>(&mut self.engine, &self.device, inputs, call, cache),
        }
    }

    /// `rejection_sample` (REFERENCE §4) on `call`'s tensors.
    ///
    /// # Errors
    /// Tensor errors (dtype, shape, layout, device) and every error of the core call, before launch.
    pub fn rejection_sample(&mut self, call: &RejectionCall<'_>) -> Result<RejectionTensors> {
        let device = &self.device;
        let (offsets, drafts) = (ints("offsets", call.offsets)?, ints("drafts", call.drafts)?);
        let (slots, top_k) = (ints("slots", call.slots)?, call.params.filters.int_top_k()?);
        let draft_top_k = match &call.draft_logits {
            Some((_, filters)) => filters.int_top_k()?,
            None => None,
        };
        let inputs = RejectionInputs {
            target: Locked::new("target logits", call.target, device)?,
            offsets: Locked::new("offsets", &offsets, device)?,
            drafts: Locked::new("drafts", &drafts, device)?,
            slots: Locked::new("slots", &slots, device)?,
            pos: Locked::new("positions", call.pos, device)?,
            params: LockedParams::new(&call.params.with_top_k(top_k.as_deref()), device)?,
            draft: match &call.draft_logits {
                Some((logits, filters)) => Some((
                    Locked::new("draft logits", logits, device)?,
                    CacheLayout::of(logits)?,
                    LockedFilters::new(&Filters { top_k: draft_top_k.as_deref(), ..*filters }, device)?,
                )),
                None => None,
            },
        };
        match self.engine {
            Engine::Cpu => rejection::<Host>(&mut self.engine, &self.device, &inputs, call),
            #[cfg(feature = "candle-cuda")]
            Engine::Cuda { .. } => rejection::<crate::memory::Device>(&mut self.engine, &self.device, &inputs, call),
        }
    }
}

/// The read-locked inputs of a `gumbel_sample` call.
struct Inputs<'l, 't> {
    logits: &'l Locked<'t>,
    slots: &'l Locked<'t>,
    pos: &'l Locked<'t>,
    params: &'l LockedParams<'t>,
    columns: Option<&'l Locked<'t>>,
}

fn logits<'l, M: Place>(l: &'l Locked<'_>) -> Result<Logits<'l, M>> {
    let (at, rows, vocab, row_stride) = l.matrix()?;
    Ok(Logits { data: l.values::<M>(at)?, rows, vocab, row_stride })
}

fn gumbel<M: Run>(
    engine: &mut Engine,
    device: &candle_core::Device,
    inputs: &Inputs<'_, '_>,
    call: &GumbelCall<'_>,
    cache: Option<(CacheMut<'_>, &CacheLayout, Option<usize>)>,
) -> Result<GumbelTensors> {
    let logits = logits::<M>(inputs.logits)?;
    let rows = logits.rows;
    let args = GumbelSample {
        logits,
        slots: vector::<M, i32>(inputs.slots, DType::I32)?,
        pos: M::read_u64(inputs.pos, inputs.pos.vector(DType::I64)?)?,
        params: inputs.params.views()?,
        drafting: call.drafting,
    };
    let mut tokens = M::alloc::<i64>(device, rows)?;
    let mut row_status = M::alloc::<u32>(device, rows)?;
    let mut logprobs = LogprobBufs::<M>::alloc(call.logprobs, rows, device)?;
    let mut cache = cache;
    {
        let draft_logits = match &mut cache {
            Some((storage, layout, column)) => {
                let column = match (column, inputs.columns) {
                    (Some(c), _) => Column::All(*c),
                    (None, Some(c)) => Column::PerRow(vector::<M, i32>(c, DType::I32)?),
                    (None, None) => unreachable!("a per-row column has its tensor"),
                };
                Some((DraftLogitsMut { data: M::cache(storage, layout)?, shape: layout.shape }, column))
            }
            None => None,
        };
        let mut out = GumbelOutput {
            tokens: Tokens::I64(M::buf_mut(&mut tokens)),
            row_status: Some(M::buf_mut(&mut row_status)),
            draft_logits,
            logprobs: logprobs.views(),
        };
        M::gumbel(engine, &args, &mut out)?;
    }
    Ok(GumbelTensors {
        tokens: M::into_tensor(tokens, &[rows], device)?,
        row_status: M::into_tensor(row_status, &[rows], device)?,
        logprobs: logprobs.into_tensors(rows, device)?,
    })
}

/// The read-locked inputs of a `rejection_sample` call.
struct RejectionInputs<'t> {
    target: Locked<'t>,
    offsets: Locked<'t>,
    drafts: Locked<'t>,
    slots: Locked<'t>,
    pos: Locked<'t>,
    params: LockedParams<'t>,
    draft: Option<(Locked<'t>, CacheLayout, LockedFilters<'t>)>,
}

fn rejection<M: Run>(
    engine: &mut Engine,
    device: &candle_core::Device,
    inputs: &RejectionInputs<'_>,
    call: &RejectionCall<'_>,
) -> Result<RejectionTensors> {
    let target = logits::<M>(&inputs.target)?;
    let rows = target.rows;
    let slots = vector::<M, i32>(&inputs.slots, DType::I32)?;
    let requests = M::len(&slots);
    let draft_logits = match &inputs.draft {
        Some((logits, layout, filters)) => Some(DraftLogits {
            data: logits.values::<M>(layout.at.clone())?,
            shape: layout.shape,
            filters: filters.views()?,
        }),
        None => None,
    };
    let args = RejectionSample {
        target,
        offsets: vector::<M, i32>(&inputs.offsets, DType::I32)?,
        drafts: vector::<M, i32>(&inputs.drafts, DType::I32)?,
        slots,
        pos: M::read_u64(&inputs.pos, inputs.pos.vector(DType::I64)?)?,
        params: inputs.params.views()?,
        max_drafts: call.max_drafts,
        verification: call.verification,
        draft_logits,
    };
    let width = call.max_drafts + 1;
    let positions = requests * width;
    let mut tokens = M::alloc::<i64>(device, positions)?;
    let mut num_emitted = M::alloc::<i32>(device, requests)?;
    let mut accepted = M::alloc::<i32>(device, requests)?;
    let mut row_status = M::alloc::<u32>(device, rows)?;
    let mut logprobs = LogprobBufs::<M>::alloc(call.logprobs, positions, device)?;
    {
        let mut out = RejectionOutput {
            tokens: Tokens::I64(M::buf_mut(&mut tokens)),
            num_emitted: M::buf_mut(&mut num_emitted),
            accepted: Some(M::buf_mut(&mut accepted)),
            row_status: Some(M::buf_mut(&mut row_status)),
            logprobs: logprobs.views(),
        };
        M::rejection(engine, &args, &mut out)?;
    }
    Ok(RejectionTensors {
        tokens: M::into_tensor(tokens, &[requests, width], device)?,
        num_emitted: M::into_tensor(num_emitted, &[requests], device)?,
        accepted: M::into_tensor(accepted, &[requests], device)?,
        row_status: M::into_tensor(row_status, &[rows], device)?,
        logprobs: logprobs.into_tensors(positions, device)?,
    })
}
