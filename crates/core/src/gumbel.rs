//! Gumbel noise from one random word, with a logarithm built from IEEE
//! `+ - * /` only, so the GPU reproduces the CPU's values bit for bit (the
//! hardware's `lg2.approx` cannot be reproduced on a CPU).
//!
//! # The mapping (SPEC §2.3, §2.4)
//!
//! A word `r` stands for the uniform `u = (r + 1/2) / 2^32`, which lies in the
//! open interval `(0, 1)` and carries all 32 bits. The noise is
//! `g = -ln(E)` with the exponential variate `E = -ln(u)`, evaluated so that
//! both tails are resolved:
//!
//! - `r < 2^31` (`u < 1/2`): `u` is formed in f32 as `(r as f32 + 0.5) * 2^-32`
//!   (round-to-nearest conversion, then exact scaling) and `E = -ln(u)`;
//! - `r >= 2^31`: `v = 1 - u = (!r + 1/2) / 2^32` is formed the same way, and
//!   `E = -ln(1 - v) = 2·atanh(v / (2 - v))`, which keeps full relative
//!   precision for tiny `v` (the upper tail of `g`, where `-log(u)` would
//!   otherwise round to zero).
//!
//! The acceptance test of `rejection_sample` needs only `ln u = -E`, so it
//! uses all 32 bits of its word as well.
//!
//! Hence `g` ranges over `[GUMBEL_MIN, GUMBEL_MAX]`, attained at `r = 0` and
//! `r = u32::MAX`: `-ln(33·ln 2) ≈ -3.130` and `-ln(2^-33) ≈ 22.874`.

/// The smallest noise value, `gumbel(0)`.
pub const GUMBEL_MIN: f32 = -3.1299946;
/// The largest noise value, `gumbel(u32::MAX)`. No token whose scaled logit is
/// below the running best by more than `GUMBEL_MAX - GUMBEL_MIN` can win.
pub const GUMBEL_MAX: f32 = 22.873857;

const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0.693145752, 16 significant bits: k·LN2_HI is exact
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // ln 2 - LN2_HI
const TWO_POW_M32: f32 = f32::from_bits(0x2f80_0000); // 2^-32

/// `ln(x)` for positive normal finite `x` as `k·ln 2 + 2·atanh(s)`.
#[inline(always)]
pub const fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut k = ((bits >> 23) as i32) - 127;
    let mut m_bits = (bits & 0x007f_ffff) | 0x3f80_0000; // m in [1, 2)
    if m_bits >= 0x3fb5_04f3 {
        // m >= sqrt(2): halve it (exactly) so that m is in [sqrt(1/2), sqrt(2)).
        m_bits -= 0x0080_0000;
        k += 1;
    }
    let m = f32::from_bits(m_bits);
    // m - 1 is exact (Sterbenz); |s| <= 0.1716.
    let s = (m - 1.0) / (m + 1.0);
    let kf = k as f32;
    kf * LN2_HI + (kf * LN2_LO + two_atanh(s))
}

/// `2·atanh(s) = ln((1 + s) / (1 - s))` for `|s| <= 1/3`, by its odd series to
/// `s^15` (truncation below `2e-9` relative).
#[inline(always)]
const fn two_atanh(s: f32) -> f32 {
    let z = s * s;
    let p = 2.0 / 15.0;
    let p = p * z + 2.0 / 13.0;
    let p = p * z + 2.0 / 11.0;
    let p = p * z + 2.0 / 9.0;
    let p = p * z + 2.0 / 7.0;
    let p = p * z + 2.0 / 5.0;
    let p = p * z + 2.0 / 3.0;
    let p = p * z + 2.0;
    s * p
}

