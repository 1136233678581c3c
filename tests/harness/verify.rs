//! Owned host buffers for one `rejection_sample` call, runnable on any backend
//! (and, copied to the device, through `Cuda::rejection_sample`: [`Verify::run_device`]).

use crate::batch::{DeviceValues, Values};
use crate::filters::{DeviceFilters, FilterTable};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, DriverError};
use specdec::shard::{Exchange, Shard};
use specdec::{
    Backend, Cuda, Device, Distribution, DraftLogits, DraftLogitsShape, Host, Logits, Logprobs, RejectionOutput,
    RejectionSample, SamplingParams, Verification, ViewMut, Workspace,
};
use std::sync::Arc;

/// A `rejection_sample` call's inputs, owned. Request `r` owns target rows
/// `offsets[r] .. offsets[r+1]`.
#[derive(Clone, Debug)]
pub struct Verify {
    pub target: Values,
    pub rows: usize,
    pub vocab: usize,
    pub row_stride: usize,
    pub offsets: Vec<i32>,
    pub drafts: Vec<i32>,
    pub slots: Vec<i32>,
    pub pos: Vec<u64>,
    pub temperature: Vec<f32>,
    pub seed: Vec<u64>,
    pub max_drafts: usize,
    /// Draft by draft (the default), as a block, or synthetic.
    pub verification: Verification<'static>,
    /// Draft logits `[slots, k, width]` with their strides, or `None` (one-hot).
    pub draft: Option<(Values, DraftLogitsShape)>,
    /// The slots' filters on the target (SPEC §7).
    pub filters: FilterTable,
    /// The filters the draft logits were sampled with, per slot.
    pub draft_filters: FilterTable,
    pub tokens_i64: bool,
}

/// What a call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// `[requests, max_drafts + 1]`, row-major.
    pub tokens: Vec<i64>,
    pub num_emitted: Vec<i32>,
    pub accepted: Vec<i32>,
    pub row_status: Vec<u32>,
}

/// The log-probabilities a run asks for ([`Verify::run_logprobs`]).
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    pub processed: bool,
    pub raw: bool,
    /// `n` and the distribution of a top-n (and rank).
    pub top: Option<(usize, Distribution)>,
}

/// A run's log-probabilities as bits (outputs not asked for: empty), so
/// that equal outputs compare equal, NaN included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogprobBits {
    pub processed: Vec<u32>,
    pub raw: Vec<u32>,
    pub top: Vec<u32>,
    pub ids: Vec<i32>,
    pub ranks: Vec<i32>,
}

/// Buffers for the log-probabilities a call is `asked` for, filled with
/// values no call writes.
pub struct LogprobBuffers {
    asked: Option<Asked>,
    processed: Vec<f32>,
    raw: Vec<f32>,
    top: Vec<f32>,
    ids: Vec<i32>,
    ranks: Vec<i32>,
}

impl LogprobBuffers {
    /// What the log-probability buffers start as: a value above 0, an id and rank below -1.
    const UNWRITTEN: (f32, i32) = (0.5, i32::MIN);

    pub fn new(positions: usize, asked: Option<Asked>) -> Self {
        let n = asked.and_then(|a| a.top).map_or(0, |(n, _)| n);
        let (value, id) = Self::UNWRITTEN;
        LogprobBuffers {
            asked,
            processed: vec![value; positions],
            raw: vec![value; positions],
            top: vec![value; positions * n],
            ids: vec![id; positions * n],
            ranks: vec![id; positions],
        }
    }

    /// The outputs to pass a call.
    pub fn outputs(&mut self) -> Logprobs<'_, Host> {
        asked_outputs(self.asked, [&mut self.processed, &mut self.raw], (&mut self.top, &mut self.ids, &mut self.ranks))
    }

    /// What the call wrote (none of the outputs not asked for).
    pub fn bits(self) -> LogprobBits {
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect();
        match self.asked {
            None => LogprobBits::default(),
            Some(a) => LogprobBits {
                processed: if a.processed { bits(self.processed) } else { Vec::new() },
                raw: if a.raw { bits(self.raw) } else { Vec::new() },
                top: bits(self.top),
                ids: self.ids,
                ranks: if a.top.is_some() { self.ranks } else { Vec::new() },
            },
        }
    }
}

/// [`LogprobBuffers`] in device memory, for calls on device buffers: the
/// same values, read back into the same bits.
pub struct DeviceLogprobBuffers {
    asked: Option<Asked>,
    processed: CudaSlice<f32>,
    raw: CudaSlice<f32>,
    /// The top-n's values and ids, one element past the call's: CUDA
    /// allocates no 0 bytes, and a top-0's (ranks alone) are empty.
    top: CudaSlice<f32>,
    ids: CudaSlice<i32>,
    ranks: CudaSlice<i32>,
}

