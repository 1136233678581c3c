//! A backend chosen at run time: the GPU when one is usable, else the CPU.
//!
//! [`Backend`]'s calls take host buffers on either backend (on CUDA they copy
//! to the device and back, allocating per call): the convenient form for
//! tools, tests and the CLI. Engines keep their data on the GPU and call
//! [`Cuda`]'s methods with device views and a [`Workspace`] instead.

use crate::cpu::Cpu;
use crate::cuda::Cuda;
use crate::error::Result;
use crate::gumbel::{GumbelOutput, GumbelSample};
use crate::logprobs::{Distribution, Logprobs};
use crate::memory::{Device, Host};
use crate::params::{Filters, SamplingParams};
use crate::rejection::{RejectionOutput, RejectionSample};
use crate::tensor::{Column, DraftLogits, DraftLogitsMut, Element, Logits, Tokens, Values, ValuesMut};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// Which backend runs the calls.
#[derive(Debug, Clone)]
pub enum Backend {
    Cpu(Cpu),
    Cuda(Cuda),
}

impl Backend {
    pub fn cpu() -> Self {
        Backend::Cpu(Cpu)
    }

    /// The CUDA backend on a caller's stream.
    pub fn cuda(stream: Arc<CudaStream>) -> Result<Self> {
        Ok(Backend::Cuda(Cuda::new(stream)?))
    }

    /// CUDA device 0 when a driver and a device are present, else the CPU.
    /// The reason the GPU was not used, if any, is returned beside it.
    pub fn auto() -> (Self, Option<crate::Error>) {
        match Cuda::on_device(0) {
            Ok(c) => (Backend::Cuda(c), None),
            Err(e) => (Backend::cpu(), Some(e)),
        }
    }

    /// "cpu" or "cuda: NVIDIA H200 (sm_90)".
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(_) => "cpu".into(),
            Backend::Cuda(c) => format!("cuda: {}", c.device_name().unwrap_or_else(|e| e.to_string())),
        }
    }

    /// `gumbel_sample` on host buffers, on whichever backend this is. Every
    /// value is checked on the host first (they are all host values here).
    pub fn gumbel_sample(&self, args: &GumbelSample<'_, Host>, out: &mut GumbelOutput<'_, Host>) -> Result<()> {
        match self {
            Backend::Cpu(cpu) => cpu.gumbel_sample(args, out),
            Backend::Cuda(cuda) => {
                let shape = args.check(out)?;
                args.check_values(out, shape)?;
                gumbel_on_device(cuda, args, out)
            }
        }
    }

    /// `rejection_sample` on host buffers, on whichever backend this is.
    /// Every value is checked on the host first.
    pub fn rejection_sample(
        &self,
        args: &RejectionSample<'_, Host>,
        out: &mut RejectionOutput<'_, Host>,
    ) -> Result<()> {
        match self {
            Backend::Cpu(cpu) => cpu.rejection_sample(args, out),
            Backend::Cuda(cuda) => {
                let shape = args.check(out)?;
                args.check_values(shape)?;
                rejection_on_device(cuda, args, out)
            }
        }
    }
}

fn upload<T: DeviceRepr>(stream: &Arc<CudaStream>, data: &[T]) -> Result<CudaSlice<T>> {
    Ok(stream.clone_htod(data)?)
}

/// A call's filter arrays, uploaded.
struct DeviceFilters {
    top_k: Option<CudaSlice<i32>>,
    top_p: Option<CudaSlice<f32>>,
    min_p: Option<CudaSlice<f32>>,
}

impl DeviceFilters {
    fn of(s: &Arc<CudaStream>, host: &Filters<'_, Host>) -> Result<Self> {
        Ok(DeviceFilters {
            top_k: host.top_k.map(|k| upload(s, k)).transpose()?,
            top_p: host.top_p.map(|p| upload(s, p)).transpose()?,
            min_p: host.min_p.map(|m| upload(s, m)).transpose()?,
        })
    }

