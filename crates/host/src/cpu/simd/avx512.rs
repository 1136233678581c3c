//! The random-row fold of the parent module on AVX-512F: Philox for eight
//! quads per vector, one counter per 64-bit lane, where `vpmuludq` gives the
//! full 32×32→64 product. A counter's words live in the low halves of their
//! lanes; the high halves carry garbage that is never read.

use super::{
    COARSE_BOUND, LATER_ROUNDS, LSE_LANES, Logit, RowKey, TOP_BUCKET, fold_scalar, fold_survivors, padded_tail,
};
use core::arch::x86_64::*;
use core::mem::transmute;
use specdec_core::argmax::ArgMax;
use specdec_core::dtype::{Bf16, F16};
use specdec_core::exp_sum::{EXP2_COEFFICIENTS, GROUP_BITS, GROUPS, LOG2E_HI, LOG2E_LO, SCALE, SPLIT, Y_MAX};
use specdec_core::gumbel::GUMBEL_MAX;
use specdec_core::rng::{M0, M1};
use specdec_core::sample::Sampler;

/// Philox counter vectors per block. One vector's rounds are a chain of
/// dependent multiplies; four chains overlap them (measured: 2 and 3 are
/// slower).
const CHAINS: usize = 4;
/// Ids per block: 8 quads per chain.
const BLOCK: usize = 32 * CHAINS;
/// Vectors of 16 ids per block.
const VECS: usize = BLOCK / 16;

/// An element type loaded 16 at a time, widened to f32 as `Element::to_f32` does.
pub(in crate::cpu) trait Load: Sized {
    /// # Safety
    /// 16 elements are readable at `p`, and the CPU supports AVX-512F.
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Load for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: the caller's promise.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Load for Bf16 {
    #[inline(always)]
    unsafe fn load16(p: *const Bf16) -> __m512 {
        // SAFETY: the caller's promise (`Bf16` is a `u16`).
        let bits = unsafe { _mm256_loadu_si256(p.cast()) };
        // SAFETY: AVX-512F, by the caller's promise.
        unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits))) }
    }
}

impl Load for F16 {
    #[inline(always)]
    unsafe fn load16(p: *const F16) -> __m512 {
        // SAFETY: the caller's promise (`F16` is a `u16`).
        let bits = unsafe { _mm256_loadu_si256(p.cast()) };
        // SAFETY: AVX-512F, by the caller's promise. The conversion is exact.
        unsafe { _mm512_cvtph_ps(bits) }
    }
}

/// [`super::fold`] on AVX-512F.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn fold<L: Logit>(
    s: &Sampler,
    mut best: ArgMax,
    base: u32,
    values: &[L],
    tau: f32,
) -> (ArgMax, bool) {
    let key = Key::new(&RowKey::new(s));
    let scale = _mm512_set1_ps(s.scale);
    let (masked, tau_v, ninf) = (tau > f32::NEG_INFINITY, _mm512_set1_ps(tau), _mm512_set1_ps(f32::NEG_INFINITY));
    let coarse = _mm512_set1_ps(COARSE_BOUND);
    let gumbel_max = _mm512_set1_ps(GUMBEL_MAX);
    let top_bucket = _mm512_set1_epi32(TOP_BUCKET as i32);
    let mut nan = false;
    let blocks = values.chunks_exact(BLOCK);
    let tail = blocks.remainder();
    for (b, block) in blocks.enumerate() {
        let first = base + (b * BLOCK) as u32;
        let mut w = [_mm512_setzero_ps(); VECS];
        let mut hi = _mm512_set1_ps(f32::NEG_INFINITY);
        for (i, w) in w.iter_mut().enumerate() {
            // SAFETY: the block holds 16·VECS elements; the CPU has AVX-512F.
            let x = unsafe { L::load16(block.as_ptr().add(16 * i)) };
            let (mut y, x_nan) = scaled(x, scale);
            nan |= x_nan;
            if masked {
                // Outside the kept set (NaN too: the compare is ordered): -inf.
                y = _mm512_mask_mov_ps(ninf, _mm512_cmp_ps_mask::<_CMP_GE_OQ>(y, tau_v), y);
            }
            *w = y;
            // `vmaxps` returns its second operand where either is NaN: NaN
            // lanes are left out, as in the scalar quad test.
            hi = _mm512_max_ps(y, hi);
        }
        let best_v = _mm512_set1_ps(best.value);
        if _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_add_ps(hi, gumbel_max), best_v) == u16::MAX {
            continue;
        }
        let words = key.words(first / 4);
        let mut keep = [0; VECS];
        let mut any = 0;
        for i in 0..VECS {
            let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_add_ps(w[i], coarse), best_v);
            keep[i] = _mm512_kor(_mm512_knot(below), _mm512_cmpge_epu32_mask(words[i], top_bucket));
            any = _mm512_kor(any, keep[i]);
        }
        if any != 0 {
            let mut survivors = 0u128;
            for (i, &k) in keep.iter().enumerate() {
                survivors |= u128::from(k) << (16 * i);
            }
            // SAFETY: a vector is 16 plain 32-bit lanes, in memory order.
            let (w, words) = unsafe {
                (transmute::<[__m512; VECS], [f32; BLOCK]>(w), transmute::<[__m512i; VECS], [u32; BLOCK]>(words))
            };
            best = fold_survivors(s, best, first, &w, &words, survivors);
        }
    }
    let done = values.len() - tail.len();
    let (best, tail_nan) = fold_scalar(s, best, base + done as u32, tail, tau);
    (best, nan || tail_nan)
}

