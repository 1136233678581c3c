//! Statistical exactness of `gumbel_sample` (SPEC §6): chi-square fits of
//! many draws of one row against `softmax(logits / T)`, and the tail mass of a
//! heavy-tailed target (SPEC §2.4). Seeds and positions are fixed, so every
//! test always passes or always fails.
//!
//! Cost: the CPU backend spends ~30 ns per (draw × id) at `T > 0`, so the CPU
//! sizes below are chosen for time; the CUDA variants use the full sizes.

use specdec::{Backend, DType};
use specdec_suite::inputs::{Rng, histogram, mixed_logits};
use specdec_suite::stats::softmax;
use specdec_suite::{Batch, chi_square, tail_z, test_device};

const SEED: u64 = 0x5EED_CAFE_F00D_0001;

/// SPEC §6 sample size: 40 draws per id on average, and never fewer than 50,000.
fn full_draws(vocab: usize) -> usize {
    (40 * vocab).max(50_000)
}

/// The probabilities the backends sample from: softmax of the logits as
/// rounded to their dtype, at the temperature the backends really use (they
/// multiply by `1/T` rounded to f32, `crates/core/src/sample.rs`).
fn exact_probs(b: &Batch, t: f32) -> Vec<f64> {
    softmax(&b.row(0), 1.0 / f64::from(1.0 / t))
}

/// Draws `row` `draws` times (one row broadcast to positions `pos0..`) and
/// checks the counts against [`exact_probs`] by chi-square.
fn check_fit(backend: &Backend, row: &[f32], dtype: DType, t: f32, draws: usize, pos0: u64) {
    let b = Batch::broadcast(row, dtype, draws, t, SEED, pos0);
    let counts = histogram(&b.run_parallel(backend).tokens, row.len());
    let ctx = format!("V {} {dtype:?} T {t} draws {draws} seed {SEED:#x} pos0 {pos0}", row.len());
    chi_square(&counts, &exact_probs(&b, t)).assert_pass(&ctx);
}

/// One V at several (dtype, T): a peaked, flat and masked target
/// ([`mixed_logits`]), positions disjoint between cases.
fn check_fits(backend: &Backend, vocab: usize, cases: &[(DType, f32)], draws: usize) {
    let row = mixed_logits(vocab, 0xF17);
    for (i, &(dtype, t)) in cases.iter().enumerate() {
        check_fit(backend, &row, dtype, t, draws, (vocab as u64) << 32 | (i as u64) << 24);
    }
}

test_device!(chi_square_v1, |backend, scale| {
    check_fits(&backend, 1, &[(DType::F32, 1.0), (DType::BF16, 0.6)], full_draws(1) * scale);
});

test_device!(chi_square_v999_each_temperature, |backend, scale| {
    let cases = [(DType::F32, 0.6), (DType::F32, 1.0), (DType::F32, 1.5), (DType::BF16, 1.0)];
    check_fits(&backend, 999, &cases, full_draws(999) * scale);
});

test_device!(chi_square_v1024, |backend, scale| {
    check_fits(&backend, 1024, &[(DType::F32, 1.0), (DType::BF16, 0.6)], full_draws(1024) * scale);
});

/// CPU draws at V = 4097: ~12 per id (the full 40 per id would take ~20 s per
/// fit); the sparsest bins merge into the "other" bin.
const CPU_DRAWS_4097: usize = 50_000;

test_device!(chi_square_v4097, |backend, scale| {
    let draws = if matches!(backend, Backend::Cpu(_)) { CPU_DRAWS_4097 } else { full_draws(4097) * scale };
    check_fits(&backend, 4097, &[(DType::F32, 1.0), (DType::BF16, 1.5)], draws);
});

/// A wide row whose mass sits on `WIDE_LIVE` ids spread over the whole row (in
/// runs of four, plus the last id, alone in a partial quad); the rest are
/// finite but 60 below (probability ~1e-22 per draw, so never drawn). Cheap on
/// the CPU (those quads are pruned) while ids run to `WIDE_VOCAB - 1`.
const WIDE_VOCAB: usize = 20_001;
const WIDE_LIVE: usize = 1000;

test_device!(chi_square_wide_sparse_row, |backend, scale| {
    let live = mixed_logits(WIDE_LIVE + 1, 0x3);
    let mut row = vec![-60.0; WIDE_VOCAB];
    let step = (WIDE_VOCAB / 4) / (WIDE_LIVE / 4); // quads between live runs
    let ids = (0..WIDE_LIVE / 4).flat_map(|q| 4 * q * step..4 * q * step + 4).chain([WIDE_VOCAB - 1]);
    for (id, x) in ids.zip(live) {
        row[id] = x;
    }
    check_fit(&backend, &row, DType::F32, 1.0, full_draws(WIDE_LIVE) * scale, 1 << 44);
});

