//! GPU-only checks of `gumbel_sample` (feature `gpu`; they need CUDA device 0
//! and fail without one):
//!
//! - randomized batches give the CPU backend's tokens, statuses and draft logits
//!   bit for bit, over every dtype pair, temperature, stride and token width;
//! - values that live in device memory (slots, temperatures, per-row columns)
//!   are checked in the kernel through the zero-copy API: the bad row gets
//!   token -1 and its flag, the call's status word collects the flags, and
//!   nothing else changes (SPEC §5);
//! - a reused workspace gives what fresh ones give.
//!
//! The GPU's noise values are checked against the core functions by the
//! `cuda` variant of `noise_is_the_keyed_core_gumbel` (tests/gumbel_exact.rs).
#![cfg(feature = "gpu")]

use specdec::status::{INVALID, INVALID_COLUMN, INVALID_SLOT, INVALID_TEMPERATURE, NAN_LOGITS};
use specdec::{
    Backend, Column, DType, DraftLogitsMut, DraftLogitsShape, Error, GumbelOutput, GumbelSample, Logits, SamplingParams,
};
use specdec_suite::batch::ColumnSpec;
use specdec_suite::inputs::{
    Rng, assert_gpu_matches_cpu, assert_same_draft_logits, assert_same_tokens, random_batch, random_draft_logits,
};
use specdec_suite::{DraftLogitsSpec, cuda, cuda_device};

// --- GPU = CPU on random batches (SPEC §2.5) ---------------------------------

/// `(vocab, rows)`: odd vocabularies, from one id to a real LM's (many
/// blocks per row at few rows).
const RANDOM_SHAPES: [(usize, usize); 4] = [(1, 33), (999, 40), (4097, 17), (151_936, 5)];
/// Random batches per (shape, logits dtype, draft-logits dtype).
const RANDOM_TRIALS: usize = 3;

#[test]
fn gpu_matches_cpu_on_random_batches() {
    let gpu = cuda();
    let mut rng = Rng::new(0x69B0);
    for (vocab, rows) in RANDOM_SHAPES {
        for logits in DType::ALL {
            for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
                for trial in 0..RANDOM_TRIALS {
                    let mut b = random_batch(&mut rng, logits, rows, vocab);
                    b.tokens_i64 = trial % 2 == 1;
                    b.drafting = rng.below(2) == 0;
                    if trial == 2 {
                        b.row_stride = 0; // one row broadcast
                    }
                    b.draft_logits = draft.map(|c| random_draft_logits(&mut rng, c, &b));
                    let ctx = format!(
                        "V {vocab} rows {rows} logits {logits:?} draft logits {:?} trial {trial} (row stride {}, drafting {}, i64 {})",
                        b.draft_logits.as_ref().map(|c| (
                            c.data.dtype(),
                            c.k,
                            c.width,
                            c.stride0,
                            c.stride1,
                            &c.column
                        )),
                        b.row_stride,
                        b.drafting,
                        b.tokens_i64
                    );
                    assert_gpu_matches_cpu(b, &gpu, &ctx);
                }
            }
        }
    }
}

// --- The zero-copy API --------------------------------------------------------

/// Rows of the device-validation call: `(slot, per-row column, flags)`.
/// Slots 1 and 2 have invalid temperatures; the draft logits have `DEVICE_K` columns.
const DEVICE_ROWS: [(i32, i32, u32); 10] = [
    (0, 0, 0),
    (7, 0, INVALID_SLOT), // past the 7 slots
    (-3, 0, INVALID_SLOT),
    (1, 0, INVALID_TEMPERATURE), // NaN
    (2, 0, INVALID_TEMPERATURE), // negative
    (3, 1, NAN_LOGITS),          // valid, a NaN logit planted
    (4, DEVICE_K as i32, INVALID_COLUMN),
    (5, -1, INVALID_COLUMN),
    (-1, 0, 0), // padding
    (6, 2, 0),
];
const DEVICE_TEMPERATURES: [f32; 7] = [0.8, f32::NAN, -1.0, 1.0, 0.0, 1.3, 0.6];
const DEVICE_K: usize = 3;
const DEVICE_VOCAB: usize = 3001;