// The 16 lanes of `super::lse` are one vector.
const _: () = assert!(LSE_LANES == 16);

/// Step 1 of [`super::lse`] on AVX-512F: the lanes' maxima.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn lane_max<L: Logit>(scale: f32, values: &[L], tau: f32) -> [f32; LSE_LANES] {
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    // SAFETY: forwarded.
    unsafe { for_each_group(scale, values, tau, |y| m = _mm512_max_ps(y, m)) };
    // SAFETY: a vector is 16 plain f32 lanes, in memory order.
    unsafe { transmute(m) }
}

/// `super::group_sums` on AVX-512F: the terms 16 at a time
/// (`specdec_core::exp_sum::term`'s steps), each part `m << (k mod 32)`
/// added, 8 at a time, to its group's sum as a 128-bit integer split into
/// 64-bit halves.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn group_sums<L: Logit>(scale: f32, top: i32, values: &[L], tau: f32) -> [u128; GROUPS] {
    let top = _mm512_set1_epi64(i64::from(top));
    let (mut lo, mut hi) = ([_mm512_setzero_si512(); GROUPS], [_mm512_setzero_si512(); GROUPS]);
    let mut add = |k: __m256i, m: __m256i| {
        let low_bits = _mm256_and_si256(k, _mm256_set1_epi32((1 << GROUP_BITS) - 1));
        let part = _mm512_sllv_epi64(_mm512_cvtepu32_epi64(m), _mm512_cvtepi32_epi64(low_bits));
        let j = _mm512_sub_epi64(top, _mm512_cvtepi32_epi64(_mm256_srai_epi32::<{ GROUP_BITS as i32 }>(k)));
        for (g, (lo, hi)) in lo.iter_mut().zip(&mut hi).enumerate() {
            let mine = _mm512_cmpeq_epi64_mask(j, _mm512_set1_epi64(g as i64));
            *lo = _mm512_mask_add_epi64(*lo, mine, *lo, part);
            // A carry out of the low half where the sum wrapped below the part.
            let carry = _mm512_mask_cmplt_epu64_mask(mine, *lo, part);
            *hi = _mm512_mask_add_epi64(*hi, carry, *hi, _mm512_set1_epi64(1));
        }
    };
    // SAFETY: forwarded.
    unsafe {
        for_each_group(scale, values, tau, |y| {
            let (k, m) = terms(y);
            add(_mm512_castsi512_si256(k), _mm512_castsi512_si256(m));
            add(_mm512_extracti64x4_epi64::<1>(k), _mm512_extracti64x4_epi64::<1>(m));
        })
    };
    core::array::from_fn(|g| {
        // SAFETY: a vector is 8 plain u64 lanes.
        let (lo, hi) = unsafe { (transmute::<__m512i, [u64; 8]>(lo[g]), transmute::<__m512i, [u64; 8]>(hi[g])) };
        lo.iter().zip(&hi).map(|(&lo, &hi)| (u128::from(hi) << 64) + u128::from(lo)).sum()
    })
}

