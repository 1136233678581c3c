//! The draft-logits cache (SPEC §3.3): each non-padding row's raw logits for
//! ids `0..V` land at `slot*stride0 + col*stride1 + x`, converted to the cache
//! dtype (bit for bit when the dtypes match); nothing else in the buffer
//! changes, whatever the strides; a cache narrower than `V` is rejected before
//! anything is written.

use specdec::{Backend, DType, Error};
use specdec_suite::batch::{ColumnSpec, Values};
use specdec_suite::inputs::{PAST_VOCAB, Rng, first_bit_difference};
use specdec_suite::{Batch, CacheSpec, test_device};

/// An odd vocabulary: the last quad of every row is partial.
const VOCAB: usize = 1031;
/// Logits rows are this much wider than `VOCAB`, holding [`PAST_VOCAB`].
const ROW_PAD: usize = 5;
const SLOTS: usize = 4;
const K: usize = 3;
/// Each step's rows: two slots, a padding row (writes nothing), another slot;
/// slot 1 is never used.
const ROW_SLOTS: [i32; 4] = [2, 0, -1, 3];
/// Per slot: greedy rows write the cache too.
const SLOT_TEMPERATURES: [f32; SLOTS] = [0.7, 0.0, 1.3, 0.0];

/// Cache layouts for `width`: `(name, stride0, stride1)`. Padded leaves gaps
/// between columns and between slots; transposed puts slots innermost.
fn layouts(width: usize) -> [(&'static str, usize, usize); 3] {
    [
        ("dense", K * width, width),
        ("padded", K * (width + 3) + 2, width + 3),
        ("transposed", width + 1, SLOTS * (width + 1) + 4),
    ]
}

/// NaN bits with a payload (signalling where the format has the bit), which
/// only a same-dtype copy keeps exactly.
fn payload_nan(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0x7f80_0001,
        DType::BF16 => 0x7f81,
        DType::F16 => 0x7c01,
    }
}

/// One step's logits, `rows × (VOCAB + ROW_PAD)`: values in `[-8, 8]` mixed
/// with `-inf`, values that overflow f16 (`±7e4`) and ones that are subnormal
/// in f16 (`±3e-6`); when `nan` a payload NaN at row 0, id 7.
fn step_logits(dtype: DType, rows: usize, salt: u64, nan: bool) -> Values {
    let mut rng = Rng::new(salt);
    let width = VOCAB + ROW_PAD;
    let xs: Vec<f32> = (0..rows * width)
        .map(|i| match (i % width >= VOCAB, rng.below(40)) {
            (true, _) => PAST_VOCAB,
            (false, 0) => f32::NEG_INFINITY,
            (false, 1) => rng.pick(&[7e4, -7e4]),
            (false, 2) => rng.pick(&[3e-6, -3e-6]),
            _ => rng.uniform(-8.0, 8.0),
        })
        .collect();
    let mut v = Values::from_f32(dtype, &xs);
    if nan {
        v.set_bits(7, payload_nan(dtype));
    }
    v
}

/// `model` after the batch `b` wrote the cache `c`: each non-padding row's
/// logits `0..V` at its slot and column, as the cache stores them.
fn apply_writes(model: &mut Values, c: &CacheSpec, b: &Batch) {
    for (r, &slot) in b.slots.iter().enumerate().filter(|&(_, &s)| s >= 0) {
        let col = match &c.column {
            ColumnSpec::All(col) => *col,
            ColumnSpec::PerRow(cols) => cols[r] as usize,
        };
        let at = slot as usize * c.stride0 + col * c.stride1;
        for x in 0..b.vocab {
            model.store_converted(at + x, &b.logits, r * b.row_stride + x);
        }
    }
}

