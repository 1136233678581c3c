//! The random-row fold of the parent module on AVX2: Philox for four
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
/// Ids per block: 4 quads per chain.
const BLOCK: usize = 16 * CHAINS;
/// Vectors of 8 ids per block.
const VECS: usize = BLOCK / 8;

// The top-bucket test below compares the word's top byte with all ones.
const _: () = assert!(TOP_BUCKET == 0xff00_0000);

/// An element type loaded 8 at a time, widened to f32 as `Element::to_f32` does.
pub(in crate::cpu) trait Load: Sized {
    /// # Safety
    /// 8 elements are readable at `p`, and the CPU supports AVX2 and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
}

impl Load for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: the caller's promise.
        unsafe { _mm256_loadu_ps(p) }
    }
}

impl Load for Bf16 {
    #[inline(always)]
    unsafe fn load8(p: *const Bf16) -> __m256 {
        // SAFETY: the caller's promise (`Bf16` is a `u16`).
        let bits = unsafe { _mm_loadu_si128(p.cast()) };
        // SAFETY: AVX2, by the caller's promise.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits))) }
    }
}

impl Load for F16 {
    #[inline(always)]
    unsafe fn load8(p: *const F16) -> __m256 {
        // SAFETY: the caller's promise (`F16` is a `u16`).
        let bits = unsafe { _mm_loadu_si128(p.cast()) };
        // SAFETY: F16C, by the caller's promise. The conversion is exact.
        unsafe { _mm256_cvtph_ps(bits) }
    }
}

/// [`super::fold`] on AVX2.
///
/// # Safety
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn fold<L: Logit>(
    s: &Sampler,
    mut best: ArgMax,
    base: u32,
    values: &[L],
    tau: f32,
) -> (ArgMax, bool) {
    let key = Key::new(&RowKey::new(s));
    let scale = _mm256_set1_ps(s.scale);
    let (masked, tau_v, ninf) = (tau > f32::NEG_INFINITY, _mm256_set1_ps(tau), _mm256_set1_ps(f32::NEG_INFINITY));
    let coarse = _mm256_set1_ps(COARSE_BOUND);
    let gumbel_max = _mm256_set1_ps(GUMBEL_MAX);
    let all_ones = _mm256_set1_epi32(-1);
    let mut nan = false;
    let blocks = values.chunks_exact(BLOCK);
    let tail = blocks.remainder();
    for (b, block) in blocks.enumerate() {
        let first = base + (b * BLOCK) as u32;
        let mut w = [_mm256_setzero_ps(); VECS];
        let mut hi = _mm256_set1_ps(f32::NEG_INFINITY);
        for (i, w) in w.iter_mut().enumerate() {
            // SAFETY: the block holds 8·VECS elements; the CPU has AVX2 and F16C.
            let x = unsafe { L::load8(block.as_ptr().add(8 * i)) };
            let (mut y, x_nan) = scaled(x, scale);
            nan |= x_nan;
            if masked {
                // Outside the kept set (NaN too: the compare is ordered): -inf.
                y = _mm256_blendv_ps(ninf, y, _mm256_cmp_ps::<_CMP_GE_OQ>(y, tau_v));
            }
            *w = y;
            // `vmaxps` returns its second operand where either is NaN: NaN
            // lanes are left out, as in the scalar quad test.
            hi = _mm256_max_ps(y, hi);
        }
        let best_v = _mm256_set1_ps(best.value);
        if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_add_ps(hi, gumbel_max), best_v)) == 0xff {
            continue;
        }
        let words = key.words(first / 4);
        let mut keep = [_mm256_setzero_ps(); VECS];
        let mut any = _mm256_setzero_ps();
        for i in 0..VECS {
            let not_below = _mm256_cmp_ps::<_CMP_NLT_UQ>(_mm256_add_ps(w[i], coarse), best_v);
            // Words >= TOP_BUCKET are those whose top byte is all ones.
            let top = _mm256_cmpeq_epi32(_mm256_srai_epi32::<24>(words[i]), all_ones);
            keep[i] = _mm256_or_ps(not_below, _mm256_castsi256_ps(top));
            any = _mm256_or_ps(any, keep[i]);
        }
        if _mm256_movemask_ps(any) != 0 {
            let mut survivors = 0u128;
            for (i, &k) in keep.iter().enumerate() {
                survivors |= (_mm256_movemask_ps(k) as u128) << (8 * i);
            }
            // SAFETY: a vector is 8 plain 32-bit lanes, in memory order.
            let (w, words) = unsafe {
                (transmute::<[__m256; VECS], [f32; BLOCK]>(w), transmute::<[__m256i; VECS], [u32; BLOCK]>(words))
            };
            best = fold_survivors(s, best, first, &w, &words, survivors);
        }
    }
    let done = values.len() - tail.len();
    let (best, tail_nan) = fold_scalar(s, best, base + done as u32, tail, tau);
    (best, nan || tail_nan)
}

