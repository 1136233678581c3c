//! A backend chosen at run time: the GPU when one is usable, else the CPU.
//!
//! [`Backend`]'s calls take host buffers on either backend (on CUDA they copy
//! to the device and back, allocating per call): the convenient form for
//! tools, tests and the CLI. Engines keep their data on the GPU and call
//! [`Cuda`]'s methods with device views and a [`Workspace`] instead.

use crate::cpu::Cpu;
use crate::cuda::{Cuda, Workspace};
use crate::error::Result;
use crate::gumbel::{GumbelOutput, GumbelSample};
use crate::memory::{Device, Host};
use crate::tensor::{CacheData, Column, DraftCache, Logits, LogitsData, SlotTable, Tokens};
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
}

fn upload<T: DeviceRepr>(stream: &Arc<CudaStream>, data: &[T]) -> Result<CudaSlice<T>> {
    Ok(stream.clone_htod(data)?)
}

/// Device copies of a host `GumbelSample`'s buffers.
struct Uploaded {
    logits: UploadedLogits,
    slots: CudaSlice<i32>,
    pos: CudaSlice<u64>,
    temperature: CudaSlice<f32>,
    seed: CudaSlice<u64>,
    cache: Option<UploadedCache>,
    columns: Option<CudaSlice<i32>>,
}

enum UploadedLogits {
    F32(CudaSlice<f32>),
    BF16(CudaSlice<half::bf16>),
    F16(CudaSlice<half::f16>),
}

enum UploadedCache {
    F32(CudaSlice<f32>),
    BF16(CudaSlice<half::bf16>),
    F16(CudaSlice<half::f16>),
}

fn gumbel_on_device(cuda: &Cuda, args: &mut GumbelSample<'_, Host>, out: GumbelOutput<'_, Host>) -> Result<()> {
    let s = cuda.stream();
    let mut up = Uploaded {
        logits: match &args.logits.data {
            LogitsData::F32(l) => UploadedLogits::F32(upload(s, l)?),
            LogitsData::BF16(l) => UploadedLogits::BF16(upload(s, l)?),
            LogitsData::F16(l) => UploadedLogits::F16(upload(s, l)?),
        },
        slots: upload(s, args.slots)?,
        pos: upload(s, args.pos)?,
        temperature: upload(s, args.table.temperature)?,
        seed: upload(s, args.table.seed)?,
        cache: None,
        columns: None,
    };
    if let Some((c, column)) = &args.cache {
        up.cache = Some(match &c.data {
            CacheData::F32(d) => UploadedCache::F32(upload(s, d)?),
            CacheData::BF16(d) => UploadedCache::BF16(upload(s, d)?),
            CacheData::F16(d) => UploadedCache::F16(upload(s, d)?),
        });
        if let Column::PerRow(cols) = column {
            up.columns = Some(upload(s, cols)?);
        }
    }
    let rows = args.logits.rows;
    let mut tokens_i32 = s.alloc_zeros::<i32>(rows)?;
    let mut tokens_i64 = s.alloc_zeros::<i64>(rows)?;
    let mut row_status = s.alloc_zeros::<u32>(rows)?;
    let mut ws: Workspace = cuda.workspace(rows)?;
    {
        let mut dargs = GumbelSample::<Device> {
            logits: Logits {
                data: match &up.logits {
                    UploadedLogits::F32(d) => LogitsData::F32(d.as_view()),
                    UploadedLogits::BF16(d) => LogitsData::BF16(d.as_view()),
                    UploadedLogits::F16(d) => LogitsData::F16(d.as_view()),
                },
                rows,
                vocab: args.logits.vocab,
                row_stride: args.logits.row_stride,
            },
            slots: up.slots.as_view(),
            pos: up.pos.as_view(),
            table: SlotTable { temperature: up.temperature.as_view(), seed: up.seed.as_view() },
            drafting: args.drafting,
            cache: match (&mut up.cache, &args.cache) {
                (Some(d), Some((c, column))) => Some((
                    DraftCache {
                        data: match d {
                            UploadedCache::F32(d) => CacheData::F32(d.as_view_mut()),
                            UploadedCache::BF16(d) => CacheData::BF16(d.as_view_mut()),
                            UploadedCache::F16(d) => CacheData::F16(d.as_view_mut()),
                        },
                        slots: c.slots,
                        k: c.k,
                        width: c.width,
                        stride0: c.stride0,
                        stride1: c.stride1,
                    },
                    match (column, &up.columns) {
                        (Column::PerRow(_), Some(cols)) => Column::PerRow(cols.as_view()),
                        (Column::All(c), _) => Column::All(*c),
                        (Column::PerRow(_), None) => unreachable!("per-row columns were uploaded above"),
                    },
                )),
                _ => None,
            },
        };
        let tokens = match out.tokens {
            Tokens::I32(_) => Tokens::I32(tokens_i32.as_view_mut()),
            Tokens::I64(_) => Tokens::I64(tokens_i64.as_view_mut()),
        };
        let dout = GumbelOutput { tokens, row_status: Some(row_status.as_view_mut()) };
        cuda.gumbel_sample(&mut ws, &mut dargs, dout)?;
    }
    match out.tokens {
        Tokens::I32(t) => s.memcpy_dtoh(&tokens_i32, t)?,
        Tokens::I64(t) => s.memcpy_dtoh(&tokens_i64, t)?,
    }
    if let Some(rs) = out.row_status {
        s.memcpy_dtoh(&row_status, rs)?;
    }
    if let (Some(d), Some((c, _))) = (&up.cache, &mut args.cache) {
        match (d, &mut c.data) {
            (UploadedCache::F32(d), CacheData::F32(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (UploadedCache::BF16(d), CacheData::BF16(h)) => s.memcpy_dtoh(d, &mut **h)?,
            (UploadedCache::F16(d), CacheData::F16(h)) => s.memcpy_dtoh(d, &mut **h)?,
            _ => unreachable!("the upload mirrors the host cache's dtype"),
        }
    }
    s.synchronize()?;
    Ok(())
}
