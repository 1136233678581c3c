//! The fold of a random (`T > 0`) row, vectorised: the same winner, ties and
//! NaN flag as folding it four ids at a time with [`Sampler::fold_quad`],
//! bit for bit, and faster (its speed-up:
//! benches/results/2026-12-02-design-measurements.md).
//!
//! The scalar fold spends nearly all its time in Philox: the bucket bound
//! ([`GUMBEL_BOUND`]) already rules out almost every id without a logarithm,
//! but only once the id's word is known. So a block of ids is done in three
//! steps:
//!
//! 1. scale the block's logits (saturating as [`Sampler::scaled`] does); if
//!    even its largest one plus [`GUMBEL_MAX`] is below the running best, the
//!    scalar fold would skip every quad in it: skip the block, Philox and all;
//! 2. draw the words of all its quads at once, one counter per vector lane;
//! 3. filter each id against the best at the block's start: an id whose word
//!    is below the top bucket and whose scaled logit plus [`COARSE_BOUND`]
//!    (the bound of every bucket but the top one) is below that best is one
//!    the scalar fold would skip as well, since the best only grows. The
//!    quads holding any other id, unless a finer bound ([`gumbel_bound`]) rules out
//!    all their scores, are folded by the scalar code itself
//!    ([`Sampler::fold_log_weights_drawn`]), in id order, with those words.
//!
//! Quads left out change nothing in the scalar fold, so the running best here
//! equals the scalar one at every folded quad, and so does the result.
//!
//! The module also computes a row's log-sum-exp ([`lse`]) and its group sums
//! ([`exp_sum_kept`]) by the order-free sum of `specdec_core::exp_sum`, the
//! same bits on every level (see there), and draws the Philox words of a run
//! of quads ([`words`]) for the CPU resample of a rejected draft.
//!
//! [`GUMBEL_MAX`]: specdec_core::gumbel::GUMBEL_MAX
//! [`GUMBEL_BOUND`]: specdec_core::gumbel::GUMBEL_BOUND

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use super::quads;
use specdec_core::argmax::ArgMax;
use specdec_core::dtype::Element;
use specdec_core::exp_sum::{self, GROUPS};
use specdec_core::gumbel::{COARSE_BOUND, TOP_BUCKET, gumbel_bound};
use specdec_core::rng::{PHILOX_ROUNDS, Stream, random_quad};
use specdec_core::sample::Sampler;

/// The widest instruction set the fold may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    /// [`Sampler::fold_quad`], four ids at a time.
    Scalar,
    /// AVX2 (with F16C for f16 logits): 4 Philox counters per vector.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512F: 8 Philox counters per vector.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Level {
    /// Every level, narrowest first.
    #[cfg(test)]
    pub(in crate::cpu) const ALL: &[Level] = &[
        Level::Scalar,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512,
    ];

    /// Whether this CPU can run the level.
    pub(in crate::cpu) fn supported(self) -> bool {
        match self {
            Level::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => is_x86_feature_detected!("avx512f"),
        }
    }

    /// The widest level this CPU supports (std caches the CPUID probe).
    pub(super) fn detect() -> Level {
        #[cfg(target_arch = "x86_64")]
        for level in [Level::Avx512, Level::Avx2] {
            if level.supported() {
                return level;
            }
        }
        Level::Scalar
    }
}

/// A logits element type the vector code can load.
#[cfg(target_arch = "x86_64")]
pub(super) trait Logit: Element + avx2::Load + avx512::Load {}
#[cfg(target_arch = "x86_64")]
impl<L: Element + avx2::Load + avx512::Load> Logit for L {}
/// A logits element type the vector code can load.
#[cfg(not(target_arch = "x86_64"))]
pub(super) trait Logit: Element {}
#[cfg(not(target_arch = "x86_64"))]
impl<L: Element> Logit for L {}

/// Folds the ids `base .. base + values.len()` (`base % 4 == 0`) of a random
/// row into `best`, exactly as [`Sampler::fold_quad`] four ids at a time
/// would, and says whether any of the values is NaN. `level` must be
/// supported ([`Level::detect`]).
pub(super) fn fold<L: Logit>(level: Level, s: &Sampler, best: ArgMax, base: u32, values: &[L]) -> (ArgMax, bool) {
    fold_kept(level, s, best, base, values, f32::NEG_INFINITY)
}

/// [`fold`] of the kept set `{scaled >= tau}` of the ids: as the fold of the
/// row with every other id (NaN included) at `-inf` would give, without the
/// copy; `tau = -inf` is [`fold`] itself (NaN kept, as it is there).
pub(super) fn fold_kept<L: Logit>(
    level: Level,
    s: &Sampler,
    best: ArgMax,
    base: u32,
    values: &[L],
    tau: f32,
) -> (ArgMax, bool) {
    debug_assert!(!s.greedy && base.is_multiple_of(4) && level.supported());
    match level {
        Level::Scalar => fold_scalar(s, best, base, values, tau),
        // SAFETY: the caller has checked that the CPU supports the level.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { avx2::fold(s, best, base, values, tau) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { avx512::fold(s, best, base, values, tau) },
    }
}