/// `specdec_core::exp_sum::term` of 16 values `y`, step for step: `(k, m)`
/// in 32-bit lanes, `m = 0` where `y` is NaN or `-inf`.
#[target_feature(enable = "avx512f")]
#[inline]
fn terms(y: __m512) -> (__m512i, __m512i) {
    let live = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(y, _mm512_set1_ps(f32::NEG_INFINITY));
    let y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-Y_MAX)), _mm512_set1_ps(Y_MAX));
    let c = _mm512_mul_ps(y, _mm512_set1_ps(SPLIT));
    let yh = _mm512_sub_ps(c, _mm512_sub_ps(c, y));
    let yl = _mm512_sub_ps(y, yh);
    let a = _mm512_mul_ps(yh, _mm512_set1_ps(LOG2E_HI));
    let b = _mm512_add_ps(_mm512_mul_ps(yl, _mm512_set1_ps(LOG2E_HI)), _mm512_mul_ps(y, _mm512_set1_ps(LOG2E_LO)));
    let (ka, kb) = (round_half_away(a), round_half_away(b));
    let r = _mm512_add_ps(_mm512_sub_ps(a, _mm512_cvtepi32_ps(ka)), _mm512_sub_ps(b, _mm512_cvtepi32_ps(kb)));
    let k = _mm512_add_epi32(ka, kb);
    let (one, half) = (_mm512_set1_ps(1.0), _mm512_set1_ps(0.5));
    let up = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(r, half);
    let down = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(r, _mm512_set1_ps(-0.5));
    let r = _mm512_mask_add_ps(_mm512_mask_sub_ps(r, up, r, one), down, r, one);
    let k = _mm512_mask_sub_epi32(_mm512_mask_add_epi32(k, up, k, _mm512_set1_epi32(1)), down, k, _mm512_set1_epi32(1));
    let c = &EXP2_COEFFICIENTS;
    let mut p = _mm512_set1_ps(c[6]);
    for &c in c[..6].iter().rev() {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c));
    }
    let p = _mm512_add_ps(_mm512_mul_ps(p, r), one);
    let m = _mm512_cvttps_epi32(_mm512_mul_ps(p, _mm512_set1_ps(SCALE)));
    (k, _mm512_maskz_mov_epi32(live, m))
}

/// `specdec_core::exp_sum::round_half_away` of 16 values.
#[target_feature(enable = "avx512f")]
#[inline]
fn round_half_away(x: __m512) -> __m512i {
    let sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(i32::MIN));
    let half = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0.5f32.to_bits() as i32)));
    _mm512_cvttps_epi32(_mm512_add_ps(x, half))
}

/// Calls `f` on the scaled logits of `values` 16 at a time, those outside
/// `{scaled >= tau}` at `-inf` where `tau > -inf`; the tail is padded with
/// `-inf`.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn for_each_group<L: Logit>(scale: f32, values: &[L], tau: f32, mut f: impl FnMut(__m512)) {
    let scale = _mm512_set1_ps(scale);
    let (masked, tau) = (tau > f32::NEG_INFINITY, _mm512_set1_ps(tau));
    // Outside the kept set (NaN too: the compare is ordered): -inf.
    let kept = |y: __m512| {
        if masked {
            _mm512_mask_mov_ps(_mm512_set1_ps(f32::NEG_INFINITY), _mm512_cmp_ps_mask::<_CMP_GE_OQ>(y, tau), y)
        } else {
            y
        }
    };
    let groups = values.chunks_exact(LSE_LANES);
    let tail = groups.remainder();
    for group in groups {
        // SAFETY: the group holds 16 elements; the CPU has AVX-512F.
        let x = unsafe { L::load16(group.as_ptr()) };
        f(kept(scaled(x, scale).0));
    }
    if !tail.is_empty() {
        let tail = padded_tail(tail);
        // SAFETY: as above.
        let x = unsafe { f32::load16(tail.as_ptr()) };
        f(kept(scaled(x, scale).0));
    }
}

