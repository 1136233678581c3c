//! Owned host buffers for one `gumbel_sample` call, runnable on any backend.

use half::{bf16, f16};
use specdec::{
    Backend, CacheData, CacheShape, Column, DType, DraftCache, GumbelOutput, GumbelSample, Logits, LogitsData,
    SlotTable, Tokens,
};

/// Logits of any dtype.
#[derive(Clone, Debug)]
pub enum Values {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
}

impl Values {
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

    /// Stores `src[j]` at `i`, converted as a draft cache stores logits
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

/// Which cache column rows write.
#[derive(Clone, Debug)]
pub enum ColumnSpec {
    All(usize),
    PerRow(Vec<i32>),
}

/// A draft-logits cache `[slots, k, width]` with explicit strides.
#[derive(Clone, Debug)]
pub struct CacheSpec {
    pub data: Values,
    pub slots: usize,
    pub k: usize,
    pub width: usize,
    pub stride0: usize,
    pub stride1: usize,
    pub column: ColumnSpec,
}

impl CacheSpec {
    /// The library's description of this layout.
    pub fn shape(&self) -> CacheShape {
        CacheShape { slots: self.slots, k: self.k, width: self.width, stride0: self.stride0, stride1: self.stride1 }
    }

    /// What a fresh cache holds everywhere, so untouched elements are visible.
    pub const SENTINEL: f32 = -7.25;

    /// A dense cache filled with [`Self::SENTINEL`].
    pub fn dense(dtype: DType, slots: usize, k: usize, width: usize, column: ColumnSpec) -> Self {
        Self::strided(dtype, slots, k, width, k * width, width, column)
    }

    /// A cache with arbitrary strides (element `(s, c, x)` at
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
        CacheSpec { data, slots, k, width, stride0, stride1, column }
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
    pub cache: Option<CacheSpec>,
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
            cache: None,
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
        let data = match &self.logits {
            Values::F32(v) => LogitsData::F32(&v[..]),
            Values::BF16(v) => LogitsData::BF16(&v[..]),
            Values::F16(v) => LogitsData::F16(&v[..]),
        };
        let cache = self.cache.as_mut().map(|c| {
            let shape = c.shape();
            let data = match &mut c.data {
                Values::F32(v) => CacheData::F32(&mut v[..]),
                Values::BF16(v) => CacheData::BF16(&mut v[..]),
                Values::F16(v) => CacheData::F16(&mut v[..]),
            };
            let column = match &c.column {
                ColumnSpec::All(col) => Column::All(*col),
                ColumnSpec::PerRow(cols) => Column::PerRow(&cols[..]),
            };
            (DraftCache { data, shape }, column)
        });
        let mut args = GumbelSample {
            logits: Logits { data, rows: self.rows, vocab: self.vocab, row_stride: self.row_stride },
            slots: &self.slots[..],
            pos: &self.pos[..],
            table: SlotTable { temperature: &self.temperature[..], seed: &self.seed[..] },
            drafting: self.drafting,
            cache,
        };
        let mut row_status = vec![u32::MAX; self.rows];
        let (result, tokens) = if self.tokens_i64 {
            let mut t = vec![i64::MIN; self.rows];
            let out = GumbelOutput { tokens: Tokens::I64(&mut t[..]), row_status: Some(&mut row_status[..]) };
            (backend.gumbel_sample(&mut args, out), t)
        } else {
            let mut t = vec![i32::MIN; self.rows];
            let out = GumbelOutput { tokens: Tokens::I32(&mut t[..]), row_status: Some(&mut row_status[..]) };
            (backend.gumbel_sample(&mut args, out), t.into_iter().map(i64::from).collect())
        };
        (result, Sampled { tokens, row_status })
    }

    /// Row `r`'s logits `0..vocab`, widened to f32 (what the backend sees).
    pub fn row(&self, r: usize) -> Vec<f32> {
        let start = r * self.row_stride;
        self.logits.f32s(start..start + self.vocab)
    }

    /// The batch of rows `idx` (in that order) with their logits, slots,
    /// positions and per-row cache columns, and copies of the slot table and
    /// cache. A broadcast batch stays broadcast; others become dense.
    pub fn select(&self, idx: &[usize]) -> Batch {
        let (logits, row_stride) = if self.row_stride == 0 {
            (self.logits.clone(), 0)
        } else {
            let elems = idx.iter().flat_map(|&r| r * self.row_stride..r * self.row_stride + self.vocab);
            (self.logits.gather(elems), self.vocab)
        };
        let mut cache = self.cache.clone();
        if let Some(ColumnSpec::PerRow(cols)) = cache.as_mut().map(|c| &mut c.column) {
            *cols = idx.iter().map(|&r| cols[r]).collect();
        }
        Batch {
            logits,
            rows: idx.len(),
            row_stride,
            slots: idx.iter().map(|&r| self.slots[r]).collect(),
            pos: idx.iter().map(|&r| self.pos[r]).collect(),
            cache,
            ..self.clone_without_rows()
        }
    }

    /// Runs the batch split into row ranges on all CPU cores when `backend`
    /// is the CPU (rows are independent, SPEC §2.1), in one call otherwise.
    /// For long statistical runs; no cache.
    pub fn run_parallel(&self, backend: &Backend) -> Sampled {
        assert!(self.cache.is_none(), "run_parallel does not merge caches");
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
            cache: None,
            tokens_i64: self.tokens_i64,
        }
    }
}
