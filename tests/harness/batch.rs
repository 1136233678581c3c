//! Owned host buffers for one `gumbel_sample` call, runnable on any backend.

use half::{bf16, f16};
use specdec::{
    Backend, CacheData, Column, DType, DraftCache, GumbelOutput, GumbelSample, Logits, LogitsData, SlotTable, Tokens,
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
    /// A dense cache filled with a sentinel, so untouched elements are visible.
    pub fn dense(dtype: DType, slots: usize, k: usize, width: usize, column: ColumnSpec) -> Self {
        let data = Values::from_f32(dtype, &vec![-7.25; slots * k * width]);
        CacheSpec { data, slots, k, width, stride0: k * width, stride1: width, column }
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
        let mut b = Batch::new(Values::from_f32(dtype, row), rows, row.len(), t, seed);
        b.row_stride = 0;
        b.pos = (pos0..pos0 + rows as u64).collect();
        b
    }

    /// Runs the call on `backend`.
    pub fn run(&mut self, backend: &Backend) -> Result<Sampled, specdec::Error> {
        let data = match &self.logits {
            Values::F32(v) => LogitsData::F32(&v[..]),
            Values::BF16(v) => LogitsData::BF16(&v[..]),
            Values::F16(v) => LogitsData::F16(&v[..]),
        };
        let cache = self.cache.as_mut().map(|c| {
            let data = match &mut c.data {
                Values::F32(v) => CacheData::F32(&mut v[..]),
                Values::BF16(v) => CacheData::BF16(&mut v[..]),
                Values::F16(v) => CacheData::F16(&mut v[..]),
            };
            let column = match &c.column {
                ColumnSpec::All(col) => Column::All(*col),
                ColumnSpec::PerRow(cols) => Column::PerRow(&cols[..]),
            };
            (
                DraftCache { data, slots: c.slots, k: c.k, width: c.width, stride0: c.stride0, stride1: c.stride1 },
                column,
            )
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
        let tokens = if self.tokens_i64 {
            let mut t = vec![i64::MIN; self.rows];
            backend.gumbel_sample(
                &mut args,
                GumbelOutput { tokens: Tokens::I64(&mut t[..]), row_status: Some(&mut row_status[..]) },
            )?;
            t
        } else {
            let mut t = vec![i32::MIN; self.rows];
            backend.gumbel_sample(
                &mut args,
                GumbelOutput { tokens: Tokens::I32(&mut t[..]), row_status: Some(&mut row_status[..]) },
            )?;
            t.into_iter().map(i64::from).collect()
        };
        Ok(Sampled { tokens, row_status })
    }
}
