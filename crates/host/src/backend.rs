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
use crate::memory::{Device, Host};
use crate::rejection::{RejectionOutput, RejectionSample};
use crate::tensor::{CacheData, Column, DraftCache, DraftLogits, Logits, LogitsData, SlotTable, Tokens};
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
    pub fn gumbel_sample(&self, args: &mut GumbelSample<'_, Host>, out: GumbelOutput<'_, Host>) -> Result<()> {
        match self {
            Backend::Cpu(cpu) => cpu.gumbel_sample(args, out),
            Backend::Cuda(cuda) => {
                let shape = args.check(&out)?;
                args.check_values(shape)?;
                gumbel_on_device(cuda, args, out)
            }
        }
    }

    /// `rejection_sample` on host buffers, on whichever backend this is.
    /// Every value is checked on the host first.
    pub fn rejection_sample(&self, args: &RejectionSample<'_, Host>, out: RejectionOutput<'_, Host>) -> Result<()> {
        match self {
            Backend::Cpu(cpu) => cpu.rejection_sample(args, out),
            Backend::Cuda(cuda) => {
                let shape = args.check(&out)?;
                args.check_values(shape)?;
                rejection_on_device(cuda, args, out)
            }
        }
    }
}

fn upload<T: DeviceRepr>(stream: &Arc<CudaStream>, data: &[T]) -> Result<CudaSlice<T>> {
    Ok(stream.clone_htod(data)?)
}

/// A device copy of logits or cache elements of any dtype.
enum DeviceCopy {
    F32(CudaSlice<f32>),
    BF16(CudaSlice<half::bf16>),
    F16(CudaSlice<half::f16>),
}

impl DeviceCopy {
    fn of_logits(s: &Arc<CudaStream>, data: &LogitsData<'_, Host>) -> Result<Self> {
        Ok(match data {
            LogitsData::F32(d) => DeviceCopy::F32(upload(s, d)?),
            LogitsData::BF16(d) => DeviceCopy::BF16(upload(s, d)?),
            LogitsData::F16(d) => DeviceCopy::F16(upload(s, d)?),
        })
    }

    fn of_cache(s: &Arc<CudaStream>, data: &CacheData<'_, Host>) -> Result<Self> {
        Ok(match data {
            CacheData::F32(d) => DeviceCopy::F32(upload(s, d)?),
            CacheData::BF16(d) => DeviceCopy::BF16(upload(s, d)?),
            CacheData::F16(d) => DeviceCopy::F16(upload(s, d)?),
        })
    }

