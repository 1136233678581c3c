//! Owned host buffers for one `gumbel_sample` call, runnable on any backend
//! (and, copied to the device, through `Cuda::gumbel_sample`: [`Batch::run_device`]).

use crate::filters::{DeviceFilters, FilterTable};
use crate::verify::{Asked, DeviceLogprobBuffers, LogprobBits};
use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use half::{bf16, f16};
use specdec::{
    Backend, Column, Cuda, DType, Device, DraftLogitsMut, DraftLogitsShape, GumbelOutput, GumbelSample, Host, Logits,
    SamplingParams, TokenId, Workspace,
};
use std::sync::Arc;

/// Logits (or draft logits) of any dtype, owned: the dtype is chosen at run
/// time, so calls see them through [`Values::view`] and [`Values::view_mut`]
/// (the constructors `Logits::new` and kin take typed buffers).
#[derive(Clone, Debug)]
pub enum Values {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
}

impl Values {
    /// The elements as a call reads them: `Logits { data: v.view(), .. }`,
    /// `DraftLogits { data: v.view(), shape }`.
    pub fn view(&self) -> specdec::Values<'_, Host> {
        match self {
            Values::F32(v) => specdec::Values::F32(v.as_slice()),
            Values::BF16(v) => specdec::Values::BF16(v.as_slice()),
            Values::F16(v) => specdec::Values::F16(v.as_slice()),
        }
    }

    /// The elements as a call writes them: `DraftLogitsMut { data: v.view_mut(), shape }`.
    pub fn view_mut(&mut self) -> specdec::ValuesMut<'_, Host> {
        match self {
            Values::F32(v) => specdec::ValuesMut::F32(v.as_mut_slice()),
            Values::BF16(v) => specdec::ValuesMut::BF16(v.as_mut_slice()),
            Values::F16(v) => specdec::ValuesMut::F16(v.as_mut_slice()),
        }
    }

    /// `xs` converted to `dtype` (round to nearest even).
    pub fn from_f32(dtype: DType, xs: &[f32]) -> Self {
        match dtype {
            DType::F32 => Values::F32(xs.to_vec()),
            DType::BF16 => Values::BF16(xs.iter().map(|&x| bf16::from_f32(x)).collect()),
            DType::F16 => Values::F16(xs.iter().map(|&x| f16::from_f32(x)).collect()),
        }
    }

    pub fn zeros(dtype: DType, len: usize) -> Self {
        Self::from_f32(dtype, &vec![0.0; len])
    }

    /// Element `i` widened to f32.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Values::F32(v) => v[i],
            Values::BF16(v) => v[i].to_f32(),
            Values::F16(v) => v[i].to_f32(),
        }
    }

    /// Element `i`'s bits (for bitwise comparisons).
    pub fn bits(&self, i: usize) -> u32 {
        match self {
            Values::F32(v) => v[i].to_bits(),
            Values::BF16(v) => v[i].to_bits() as u32,
            Values::F16(v) => v[i].to_bits() as u32,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::BF16(v) => v.len(),
            Values::F16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> DType {
        match self {
            Values::F32(_) => DType::F32,
            Values::BF16(_) => DType::BF16,
            Values::F16(_) => DType::F16,
        }
    }

    /// Elements `range` widened to f32.
    pub fn f32s(&self, range: std::ops::Range<usize>) -> Vec<f32> {
        range.map(|i| self.get(i)).collect()
    }

    /// The elements at `idx`, in that order, same dtype.
    pub fn gather(&self, idx: impl Iterator<Item = usize>) -> Values {
        match self {
            Values::F32(v) => Values::F32(idx.map(|i| v[i]).collect()),
            Values::BF16(v) => Values::BF16(idx.map(|i| v[i]).collect()),
            Values::F16(v) => Values::F16(idx.map(|i| v[i]).collect()),
        }
    }

    /// Stores `src[j]` at `i`, converted as the draft logits store logits
    /// (SPEC §3.3): bit for bit when the dtypes match, else through f32 with
    /// round to nearest even.
    pub fn store_converted(&mut self, i: usize, src: &Values, j: usize) {
        let x = src.get(j);
        match (self, src) {
            (Values::F32(d), Values::F32(s)) => d[i] = s[j],
            (Values::BF16(d), Values::BF16(s)) => d[i] = s[j],
            (Values::F16(d), Values::F16(s)) => d[i] = s[j],
            (Values::F32(d), _) => d[i] = x,
            (Values::BF16(d), _) => d[i] = bf16::from_f32(x),
            (Values::F16(d), _) => d[i] = f16::from_f32(x),
        }
    }

    /// Stores `x` at `i`, rounded to the dtype.
    pub fn set_f32(&mut self, i: usize, x: f32) {
        match self {
            Values::F32(v) => v[i] = x,
            Values::BF16(v) => v[i] = bf16::from_f32(x),
            Values::F16(v) => v[i] = f16::from_f32(x),
        }
    }

    /// Stores raw bits at `i` (to plant NaN payloads).
    pub fn set_bits(&mut self, i: usize, bits: u32) {
        match self {
            Values::F32(v) => v[i] = f32::from_bits(bits),
            Values::BF16(v) => v[i] = bf16::from_bits(bits as u16),
            Values::F16(v) => v[i] = f16::from_bits(bits as u16),
        }
    }
}

/// A device copy of [`Values`], for the zero-copy API's tests: the same
/// dtype, viewed as a call on device buffers reads or writes it.
pub enum DeviceValues {
    F32(CudaSlice<f32>),
    BF16(CudaSlice<bf16>),
    F16(CudaSlice<f16>),
}

impl DeviceValues {
    pub fn upload(stream: &Arc<CudaStream>, v: &Values) -> Result<Self, DriverError> {
        Ok(match v {
            Values::F32(v) => DeviceValues::F32(stream.clone_htod(v)?),
            Values::BF16(v) => DeviceValues::BF16(stream.clone_htod(v)?),
            Values::F16(v) => DeviceValues::F16(stream.clone_htod(v)?),
        })
    }

    /// As [`Values::view`].
    pub fn view(&self) -> specdec::Values<'_, Device> {
        match self {
            DeviceValues::F32(d) => specdec::Values::F32(d.as_view()),
            DeviceValues::BF16(d) => specdec::Values::BF16(d.as_view()),
            DeviceValues::F16(d) => specdec::Values::F16(d.as_view()),
        }
    }

    /// As [`Values::view_mut`].
    pub fn view_mut(&mut self) -> specdec::ValuesMut<'_, Device> {
        match self {
            DeviceValues::F32(d) => specdec::ValuesMut::F32(d.as_view_mut()),
            DeviceValues::BF16(d) => specdec::ValuesMut::BF16(d.as_view_mut()),
            DeviceValues::F16(d) => specdec::ValuesMut::F16(d.as_view_mut()),
        }
    }

    /// A host copy (enqueued on `stream`, which it waits for).
    pub fn download(&self, stream: &Arc<CudaStream>) -> Result<Values, DriverError> {
        Ok(match self {
            DeviceValues::F32(d) => Values::F32(stream.clone_dtoh(d)?),
            DeviceValues::BF16(d) => Values::BF16(stream.clone_dtoh(d)?),
            DeviceValues::F16(d) => Values::F16(stream.clone_dtoh(d)?),
        })
    }
}