    fn view(&self) -> Filters<'_, Device> {
        Filters {
            top_k: self.top_k.as_ref().map(|k| k.as_view()),
            top_p: self.top_p.as_ref().map(|p| p.as_view()),
            min_p: self.min_p.as_ref().map(|m| m.as_view()),
        }
    }
}

/// A device copy of logits or draft-logits elements of any dtype.
enum DeviceCopy {
    F32(CudaSlice<f32>),
    BF16(CudaSlice<half::bf16>),
    F16(CudaSlice<half::f16>),
}

impl DeviceCopy {
    fn of<T: Element>(s: &Arc<CudaStream>, data: &[T], wrap: fn(CudaSlice<T>) -> Self) -> Result<Self> {
        Ok(wrap(upload(s, data)?))
    }

    fn of_values(s: &Arc<CudaStream>, data: &Values<'_, Host>) -> Result<Self> {
        match data {
            Values::F32(d) => Self::of(s, d, DeviceCopy::F32),
            Values::BF16(d) => Self::of(s, d, DeviceCopy::BF16),
            Values::F16(d) => Self::of(s, d, DeviceCopy::F16),
        }
    }

    fn of_values_mut(s: &Arc<CudaStream>, data: &ValuesMut<'_, Host>) -> Result<Self> {
        match data {
            ValuesMut::F32(d) => Self::of(s, d, DeviceCopy::F32),
            ValuesMut::BF16(d) => Self::of(s, d, DeviceCopy::BF16),
            ValuesMut::F16(d) => Self::of(s, d, DeviceCopy::F16),
        }
    }