/// `Sampler::scaled`, 16 lanes at a time, and whether any `x` is NaN.
#[target_feature(enable = "avx512f")]
#[inline]
fn scaled(x: __m512, scale: __m512) -> (__m512, bool) {
    let (inf, ninf) = (_mm512_set1_ps(f32::INFINITY), _mm512_set1_ps(f32::NEG_INFINITY));
    let y = _mm512_mul_ps(x, scale);
    // One test for both rare cases: `|y|` is infinite or NaN.
    if _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(_mm512_abs_ps(y), inf) == 0 {
        return (y, false);
    }
    let up = _mm512_mask_cmp_ps_mask::<_CMP_NEQ_UQ>(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(y, inf), x, inf);
    let down = _mm512_mask_cmp_ps_mask::<_CMP_NEQ_UQ>(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(y, ninf), x, ninf);
    let y = _mm512_mask_mov_ps(y, up, _mm512_set1_ps(f32::MAX));
    let y = _mm512_mask_mov_ps(y, down, _mm512_set1_ps(-f32::MAX));
    (y, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x) != 0)
}

/// A row's [`RowKey`] broadcast to every lane.
struct Key {
    r1_c2: __m512i,
    r2_c0: __m512i,
    r2_c2: __m512i,
    r2_c3: __m512i,
    k0: [__m512i; LATER_ROUNDS],
    k1: [__m512i; LATER_ROUNDS],
}

impl Key {
    #[target_feature(enable = "avx512f")]
    fn new(key: &RowKey) -> Key {
        let splat = |x: u32| _mm512_set1_epi32(x as i32);
        let (mut k0, mut k1) = ([_mm512_setzero_si512(); LATER_ROUNDS], [_mm512_setzero_si512(); LATER_ROUNDS]);
        for (r, (k0, k1)) in k0.iter_mut().zip(&mut k1).enumerate() {
            (*k0, *k1) = (splat(key.k0[r]), splat(key.k1[r]));
        }
        Key {
            r1_c2: splat(key.r1_c2),
            r2_c0: splat(key.r2_c0),
            r2_c2: splat(key.r2_c2),
            r2_c3: splat(key.r2_c3),
            k0,
            k1,
        }
    }

    /// The random words of quads `first_quad .. first_quad + 8·CHAINS`, in id
    /// order, 16 per vector.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn words(&self, first_quad: u32) -> [__m512i; VECS] {
        // Lane l counts quad `order[l]`, so that the unpacks below leave the words in id order.
        let order = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
        let mut ctr = [[_mm512_setzero_si512(); 4]; CHAINS];
        for (c, ctr) in ctr.iter_mut().enumerate() {
            let quad = _mm512_add_epi64(_mm512_set1_epi64(i64::from(first_quad + 8 * c as u32)), order);
            let p0 = _mm512_mul_epu32(quad, _mm512_set1_epi64(M0 as i64));
            let c2 = _mm512_xor_si512(high(p0), self.r1_c2);
            let p1 = _mm512_mul_epu32(c2, _mm512_set1_epi64(M1 as i64));
            *ctr = [_mm512_xor_si512(high(p1), self.r2_c0), p1, _mm512_xor_si512(p0, self.r2_c2), self.r2_c3];
        }
        // Spelled out: LLVM keeps a loop over the round keys, with moves.
        const { assert!(LATER_ROUNDS == 5, "one call per later round") };
        round(&mut ctr, self.k0[0], self.k1[0]);
        round(&mut ctr, self.k0[1], self.k1[1]);
        round(&mut ctr, self.k0[2], self.k1[2]);
        round(&mut ctr, self.k0[3], self.k1[3]);
        round(&mut ctr, self.k0[4], self.k1[4]);
        // Low halves of words 0 and 1 (2 and 3) side by side: one quad's pair per 64-bit lane.
        let pairs = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
        let mut out = [_mm512_setzero_si512(); VECS];
        for (c, ctr) in ctr.iter().enumerate() {
            let w01 = _mm512_permutex2var_epi32(ctr[0], pairs, ctr[1]);
            let w23 = _mm512_permutex2var_epi32(ctr[2], pairs, ctr[3]);
            out[2 * c] = _mm512_unpacklo_epi64(w01, w23);
            out[2 * c + 1] = _mm512_unpackhi_epi64(w01, w23);
        }
        out
    }
}