/// Which draft-logits column rows write.
#[derive(Clone, Debug)]
pub enum ColumnSpec {
    All(usize),
    PerRow(Vec<i32>),
}

impl ColumnSpec {
    /// The column argument of a call on host buffers.
    pub fn column(&self) -> Column<'_, Host> {
        match self {
            ColumnSpec::All(c) => Column::All(*c),
            ColumnSpec::PerRow(cols) => Column::per_row(cols),
        }
    }
}

/// Draft logits `[slots, k, width]` with explicit strides.
#[derive(Clone, Debug)]
pub struct DraftLogitsSpec {
    pub data: Values,
    pub slots: usize,
    pub k: usize,
    pub width: usize,
    pub stride0: usize,
    pub stride1: usize,
    pub column: ColumnSpec,
}

impl DraftLogitsSpec {
    /// The library's description of this layout.
    pub fn shape(&self) -> DraftLogitsShape {
        DraftLogitsShape {
            slots: self.slots,
            k: self.k,
            width: self.width,
            stride0: self.stride0,
            stride1: self.stride1,
        }
    }

    /// What a `gumbel_sample` call on host buffers writes into these draft
    /// logits: the draft logits and the column of each row.
    pub fn draft_logits_mut(&mut self) -> (DraftLogitsMut<'_, Host>, Column<'_, Host>) {
        let shape = self.shape();
        (DraftLogitsMut { data: self.data.view_mut(), shape }, self.column.column())
    }

    /// What fresh draft logits hold everywhere, so untouched elements are visible.
    pub const SENTINEL: f32 = -7.25;