impl DeviceLogprobBuffers {
    /// [`LogprobBuffers::new`]'s buffers, copied to the device on `stream`.
    pub fn new(stream: &Arc<CudaStream>, positions: usize, asked: Option<Asked>) -> Result<Self, DriverError> {
        let host = LogprobBuffers::new(positions, asked);
        let (value, id) = LogprobBuffers::UNWRITTEN;
        Ok(DeviceLogprobBuffers {
            asked,
            processed: stream.clone_htod(&host.processed)?,
            raw: stream.clone_htod(&host.raw)?,
            top: upload_with(stream, &host.top, value)?,
            ids: upload_with(stream, &host.ids, id)?,
            ranks: stream.clone_htod(&host.ranks)?,
        })
    }

    /// The outputs to pass a call, as [`LogprobBuffers::outputs`].
    pub fn outputs(&mut self) -> Logprobs<'_, Device> {
        let len = self.top.len() - 1;
        let top = (self.top.slice_mut(..len), self.ids.slice_mut(..len), &mut self.ranks);
        asked_outputs(self.asked, [&mut self.processed, &mut self.raw], top)
    }

    /// What the call wrote, as [`LogprobBuffers::bits`] (copied back on `stream`, which it waits for).
    pub fn bits(&self, stream: &Arc<CudaStream>) -> Result<LogprobBits, DriverError> {
        let len = self.top.len() - 1;
        let host = LogprobBuffers {
            asked: self.asked,
            processed: stream.clone_dtoh(&self.processed)?,
            raw: stream.clone_dtoh(&self.raw)?,
            top: stream.clone_dtoh(&self.top.slice(..len))?,
            ids: stream.clone_dtoh(&self.ids.slice(..len))?,
            ranks: stream.clone_dtoh(&self.ranks)?,
        };
        Ok(host.bits())
    }
}

/// The log-probabilities `asked` names, into buffers of every output
/// (processed and raw; the top-n's values, ids and ranks): host or device ones alike.
fn asked_outputs<'a, F, T, I, R>(
    asked: Option<Asked>,
    [processed, raw]: [F; 2],
    (top, ids, ranks): (T, I, R),
) -> Logprobs<'a, F::Memory>
where
    F: ViewMut<'a, Elem = f32>,
    T: ViewMut<'a, Memory = F::Memory, Elem = f32>,
    I: ViewMut<'a, Memory = F::Memory, Elem = i32>,
    R: ViewMut<'a, Memory = F::Memory, Elem = i32>,
{
    let mut logprobs = Logprobs::none();
    if let Some(a) = asked {
        if a.processed {
            logprobs = logprobs.with_processed(processed);
        }
        if a.raw {
            logprobs = logprobs.with_raw(raw);
        }
        if let Some((n, d)) = a.top {
            logprobs = logprobs.with_top(n, d, top, ids, ranks);
        }
    }
    logprobs
}

/// A device copy of `v` followed by one `extra` (an allocation even where `v` is empty).
fn upload_with<T: DeviceRepr + Copy>(stream: &Arc<CudaStream>, v: &[T], extra: T) -> Result<CudaSlice<T>, DriverError> {
    stream.clone_htod(&[v, &[extra]].concat())
}

impl Verified {
    /// Request `r`'s `max_drafts + 1` tokens.
    pub fn request(&self, r: usize) -> &[i64] {
        let k1 = self.tokens.len() / self.num_emitted.len();
        &self.tokens[r * k1..(r + 1) * k1]
    }
}

impl Verify {
    /// Requests with `n[r]` drafts each; target rows from `target`
    /// (`sum(n) + requests` dense rows of `vocab`); request `r` on slot `r`
    /// (tables sized to `requests`, temperature `t`, seed `1000 + r`);
    /// positions `100·r + i`.
    pub fn new(target: Values, vocab: usize, n: &[usize], max_drafts: usize, t: f32) -> Self {
        let mut offsets = vec![0i32];
        for &k in n {
            offsets.push(offsets.last().unwrap() + k as i32 + 1);
        }
        let rows = *offsets.last().unwrap() as usize;
        let requests = n.len();
        let pos = (0..requests).flat_map(|r| (0..=n[r] as u64).map(move |i| 100 * r as u64 + i)).collect();
        Verify {
            target,
            rows,
            vocab,
            row_stride: vocab,
            offsets,
            drafts: vec![-1; rows],
            slots: (0..requests as i32).collect(),
            pos,
            temperature: vec![t; requests],
            seed: (0..requests as u64).map(|r| 1000 + r).collect(),
            max_drafts,
            verification: Verification::Token,
            draft: None,
            filters: FilterTable::none(),
            draft_filters: FilterTable::none(),
            tokens_i64: false,
        }
    }