// The 16 lanes of `super::lse`'s maximum are two vectors: lanes 0..8 and 8..16.
const _: () = assert!(LSE_LANES == 16);

/// Step 1 of [`super::lse`] on AVX2: the lanes' maxima (two vectors:
/// lanes 0..8 and 8..16).
///
/// # Safety
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn lane_max<L: Logit>(scale: f32, values: &[L], tau: f32) -> [f32; LSE_LANES] {
    let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
    // SAFETY: forwarded.
    unsafe { for_each_group(scale, values, tau, |h, y| m[h] = _mm256_max_ps(y, m[h])) };
    // SAFETY: a vector is 8 plain f32 lanes, in memory order.
    unsafe { transmute(m) }
}

/// `super::group_sums` on AVX2: the terms 8 at a time
/// (`specdec_core::exp_sum::term`'s steps), each part `m << (k mod 32)`
/// added, 4 at a time, to its group's sum as a 128-bit integer split into
/// 64-bit halves.
///
/// # Safety
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn group_sums<L: Logit>(scale: f32, top: i32, values: &[L], tau: f32) -> [u128; GROUPS] {
    let (top, sign) = (_mm256_set1_epi64x(i64::from(top)), _mm256_set1_epi64x(i64::MIN));
    let (mut lo, mut hi) = ([_mm256_setzero_si256(); GROUPS], [_mm256_setzero_si256(); GROUPS]);
    let mut add = |k: __m128i, m: __m128i| {
        let low_bits = _mm_and_si128(k, _mm_set1_epi32((1 << GROUP_BITS) - 1));
        let part = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(m), _mm256_cvtepi32_epi64(low_bits));
        let j = _mm256_sub_epi64(top, _mm256_cvtepi32_epi64(_mm_srai_epi32::<{ GROUP_BITS as i32 }>(k)));
        for (g, (lo, hi)) in lo.iter_mut().zip(&mut hi).enumerate() {
            let part = _mm256_and_si256(part, _mm256_cmpeq_epi64(j, _mm256_set1_epi64x(g as i64)));
            *lo = _mm256_add_epi64(*lo, part);
            // A carry out of the low half where the sum wrapped below the part
            // (an unsigned compare: both sign bits flipped); the mask is -1 there.
            let carry = _mm256_cmpgt_epi64(_mm256_xor_si256(part, sign), _mm256_xor_si256(*lo, sign));
            *hi = _mm256_sub_epi64(*hi, carry);
        }
    };
    // SAFETY: forwarded.
    unsafe {
        for_each_group(scale, values, tau, |_, y| {
            let (k, m) = terms(y);
            add(_mm256_castsi256_si128(k), _mm256_castsi256_si128(m));
            add(_mm256_extracti128_si256::<1>(k), _mm256_extracti128_si256::<1>(m));
        })
    };
    core::array::from_fn(|g| {
        // SAFETY: a vector is 4 plain u64 lanes.
        let (lo, hi) = unsafe { (transmute::<__m256i, [u64; 4]>(lo[g]), transmute::<__m256i, [u64; 4]>(hi[g])) };
        lo.iter().zip(&hi).map(|(&lo, &hi)| (u128::from(hi) << 64) + u128::from(lo)).sum()
    })
}

/// `specdec_core::exp_sum::term` of 8 values `y`, step for step: `(k, m)` in
/// 32-bit lanes, `m = 0` where `y` is NaN or `-inf`.
#[target_feature(enable = "avx2")]
#[inline]
fn terms(y: __m256) -> (__m256i, __m256i) {
    let live = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GT_OQ>(y, _mm256_set1_ps(f32::NEG_INFINITY)));
    let y = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(-Y_MAX)), _mm256_set1_ps(Y_MAX));
    let c = _mm256_mul_ps(y, _mm256_set1_ps(SPLIT));
    let yh = _mm256_sub_ps(c, _mm256_sub_ps(c, y));
    let yl = _mm256_sub_ps(y, yh);
    let a = _mm256_mul_ps(yh, _mm256_set1_ps(LOG2E_HI));
    let b = _mm256_add_ps(_mm256_mul_ps(yl, _mm256_set1_ps(LOG2E_HI)), _mm256_mul_ps(y, _mm256_set1_ps(LOG2E_LO)));
    let (ka, kb) = (round_half_away(a), round_half_away(b));
    let r = _mm256_add_ps(_mm256_sub_ps(a, _mm256_cvtepi32_ps(ka)), _mm256_sub_ps(b, _mm256_cvtepi32_ps(kb)));
    let k = _mm256_add_epi32(ka, kb);
    // Masks of all ones where `r` is past 1/2 (or -1/2): `k` minus the mask adds one.
    let one = _mm256_set1_ps(1.0);
    let up = _mm256_cmp_ps::<_CMP_GT_OQ>(r, _mm256_set1_ps(0.5));
    let down = _mm256_cmp_ps::<_CMP_LT_OQ>(r, _mm256_set1_ps(-0.5));
    let r = _mm256_add_ps(_mm256_sub_ps(r, _mm256_and_ps(up, one)), _mm256_and_ps(down, one));
    let k = _mm256_add_epi32(_mm256_sub_epi32(k, _mm256_castps_si256(up)), _mm256_castps_si256(down));
    let c = &EXP2_COEFFICIENTS;
    let mut p = _mm256_set1_ps(c[6]);
    for &c in c[..6].iter().rev() {
        p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
    }
    let p = _mm256_add_ps(_mm256_mul_ps(p, r), one);
    let m = _mm256_cvttps_epi32(_mm256_mul_ps(p, _mm256_set1_ps(SCALE)));
    (k, _mm256_and_si256(live, m))
}

