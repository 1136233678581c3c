//! Deterministic test inputs and independent reference results: a small
//! fixed-seed generator, structured logits, random batches and draft logits, and the
//! argmax rule computed without the backends.

use crate::batch::{Batch, ColumnSpec, DraftLogitsSpec, Sampled, Values};
use specdec::{Backend, DType};

/// SplitMix64: fast, fixed-seed randomness for building inputs (the samplers'
/// own randomness always comes from the backend under test).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit() as f32
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            xs.swap(i, self.below(i + 1));
        }
    }
}

/// Greedy and the temperatures SPEC §6 names.
pub const TEMPERATURES: [f32; 4] = [0.0, 0.6, 1.0, 1.5];

/// A finite logit no candidate id can beat if it were read: marks row padding
/// (ids `>= vocab`) that must never be sampled.
pub const PAST_VOCAB: f32 = 1e30;

/// A target with structure, for any `vocab >= 1`: three peaks at
/// `ln V - 2, ln V - 3, ln V - 4` (about 15% of the mass at `T = 1`, far more
/// at `T = 0.6`), a flat bulk in `[-1, 1]`, a low band in `[-6, -4]` (1 in 32)
/// and `-inf` entries (1 in 16, never a peak).
pub fn mixed_logits(vocab: usize, salt: u64) -> Vec<f32> {
    let mut rng = Rng::new(salt ^ ((vocab as u64) << 32));
    let mut row: Vec<f32> = (0..vocab)
        .map(|_| match rng.below(32) {
            0 | 1 => f32::NEG_INFINITY,
            2 => rng.uniform(-6.0, -4.0),
            _ => rng.uniform(-1.0, 1.0),
        })
        .collect();
    let top = (vocab as f32).ln();
    for drop in [2.0, 3.0, 4.0] {
        row[rng.below(vocab)] = top - drop;
    }
    row
}

/// The first id of the largest logit, NaN counting as `-inf` (SPEC §3.1 and
/// `specdec::status::NAN_LOGITS`); 0 when nothing beats `-inf`.
pub fn first_argmax(row: &[f32]) -> usize {
    let key = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if key(x) > key(row[best]) {
            best = i;
        }
    }
    best
}

/// Counts of each id; panics (naming the offender) on an id outside `0..vocab`.
pub fn histogram(tokens: &[i64], vocab: usize) -> Vec<u64> {
    let mut counts = vec![0u64; vocab];
    for (row, &t) in tokens.iter().enumerate() {
        assert!((0..vocab as i64).contains(&t), "row {row}: token {t} outside 0..{vocab}");
        counts[t as usize] += 1;
    }
    counts
}

/// `rows` rows of random logits in `[-6, 6]` (1 in 50 `-inf`, and one NaN in
/// row 1), row stride `vocab + 0..4` with [`PAST_VOCAB`] in the padding, about
/// one row in six padding (slot `-1`), every other row on a slot of its own (so
/// rows never write the same draft row), temperatures from [`TEMPERATURES`],
/// random seeds and 64-bit positions.
pub fn random_batch(rng: &mut Rng, dtype: DType, rows: usize, vocab: usize) -> Batch {
    let row_stride = vocab + rng.below(4);
    let mut logits: Vec<f32> = (0..rows.max(1) * row_stride)
        .map(|i| match (i % row_stride >= vocab, rng.below(50)) {
            (true, _) => PAST_VOCAB,
            (false, 0) => f32::NEG_INFINITY,
            _ => rng.uniform(-6.0, 6.0),
        })
        .collect();
    if rows > 1 {
        logits[row_stride + rng.below(vocab)] = f32::NAN;
    }
    let num_slots = rows + 3;
    let mut perm: Vec<i32> = (0..num_slots as i32).collect();
    rng.shuffle(&mut perm);
    let mut b = Batch::new(Values::from_f32(dtype, &logits), rows, vocab, 1.0, 0);
    b.row_stride = row_stride;
    b.slots = (0..rows).map(|r| if rng.below(6) == 0 { -1 } else { perm[r] }).collect();
    b.pos = (0..rows).map(|_| rng.next_u64()).collect();
    b.temperature = (0..num_slots).map(|_| rng.pick(&TEMPERATURES)).collect();
    b.seed = (0..num_slots).map(|_| rng.next_u64()).collect();
    b
}

/// Draft logits for `batch` (one slot per table entry) in a random layout: dense,
/// padded (gaps between columns and slots), or transposed (`stride0 <
/// stride1`); 1 to 3 columns, width `vocab + 0..3`, one column for all rows or
/// a random column per row.
pub fn random_draft_logits(rng: &mut Rng, dtype: DType, batch: &Batch) -> DraftLogitsSpec {
    let (slots, k, width) = (batch.temperature.len(), 1 + rng.below(3), batch.vocab + rng.below(3));
    let (stride0, stride1) = match rng.below(3) {
        0 => (k * width, width),
        1 => {
            let s1 = width + 1 + rng.below(3);
            (k * s1 + rng.below(5), s1)
        }
        _ => {
            let s0 = width + rng.below(2);
            (s0, slots * s0 + rng.below(3))
        }
    };
    let column = if rng.below(2) == 0 {
        ColumnSpec::All(rng.below(k))
    } else {
        ColumnSpec::PerRow((0..batch.rows).map(|_| rng.below(k) as i32).collect())
    };
    DraftLogitsSpec::strided(dtype, slots, k, width, stride0, stride1, column)
}

/// Runs `batch` on `gpu` and on the CPU backend and panics with `ctx` unless
/// their tokens, row statuses and draft logits are bitwise equal; returns the
/// GPU's outputs.
pub fn assert_gpu_matches_cpu(batch: Batch, gpu: &Backend, ctx: &str) -> Sampled {
    let (mut on_gpu, mut on_cpu) = (batch.clone(), batch);
    let got = on_gpu.run(gpu).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let want = on_cpu.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: cpu: {e}"));
    assert_same_tokens(&got.tokens, &want.tokens, ctx);
    assert_eq!(got.row_status, want.row_status, "{ctx}: row status");
    assert_same_draft_logits(&on_gpu, &on_cpu, ctx);
    got
}

/// Panics with `ctx` unless the two runs' draft logits are bitwise equal.
pub fn assert_same_draft_logits(a: &Batch, b: &Batch, ctx: &str) {
    if let (Some(x), Some(y)) = (&a.draft_logits, &b.draft_logits)
        && let Some(i) = first_bit_difference(&x.data, &y.data)
    {
        panic!("{ctx}: draft logits differ at element {i}: {:#x} vs {:#x}", x.data.bits(i), y.data.bits(i));
    }
}

/// The first index where two buffers differ bitwise (dtype included), if any.
pub fn first_bit_difference(a: &Values, b: &Values) -> Option<usize> {
    if a.dtype() != b.dtype() || a.len() != b.len() {
        return Some(0);
    }
    (0..a.len()).find(|&i| a.bits(i) != b.bits(i))
}

/// Asserts `got == want` row by row, reporting the first differing row and
/// how many differ (not two long vectors).
pub fn assert_same_tokens(got: &[i64], want: &[i64], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: token counts differ");
    let differing: Vec<usize> = (0..got.len()).filter(|&r| got[r] != want[r]).collect();
    if let Some(&r) = differing.first() {
        panic!(
            "{ctx}: {} of {} rows differ; first is row {r}: got {}, want {}",
            differing.len(),
            got.len(),
            got[r],
            want[r]
        );
    }
}