    pub fn requests(&self) -> usize {
        self.slots.len()
    }

    /// Whether request `r` is greedy: padding (a negative slot) or temperature 0.
    pub fn is_greedy(&self, r: usize) -> bool {
        self.slots[r] < 0 || self.temperature[self.slots[r] as usize] == 0.0
    }

    /// The call's inputs.
    pub fn call(&self) -> RejectionSample<'_, Host> {
        RejectionSample {
            target: Logits {
                data: self.target.view(),
                rows: self.rows,
                vocab: self.vocab,
                row_stride: self.row_stride,
            },
            offsets: &self.offsets[..],
            drafts: &self.drafts[..],
            slots: &self.slots[..],
            pos: &self.pos[..],
            params: SamplingParams::new(&self.temperature, &self.seed).with_filters(self.filters.view()),
            max_drafts: self.max_drafts,
            verification: self.verification,
            draft_logits: self.draft.as_ref().map(|(v, shape)| DraftLogits {
                data: v.view(),
                shape: *shape,
                filters: self.draft_filters.view(),
            }),
        }
    }

    /// Runs the call on `backend`.
    pub fn run(&self, backend: &Backend) -> Result<Verified, specdec::Error> {
        Ok(self.run_logprobs(backend, None)?.0)
    }

    /// Runs the call on `backend`, asking for `asked` log-probabilities.
    pub fn run_logprobs(
        &self,
        backend: &Backend,
        asked: Option<Asked>,
    ) -> Result<(Verified, LogprobBits), specdec::Error> {
        self.run_with(asked, |call, out| backend.rejection_sample(call, out))
    }

    /// Runs the call as rank `exchange.rank()` of a vocab-parallel group on
    /// the CPU backend, holding `shard` of every row (this `Verify`'s logits
    /// are the shard's ids: `sharding::rank_verify`).
    pub fn run_sharded(&self, shard: Shard, exchange: &mut dyn Exchange<Host>) -> Result<Verified, specdec::Error> {
        Ok(self.run_sharded_logprobs(shard, exchange, None)?.0)
    }

    /// [`Verify::run_sharded`], asking for `asked` log-probabilities.
    pub fn run_sharded_logprobs(
        &self,
        shard: Shard,
        exchange: &mut dyn Exchange<Host>,
        asked: Option<Asked>,
    ) -> Result<(Verified, LogprobBits), specdec::Error> {
        self.run_with(asked, |call, out| specdec::Cpu.sharded_rejection_sample(shard, exchange, call, out))
    }

    /// Runs the call through `call_fn`, with outputs pre-filled with
    /// values no call writes.
    fn run_with(
        &self,
        asked: Option<Asked>,
        mut call_fn: impl FnMut(&RejectionSample<'_, Host>, &mut RejectionOutput<'_, Host>) -> specdec::Result<()>,
    ) -> Result<(Verified, LogprobBits), specdec::Error> {
        let call = self.call();
        let requests = self.requests();
        let k1 = self.max_drafts + 1;
        let mut num_emitted = vec![i32::MIN; requests];
        let mut accepted = vec![i32::MIN; requests];
        let mut row_status = vec![u32::MAX; self.rows];
        let mut buffers = LogprobBuffers::new(requests * k1, asked);
        let logprobs = buffers.outputs();
        let tokens = if self.tokens_i64 {
            let mut t = vec![i64::MIN; requests * k1];
            let out = RejectionOutput::new(&mut t, &mut num_emitted).with_logprobs(logprobs);
            call_fn(&call, &mut out.with_accepted(&mut accepted).with_row_status(&mut row_status))?;
            t
        } else {
            let mut t = vec![i32::MIN; requests * k1];
            let out = RejectionOutput::new(&mut t, &mut num_emitted).with_logprobs(logprobs);
            call_fn(&call, &mut out.with_accepted(&mut accepted).with_row_status(&mut row_status))?;
            t.into_iter().map(i64::from).collect()
        };
        Ok((Verified { tokens, num_emitted, accepted, row_status }, buffers.bits()))
    }

    /// Runs the call through [`Cuda::rejection_sample`] with device copies
    /// of its buffers (filter tables included) and workspace `ws`, then
    /// copies the outputs back. Outputs start at `i32::MIN` (`i64::MIN`
    /// tokens) and statuses at `u32::MAX`, as in [`Verify::run`]. Nothing is
    /// checked on the host beyond shapes: slots, offsets, draft ids,
    /// temperatures and filter values reach the kernels as they are. The
    /// workspace's status word is the caller's.
    pub fn run_device(&self, cuda: &Cuda, ws: &mut Workspace) -> specdec::Result<Verified> {
        self.run_device_with(cuda, |call, out| cuda.rejection_sample(ws, call, out))
    }

    /// [`Verify::run_device`] as rank `exchange.rank()` of a vocab-parallel
    /// group through [`Cuda::sharded_rejection_sample`], holding `shard` of
    /// every row (this `Verify`'s logits are the shard's ids:
    /// `sharding::rank_verify`); `ws` from [`Cuda::sharded_workspace`].
    pub fn run_device_sharded(
        &self,
        cuda: &Cuda,
        ws: &mut Workspace,
        shard: Shard,
        exchange: &mut dyn Exchange<Device>,
    ) -> specdec::Result<Verified> {
        self.run_device_with(cuda, |call, out| cuda.sharded_rejection_sample(ws, shard, exchange, call, out))
    }

    /// [`Verify::run_device`], the call made by `call_fn` on `cuda`'s stream
    /// (which may capture it in a CUDA graph and replay that).
    pub fn run_device_with(
        &self,
        cuda: &Cuda,
        call_fn: impl FnOnce(&RejectionSample<'_, Device>, &mut RejectionOutput<'_, Device>) -> specdec::Result<()>,
    ) -> specdec::Result<Verified> {
        Ok(self.run_device_logprobs_with(cuda, None, call_fn)?.0)
    }

    /// [`Verify::run_device_with`], asking for `asked` log-probabilities
    /// ([`DeviceLogprobBuffers`]: they start as [`Verify::run_logprobs`]'s do).
    pub fn run_device_logprobs_with(
        &self,
        cuda: &Cuda,
        asked: Option<Asked>,
        call_fn: impl FnOnce(&RejectionSample<'_, Device>, &mut RejectionOutput<'_, Device>) -> specdec::Result<()>,
    ) -> specdec::Result<(Verified, LogprobBits)> {
        let s = cuda.stream();
        let (requests, k1) = (self.requests(), self.max_drafts + 1);
        let target = DeviceValues::upload(s, &self.target)?;
        let draft = match &self.draft {
            Some((d, shape)) => Some((DeviceValues::upload(s, d)?, *shape)),
            None => None,
        };
        let (offsets, drafts) = (s.clone_htod(&self.offsets)?, s.clone_htod(&self.drafts)?);
        let (slots, pos) = (s.clone_htod(&self.slots)?, s.clone_htod(&self.pos)?);
        let (temperature, seed) = (s.clone_htod(&self.temperature)?, s.clone_htod(&self.seed)?);
        let (filters, draft_filters) =
            (DeviceFilters::upload(s, &self.filters)?, DeviceFilters::upload(s, &self.draft_filters)?);
        let mut t32 = s.clone_htod(&vec![i32::MIN; requests * k1])?;
        let mut t64 = s.clone_htod(&vec![i64::MIN; requests * k1])?;
        let mut num_emitted = s.clone_htod(&vec![i32::MIN; requests])?;
        let mut accepted = s.clone_htod(&vec![i32::MIN; requests])?;
        let mut row_status = s.clone_htod(&vec![u32::MAX; self.rows])?;
        let mut logprobs = DeviceLogprobBuffers::new(s, requests * k1, asked)?;
        {
            let call = RejectionSample::<Device> {
                target: Logits { data: target.view(), rows: self.rows, vocab: self.vocab, row_stride: self.row_stride },
                offsets: offsets.as_view(),
                drafts: drafts.as_view(),
                slots: slots.as_view(),
                pos: pos.as_view(),
                params: SamplingParams::new(&temperature, &seed).with_filters(filters.view()),
                max_drafts: self.max_drafts,
                verification: self.verification,
                draft_logits: draft.as_ref().map(|(d, shape)| DraftLogits {
                    data: d.view(),
                    shape: *shape,
                    filters: draft_filters.view(),
                }),
            };
            let out = if self.tokens_i64 {
                RejectionOutput::new(&mut t64, &mut num_emitted)
            } else {
                RejectionOutput::new(&mut t32, &mut num_emitted)
            };
            let out = out.with_accepted(&mut accepted).with_row_status(&mut row_status);
            call_fn(&call, &mut out.with_logprobs(logprobs.outputs()))?;
        }
        let tokens = if self.tokens_i64 {
            s.clone_dtoh(&t64)?
        } else {
            s.clone_dtoh(&t32)?.into_iter().map(i64::from).collect()
        };
        let out = Verified {
            tokens,
            num_emitted: s.clone_dtoh(&num_emitted)?,
            accepted: s.clone_dtoh(&accepted)?,
            row_status: s.clone_dtoh(&row_status)?,
        };
        let bits = logprobs.bits(s)?;
        s.synchronize()?;
        Ok((out, bits))
    }
}