/// [`super::words`] on AVX-512F: whole blocks, then a last block cut short.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn words(key: &RowKey, first_quad: u32, out: &mut [u32]) {
    let key = Key::new(key);
    let whole = out.len() / BLOCK * BLOCK;
    let (blocks, tail) = out.split_at_mut(whole);
    for (b, block) in blocks.chunks_exact_mut(BLOCK).enumerate() {
        // SAFETY: a vector is plain 32-bit lanes, in memory order.
        let w: [u32; BLOCK] = unsafe { transmute(key.words(first_quad + (b * BLOCK / 4) as u32)) };
        block.copy_from_slice(&w);
    }
    if !tail.is_empty() {
        // SAFETY: as above.
        let w: [u32; BLOCK] = unsafe { transmute(key.words(first_quad + (whole / 4) as u32)) };
        tail.copy_from_slice(&w[..tail.len()]);
    }
}

/// One Philox round of every chain, with round key `(k0, k1)`.
#[target_feature(enable = "avx512f")]
#[inline]
fn round(ctr: &mut [[__m512i; 4]; CHAINS], k0: __m512i, k1: __m512i) {
    for c in ctr.iter_mut() {
        let p0 = _mm512_mul_epu32(c[0], _mm512_set1_epi64(M0 as i64));
        let p1 = _mm512_mul_epu32(c[2], _mm512_set1_epi64(M1 as i64));
        *c = [
            _mm512_ternarylogic_epi32::<XOR3>(high(p1), c[1], k0),
            p1,
            _mm512_ternarylogic_epi32::<XOR3>(high(p0), c[3], k1),
            p0,
        ];
    }
}

/// `a ^ b ^ c` as a `vpternlogd` truth table.
const XOR3: i32 = 0x96;

/// The high half of each 64-bit lane into its low half (the high half keeps
/// garbage), on the shuffle port, away from the multiplies.
#[target_feature(enable = "avx512f")]
#[inline]
fn high(x: __m512i) -> __m512i {
    _mm512_shuffle_epi32::<0b11_11_01_01>(x)
}

/// `values` (a multiple of 16 long) widened by [`Load::load16`], for the tests.
#[cfg(test)]
pub(super) fn load_all<L: Load>(values: &[L]) -> Vec<f32> {
    assert!(super::Level::Avx512.supported());
    let mut out = Vec::with_capacity(values.len());
    for chunk in values.chunks_exact(16) {
        // SAFETY: 16 elements at the pointer; the CPU has AVX-512F (just checked).
        let x: [f32; 16] = unsafe { transmute(L::load16(chunk.as_ptr())) };
        out.extend_from_slice(&x);
    }
    out
}

/// `specdec_core::exp_sum::term` of `y` (a multiple of 16 long) by [`terms`], for the tests.
#[cfg(test)]
pub(super) fn terms_all(y: &[f32]) -> Vec<(i32, u32)> {
    assert!(super::Level::Avx512.supported());
    let mut out = Vec::with_capacity(y.len());
    for chunk in y.chunks_exact(16) {
        // SAFETY: 16 elements at the pointer; the CPU has AVX-512F (just checked).
        let (k, m) = unsafe { terms(_mm512_loadu_ps(chunk.as_ptr())) };
        // SAFETY: a vector is 16 plain 32-bit lanes.
        let (k, m) = unsafe { (transmute::<__m512i, [i32; 16]>(k), transmute::<__m512i, [u32; 16]>(m)) };
        out.extend(k.into_iter().zip(m));
    }
    out
}