/// `specdec_core::exp_sum::round_half_away` of 8 values.
#[target_feature(enable = "avx2")]
#[inline]
fn round_half_away(x: __m256) -> __m256i {
    let sign = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN)));
    _mm256_cvttps_epi32(_mm256_add_ps(x, _mm256_or_ps(sign, _mm256_set1_ps(0.5))))
}

/// Calls `f(h, y)` on the scaled logits of `values` 16 at a time, as two
/// halves `h = 0, 1` of 8, those outside `{scaled >= tau}` at `-inf` where
/// `tau > -inf`; the tail is padded with `-inf`.
///
/// # Safety
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn for_each_group<L: Logit>(scale: f32, values: &[L], tau: f32, mut f: impl FnMut(usize, __m256)) {
    let scale = _mm256_set1_ps(scale);
    let (masked, tau) = (tau > f32::NEG_INFINITY, _mm256_set1_ps(tau));
    // Outside the kept set (NaN too: the compare is ordered): -inf.
    let kept = |y: __m256| {
        if masked {
            _mm256_blendv_ps(_mm256_set1_ps(f32::NEG_INFINITY), y, _mm256_cmp_ps::<_CMP_GE_OQ>(y, tau))
        } else {
            y
        }
    };
    let groups = values.chunks_exact(LSE_LANES);
    let tail = groups.remainder();
    for group in groups {
        for h in 0..2 {
            // SAFETY: the group holds 16 elements; the CPU has AVX2 and F16C.
            let x = unsafe { L::load8(group.as_ptr().add(8 * h)) };
            f(h, kept(scaled(x, scale).0));
        }
    }
    if !tail.is_empty() {
        let tail = padded_tail(tail);
        for h in 0..2 {
            // SAFETY: as above.
            let x = unsafe { f32::load8(tail.as_ptr().add(8 * h)) };
            f(h, kept(scaled(x, scale).0));
        }
    }
}

/// `Sampler::scaled`, 8 lanes at a time, and whether any `x` is NaN.
#[target_feature(enable = "avx2")]
#[inline]
fn scaled(x: __m256, scale: __m256) -> (__m256, bool) {
    let (inf, ninf) = (_mm256_set1_ps(f32::INFINITY), _mm256_set1_ps(f32::NEG_INFINITY));
    let y = _mm256_mul_ps(x, scale);
    let abs = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
    // One test for both rare cases: `|y|` is infinite or NaN.
    if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(abs, inf)) == 0 {
        return (y, false);
    }
    let up = _mm256_and_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(y, inf), _mm256_cmp_ps::<_CMP_NEQ_UQ>(x, inf));
    let down = _mm256_and_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(y, ninf), _mm256_cmp_ps::<_CMP_NEQ_UQ>(x, ninf));
    let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::MAX), up);
    let y = _mm256_blendv_ps(y, _mm256_set1_ps(-f32::MAX), down);
    (y, _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)) != 0)
}

/// A row's [`RowKey`] broadcast to every lane.
struct Key {
    r1_c2: __m256i,
    r2_c0: __m256i,
    r2_c2: __m256i,
    r2_c3: __m256i,
    k0: [__m256i; LATER_ROUNDS],
    k1: [__m256i; LATER_ROUNDS],
}