/// Runs one call per entry of `columns` on the same cache, checking after
/// each that the whole buffer equals the model bit for bit and that tokens
/// stay below `VOCAB`.
fn check_steps(backend: &Backend, logits: DType, mut cache: CacheSpec, slots: &[i32], columns: &[ColumnSpec]) {
    let ctx = format!(
        "logits {logits:?}, cache {:?} [{SLOTS}, {K}, {}] strides ({}, {})",
        cache.data.dtype(),
        cache.width,
        cache.stride0,
        cache.stride1
    );
    let mut model = cache.data.clone();
    for (step, column) in columns.iter().enumerate() {
        let rows = slots.len();
        let same_dtype = cache.data.dtype() == logits;
        let mut b = Batch::new(step_logits(logits, rows, step as u64, same_dtype), rows, VOCAB, 1.0, 0);
        b.row_stride = VOCAB + ROW_PAD;
        b.slots = slots.to_vec();
        b.temperature = SLOT_TEMPERATURES.to_vec();
        b.seed = vec![11, 12, 13, 14];
        b.drafting = step % 2 == 1;
        cache.column = column.clone();
        apply_writes(&mut model, &cache, &b);
        b.cache = Some(cache);
        let ctx = format!("{ctx}, step {step} column {column:?}");
        let got = b.run(backend).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(got.tokens.iter().all(|&t| (0..VOCAB as i64).contains(&t)), "{ctx}: tokens {:?}", got.tokens);
        cache = b.cache.take().expect("the batch keeps its cache");
        if let Some(i) = first_bit_difference(&cache.data, &model) {
            let (got, want) = (cache.data.bits(i), model.bits(i));
            panic!("{ctx}: element {i} ({}) is {got:#x}, want {want:#x}", locate(&cache, i));
        }
    }
}

/// Names buffer element `i` as `(slot, column, id)`, or as a gap.
fn locate(c: &CacheSpec, i: usize) -> String {
    for s in 0..c.slots {
        for col in 0..c.k {
            let at = s * c.stride0 + col * c.stride1;
            if (at..at + c.width).contains(&i) {
                return format!("slot {s}, column {col}, id {}", i - at);
            }
        }
    }
    "a gap between cache rows".into()
}

/// Every layout, cache width `VOCAB + 0/1`, logits f32/bf16 × every cache dtype.
fn each_cache(mut f: impl FnMut(DType, CacheSpec)) {
    for width in [VOCAB, VOCAB + 1] {
        for (_, stride0, stride1) in layouts(width) {
            for logits in [DType::F32, DType::BF16] {
                for dtype in DType::ALL {
                    f(logits, CacheSpec::strided(dtype, SLOTS, K, width, stride0, stride1, ColumnSpec::All(0)));
                }
            }
        }
    }
}

test_device!(cache_columns_hold_each_steps_raw_logits, |backend, scale| {
    let columns: Vec<ColumnSpec> = (0..K).map(ColumnSpec::All).collect();
    each_cache(|logits, cache| check_steps(&backend, logits, cache, &ROW_SLOTS, &columns));
});

test_device!(per_row_columns_write_only_their_column, |backend, scale| {
    // Slot 0 twice, in different columns; the padding row's column is unused.
    let slots = [0, 0, 3, -1, 2];
    let columns = [ColumnSpec::PerRow(vec![2, 0, 1, 0, 2]), ColumnSpec::PerRow(vec![1, 2, 0, 2, 0])];
    each_cache(|logits, cache| check_steps(&backend, logits, cache, &slots, &columns));
});

test_device!(narrower_cache_is_rejected_and_untouched, |backend, scale| {
    let vocab = 64;
    for dtype in DType::ALL {
        for column in [ColumnSpec::All(1), ColumnSpec::PerRow(vec![0, 2])] {
            let ctx = format!("cache {dtype:?} [2, 3, 63] for V {vocab}, column {column:?}");
            let mut b = Batch::new(step_logits(DType::F32, 2, 9, false), 2, vocab, 1.0, 3);
            b.row_stride = VOCAB + ROW_PAD;
            b.slots = vec![0, 1];
            b.temperature = vec![1.0, 0.0];
            b.seed = vec![1, 2];
            b.cache = Some(CacheSpec::dense(dtype, 2, 3, vocab - 1, column));
            let before = b.cache.clone().expect("cache").data;
            let (result, out) = b.run_keep(&backend);
            match result {
                Err(e @ Error::CacheTooNarrow { cache_width: 63, vocab: 64 }) => {
                    assert!(e.to_string().contains("narrower"), "{ctx}: message {e}")
                }
                other => panic!("{ctx}: expected CacheTooNarrow, got {other:?}"),
            }
            assert!(out.untouched(), "{ctx}: outputs written: {out:?}");
            assert_eq!(first_bit_difference(&b.cache.expect("cache").data, &before), None, "{ctx}: cache written");
        }
    }
});