/// SPEC §6's largest vocabularies, at full size: GPU only (the CPU would need
/// hours).
#[cfg(feature = "gpu")]
#[test]
fn chi_square_full_vocab_200k_cuda() {
    const VOCAB: usize = 200_000;
    let draws = specdec_suite::gpu_sized(full_draws(VOCAB));
    check_fit(&specdec_suite::cuda(), &mixed_logits(VOCAB, 0x200), DType::F32, 1.0, draws, 1 << 45);
}

/// Calls of few rows, where a block's chunk is one quad a lane: there a warp
/// folds its lanes' leads before the rest of their quads (`LEAD` in
/// `crates/kernels/src/load.rs`), a path the large calls above, which take
/// the lean kernels, never reach. GPU only (the CPU has no such path).
#[cfg(feature = "gpu")]
#[test]
fn chi_square_v999_in_small_calls_cuda() {
    const ROWS_PER_CALL: usize = 128;
    let (vocab, t) = (999, 0.8);
    let draws = specdec_suite::gpu_sized(full_draws(vocab));
    let b = Batch::broadcast(&mixed_logits(vocab, 0xF17), DType::F32, draws, t, SEED, 7 << 40);
    let cuda = specdec_suite::cuda();
    let mut tokens = Vec::with_capacity(draws);
    for first in (0..draws).step_by(ROWS_PER_CALL) {
        let rows: Vec<usize> = (first..(first + ROWS_PER_CALL).min(draws)).collect();
        tokens.extend(b.select(&rows).run(&cuda).expect("gumbel_sample").tokens);
    }
    let ctx = format!("V {vocab} F32 T {t} draws {draws} in calls of {ROWS_PER_CALL} rows");
    chi_square(&histogram(&tokens, vocab), &exact_probs(&b, t)).assert_pass(&ctx);
}

/// The heavy token's logit. Its weight e^18 ≈ 6.6e7 dwarfs the tail's ~4e5,
/// so a tail id wins only with noise ~17 above the heavy token's: `u` within
/// ~e^-18 ≈ 2^-26 of 1, finer than f32 resolves near 1 (2^-24). A Gumbel
/// transform without the resolved upper tail (SPEC §2.4) undercounts it.
const HEAVY_LOGIT: f32 = 18.0;
/// Tail ids, weights uniform in [1, 3] (logits ln 1 ..= ln 3).
const TAIL_IDS: usize = 200_000;
/// Expected tail draws, × scale² on GPU. Each expected tail draw costs
/// ~e^18 / 2 ≈ 3.3e7 id evaluations (~1 CPU second) however many tail ids
/// there are (fewer ids only need more draws), so the CPU stops at this floor.
const MIN_TAIL_DRAWS: f64 = 100.0;
/// SPEC §6's bound on the tail-mass z-score.
const TAIL_Z_LIMIT: f64 = 10.0;

test_device!(heavy_tailed_target_tail_mass, |backend, scale| {
    let mut rng = Rng::new(0x7A11);
    let mut row: Vec<f32> = (0..=TAIL_IDS).map(|_| rng.uniform(1.0, 3.0).ln()).collect();
    let heavy = TAIL_IDS / 2;
    row[heavy] = HEAVY_LOGIT;
    let probs = softmax(&row, 1.0);
    let p_tail: f64 = probs.iter().enumerate().filter(|&(id, _)| id != heavy).map(|(_, p)| p).sum();
    let draws = (MIN_TAIL_DRAWS * (scale * scale) as f64 / p_tail).ceil() as usize;
    let b = Batch::broadcast(&row, DType::F32, draws, 1.0, SEED, 1 << 40);
    let counts = histogram(&b.run_parallel(&backend).tokens, row.len());
    let tail = draws as u64 - counts[heavy];
    let z = tail_z(tail, draws as u64, p_tail);
    assert!(
        z.abs() < TAIL_Z_LIMIT,
        "heavy tail (logit {HEAVY_LOGIT}, {TAIL_IDS} tail ids): {tail} tail draws of {draws}, expected {:.1} \
         (p = {p_tail:.4e}), z = {z:.2}, seed {SEED:#x}",
        p_tail * draws as f64
    );
});