    fn logits(&self) -> LogitsData<'_, Device> {
        match self {
            DeviceCopy::F32(d) => LogitsData::F32(d.as_view()),
            DeviceCopy::BF16(d) => LogitsData::BF16(d.as_view()),
            DeviceCopy::F16(d) => LogitsData::F16(d.as_view()),
        }
    }

    fn cache(&mut self) -> CacheData<'_, Device> {
        match self {
            DeviceCopy::F32(d) => CacheData::F32(d.as_view_mut()),
            DeviceCopy::BF16(d) => CacheData::BF16(d.as_view_mut()),
            DeviceCopy::F16(d) => CacheData::F16(d.as_view_mut()),
        }
    }

    /// Copies back into the host cache this was made from.
    fn download(&self, s: &Arc<CudaStream>, host: &mut CacheData<'_, Host>) -> Result<()> {
        match (self, host) {
            (DeviceCopy::F32(d), CacheData::F32(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (DeviceCopy::BF16(d), CacheData::BF16(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (DeviceCopy::F16(d), CacheData::F16(h)) => s.memcpy_dtoh(d, &mut **h)?,
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

    fn download(&self, s: &Arc<CudaStream>, host: Tokens<'_, Host>) -> Result<()> {
        match (self, host) {
            (DeviceTokens::I32(d), Tokens::I32(h)) => s.memcpy_dtoh(d, h)?,
            (DeviceTokens::I64(d), Tokens::I64(h)) => s.memcpy_dtoh(d, h)?,
            _ => unreachable!("device tokens mirror the host output's width"),
        }
        Ok(())
    }
}

fn gumbel_on_device(cuda: &Cuda, args: &mut GumbelSample<'_, Host>, out: GumbelOutput<'_, Host>) -> Result<()> {
    let s = cuda.stream();
    let logits = DeviceCopy::of_logits(s, &args.logits.data)?;
    let (slots, pos) = (upload(s, args.slots)?, upload(s, args.pos)?);
    let (temperature, seed) = (upload(s, args.table.temperature)?, upload(s, args.table.seed)?);
    let mut cache = args.cache.as_ref().map(|(c, _)| DeviceCopy::of_cache(s, &c.data)).transpose()?;
    let columns = match &args.cache {
        Some((_, Column::PerRow(cols))) => Some(upload(s, cols)?),
        _ => None,
    };
    let rows = args.logits.rows;
    let mut tokens = DeviceTokens::like(s, &out.tokens)?;
    let mut row_status = s.alloc_zeros::<u32>(rows)?;
    let mut ws = cuda.workspace(rows)?;
    let mut dargs = GumbelSample::<Device> {
        logits: Logits { data: logits.logits(), rows, vocab: args.logits.vocab, row_stride: args.logits.row_stride },
        slots: slots.as_view(),
        pos: pos.as_view(),
        table: SlotTable { temperature: temperature.as_view(), seed: seed.as_view() },
        drafting: args.drafting,
        cache: match (cache.as_mut(), &args.cache) {
            (Some(d), Some((c, column))) => Some((
                DraftCache { data: d.cache(), shape: c.shape },
                match (column, &columns) {
                    (Column::PerRow(_), Some(cols)) => Column::PerRow(cols.as_view()),
                    (Column::All(c), _) => Column::All(*c),
                    (Column::PerRow(_), None) => unreachable!("per-row columns were uploaded above"),
                },
            )),
            _ => None,
        },
    };
    let dout = GumbelOutput { tokens: tokens.view(), row_status: Some(row_status.as_view_mut()) };
    cuda.gumbel_sample(&mut ws, &mut dargs, dout)?;
    tokens.download(s, out.tokens)?;
    if let Some(rs) = out.row_status {
        s.memcpy_dtoh(&row_status, rs)?;
    }
    if let (Some(d), Some((c, _))) = (&cache, &mut args.cache) {
        d.download(s, &mut c.data)?;
    }
    s.synchronize()?;
    Ok(())
}

fn rejection_on_device(cuda: &Cuda, args: &RejectionSample<'_, Host>, out: RejectionOutput<'_, Host>) -> Result<()> {
    let s = cuda.stream();
    let target = DeviceCopy::of_logits(s, &args.target.data)?;
    let draft = args.draft_logits.as_ref().map(|d| DeviceCopy::of_logits(s, &d.data)).transpose()?;
    let (offsets, drafts, slots, pos) =
        (upload(s, args.offsets)?, upload(s, args.drafts)?, upload(s, args.slots)?, upload(s, args.pos)?);
    let (temperature, seed) = (upload(s, args.table.temperature)?, upload(s, args.table.seed)?);
    let requests = args.slots.len();
    let mut tokens = DeviceTokens::like(s, &out.tokens)?;
    let mut num_emitted = s.alloc_zeros::<i32>(requests)?;
    let mut accepted = s.alloc_zeros::<i32>(requests)?;
    let mut row_status = s.alloc_zeros::<u32>(args.target.rows)?;
    let mut ws = cuda.workspace(requests * (args.max_drafts + 1))?;
    let dargs = RejectionSample::<Device> {
        target: Logits {
            data: target.logits(),
            rows: args.target.rows,
            vocab: args.target.vocab,
            row_stride: args.target.row_stride,
        },
        offsets: offsets.as_view(),
        drafts: drafts.as_view(),
        slots: slots.as_view(),
        pos: pos.as_view(),
        table: SlotTable { temperature: temperature.as_view(), seed: seed.as_view() },
        max_drafts: args.max_drafts,
        draft_logits: match (&draft, &args.draft_logits) {
            (Some(d), Some(h)) => Some(DraftLogits { data: d.logits(), shape: h.shape }),
            _ => None,
        },
    };
    let dout = RejectionOutput {
        tokens: tokens.view(),
        num_emitted: num_emitted.as_view_mut(),
        accepted: Some(accepted.as_view_mut()),
        row_status: Some(row_status.as_view_mut()),
    };
    cuda.rejection_sample(&mut ws, &dargs, dout)?;
    tokens.download(s, out.tokens)?;
    s.memcpy_dtoh(&num_emitted, out.num_emitted)?;
    if let Some(a) = out.accepted {
        s.memcpy_dtoh(&accepted, a)?;
    }
    if let Some(rs) = out.row_status {
        s.memcpy_dtoh(&row_status, rs)?;
    }
    s.synchronize()?;
    Ok(())
}