    /// Dense draft logits filled with [`Self::SENTINEL`].
    pub fn dense(dtype: DType, slots: usize, k: usize, width: usize, column: ColumnSpec) -> Self {
        Self::strided(dtype, slots, k, width, k * width, width, column)
    }

    /// Draft logits with arbitrary strides (element `(s, c, x)` at
    /// `s*stride0 + c*stride1 + x`), its whole buffer (gaps included) filled
    /// with [`Self::SENTINEL`].
    pub fn strided(
        dtype: DType,
        slots: usize,
        k: usize,
        width: usize,
        stride0: usize,
        stride1: usize,
        column: ColumnSpec,
    ) -> Self {
        let len = (slots.max(1) - 1) * stride0 + (k.max(1) - 1) * stride1 + width;
        let data = Values::from_f32(dtype, &vec![Self::SENTINEL; len]);
        DraftLogitsSpec { data, slots, k, width, stride0, stride1, column }
    }
}

/// A `gumbel_sample` call's inputs, owned.
#[derive(Clone, Debug)]
pub struct Batch {
    pub logits: Values,
    pub rows: usize,
    pub vocab: usize,
    pub row_stride: usize,
    pub slots: Vec<i32>,
    pub pos: Vec<u64>,
    pub temperature: Vec<f32>,
    pub seed: Vec<u64>,
    pub drafting: bool,
    /// The slots' sampling filters (SPEC §7).
    pub filters: FilterTable,
    pub draft_logits: Option<DraftLogitsSpec>,
    pub tokens_i64: bool,
}

/// What a call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampled {
    pub tokens: Vec<i64>,
    pub row_status: Vec<u32>,
}

impl Sampled {
    /// Whether every output still holds the fill value [`Batch::run_keep`]
    /// put there (nothing was written).
    pub fn untouched(&self) -> bool {
        self.tokens.iter().all(|&t| t == i32::MIN as i64 || t == i64::MIN)
            && self.row_status.iter().all(|&s| s == u32::MAX)
    }
}

impl Batch {
    /// `rows` rows of `vocab` logits (row-major, dense), every row on slot 0
    /// with temperature `t` and seed `seed`, positions `0..rows`.
    pub fn new(logits: Values, rows: usize, vocab: usize, t: f32, seed: u64) -> Self {
        assert!(logits.len() >= rows * vocab || rows <= 1);
        Batch {
            logits,
            rows,
            vocab,
            row_stride: vocab,
            slots: vec![0; rows],
            pos: (0..rows as u64).collect(),
            temperature: vec![t],
            seed: vec![seed],
            drafting: false,
            filters: FilterTable::none(),
            draft_logits: None,
            tokens_i64: false,
        }
    }

    /// One row broadcast (stride 0) to `rows` rows at positions `pos0..`.
    pub fn broadcast(row: &[f32], dtype: DType, rows: usize, t: f32, seed: u64, pos0: u64) -> Self {
        // Built as one row (`new` checks a dense extent), then widened.
        let mut b = Batch::new(Values::from_f32(dtype, row), 1, row.len(), t, seed);
        b.rows = rows;
        b.row_stride = 0;
        b.slots = vec![0; rows];
        b.pos = (pos0..pos0 + rows as u64).collect();
        b
    }

    /// Runs the call on `backend`.
    pub fn run(&mut self, backend: &Backend) -> Result<Sampled, specdec::Error> {
        let (result, sampled) = self.run_keep(backend);
        result.map(|()| sampled)
    }

    /// Runs the call and returns its outputs even when it fails. They start
    /// filled with `i32::MIN` (or `i64::MIN`) tokens and `u32::MAX` statuses,
    /// so a test can see that a rejected call wrote nothing.
    pub fn run_keep(&mut self, backend: &Backend) -> (Result<(), specdec::Error>, Sampled) {
        // The draft logits are an output: out of `self` while the call borrows the inputs.
        let mut draft = self.draft_logits.take();
        let call = self.call();
        let draft_logits = draft.as_mut().map(DraftLogitsSpec::draft_logits_mut);
        let mut row_status = vec![u32::MAX; self.rows];
        let (result, tokens) = if self.tokens_i64 {
            let mut t = vec![i64::MIN; self.rows];
            (sample(backend, &call, &mut t, &mut row_status, draft_logits), t)
        } else {
            let mut t = vec![i32::MIN; self.rows];
            let result = sample(backend, &call, &mut t, &mut row_status, draft_logits);
            (result, t.into_iter().map(i64::from).collect())
        };
        self.draft_logits = draft;
        (result, Sampled { tokens, row_status })
    }