/// `E = -ln(u)` for the uniform `u = (r + 1/2) / 2^32`: an Exp(1) variate,
/// in `[2^-33·(1 - 2^-33), 33·ln 2]`.
#[inline(always)]
pub const fn exponential(r: u32) -> f32 {
    if r < 0x8000_0000 {
        -ln((r as f32 + 0.5) * TWO_POW_M32)
    } else {
        let v = ((!r) as f32 + 0.5) * TWO_POW_M32; // 1 - u, in (0, 1/2]
        two_atanh(v / (2.0 - v))
    }
}

/// Standard Gumbel noise `-ln(-ln(u))` from one random word.
///
/// Not inlined on the GPU: samplers evaluate it only for the few ids their
/// bucket bound cannot rule out, and one out-of-line copy keeps the unrolled
/// kernels small.
#[cfg_attr(target_arch = "nvptx64", inline(never))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(always))]
pub const fn gumbel(r: u32) -> f32 {
    -ln(exponential(r))
}

/// Slack above each bucket's largest computed value: rounding can make the
/// computed `gumbel` non-monotone by a few ulps (< 1e-5 at its top), never 1e-4.
const BOUND_SLACK: f32 = 1e-4;

/// `GUMBEL_BOUND[r >> 24]` is at least `gumbel(r)` for every word `r`:
/// `gumbel` increases with `r`, so each bucket of the top 8 bits is bounded by
/// its last word's value (plus a slack of `1e-4` for rounding). All but the
/// top bucket are far below [`GUMBEL_MAX`] (bucket 254 is below 5.6), so a
/// sampler can rule most ids out from their word alone, without evaluating
/// two logarithms.
pub const GUMBEL_BOUND: [f32; 256] = {
    let mut table = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = gumbel(((b as u32) << 24) | 0x00ff_ffff) + BOUND_SLACK;
        b += 1;
    }
    table
};

/// Words at or above this are in the top bucket, bounded by `GUMBEL_BOUND[255]`
/// = [`GUMBEL_MAX`].
pub const TOP_BUCKET: u32 = 0xff00_0000;

/// `TOP_BOUND[(r >> 16) & 0xff]` is at least `gumbel(r)` for every word `r`
/// of the top bucket: [`GUMBEL_BOUND`]'s rule one byte further down. The
/// top bucket spans noise from 5.5 to `GUMBEL_MAX` ≈ 22.9, so its single
/// bound rules out few ids; all but its last sub-bucket are below 11.1.
pub const TOP_BOUND: [f32; 256] = {
    let mut table = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = gumbel(TOP_BUCKET | (b as u32) << 16 | 0xffff) + BOUND_SLACK;
        b += 1;
    }
    table
};

/// The largest bucket bound below the top bucket (words `< TOP_BUCKET`):
/// about 5.6, against `GUMBEL_MAX` ≈ 22.9 for the top one.
pub const COARSE_BOUND: f32 = {
    let mut max = GUMBEL_BOUND[0];
    let mut b = 1;
    while b < 255 {
        if GUMBEL_BOUND[b] > max {
            max = GUMBEL_BOUND[b];
        }
        b += 1;
    }
    max
};

/// A bound on the noise of all four words of a quad: [`gumbel_bound`] of
/// their largest word (the bounds grow with the word). One table load a
/// quad; samplers test it through [`quad_ruled_out`], which spares the load
/// where [`COARSE_BOUND`] decides. (As the bound itself, `COARSE_BOUND` for
/// every quad below the top bucket rules out far fewer quads, each of them
/// then evaluated: the table measured faster,
/// benches/results/2026-12-02-design-measurements.md.)
#[inline(always)]
pub fn quad_bound(words: [u32; 4]) -> f32 {
    let m = words[0].max(words[1]).max(words[2].max(words[3]));
    gumbel_bound(m)
}