#[test]
fn device_values_are_validated_in_the_kernel() {
    let cuda = cuda_device();
    let mut ws = cuda.workspace(DEVICE_ROWS.len()).expect("workspace");
    let mut rng = Rng::new(0xDE71CE);
    for (logits, draft) in [(DType::F32, DType::F32), (DType::BF16, DType::F16), (DType::F16, DType::BF16)] {
        for tokens_i64 in [false, true] {
            let ctx = format!("logits {logits:?} draft logits {draft:?} i64 {tokens_i64}");
            let mut b = random_batch(&mut rng, logits, DEVICE_ROWS.len(), DEVICE_VOCAB);
            b.slots = DEVICE_ROWS.iter().map(|r| r.0).collect();
            b.temperature = DEVICE_TEMPERATURES.to_vec();
            b.seed = (0..DEVICE_TEMPERATURES.len() as u64).map(|s| s * 1_000_003).collect();
            b.tokens_i64 = tokens_i64;
            b.logits.set_f32(5 * b.row_stride + 17, f32::NAN);
            let columns = DEVICE_ROWS.iter().map(|r| r.1).collect();
            let width = DEVICE_VOCAB + 2;
            let transposed = (width, DEVICE_TEMPERATURES.len() * width + 1);
            b.draft_logits = Some(DraftLogitsSpec::strided(
                draft,
                7,
                DEVICE_K,
                width,
                transposed.0,
                transposed.1,
                ColumnSpec::PerRow(columns),
            ));

            // The reference: only the valid rows, on the CPU (which would reject the others).
            let valid: Vec<usize> = (0..b.rows).filter(|&r| DEVICE_ROWS[r].2 & INVALID == 0).collect();
            let mut reference = b.select(&valid);
            let want = reference.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: cpu: {e}"));

            let got = b.run_device(&cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            for (r, &(slot, column, flags)) in DEVICE_ROWS.iter().enumerate() {
                let row = format!("{ctx}: row {r} (slot {slot}, column {column})");
                assert_eq!(got.row_status[r], flags, "{row}: status");
                match valid.iter().position(|&v| v == r) {
                    Some(i) => assert_eq!(got.tokens[r], want.tokens[i], "{row}: token differs from the CPU's"),
                    None => assert_eq!(got.tokens[r], -1, "{row}: an invalid row's token"),
                }
            }
            assert_same_draft_logits(&b, &reference, &format!("{ctx}: invalid rows must not write"));
            let all = INVALID_SLOT | INVALID_TEMPERATURE | INVALID_COLUMN | NAN_LOGITS;
            assert_eq!(ws.take_status().expect("status"), all, "{ctx}: the call's status word");
            assert_eq!(ws.take_status().expect("status"), 0, "{ctx}: status word after clearing");
        }
    }
}

/// The reused workspace's capacity, and the calls made through it.
const REUSE_MAX_ROWS: usize = 48;
const REUSE_CALLS: usize = 40;

#[test]
fn a_reused_workspace_matches_fresh_ones() {
    let cuda = cuda_device();
    let mut shared = cuda.workspace(REUSE_MAX_ROWS).expect("workspace");
    let mut rng = Rng::new(0x3E05E);
    for call in 0..REUSE_CALLS {
        // Full, then smaller, calls in turn, so stale partials would show.
        let rows = if call % 3 == 0 { REUSE_MAX_ROWS } else { 1 + rng.below(REUSE_MAX_ROWS) };
        let vocab = rng.pick(&[1, 5, 999, 4097, 33_001]);
        let (dtype, draft_dtype) = (rng.pick(&DType::ALL), rng.pick(&DType::ALL));
        let mut b = random_batch(&mut rng, dtype, rows, vocab);
        b.tokens_i64 = rng.below(2) == 0;
        b.draft_logits = (rng.below(2) == 0).then(|| random_draft_logits(&mut rng, draft_dtype, &b));
        let ctx = format!(
            "call {call}: rows {rows} V {vocab} {dtype:?} draft logits {:?}",
            b.draft_logits.as_ref().map(|c| c.data.dtype())
        );
        let (mut reused, mut fresh, mut on_cpu) = (b.clone(), b.clone(), b);
        let got = reused.run_device(&cuda, &mut shared).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let mut ws = cuda.workspace(rows).expect("workspace");
        let want = fresh.run_device(&cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: fresh: {e}"));
        assert_eq!(got, want, "{ctx}: reused vs fresh workspace");
        assert_same_draft_logits(&reused, &fresh, &ctx);
        let cpu = on_cpu.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: cpu: {e}"));
        assert_same_tokens(&got.tokens, &cpu.tokens, &format!("{ctx}: vs cpu"));
    }
    // Valid calls raise at most NAN_LOGITS (random batches plant one NaN).
    let word = shared.take_status().expect("status");
    assert_eq!(word & !NAN_LOGITS, 0, "status word {word:#x}");

    let mut too_big = random_batch(&mut rng, DType::F32, REUSE_MAX_ROWS + 1, 7);
    let result = too_big.run_device(&cuda, &mut shared);
    assert!(
        matches!(result, Err(Error::WorkspaceTooSmall { needed, capacity }) if needed == REUSE_MAX_ROWS + 1 && capacity == REUSE_MAX_ROWS),
        "{result:?}"
    );
}

/// Elements before the second row (and the second slot's draft row): an
/// offset computed in 32 bits would wrap to 0 and land on the first (SPEC §5).
const FAR: usize = 1 << 32;

#[test]
fn offsets_past_u32_elements_are_not_truncated() -> specdec::Result<()> {
    use half::bf16;
    let cuda = cuda_device();
    let s = cuda.stream();
    let vocab = 1000;
    // Greedy rows whose maxima differ: row 0 at id 10, row 1 at id 900.
    let rows: [Vec<bf16>; 2] = [10, 900]
        .map(|top| (0..vocab).map(|i| bf16::from_f32(if i == top { 5.0 } else { (i % 7) as f32 - 10.0 })).collect());
    // Two 8 GiB buffers: logits [2, FAR] and draft logits [2 slots, 1, vocab] with stride0 = FAR.
    let mut logits = s.alloc_zeros::<bf16>(FAR + vocab)?;
    let mut draft_logits = s.alloc_zeros::<bf16>(FAR + vocab)?;
    s.memcpy_htod(&rows[0], &mut logits.slice_mut(0..vocab))?;
    s.memcpy_htod(&rows[1], &mut logits.slice_mut(FAR..FAR + vocab))?;
    let (slots, pos) = (s.clone_htod(&[0i32, 1])?, s.clone_htod(&[3u64, 4])?);
    let (temperature, seed) = (s.clone_htod(&[0.0f32, 0.0])?, s.clone_htod(&[1u64, 2])?);
    let mut tokens = s.alloc_zeros::<i64>(2)?;
    let mut ws = cuda.workspace(2)?;
    let call = GumbelSample::new(
        Logits::new(&logits, 2, vocab).with_row_stride(FAR),
        &slots,
        &pos,
        SamplingParams::new(&temperature, &seed),
    );
    let shape = DraftLogitsShape { slots: 2, k: 1, width: vocab, stride0: FAR, stride1: vocab };
    let mut out =
        GumbelOutput::new(&mut tokens).with_draft_logits(DraftLogitsMut::new(&mut draft_logits, shape), Column::All(0));
    cuda.gumbel_sample(&mut ws, &call, &mut out)?;
    assert_eq!(s.clone_dtoh(&tokens)?, [10, 900], "tokens of rows 0 and 1 (row 1 starts at element 2^32)");
    for (slot, at) in [(0, 0), (1, FAR)] {
        let stored = s.clone_dtoh(&draft_logits.slice(at..at + vocab))?;
        assert!(stored == rows[slot], "draft-logits slot {slot} (offset {at}) does not hold row {slot}'s logits");
    }
    s.synchronize()?;
    Ok(())
}