    /// Runs the call through [`Cuda::gumbel_sample`] with device copies of
    /// its buffers (the filter tables included) and workspace `ws`, then
    /// copies tokens, statuses and the draft logits back (the draft logits
    /// into `self`). Tokens start at `i32::MIN`/`i64::MIN` and statuses at
    /// `u32::MAX`, as in [`Batch::run_keep`]. Nothing is checked on the host
    /// beyond shapes: slots, temperatures, filter values and columns reach
    /// the kernel as they are. The workspace's status word is the caller's.
    pub fn run_device(&mut self, cuda: &Cuda, ws: &mut Workspace) -> specdec::Result<Sampled> {
        self.run_device_with(cuda, |call, out| cuda.gumbel_sample(ws, call, out))
    }

    /// [`Batch::run_device`], the call made by `call_fn` on `cuda`'s stream
    /// (a sharded call, say).
    pub fn run_device_with(
        &mut self,
        cuda: &Cuda,
        call_fn: impl FnOnce(&GumbelSample<'_, Device>, &mut GumbelOutput<'_, Device>) -> specdec::Result<()>,
    ) -> specdec::Result<Sampled> {
        Ok(self.run_device_logprobs_with(cuda, None, call_fn)?.0)
    }

    /// [`Batch::run_device_with`], asking for `asked` log-probabilities of
    /// the rows ([`DeviceLogprobBuffers`]: they start as values no call writes).
    pub fn run_device_logprobs_with(
        &mut self,
        cuda: &Cuda,
        asked: Option<Asked>,
        call_fn: impl FnOnce(&GumbelSample<'_, Device>, &mut GumbelOutput<'_, Device>) -> specdec::Result<()>,
    ) -> specdec::Result<(Sampled, LogprobBits)> {
        let s = cuda.stream();
        let logits = DeviceValues::upload(s, &self.logits)?;
        let mut draft_logits = self.draft_logits.as_ref().map(|c| DeviceValues::upload(s, &c.data)).transpose()?;
        let columns = match self.draft_logits.as_ref().map(|c| &c.column) {
            Some(ColumnSpec::PerRow(cols)) => Some(s.clone_htod(cols)?),
            _ => None,
        };
        let (slots, pos) = (s.clone_htod(&self.slots)?, s.clone_htod(&self.pos)?);
        let (temperature, seed) = (s.clone_htod(&self.temperature)?, s.clone_htod(&self.seed)?);
        let filters = DeviceFilters::upload(s, &self.filters)?;
        let mut t32 = s.clone_htod(&vec![i32::MIN; self.rows])?;
        let mut t64 = s.clone_htod(&vec![i64::MIN; self.rows])?;
        let mut status = s.clone_htod(&vec![u32::MAX; self.rows])?;
        let mut logprobs = DeviceLogprobBuffers::new(s, self.rows, asked)?;
        {
            let call = GumbelSample::<Device> {
                logits: Logits { data: logits.view(), rows: self.rows, vocab: self.vocab, row_stride: self.row_stride },
                slots: slots.as_view(),
                pos: pos.as_view(),
                params: SamplingParams::new(&temperature, &seed).with_filters(filters.view()),
                drafting: self.drafting,
            };
            let out = if self.tokens_i64 { GumbelOutput::new(&mut t64) } else { GumbelOutput::new(&mut t32) };
            let mut out = out.with_row_status(&mut status).with_logprobs(logprobs.outputs());
            if let (Some(d), Some(c)) = (&mut draft_logits, &self.draft_logits) {
                let column = match (&c.column, &columns) {
                    (ColumnSpec::All(col), _) => Column::All(*col),
                    (ColumnSpec::PerRow(_), Some(cols)) => Column::per_row(cols),
                    (ColumnSpec::PerRow(_), None) => unreachable!("per-row columns were uploaded"),
                };
                out = out.with_draft_logits(DraftLogitsMut { data: d.view_mut(), shape: c.shape() }, column);
            }
            call_fn(&call, &mut out)?;
        }
        let tokens = if self.tokens_i64 {
            s.clone_dtoh(&t64)?
        } else {
            s.clone_dtoh(&t32)?.into_iter().map(i64::from).collect()
        };
        let row_status = s.clone_dtoh(&status)?;
        if let (Some(d), Some(c)) = (&draft_logits, &mut self.draft_logits) {
            c.data = d.download(s)?;
        }
        let bits = logprobs.bits(s)?;
        s.synchronize()?;
        Ok((Sampled { tokens, row_status }, bits))
    }