    fn values(&self) -> Values<'_, Device> {
        match self {
            DeviceCopy::F32(d) => Values::F32(d.as_view()),
            DeviceCopy::BF16(d) => Values::BF16(d.as_view()),
            DeviceCopy::F16(d) => Values::F16(d.as_view()),
        }
    }

    fn values_mut(&mut self) -> ValuesMut<'_, Device> {
        match self {
            DeviceCopy::F32(d) => ValuesMut::F32(d.as_view_mut()),
            DeviceCopy::BF16(d) => ValuesMut::BF16(d.as_view_mut()),
            DeviceCopy::F16(d) => ValuesMut::F16(d.as_view_mut()),
        }
    }

    /// Copies back into the host buffer this was made from.
    fn download(&self, s: &Arc<CudaStream>, host: &mut ValuesMut<'_, Host>) -> Result<()> {
        match (self, host) {
            (DeviceCopy::F32(d), ValuesMut::F32(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (DeviceCopy::BF16(d), ValuesMut::BF16(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (DeviceCopy::F16(d), ValuesMut::F16(h)) => s.memcpy_dtoh(d, &mut **h)?,
            _ => unreachable!("a device copy mirrors its host buffer's dtype"),
        }
        Ok(())
    }
}

/// Device buffers for a host `Tokens` output.
enum DeviceTokens {
    I32(CudaSlice<i32>),
    I64(CudaSlice<i64>),
}

impl DeviceTokens {
    fn like(s: &Arc<CudaStream>, host: &Tokens<'_, Host>) -> Result<Self> {
        Ok(match host {
            Tokens::I32(t) => DeviceTokens::I32(s.alloc_zeros(t.len())?),
            Tokens::I64(t) => DeviceTokens::I64(s.alloc_zeros(t.len())?),
        })
    }

    fn view(&mut self) -> Tokens<'_, Device> {
        match self {
            DeviceTokens::I32(d) => Tokens::I32(d.as_view_mut()),
            DeviceTokens::I64(d) => Tokens::I64(d.as_view_mut()),
        }
    }

    fn download(&self, s: &Arc<CudaStream>, host: &mut Tokens<'_, Host>) -> Result<()> {
        match (self, host) {
            (DeviceTokens::I32(d), Tokens::I32(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (DeviceTokens::I64(d), Tokens::I64(h)) => s.memcpy_dtoh(d, &mut **h)?,
            _ => unreachable!("device tokens mirror the host output's width"),
        }
        Ok(())
    }
}

/// Device outputs shaped as a host call's log-probabilities.
struct DeviceLogprobs {
    processed: Option<CudaSlice<f32>>,
    raw: Option<CudaSlice<f32>>,
    top: Option<DeviceTop>,
}

/// Device outputs of a top-n (`TopLogprobs`).
struct DeviceTop {
    n: usize,
    distribution: Distribution,
    logprobs: CudaSlice<f32>,
    ids: CudaSlice<i32>,
    ranks: CudaSlice<i32>,
}

impl DeviceLogprobs {
    fn like(s: &Arc<CudaStream>, host: &Logprobs<'_, Host>) -> Result<Self> {
        let alloc = |len: usize| s.alloc_zeros::<f32>(len);
        Ok(DeviceLogprobs {
            processed: host.processed.as_ref().map(|p| alloc(p.len())).transpose()?,
            raw: host.raw.as_ref().map(|r| alloc(r.len())).transpose()?,
            top: match &host.top {
                Some(t) => Some(DeviceTop {
                    n: t.n,
                    distribution: t.distribution,
                    logprobs: alloc(t.logprobs.len())?,
                    ids: s.alloc_zeros::<i32>(t.ids.len())?,
                    ranks: s.alloc_zeros::<i32>(t.ranks.len())?,
                }),
                None => None,
            },
        })
    }

    fn view(&mut self) -> Logprobs<'_, Device> {
        let mut out = Logprobs::none();
        if let Some(p) = &mut self.processed {
            out = out.with_processed(p);
        }
        if let Some(r) = &mut self.raw {
            out = out.with_raw(r);
        }
        if let Some(t) = &mut self.top {
            out = out.with_top(t.n, t.distribution, &mut t.logprobs, &mut t.ids, &mut t.ranks);
        }
        out
    }

    fn download(&self, s: &Arc<CudaStream>, host: &mut Logprobs<'_, Host>) -> Result<()> {
        if let (Some(d), Some(h)) = (&self.processed, &mut host.processed) {
            s.memcpy_dtoh(d, &mut **h)?;
        }
        if let (Some(d), Some(h)) = (&self.raw, &mut host.raw) {
            s.memcpy_dtoh(d, &mut **h)?;
        }
        if let (Some(d), Some(h)) = (&self.top, &mut host.top) {
            s.memcpy_dtoh(&d.logprobs, &mut *h.logprobs)?;
            s.memcpy_dtoh(&d.ids, &mut *h.ids)?;
            s.memcpy_dtoh(&d.ranks, &mut *h.ranks)?;
        }
        Ok(())
    }
}

fn gumbel_on_device(cuda: &Cuda, args: &GumbelSample<'_, Host>, out: &mut GumbelOutput<'_, Host>) -> Result<()> {
    let s = cuda.stream();
    let mut logprobs = DeviceLogprobs::like(s, &out.logprobs)?;
    let logits = DeviceCopy::of_values(s, &args.logits.data)?;
    let (slots, pos) = (upload(s, args.slots)?, upload(s, args.pos)?);
    let (temperature, seed) = (upload(s, args.params.temperature)?, upload(s, args.params.seed)?);
    let filters = DeviceFilters::of(s, &args.params.filters)?;
    let mut draft = out.draft_logits.as_ref().map(|(d, _)| DeviceCopy::of_values_mut(s, &d.data)).transpose()?;
    let columns = match &out.draft_logits {
        Some((_, Column::PerRow(cols))) => Some(upload(s, cols)?),
        _ => None,
    };
    let rows = args.logits.rows;
    let mut tokens = DeviceTokens::like(s, &out.tokens)?;
    let mut row_status = s.alloc_zeros::<u32>(rows)?;
    let mut ws = cuda.workspace(rows)?;
    let dargs = GumbelSample {
        logits: Logits { data: logits.values(), rows, vocab: args.logits.vocab, row_stride: args.logits.row_stride },
        slots: slots.as_view(),
        pos: pos.as_view(),
        params: SamplingParams::new(&temperature, &seed).with_filters(filters.view()),
        drafting: args.drafting,
    };
    let mut dout =
        GumbelOutput { tokens: tokens.view(), row_status: None, draft_logits: None, logprobs: logprobs.view() }
            .with_row_status(&mut row_status);
    if let (Some(d), Some((host, column))) = (draft.as_mut(), &out.draft_logits) {
        let column = match (column, &columns) {
            (Column::PerRow(_), Some(cols)) => Column::per_row(cols),
            (Column::All(c), _) => Column::All(*c),
            (Column::PerRow(_), None) => unreachable!("per-row columns were uploaded above"),
        };
        dout = dout.with_draft_logits(DraftLogitsMut { data: d.values_mut(), shape: host.shape }, column);
    }
    cuda.gumbel_sample(&mut ws, &dargs, &mut dout)?;
    tokens.download(s, &mut out.tokens)?;
    logprobs.download(s, &mut out.logprobs)?;
    if let Some(rs) = &mut out.row_status {
        s.memcpy_dtoh(&row_status, &mut **rs)?;
    }
    if let (Some(d), Some((host, _))) = (&draft, &mut out.draft_logits) {
        d.download(s, &mut host.data)?;
    }
    s.synchronize()?;
    Ok(())
}

fn rejection_on_device(
    cuda: &Cuda,
    args: &RejectionSample<'_, Host>,
    out: &mut RejectionOutput<'_, Host>,
) -> Result<()> {
    // The device call refuses a block or synthetic rule itself.
    let s = cuda.stream();
    let mut logprobs = DeviceLogprobs::like(s, &out.logprobs)?;
    let target = DeviceCopy::of_values(s, &args.target.data)?;
    let draft = args.draft_logits.as_ref().map(|d| DeviceCopy::of_values(s, &d.data)).transpose()?;
    let (offsets, drafts, slots, pos) =
        (upload(s, args.offsets)?, upload(s, args.drafts)?, upload(s, args.slots)?, upload(s, args.pos)?);
    let (temperature, seed) = (upload(s, args.params.temperature)?, upload(s, args.params.seed)?);
    let filters = DeviceFilters::of(s, &args.params.filters)?;
    let draft_filters = args.draft_logits.as_ref().map(|d| DeviceFilters::of(s, &d.filters)).transpose()?;
    let requests = args.slots.len();
    let mut tokens = DeviceTokens::like(s, &out.tokens)?;
    let mut num_emitted = s.alloc_zeros::<i32>(requests)?;
    let mut accepted = s.alloc_zeros::<i32>(requests)?;
    let mut row_status = s.alloc_zeros::<u32>(args.target.rows)?;
    let mut ws = cuda.workspace(requests * (args.max_drafts + 1))?;
    let dargs = RejectionSample {
        target: Logits {
            data: target.values(),
            rows: args.target.rows,
            vocab: args.target.vocab,
            row_stride: args.target.row_stride,
        },
        offsets: offsets.as_view(),
        drafts: drafts.as_view(),
        slots: slots.as_view(),
        pos: pos.as_view(),
        params: SamplingParams::new(&temperature, &seed).with_filters(filters.view()),
        max_drafts: args.max_drafts,
        verification: args.verification,
        draft_logits: match (&draft, &args.draft_logits, &draft_filters) {
            (Some(d), Some(h), Some(f)) => Some(DraftLogits { data: d.values(), shape: h.shape, filters: f.view() }),
            _ => None,
        },
    };
    let mut dout = RejectionOutput {
        tokens: tokens.view(),
        num_emitted: num_emitted.as_view_mut(),
        accepted: Some(accepted.as_view_mut()),
        row_status: Some(row_status.as_view_mut()),
        logprobs: logprobs.view(),
    };
    cuda.rejection_sample(&mut ws, &dargs, &mut dout)?;
    tokens.download(s, &mut out.tokens)?;
    logprobs.download(s, &mut out.logprobs)?;
    s.memcpy_dtoh(&num_emitted, &mut *out.num_emitted)?;
    if let Some(a) = &mut out.accepted {
        s.memcpy_dtoh(&accepted, &mut **a)?;
    }
    if let Some(rs) = &mut out.row_status {
        s.memcpy_dtoh(&row_status, &mut **rs)?;
    }
    s.synchronize()?;
    Ok(())
}