impl Key {
    #[target_feature(enable = "avx2")]
    fn new(key: &RowKey) -> Key {
        let splat = |x: u32| _mm256_set1_epi32(x as i32);
        let (mut k0, mut k1) = ([_mm256_setzero_si256(); LATER_ROUNDS], [_mm256_setzero_si256(); LATER_ROUNDS]);
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

    /// The random words of quads `first_quad .. first_quad + 4·CHAINS`, in id
    /// order, 8 per vector.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn words(&self, first_quad: u32) -> [__m256i; VECS] {
        // Lane l counts quad `order[l]`, so that the unpacks below leave the words in id order.
        let order = _mm256_setr_epi64x(0, 2, 1, 3);
        let mut ctr = [[_mm256_setzero_si256(); 4]; CHAINS];
        for (c, ctr) in ctr.iter_mut().enumerate() {
            let quad = _mm256_add_epi64(_mm256_set1_epi64x(i64::from(first_quad + 4 * c as u32)), order);
            let p0 = _mm256_mul_epu32(quad, _mm256_set1_epi64x(M0 as i64));
            let c2 = _mm256_xor_si256(high(p0), self.r1_c2);
            let p1 = _mm256_mul_epu32(c2, _mm256_set1_epi64x(M1 as i64));
            *ctr = [_mm256_xor_si256(high(p1), self.r2_c0), p1, _mm256_xor_si256(p0, self.r2_c2), self.r2_c3];
        }
        // Spelled out: LLVM keeps a loop over the round keys, with moves.
        const { assert!(LATER_ROUNDS == 5, "one call per later round") };
        round(&mut ctr, self.k0[0], self.k1[0]);
        round(&mut ctr, self.k0[1], self.k1[1]);
        round(&mut ctr, self.k0[2], self.k1[2]);
        round(&mut ctr, self.k0[3], self.k1[3]);
        round(&mut ctr, self.k0[4], self.k1[4]);
        let mut out = [_mm256_setzero_si256(); VECS];
        for (c, ctr) in ctr.iter().enumerate() {
            // Low halves of words 0 and 1 (2 and 3) side by side: one quad's pair per 64-bit lane.
            let w01 = _mm256_blend_epi32::<0b1010_1010>(ctr[0], _mm256_slli_epi64::<32>(ctr[1]));
            let w23 = _mm256_blend_epi32::<0b1010_1010>(ctr[2], _mm256_slli_epi64::<32>(ctr[3]));
            out[2 * c] = _mm256_unpacklo_epi64(w01, w23);
            out[2 * c + 1] = _mm256_unpackhi_epi64(w01, w23);
        }
        out
    }
}

/// [`super::words`] on AVX2: whole blocks, then a last block cut short.
///
/// # Safety
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
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
#[target_feature(enable = "avx2")]
#[inline]
fn round(ctr: &mut [[__m256i; 4]; CHAINS], k0: __m256i, k1: __m256i) {
    for c in ctr.iter_mut() {
        let p0 = _mm256_mul_epu32(c[0], _mm256_set1_epi64x(M0 as i64));
        let p1 = _mm256_mul_epu32(c[2], _mm256_set1_epi64x(M1 as i64));
        *c = [
            _mm256_xor_si256(_mm256_xor_si256(high(p1), c[1]), k0),
            p1,
            _mm256_xor_si256(_mm256_xor_si256(high(p0), c[3]), k1),
            p0,
        ];
    }
}

/// The high half of each 64-bit lane into its low half (the high half keeps
/// garbage), on a shuffle port, away from the multiplies.
#[target_feature(enable = "avx2")]
#[inline]
fn high(x: __m256i) -> __m256i {
    _mm256_shuffle_epi32::<0b11_11_01_01>(x)
}

/// `values` (a multiple of 8 long) widened by [`Load::load8`], for the tests.
#[cfg(test)]
pub(super) fn load_all<L: Load>(values: &[L]) -> Vec<f32> {
    assert!(super::Level::Avx2.supported());
    let mut out = Vec::with_capacity(values.len());
    for chunk in values.chunks_exact(8) {
        // SAFETY: 8 elements at the pointer; the CPU has AVX2 and F16C (just checked).
        let x: [f32; 8] = unsafe { transmute(L::load8(chunk.as_ptr())) };
        out.extend_from_slice(&x);
    }
    out
}

/// `specdec_core::exp_sum::term` of `y` (a multiple of 8 long) by [`terms`], for the tests.
#[cfg(test)]
pub(super) fn terms_all(y: &[f32]) -> Vec<(i32, u32)> {
    assert!(super::Level::Avx2.supported());
    let mut out = Vec::with_capacity(y.len());
    for chunk in y.chunks_exact(8) {
        // SAFETY: 8 elements at the pointer; the CPU has AVX2 (just checked).
        let (k, m) = unsafe { terms(_mm256_loadu_ps(chunk.as_ptr())) };
        // SAFETY: a vector is 8 plain 32-bit lanes.
        let (k, m) = unsafe { (transmute::<__m256i, [i32; 8]>(k), transmute::<__m256i, [u32; 8]>(m)) };
        out.extend(k.into_iter().zip(m));
    }
    out
}