/// The reference: [`Sampler::fold_quad`] over the row's quads, those
/// outside `{scaled >= tau}` at `-inf` ([`fold_kept`]). The vector levels
/// use it for the ids after their last whole block.
fn fold_scalar<L: Element>(s: &Sampler, mut best: ArgMax, base: u32, values: &[L], tau: f32) -> (ArgMax, bool) {
    let mut nan = false;
    for (x, mut vals, n) in quads(values) {
        nan |= vals[..n as usize].iter().any(|v| v.is_nan());
        if tau > f32::NEG_INFINITY {
            vals = vals.map(|v| if kept_scaled(s, v, tau) == f32::NEG_INFINITY { f32::NEG_INFINITY } else { v });
        }
        best = s.fold_quad(best, base + x, vals, n);
    }
    (best, nan)
}

/// `specdec_core::filter::masses`, compiled for the level's vector width
/// (the same operations, so every level gives the same masses). `level`
/// must be supported ([`Level::detect`]).
pub(super) fn masses(level: Level, ys: &[f32], max: f32, out: &mut [u64]) {
    debug_assert!(level.supported());
    match level {
        Level::Scalar => specdec_core::filter::masses(ys, max, out),
        // SAFETY: the caller has checked that the CPU supports the level.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { masses_avx2(ys, max, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { masses_avx512(ys, max, out) },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn masses_avx2(ys: &[f32], max: f32, out: &mut [u64]) {
    specdec_core::filter::masses(ys, max, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn masses_avx512(ys: &[f32], max: f32, out: &mut [u64]) {
    specdec_core::filter::masses(ys, max, out)
}

/// The largest value of `block` (NaN ignored; `-inf` if none) and whether it
/// holds a NaN, for the greedy scan. One body ([`block_max_lanes`]), compiled
/// for each level, where the compiler vectorises its 16 independent lanes at
/// the level's width (a baseline x86-64 build gets 4-wide SSE2 and is
/// compute-bound; one core's memory bandwidth needs AVX2 or AVX-512). A
/// maximum is exact, so every level gives the same answer. `level` must be
/// supported ([`Level::detect`]).
pub(super) fn block_max<L: Logit>(level: Level, block: &[L]) -> (f32, bool) {
    debug_assert!(level.supported());
    match level {
        Level::Scalar => block_max_lanes(block),
        // SAFETY: the caller has checked that the CPU supports the level.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { block_max_avx2(block) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { block_max_avx512(block) },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
fn block_max_avx2<L: Element>(block: &[L]) -> (f32, bool) {
    block_max_lanes(block)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn block_max_avx512<L: Element>(block: &[L]) -> (f32, bool) {
    block_max_lanes(block)
}

#[inline(always)]
fn block_max_lanes<L: Element>(block: &[L]) -> (f32, bool) {
    const LANES: usize = 16;
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let chunks = block.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for i in 0..LANES {
            let x = chunk[i].to_f32();
            nan[i] |= x.is_nan();
            max[i] = if x > max[i] { x } else { max[i] };
        }
    }
    let mut top = max.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    let mut any_nan = nan.iter().any(|&n| n);
    for v in tail {
        let x = v.to_f32();
        any_nan |= x.is_nan();
        top = if x > top { x } else { top };
    }
    (top, any_nan)
}

/// `log Σ e^y` over the scaled logits `y = s.scaled(x)` of `values`, by the
/// order-free sum of [`specdec_core::exp_sum`] (REFERENCE §2.6), with the
/// special cases of [`ExpSum`]: NaN values are skipped, `-inf` ones add
/// nothing, any `+inf` makes it `+inf`, and a row with nothing above `-inf`
/// (or empty) gives `-inf`. Bit for bit `ExpSum`'s log-sum-exp of the same
/// values, on every level. `level` must be supported ([`Level::detect`]).
///
/// Two passes: the row maximum `m` (lanes of `vmaxps(y, m)`, NaN left out),
/// then, unless `m` is infinite (the answer, then), the group sums of every
/// term against `m`'s group ([`group_sums`]): integers, so any order gives
/// the same sums. The vector levels pad a short tail with `-inf`, which adds
/// nothing.
///
/// [`ExpSum`]: specdec_core::exp_sum::ExpSum
pub(super) fn lse<L: Logit>(level: Level, s: &Sampler, values: &[L]) -> f32 {
    lse_kept(level, s, values, f32::NEG_INFINITY)
}

/// [`lse`] of the kept set `{scaled >= tau}` of the ids, bit for bit that of
/// the row with every other id (NaN included) at `-inf`, without the copy;
/// `tau = -inf` is [`lse`] itself.
pub(super) fn lse_kept<L: Logit>(level: Level, s: &Sampler, values: &[L], tau: f32) -> f32 {
    exp_sum_kept(level, s, values, tau).lse()
}

/// The largest kept scaled value of `values` (NaN left out; `-inf` for
/// none): step 1 of [`lse_kept`], by lanes of `vmaxps(y, m)`.
fn row_max<L: Logit>(level: Level, s: &Sampler, values: &[L], tau: f32) -> f32 {
    debug_assert!(level.supported());
    let lanes = match level {
        Level::Scalar => lane_max_scalar(s, values, tau),
        // SAFETY: the caller has checked that the CPU supports the level.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { avx2::lane_max(s.scale, values, tau) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { avx512::lane_max(s.scale, values, tau) },
    };
    lanes.iter().fold(f32::NEG_INFINITY, |m, &y| max_ps(y, m))
}

/// The group sums of the kept scaled values of `values` in a set whose
/// largest term is in group `top` (every value's group at most `top`):
/// for each `j`, the sum of the parts of the finite `y` whose term is in
/// group `top − j` ([`exp_sum::group_part`]).
fn group_sums<L: Logit>(level: Level, s: &Sampler, top: i32, values: &[L], tau: f32) -> [u128; GROUPS] {
    match level {
        Level::Scalar => {
            let mut sums = [0u128; GROUPS];
            for x in values {
                let y = kept_scaled(s, x.to_f32(), tau);
                if let Some((j, part)) = y.is_finite().then(|| exp_sum::group_part(exp_sum::term(y), top)).flatten() {
                    sums[j] += u128::from(part);
                }
            }
            sums
        }
        // SAFETY: the caller has checked that the CPU supports the level.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { avx2::group_sums(s.scale, top, values, tau) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { avx512::group_sums(s.scale, top, values, tau) },
    }
}

/// The [`ExpSum`] of the kept scaled values of `values` (as [`lse_kept`]
/// reads them): what a vocabulary shard sends, equal to pushing every
/// value. Two passes: the maximum, then each term's part into the sum of
/// its group below the maximum's.
///
/// [`ExpSum`]: specdec_core::exp_sum::ExpSum
pub(super) fn exp_sum_kept<L: Logit>(level: Level, s: &Sampler, values: &[L], tau: f32) -> exp_sum::ExpSum {
    let m = row_max(level, s, values, tau);
    if m.is_infinite() {
        return exp_sum::ExpSum::from_parts(m, [0; GROUPS]);
    }
    exp_sum::ExpSum::from_parts(m, group_sums(level, s, exp_sum::term(m).group(), values, tau))
}

/// [`exp_sum_kept`] of the raw row (temperature 1, every id kept): the sum
/// behind raw log-probabilities (REFERENCE §8).
pub(super) fn raw_exp_sum<L: Logit>(level: Level, values: &[L]) -> exp_sum::ExpSum {
    exp_sum_kept(level, &Sampler::new(1.0, 0, 0, Stream::Target), values, f32::NEG_INFINITY)
}

/// Lanes of [`lse`]'s maximum: one AVX-512 vector, two AVX2 ones.
const LSE_LANES: usize = 16;

/// `vmaxps(y, m)`: `y` if it is larger, else `m` (so NaN `y` is left out).
#[inline(always)]
fn max_ps(y: f32, m: f32) -> f32 {
    if y > m { y } else { m }
}

/// `x` scaled, or `-inf` outside the kept set `{scaled >= tau}` (NaN too)
/// where `tau > -inf`: a masked copy's value, as [`lse_kept`] and
/// [`fold_kept`]'s scalar reference read it.
#[inline(always)]
pub(super) fn kept_scaled(s: &Sampler, x: f32, tau: f32) -> f32 {
    let y = s.scaled(x);
    // Unmasked where `tau > -inf` is false, as the vector levels test it.
    if tau == f32::NEG_INFINITY || tau.is_nan() || y >= tau { y } else { f32::NEG_INFINITY }
}

/// Step 1 of [`lse_kept`], the reference for the vector levels.
fn lane_max_scalar<L: Element>(s: &Sampler, values: &[L], tau: f32) -> [f32; LSE_LANES] {
    let mut m = [f32::NEG_INFINITY; LSE_LANES];
    // Whole groups first, so that the compiler can vectorise: the lanes are
    // independent.
    let groups = values.chunks_exact(LSE_LANES);
    let tail = groups.remainder();
    for group in groups {
        for (m, x) in m.iter_mut().zip(group) {
            *m = max_ps(kept_scaled(s, x.to_f32(), tau), *m);
        }
    }
    for (m, x) in m.iter_mut().zip(tail) {
        *m = max_ps(kept_scaled(s, x.to_f32(), tau), *m);
    }
    m
}

/// The values of a short tail (`len < LSE_LANES`) widened to f32 and padded
/// with `-inf` to a full group, for the vector levels.
#[cfg(target_arch = "x86_64")]
fn padded_tail<L: Element>(tail: &[L]) -> [f32; LSE_LANES] {
    let mut out = [f32::NEG_INFINITY; LSE_LANES];
    for (o, x) in out.iter_mut().zip(tail) {
        *o = x.to_f32();
    }
    out
}

/// Step 3 of the module docs for one block of ids `base .. base + w.len()`
/// (`base % 4 == 0`): folds, in id order and with the scalar code, every quad
/// holding an id whose bit is set in `survivors`. `w` are the scaled logits
/// and `words` the random words of the block's ids.
///
/// A quad whose every score is provably below the best, by [`gumbel_bound`], is
/// left out too: the scalar fold would combine only losers there.
#[inline]
fn fold_survivors(s: &Sampler, mut best: ArgMax, base: u32, w: &[f32], words: &[u32], mut survivors: u128) -> ArgMax {
    while survivors != 0 {
        let q = survivors.trailing_zeros() as usize / 4;
        survivors &= !(0xf << (4 * q));
        let at = 4 * q;
        let quad_w = [w[at], w[at + 1], w[at + 2], w[at + 3]];
        let quad_words = [words[at], words[at + 1], words[at + 2], words[at + 3]];
        // `<` is false for a NaN weight, which the scalar fold must see.
        if (0..4).all(|i| quad_w[i] + gumbel_bound(quad_words[i]) < best.value) {
            continue;
        }
        best = s.fold_log_weights_drawn(best, base + at as u32, quad_w, 4, || quad_words);
    }
    best
}

/// The random words of quads `first_quad .. first_quad + out.len() / 4` of
/// the row keyed by `key` (`out.len() % 4 == 0`), in id order: those of
/// `random_quad(seed, pos, stream, q)` for each quad `q`, drawn as the
/// vector fold draws them. `level` must be supported ([`Level::detect`]).
pub(super) fn words(level: Level, key: &RowKey, first_quad: u32, out: &mut [u32]) {
    debug_assert!(out.len().is_multiple_of(4) && level.supported());
    match level {
        Level::Scalar => {
            for (q, quad) in out.chunks_exact_mut(4).enumerate() {
                quad.copy_from_slice(&random_quad(key.seed, key.pos, key.stream, first_quad + q as u32));
            }
        }
        // SAFETY: the caller has checked that the CPU supports the level.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { avx2::words(key, first_quad, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { avx512::words(key, first_quad, out) },
    }
}

/// The rounds after the two [`RowKey`] folds into per-row constants.
pub(super) const LATER_ROUNDS: usize = PHILOX_ROUNDS as usize - 2;

/// The part of Philox4x32 that is the same for every quad of a row.
///
/// A row's counters `[quad, stream, pos, pos >> 32]` differ only in `ctr[0]`,
/// so besides the key schedule, the first two rounds' products of the other
/// words are per-row constants: the vector code does one multiply per
/// counter in rounds 1 and 2 instead of two.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowKey {
    /// The row's key and counter words, for the scalar level.
    seed: u64,
    pos: u64,
    stream: Stream,
    /// After round 1: `ctr = [_, _, hi(M0·quad) ^ r1_c2, lo(M0·quad)]` (the
    /// first two words only feed the constants below).
    r1_c2: u32,
    /// After round 2: `ctr = [hi(M1·c2) ^ r2_c0, lo(M1·c2), c3 ^ r2_c2, r2_c3]`
    /// with `c2`, `c3` the words after round 1.
    r2_c0: u32,
    r2_c2: u32,
    r2_c3: u32,
    /// The keys of rounds 3 ..= [`PHILOX_ROUNDS`].
    k0: [u32; LATER_ROUNDS],
    k1: [u32; LATER_ROUNDS],
}

impl RowKey {
    pub(super) fn new(s: &Sampler) -> RowKey {
        use specdec_core::rng::{M0, M1, W0, W1};
        let mulhilo = |a: u32, b: u32| {
            let p = a as u64 * b as u64;
            ((p >> 32) as u32, p as u32)
        };
        let key = |round: u32| {
            (
                (s.seed as u32).wrapping_add(round.wrapping_mul(W0)),
                ((s.seed >> 32) as u32).wrapping_add(round.wrapping_mul(W1)),
            )
        };
        let (stream, pos_lo, pos_hi) = (s.stream as u32, s.pos as u32, (s.pos >> 32) as u32);
        // Round 1: ctr[0], ctr[1] do not depend on the quad.
        let (k0, k1) = key(0);
        let (hi1, lo1) = mulhilo(M1, pos_lo);
        let (c0, c1, r1_c2) = (hi1 ^ stream ^ k0, lo1, pos_hi ^ k1);
        // Round 2: M0·ctr[0] is a constant.
        let (k0, k1) = key(1);
        let (hi0, lo0) = mulhilo(M0, c0);
        RowKey {
            seed: s.seed,
            pos: s.pos,
            stream: s.stream,
            r1_c2,
            r2_c0: c1 ^ k0,
            r2_c2: hi0 ^ k1,
            r2_c3: lo0,
            k0: std::array::from_fn(|r| key(r as u32 + 2).0),
            k1: std::array::from_fn(|r| key(r as u32 + 2).1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_core::dtype::{Bf16, F16, bf16_to_f32, f16_to_f32};
    use specdec_core::gumbel::gumbel;
    use specdec_core::rng::random_u32;

    /// The vector levels this CPU can run (the scalar one is the reference).
    fn vector_levels() -> impl Iterator<Item = Level> {
        Level::ALL.iter().copied().filter(|l| *l != Level::Scalar && l.supported())
    }

    /// Keys with every word of seed and position in play, and all streams.
    fn samplers() -> Vec<Sampler> {
        let mut out = Vec::new();
        for (i, (seed, pos)) in
            [(0u64, 0u64), (7, 100), (u64::MAX, u64::MAX), (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210), (1 << 40, 3)]
                .into_iter()
                .enumerate()
        {
            for stream in [Stream::Target, Stream::Draft, Stream::Accept] {
                out.push(Sampler::new(0.25 + i as f32, seed, pos, stream));
            }
        }
        out
    }

    /// [`words`] gives `random_quad`'s words on every level, at the start of
    /// the id range and near its top, for runs of quads that are whole
    /// blocks, ragged, shorter than a block or empty. (The fold draws its
    /// words from the same vector code.)
    #[test]
    fn words_are_random_quad() {
        for level in Level::ALL.iter().copied().filter(|l| l.supported()) {
            for s in samplers() {
                let key = RowKey::new(&s);
                for first_quad in [0u32, 8, 1000, (1 << 30) - 512, (1 << 30) - 64] {
                    for quads in [0usize, 1, 3, 8, 15, 16, 17, 31, 32, 33, 64, 100, 128] {
                        let mut out = vec![0u32; 4 * quads];
                        words(level, &key, first_quad, &mut out);
                        for (q, quad) in out.chunks_exact(4).enumerate() {
                            let want = random_quad(s.seed, s.pos, s.stream, first_quad + q as u32);
                            assert_eq!(quad, want, "{level:?} {s:?} {quads} quads from {first_quad}: quad {q}");
                        }
                    }
                }
            }
        }
    }

    /// The vector loads widen every bf16 and f16 bit pattern as `specdec-core` does.
    #[test]
    fn vector_loads_widen_like_core() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for level in vector_levels() {
            let bf: Vec<f32> = match level {
                Level::Scalar => unreachable!(),
                Level::Avx2 => avx2::load_all(&all.iter().map(|&b| Bf16(b)).collect::<Vec<_>>()),
                Level::Avx512 => avx512::load_all(&all.iter().map(|&b| Bf16(b)).collect::<Vec<_>>()),
            };
            let h: Vec<f32> = match level {
                Level::Scalar => unreachable!(),
                Level::Avx2 => avx2::load_all(&all.iter().map(|&b| F16(b)).collect::<Vec<_>>()),
                Level::Avx512 => avx512::load_all(&all.iter().map(|&b| F16(b)).collect::<Vec<_>>()),
            };
            for &b in &all {
                assert!(same(bf[b as usize], bf16_to_f32(b)), "{level:?} bf16 {b:#06x}");
                assert!(same(h[b as usize], f16_to_f32(b)), "{level:?} f16 {b:#06x}");
            }
        }
    }

    /// A test row: its logits and what makes it interesting.
    struct Row {
        what: &'static str,
        values: Vec<f32>,
    }

    fn word(salt: u64, i: usize) -> u32 {
        random_u32(salt, i as u64, Stream::Accept, 0)
    }

    /// Rows of many lengths (whole blocks and ragged tails) with the values
    /// that take the vector code off its common path.
    fn rows() -> Vec<Row> {
        let lengths = [1usize, 3, 4, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 999, 1024, 4097];
        let mut rows = Vec::new();
        for (k, &n) in lengths.iter().enumerate() {
            let salt = k as u64;
            let normal = |i: usize| (word(salt, i) as f32 / 4_294_967_296.0 - 0.5) * 6.0;
            rows.push(Row { what: "spread", values: (0..n).map(normal).collect() });
            // Far-apart values: most blocks and quads are skipped.
            rows.push(Row { what: "peaked", values: (0..n).map(|i| normal(i) * 40.0).collect() });
            // A few equal values, so that ties are only broken by the noise.
            rows.push(Row { what: "few levels", values: (0..n).map(|i| (word(salt, i) % 3) as f32).collect() });
            rows.push(Row {
                what: "nan, ±inf, ±3e38",
                values: (0..n)
                    .map(|i| match word(salt + 100, i) % 8 {
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 => f32::INFINITY,
                        3 => 3.0e38,
                        4 => -3.0e38,
                        _ => normal(i),
                    })
                    .collect(),
            });
            // Saturation: every scaled value is ±f32::MAX, so all scores tie.
            rows.push(Row {
                what: "saturated",
                values: (0..n).map(|i| if word(salt, i).is_multiple_of(2) { 3.0e38 } else { -3.0e38 }).collect(),
            });
            rows.push(Row { what: "all nan", values: vec![f32::NAN; n] });
            rows.push(Row { what: "all -inf", values: vec![f32::NEG_INFINITY; n] });
            rows.push(Row {
                what: "-inf then nan",
                values: (0..n).map(|i| if i < n / 2 { f32::NEG_INFINITY } else { f32::NAN }).collect(),
            });
            // A winner late in the row after a long prefix of losers.
            let mut late = vec![-50.0f32; n];
            late[n - 1] = 0.0;
            rows.push(Row { what: "late winner", values: late });
        }
        rows.push(Row {
            what: "151936 spread",
            values: (0..151_936).map(|i| (word(77, i) as f32 / 4_294_967_296.0 - 0.5) * 8.0).collect(),
        });
        rows
    }

    fn temperatures() -> [f32; 6] {
        [f32::MIN_POSITIVE, 1e-3, 0.6, 1.0, 1.5, 1e4]
    }

    /// Folds `values` as the CPU backend does for level `level`, from id `base`.
    fn fold_with<L: Logit>(level: Level, s: &Sampler, base: u32, values: &[L]) -> (ArgMax, bool) {
        fold(level, s, ArgMax::IDENTITY, base, values)
    }

    fn bits(a: ArgMax) -> (u32, u32) {
        (a.value.to_bits(), a.index)
    }

    fn check<L: Logit>(dtype: &str, values: &[L], what: &str) {
        for &t in &temperatures() {
            for key in samplers().iter().step_by(4) {
                let s = Sampler::new(t, key.seed, key.pos, key.stream);
                for base in [0u32, 4096] {
                    let want = fold_with(Level::Scalar, &s, base, values);
                    for level in vector_levels() {
                        let got = fold_with(level, &s, base, values);
                        assert_eq!(
                            (bits(got.0), got.1),
                            (bits(want.0), want.1),
                            "{level:?} {dtype} row '{what}' of {} ids, T={t}, base={base}, {s:?}: got {:?}, want {:?}",
                            values.len(),
                            got.0,
                            want.0,
                        );
                    }
                }
            }
        }
    }

    /// Every vector level folds every test row to the scalar fold's winner
    /// (value bits and id) and NaN flag, for f32, bf16 and f16 logits.
    #[test]
    fn vector_folds_equal_the_scalar_fold() {
        for row in rows() {
            let long = row.values.len() > 10_000;
            check("f32", &row.values, row.what);
            if !long {
                let bf: Vec<Bf16> = row.values.iter().map(|&x| Bf16::from_f32(x)).collect();
                check("bf16", &bf, row.what);
                let h: Vec<F16> = row.values.iter().map(|&x| F16::from_f32(x)).collect();
                check("f16", &h, row.what);
            }
        }
    }

    /// A NaN after a block's largest value, in the same vector lane, does not
    /// hide that value from the block skip (`vmaxps` keeps its second operand
    /// where either is NaN, so the operand order matters).
    #[test]
    fn a_nan_does_not_hide_a_blocks_maximum() {
        let s = Sampler::new(1.0, 7, 100, Stream::Target);
        for at in 256..512 {
            for gap in [8, 16, 32] {
                let mut row = vec![-1000.0f32; 640];
                row[..256].fill(0.0);
                row[at] = 100.0;
                row[at + gap] = f32::NAN;
                let want = fold(Level::Scalar, &s, ArgMax::IDENTITY, 0, &row);
                assert_eq!((want.0.index, want.1), (at as u32, true));
                for level in vector_levels() {
                    let got = fold(level, &s, ArgMax::IDENTITY, 0, &row);
                    assert_eq!((bits(got.0), got.1), (bits(want.0), want.1), "{level:?}: 100 at {at}, NaN {gap} later");
                }
            }
        }
    }

    /// Pruning keeps a winner that is far behind on its logit and wins by its
    /// noise alone: the id with the largest word among 2^20, against a leader
    /// at id 0, with every other id hopeless (so nearly every block is skipped).
    #[test]
    fn a_winner_by_noise_alone_is_kept() {
        let s = Sampler::new(1.0, 11, 5, Stream::Draft);
        let n = 1u32 << 20;
        let word = |i: u32| random_u32(s.seed, s.pos, s.stream, i);
        let t = (0..n).max_by_key(|&i| word(i)).expect("n > 0");
        let (g0, gt) = (gumbel(word(0)), gumbel(word(t)));
        assert!(t > 1024 && gt - g0 > 10.0, "the key gives a far-behind winner ({t}, {gt} - {g0})");
        let mut row = vec![-1000.0f32; n as usize];
        row[0] = 0.0;
        row[t as usize] = g0 - gt + 0.01;
        let want = fold(Level::Scalar, &s, ArgMax::IDENTITY, 0, &row);
        assert_eq!(want.0.index, t);
        for level in vector_levels() {
            let got = fold(level, &s, ArgMax::IDENTITY, 0, &row);
            assert_eq!((bits(got.0), got.1), (bits(want.0), want.1), "{level:?}");
        }
    }

    /// [`lse`] at `level` of `values` under temperature `t`.
    fn lse_with<L: Logit>(level: Level, t: f32, values: &[L]) -> f32 {
        lse(level, &Sampler::new(t, 0, 0, Stream::Target), values)
    }

    /// Temperatures for [`lse`]: 0.25, 1 and 4, and two under which most logits saturate.
    const LSE_TEMPERATURES: [f32; 5] = [0.25, 1.0, 4.0, 1e-3, f32::MIN_POSITIVE];

    /// Test rows for [`lse`]: those of the fold, a `+inf` among finite
    /// values, and the empty row.
    fn lse_rows() -> Vec<Row> {
        let mut rows = rows();
        for n in [1usize, 2, 17, 1000] {
            let mut v: Vec<f32> = (0..n).map(|i| (word(9, i) % 1000) as f32 * 1e-2).collect();
            v[n / 2] = f32::INFINITY;
            rows.push(Row { what: "one +inf", values: v });
        }
        rows.push(Row { what: "empty", values: Vec::new() });
        rows
    }

    fn check_lse<L: Logit>(dtype: &str, values: &[L], what: &str) {
        for t in LSE_TEMPERATURES {
            let want = lse_with(Level::Scalar, t, values);
            for level in vector_levels() {
                let got = lse_with(level, t, values);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{level:?} {dtype} row '{what}' of {} ids, T={t}: got {got}, want {want}",
                    values.len(),
                );
            }
        }
    }

    /// Every vector level gives the scalar level's log-sum-exp, bit for bit,
    /// for f32, bf16 and f16 rows of every test length and kind.
    #[test]
    fn vector_lse_equals_the_scalar_lse() {
        for row in lse_rows() {
            check_lse("f32", &row.values, row.what);
            let bf: Vec<Bf16> = row.values.iter().map(|&x| Bf16::from_f32(x)).collect();
            check_lse("bf16", &bf, row.what);
            let h: Vec<F16> = row.values.iter().map(|&x| F16::from_f32(x)).collect();
            check_lse("f16", &h, row.what);
        }
    }

    /// Every level's log-sum-exp, of the whole row and of a kept set, is the
    /// definition's: `ExpSum` over the same scaled values, bit for bit (so
    /// every split of the row, a vocabulary shard's too, gives it); and
    /// every level's group sums ([`exp_sum_kept`]) are the pushed ones.
    #[test]
    fn lse_is_the_exp_sum() {
        for row in lse_rows() {
            for t in LSE_TEMPERATURES {
                let s = Sampler::new(t, 0, 0, Stream::Target);
                let ys: Vec<f32> = row.values.iter().map(|&x| s.scaled(x)).collect();
                let finite: Vec<f32> = ys.iter().copied().filter(|y| y.is_finite()).collect();
                let median = if finite.is_empty() { 0.0 } else { finite[finite.len() / 2] };
                for tau in [f32::NEG_INFINITY, median] {
                    let mut sum = exp_sum::ExpSum::EMPTY;
                    ys.iter().filter(|&&y| tau == f32::NEG_INFINITY || y >= tau).for_each(|&y| sum.push(y));
                    for level in Level::ALL.iter().copied().filter(|l| l.supported()) {
                        let sums = exp_sum_kept(level, &s, &row.values, tau);
                        assert_eq!(sums.sums(), sum.sums(), "{level:?} row '{}', T={t}, tau={tau}", row.what);
                        assert_eq!(sums.lse().to_bits(), sum.lse().to_bits(), "{level:?} row '{}'", row.what);
                        let got = lse_kept(level, &s, &row.values, tau);
                        assert_eq!(
                            got.to_bits(),
                            sum.lse().to_bits(),
                            "{level:?} row '{}' of {} ids, T={t}, tau={tau}: {got} vs {}",
                            row.what,
                            row.values.len(),
                            sum.lse()
                        );
                    }
                }
            }
        }
    }

    /// Every vector level's terms are `exp_sum::term`'s, bit for bit, on a
    /// dense sweep and on values spread over the whole `f32` range (a sum
    /// could hide a term outside its window).
    #[test]
    fn vector_terms_equal_the_scalar_terms() {
        let mut y: Vec<f32> = (0..1 << 20).map(|i| (i as f32 - (1 << 19) as f32) * 3e-4).collect();
        y.extend([0.0, -0.0, 0.5, -0.5, 1e9, -1e9, f32::MAX, -f32::MAX, f32::NEG_INFINITY, f32::NAN, 5.4e8, -5.4e8]);
        y.extend((0..1 << 16).map(|i| f32::from_bits(word(6, i))).filter(|x| x.is_finite()));
        y.resize(y.len().next_multiple_of(16), 1.0);
        for level in vector_levels() {
            let got = match level {
                Level::Scalar => unreachable!(),
                Level::Avx2 => avx2::terms_all(&y),
                Level::Avx512 => avx512::terms_all(&y),
            };
            for (&y, &(k, m)) in y.iter().zip(&got) {
                let want = if y > f32::NEG_INFINITY { exp_sum::term(y) } else { exp_sum::Term { k, m: 0 } };
                assert_eq!((k, u64::from(m)), (want.k, want.m), "{level:?}: term({y})");
            }
        }
    }

    /// `log Σ e^(x·(1/T))` in f64, with the special cases of `Lse`, from the
    /// same saturated f32 scaled values.
    fn lse_f64(s: &Sampler, values: &[f32]) -> f64 {
        let y: Vec<f64> = values.iter().map(|&x| s.scaled(x)).filter(|y| !y.is_nan()).map(f64::from).collect();
        let m = y.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m.is_infinite() {
            return m;
        }
        m + y.iter().map(|&y| (y - m).exp()).sum::<f64>().ln()
    }

    /// Error allowed in a log-sum-exp, relative to `max(|lse|, 1)`: `ln S`
    /// carries the sum's rounding (16 lanes of up to ~10^4 terms each, each
    /// term within about an ulp); the worst of these rows is 2.4e-7.
    const LSE_TOLERANCE: f64 = 1e-6;

    /// [`lse`] is accurate against f64 on every test row, and has the special
    /// cases of `Lse` (infinite results exactly).
    #[test]
    fn lse_is_accurate() {
        let mut worst = 0.0f64;
        for row in lse_rows() {
            for t in LSE_TEMPERATURES {
                let s = Sampler::new(t, 0, 0, Stream::Target);
                let want = lse_f64(&s, &row.values);
                let got = lse(Level::Scalar, &s, &row.values);
                let what = format!("row '{}' of {} ids, T={t}: got {got}, want {want}", row.what, row.values.len());
                if want.is_infinite() {
                    assert_eq!(got as f64, want, "{what}");
                    continue;
                }
                let err = (got as f64 - want).abs() / want.abs().max(1.0);
                assert!(err <= LSE_TOLERANCE, "{what}: error {err:e}");
                worst = worst.max(err);
            }
        }
        eprintln!("lse: worst relative error {worst:e}");
    }

    /// The special cases, spelled out: NaN skipped, `-inf` adds nothing, a
    /// `+inf` wins, nothing above `-inf` gives `-inf`, finite logits saturate.
    #[test]
    fn lse_special_cases() {
        let (nan, inf, ninf) = (f32::NAN, f32::INFINITY, f32::NEG_INFINITY);
        for level in Level::ALL.iter().copied().filter(|l| l.supported()) {
            let lse = |t: f32, v: &[f32]| lse_with(level, t, v);
            for n in [1usize, 5, 16, 33] {
                let base: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
                let want = lse(1.0, &base);
                let mut with = base.clone();
                with.extend([nan, ninf, nan]);
                with.insert(0, nan);
                assert_eq!(
                    lse(1.0, &with).to_bits(),
                    lse(1.0, &[&[ninf], &base[..], &[ninf, ninf]].concat()).to_bits(),
                    "{level:?} n={n}: NaN is skipped like -inf"
                );
                assert!((lse(1.0, &with) - want).abs() <= 1e-6 * want.abs().max(1.0), "{level:?} n={n}");
                with[n / 2] = inf;
                assert_eq!(lse(1.0, &with), inf, "{level:?} n={n}");
                assert_eq!(lse(1.0, &vec![ninf; n]), ninf, "{level:?} n={n}");
                assert_eq!(lse(1.0, &vec![nan; n]), ninf, "{level:?} n={n}");
                assert_eq!(lse(0.25, &[&vec![ninf; n][..], &[nan]].concat()), ninf, "{level:?} n={n}");
            }
            assert_eq!(lse(1.0, &[] as &[f32]), ninf);
            assert_eq!(lse(1.0, &[2.5]), 2.5);
            // 3e38/0.25 saturates to f32::MAX, which absorbs ln 2; -inf/0.25 stays -inf.
            assert_eq!(lse(0.25, &[3e38, 3e38, ninf]), f32::MAX, "{level:?}");
            assert_eq!(lse(0.25, &[-3e38, -3e38]), -f32::MAX, "{level:?}");
            // e^(y − m) below the smallest normal adds nothing.
            assert_eq!(lse(1.0, &[0.0, -100.0, -1e30]), 0.0, "{level:?}");
        }
    }
}