    /// The call's inputs (its outputs, the draft logits included, are the caller's).
    pub fn call(&self) -> GumbelSample<'_, Host> {
        let logits =
            Logits { data: self.logits.view(), rows: self.rows, vocab: self.vocab, row_stride: self.row_stride };
        let params = SamplingParams::new(&self.temperature, &self.seed).with_filters(self.filters.view());
        GumbelSample { drafting: self.drafting, ..GumbelSample::new(logits, &self.slots, &self.pos, params) }
    }

    /// Row `r`'s logits `0..vocab`, widened to f32 (what the backend sees).
    pub fn row(&self, r: usize) -> Vec<f32> {
        let start = r * self.row_stride;
        self.logits.f32s(start..start + self.vocab)
    }

    /// The batch of rows `idx` (in that order) with their logits, slots,
    /// positions and per-row draft-logits columns, and copies of the slot
    /// table and draft logits. A broadcast batch stays broadcast; others become dense.
    pub fn select(&self, idx: &[usize]) -> Batch {
        let (logits, row_stride) = if self.row_stride == 0 {
            (self.logits.clone(), 0)
        } else {
            let elems = idx.iter().flat_map(|&r| r * self.row_stride..r * self.row_stride + self.vocab);
            (self.logits.gather(elems), self.vocab)
        };
        let mut draft = self.draft_logits.clone();
        if let Some(ColumnSpec::PerRow(cols)) = draft.as_mut().map(|c| &mut c.column) {
            *cols = idx.iter().map(|&r| cols[r]).collect();
        }
        Batch {
            logits,
            rows: idx.len(),
            row_stride,
            slots: idx.iter().map(|&r| self.slots[r]).collect(),
            pos: idx.iter().map(|&r| self.pos[r]).collect(),
            draft_logits: draft,
            ..self.clone_without_rows()
        }
    }

    /// Runs the batch split into row ranges on all CPU cores when `backend`
    /// is the CPU (rows are independent, SPEC §2.1), in one call otherwise.
    /// For long statistical runs; no draft logits.
    pub fn run_parallel(&self, backend: &Backend) -> Sampled {
        assert!(self.draft_logits.is_none(), "run_parallel does not merge draft logits");
        if !matches!(backend, Backend::Cpu(_)) {
            return self.clone().run(backend).expect("gumbel_sample");
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = self.rows.div_ceil(threads).max(1);
        let parts: Vec<Sampled> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.rows)
                .step_by(per)
                .map(|a| {
                    let idx: Vec<usize> = (a..(a + per).min(self.rows)).collect();
                    let mut part = self.select(&idx);
                    s.spawn(move || part.run(&Backend::cpu()).expect("gumbel_sample"))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("worker panicked")).collect()
        });
        Sampled {
            tokens: parts.iter().flat_map(|p| p.tokens.iter().copied()).collect(),
            row_status: parts.iter().flat_map(|p| p.row_status.iter().copied()).collect(),
        }
    }

    /// The per-call fields, with empty logits and rows (for building sub-batches).
    fn clone_without_rows(&self) -> Batch {
        Batch {
            logits: Values::F32(Vec::new()),
            rows: 0,
            vocab: self.vocab,
            row_stride: self.row_stride,
            slots: Vec::new(),
            pos: Vec::new(),
            temperature: self.temperature.clone(),
            seed: self.seed.clone(),
            drafting: self.drafting,
            filters: self.filters.clone(),
            draft_logits: None,
            tokens_i64: self.tokens_i64,
        }
    }
}

/// Runs `call` into `tokens` and `row_status`, and into `draft_logits` if any.
fn sample<'a, T: TokenId>(
    backend: &Backend,
    call: &GumbelSample<'_, Host>,
    tokens: &'a mut [T],
    row_status: &'a mut [u32],
    draft_logits: Option<(DraftLogitsMut<'a, Host>, Column<'a, Host>)>,
) -> Result<(), specdec::Error> {
    let mut out = GumbelOutput::new(tokens).with_row_status(row_status);
    if let Some((draft_logits, column)) = draft_logits {
        out = out.with_draft_logits(draft_logits, column);
    }
    backend.gumbel_sample(call, &mut out)
}