/// Whether `below(bound)` holds for a bound on the noise of all four
/// `words`, where `below` is monotone (holding for a bound, it holds for any
/// smaller): first for [`COARSE_BOUND`] if every word is below the top
/// bucket, then for [`quad_bound`]: the same answer as `below(quad_bound(words))`
/// (`COARSE_BOUND` is at least every bucket's bound below the top one), but
/// the first test needs no table load, and once a sampler's running best is
/// far ahead (as with a GPU block's floors) it decides nearly every quad,
/// sparing a warp's table loads, which gather from 32 addresses (measured:
/// benches/results/2026-12-02-design-measurements.md).
#[inline(always)]
pub fn quad_ruled_out(words: [u32; 4], below: impl Fn(f32) -> bool) -> bool {
    let m = words[0].max(words[1]).max(words[2].max(words[3]));
    (m < TOP_BUCKET && below(COARSE_BOUND)) || below(quad_bound(words))
}

/// The tighter of the two tables' bounds on `gumbel(r)`. The top bucket is
/// 1/256 of the ids but, with one bound of 22.9, it was most of those a
/// sampler could not rule out; on the GPU, where a warp evaluates the noise
/// if any of its 32 lanes must, that set the cost.
#[inline(always)]
pub fn gumbel_bound(r: u32) -> f32 {
    if r >= TOP_BUCKET { TOP_BOUND[(r >> 16 & 0xff) as usize] } else { GUMBEL_BOUND[(r >> 24) as usize] }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `quad_ruled_out` answers as the table's bound does, at thresholds
    /// around `COARSE_BOUND` and for words in and out of the top bucket.
    #[test]
    fn quad_ruled_out_answers_as_quad_bound() {
        let mut words = crate::xorshift(0x9E37_79B9_7F4A_7C15);
        let mut next = || words() as u32;
        for k in 0..200_000 {
            let mut words = [next(), next(), next(), next()];
            if k % 3 == 0 {
                words = words.map(|w| w >> 1); // every word below the top bucket
            }
            let y = COARSE_BOUND + (next() % 4000) as f32 / 1000.0 - 2.0;
            assert_eq!(quad_ruled_out(words, |b| b < y), quad_bound(words) < y, "{words:x?} {y}");
        }
    }

    /// `gumbel_bound` holds for every word of the top bucket (all 2^24 of
    /// them) and, through `GUMBEL_BOUND`, at both ends of every other bucket.
    #[test]
    fn bound_holds_for_every_top_word() {
        for r in TOP_BUCKET..=u32::MAX {
            assert!(gumbel(r) <= gumbel_bound(r), "word {r:#x}: {} > {}", gumbel(r), gumbel_bound(r));
        }
        for b in 0..255u32 {
            for r in [b << 24, b << 24 | 0x00ff_ffff] {
                assert!(gumbel(r) <= gumbel_bound(r), "word {r:#x}");
            }
        }
        // It is tighter than the bucket bound wherever it can be.
        const { assert!(TOP_BOUND[254] < 11.1 && TOP_BOUND[255] >= GUMBEL_MAX) };
    }

    /// The tables grow with the word, so the bound of a quad's largest word
    /// bounds every word of it.
    #[test]
    fn quad_bound_holds_for_every_word_of_the_quad() {
        for b in 1..256 {
            assert!(GUMBEL_BOUND[b - 1] <= GUMBEL_BOUND[b] && TOP_BOUND[b - 1] <= TOP_BOUND[b], "bucket {b}");
        }
        const { assert!(GUMBEL_BOUND[254] <= TOP_BOUND[0] && COARSE_BOUND == GUMBEL_BOUND[254]) };
        let mut r = 0u32;
        while let Some(next) = r.checked_add(65_519) {
            let others = [r / 3, r / 2, r ^ 0x00ff_00ff & r];
            for quad in [[r, others[0], others[1], others[2]], [others[2], others[1], r, others[0]]] {
                for w in quad {
                    assert!(gumbel_bound(w) <= quad_bound(quad), "words {quad:x?}");
                }
            }
            r = next;
        }
        assert_eq!(quad_bound([0, 1, 2, u32::MAX]), TOP_BOUND[255]);
        assert_eq!(quad_bound([0, 1, 2, TOP_BUCKET - 1]), COARSE_BOUND);
        assert_eq!(quad_bound([0x7fff_ffff, 1, 2, 3]), GUMBEL_BOUND[0x7f]);
    }

    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        let ulp = (f32::from_bits(b32.abs().to_bits() + 1) - b32.abs()) as f64;
        (a as f64 - b).abs() / ulp
    }

    #[test]
    fn ln_is_accurate_over_the_range_we_use() {
        let mut worst = 0.0f64;
        // E spans [2^-33, 23]; sweep every 97th f32 bit pattern in [2^-40, 2^10].
        let (lo, hi) = (2f32.powi(-40).to_bits(), 1024f32.to_bits());
        let mut b = lo;
        while b < hi {
            let x = f32::from_bits(b);
            let e = ulps(ln(x), (x as f64).ln());
            // Absolute error near x = 1 (ln x -> 0) is what matters there.
            let abs = (ln(x) as f64 - (x as f64).ln()).abs();
            if abs > 1e-8 {
                worst = worst.max(e);
            }
            b += 97;
        }
        assert!(worst <= 4.0, "worst ln error {worst} ulp");
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn exponential_resolves_both_tails() {
        for r in [0u32, 1, 2, 1000, 0x7fff_ffff, 0x8000_0000, 0xffff_0000, u32::MAX - 1, u32::MAX] {
            let u = (r as f64 + 0.5) / 4294967296.0;
            let exact = -(u.ln_1p_neg());
            let e = exponential(r);
            assert!(ulps(e, exact) <= 4.0, "r={r:#x}: E={e} exact={exact}");
        }
        // Dense check over a stride of the whole word range.
        let mut r = 0u32;
        loop {
            let u = (r as f64 + 0.5) / 4294967296.0;
            let exact = -(u.ln_1p_neg());
            let e = exponential(r);
            assert!(ulps(e, exact) <= 6.0, "r={r:#x}: E={e} exact={exact}");
            match r.checked_add(65_521) {
                Some(n) => r = n,
                None => break,
            }
        }
    }

    trait LnU {
        fn ln_1p_neg(self) -> f64;
    }
    impl LnU for f64 {
        /// ln(u) computed accurately for u near 1 as well.
        fn ln_1p_neg(self) -> f64 {
            if self > 0.5 { (-(1.0 - self)).ln_1p() } else { self.ln() }
        }
    }

    #[test]
    fn bucket_bounds_hold() {
        // Both ends of every bucket, the branch boundary, and a stride over all words.
        let check = |r: u32| assert!(gumbel(r) <= GUMBEL_BOUND[(r >> 24) as usize], "word {r:#x}");
        for b in 0..256u32 {
            for d in 0..512 {
                check((b << 24) + d);
                check((b << 24 | 0x00ff_ffff) - d);
            }
        }
        let mut r = 0u32;
        while let Some(next) = r.checked_add(4099) {
            check(r);
            r = next;
        }
        const { assert!(GUMBEL_BOUND[254] < 5.6 && GUMBEL_BOUND[255] >= GUMBEL_MAX) };
    }

    #[test]
    fn gumbel_extremes_are_documented() {
        assert_eq!(gumbel(0), GUMBEL_MIN);
        assert_eq!(gumbel(u32::MAX), GUMBEL_MAX);
        let exact_max = -(2f64.powi(-33)).ln();
        assert!((GUMBEL_MAX as f64 - exact_max).abs() < 1e-5);
        let exact_min = -(33.0 * 2f64.ln()).ln();
        assert!((GUMBEL_MIN as f64 - exact_min).abs() < 1e-5);
        // Monotone at the ends, so the endpoints really are the extremes.
        for r in 0..4096u32 {
            assert!(gumbel(r) >= GUMBEL_MIN && gumbel(u32::MAX - r) <= GUMBEL_MAX);
        }
    }
}
