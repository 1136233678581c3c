//! Log-space arithmetic for the softmax-free verifier (SPEC §4): an IEEE-only
//! `exp`, the blockwise log-sum-exp statistics and their combine rule, and the
//! residual log-weight `log(p − q)`.
//!
//! Like [`crate::gumbel`], everything here uses only IEEE-rounded `+ − × ÷`
//! and integer operations. The one exception is the exponential inside the
//! GPU's float row sums, [`Lse::push_quad`] and [`Lse::combine_with`], which
//! take it as an argument: the kernels pass their hardware `ex2.approx`
//! (relative error below 2^-22, the size of f32 rounding itself). The CPU
//! sums rows by [`crate::exp_sum`] instead, so a row's log-sum-exp may differ
//! in its last bits between the backends; every per-element value (noise,
//! residual weights given the log-sum-exps) is computed alike.

use crate::gumbel::ln;

pub(crate) const LOG2E: f32 = core::f32::consts::LOG2_E;
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);

/// `e^x`. Exact at `-inf` (0) and for NaN (NaN); `0` below `-87.3` (no
/// subnormal results: they never matter to a probability sum), `inf` above 88.7.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x < -87.33 {
        return 0.0;
    }
    if x > 88.72 {
        return f32::INFINITY;
    }
    let t = x * LOG2E;
    exp_reduced(x, if t >= 0.0 { (t + 0.5) as i32 } else { (t - 0.5) as i32 })
}

/// [`exp`] of `x` in its range (`-87.33 ..= 88.72`) given `k`, `x·log2(e)`
/// rounded to the nearest integer as [`exp`] rounds it: the reduction, the
/// polynomial and the scaling by `2^k`, shared with the batched masses of
/// `crate::filter::masses`.
#[inline(always)]
pub(crate) fn exp_reduced(x: f32, k: i32) -> f32 {
    // x = k·ln2 + r, |r| <= ln2/2 (Cody–Waite: k·LN2_HI is exact).
    let kf = k as f32;
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2^k for k in [-126, 128]: build the exponent directly (two steps keep it normal).
    let half = k / 2;
    p * f32::from_bits(((half + 127) as u32) << 23) * f32::from_bits(((k - half + 127) as u32) << 23)
}

/// `e^z − 1` for `|z| <= ln 2`, with full relative precision near 0.
#[inline(always)]
fn expm1_small(z: f32) -> f32 {
    z * (1.0
        + z * (0.5
            + z * (1.0 / 6.0
                + z * (1.0 / 24.0 + z * (1.0 / 120.0 + z * (1.0 / 720.0 + z * (1.0 / 5040.0 + z * (1.0 / 40320.0))))))))
}

/// `ln(1 − e^z)` for `z < 0` (`-inf` at `z >= 0`): the log of the residual
/// weight `1 − q/p` when `z = log q − log p`.
#[inline(always)]
pub fn ln_one_minus_exp(z: f32) -> f32 {
    if z.is_nan() || z >= 0.0 {
        return f32::NEG_INFINITY;
    }
    if z > -core::f32::consts::LN_2 {
        // 1 − e^z = −expm1(z), small: keep its relative precision.
        ln(-expm1_small(z))
    } else {
        // e^z <= 1/2: 1 − y >= 1/2 is formed with one rounding.
        let y = exp(z);
        if y == 0.0 { 0.0 } else { ln(1.0 - y) }
    }
}

/// `log(p − q)` from `a = log p`, `c = log q`: `a + ln(1 − e^(c − a))`,
/// `-inf` where `q >= p` (and where `p = 0`). Out of line on the GPU (one copy
/// per kernel rather than one per unrolled lane).
#[cfg_attr(target_arch = "nvptx64", inline(never))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(always))]
pub fn ln_residual(a: f32, c: f32) -> f32 {
    if a == f32::NEG_INFINITY {
        return f32::NEG_INFINITY;
    }
    if c == f32::NEG_INFINITY {
        return a;
    }
    a + ln_one_minus_exp(c - a)
}

/// Running log-sum-exp statistics of some values: their maximum and
/// `Σ e^(x − max)`. The empty (or all `-inf`) set is `(-inf, 0)`. NaN values
/// are skipped (the caller flags them).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Lse {
    pub max: f32,
    pub sum: f32,
}

impl Lse {
    pub const EMPTY: Lse = Lse { max: f32::NEG_INFINITY, sum: 0.0 };

    /// Adds one value.
    #[inline(always)]
    pub fn push(self, x: f32) -> Lse {
        if x.is_nan() || x == f32::NEG_INFINITY {
            return self; // -inf or NaN
        }
        if x == f32::INFINITY {
            // +inf dominates: the distribution is a point mass on the +inf ids.
            return if self.max == f32::INFINITY {
                Lse { max: x, sum: self.sum + 1.0 }
            } else {
                Lse { max: x, sum: 1.0 }
            };
        }
        if x <= self.max {
            Lse { max: self.max, sum: self.sum + exp(x - self.max) }
        } else {
            Lse { max: x, sum: self.sum * exp(self.max - x) + 1.0 }
        }
    }

    /// Adds the first `n` of four values, with `exp` as the exponential (one
    /// call per finite value, plus one when the maximum grows).
    #[inline(always)]
    pub fn push_quad(self, v: [f32; 4], n: u32, exp: impl Fn(f32) -> f32) -> Lse {
        let live = |i: usize| (i as u32) < n && v[i] > f32::NEG_INFINITY; // NaN is not > -inf
        let top = |m: f32, i: usize| if live(i) && v[i] > m { v[i] } else { m };
        let m = top(top(top(top(f32::NEG_INFINITY, 0), 1), 2), 3);
        if m == f32::NEG_INFINITY {
            return self;
        }
        if m == f32::INFINITY || self.max == f32::INFINITY {
            // A point mass at +inf: count it exactly, element by element.
            let one = |s: Lse, i: usize| if (i as u32) < n { s.push(v[i]) } else { s };
            return one(one(one(one(self, 0), 1), 2), 3);
        }
        let (max, mut sum) = if m > self.max {
            (m, if self.max == f32::NEG_INFINITY { 0.0 } else { self.sum * exp(self.max - m) })
        } else {
            (self.max, self.sum)
        };
        let add = |s: f32, i: usize| if live(i) { s + exp(v[i] - max) } else { s };
        sum = add(add(add(add(sum, 0), 1), 2), 3);
        Lse { max, sum }
    }

    /// Combines two sets' statistics.
    #[inline(always)]
    pub fn combine(self, other: Lse) -> Lse {
        self.combine_with(other, exp)
    }

    /// [`Lse::combine`] with `exp` as the exponential (as in [`Lse::push_quad`]).
    #[inline(always)]
    pub fn combine_with(self, other: Lse, exp: impl Fn(f32) -> f32) -> Lse {
        let max = if other.max > self.max { other.max } else { self.max };
        if max == f32::NEG_INFINITY {
            return Lse::EMPTY;
        }
        if max == f32::INFINITY {
            let count = |s: Lse| if s.max == f32::INFINITY { s.sum } else { 0.0 };
            return Lse { max, sum: count(self) + count(other) };
        }
        Lse { max, sum: self.sum * exp(self.max - max) + other.sum * exp(other.max - max) }
    }

    /// This set's part of a combined sum `Σ e^(x − max)`, `max` being the
    /// largest maximum of the sets combined: `sum·e^(self.max − max)`, nothing
    /// for an empty combination, and for a point mass at `+inf` the count of
    /// `+inf` values this set holds. The combined statistics are `(max, Σ
    /// shares)`: [`Lse::combine_with`]'s result, summed in any order (a GPU
    /// warp takes the maximum first, then adds the shares).
    #[inline(always)]
    pub fn share(self, max: f32, exp: impl Fn(f32) -> f32) -> f32 {
        if max == f32::NEG_INFINITY {
            0.0
        } else if max == f32::INFINITY {
            if self.max == f32::INFINITY { self.sum } else { 0.0 }
        } else {
            self.sum * exp(self.max - max)
        }
    }

    /// `log Σ e^x` (`-inf` for the empty set).
    #[inline(always)]
    pub fn value(self) -> f32 {
        if self.max == f32::NEG_INFINITY || self.max == f32::INFINITY {
            return self.max;
        }
        self.max + ln(self.sum)
    }
}

/// The centre of a target row's and its draft row's statistics, `(max_t +
/// max_d)/2` (halved first, so that no finite pair overflows), which their
/// *overlap* is kept relative to: `Σ e^((t + d)/2 − centre)` over the pairs
/// of scaled logits `(t, d)`, each term at most 1, an empty overlap `0` at
/// any centre. The rows' Bhattacharyya coefficient `Σ √(p(x)·q(x))` is then
/// `overlap / √(S_t·S_d)`, the maxima cancelling ([`residual_mass_bound`]).
#[inline(always)]
pub fn centre(target_max: f32, draft_max: f32) -> f32 {
    0.5 * target_max + 0.5 * draft_max
}

/// An overlap sum kept relative to centre `from`, made relative to centre
/// `to >= from` (the combined rows' centre), with `exp` as the exponential.
/// An empty sum stays empty (its centre may be `-inf`).
#[inline(always)]
pub fn recentre(sum: f32, from: f32, to: f32, exp: impl Fn(f32) -> f32) -> f32 {
    if sum == 0.0 { 0.0 } else { sum * exp(from - to) }
}

/// Where `1 − BC` is too close to rounding to bound anything: the sums
/// behind it carry relative errors near 10⁻⁶ (hardware exponentials, f32
/// sums of up to 2¹⁸ terms).
const OVERLAP_RESOLUTION: f32 = 1.0e-4;

/// A lower bound on the mass of the residual `Σ max(p − q, 0)` of a target
/// row and its draft row from their statistics and overlap ([`centre`]): the
/// squared Hellinger distance `1 − BC`, at most the total variation (which
/// is the residual's mass). `0` (no bound) where `1 − BC` is below 10⁻⁴,
/// within the sums' rounding, NaN where the statistics give none (empty rows,
/// `+inf` logits); `rsqrt` is `1/√x`. Unlike one id's excess `q − p`, it
/// does not shrink with the vocabulary: a resample's floors start near
/// the residual's true log-mass.
#[inline(always)]
pub fn residual_mass_bound(target: Lse, draft: Lse, overlap: f32, rsqrt: impl Fn(f32) -> f32) -> f32 {
    let gap = 1.0 - overlap * rsqrt(target.sum * draft.sum);
    if gap < OVERLAP_RESOLUTION { 0.0 } else { gap }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statistics combined by their largest maximum and the sum of their
    /// shares equal those combined two at a time: the same maximum, sums
    /// within rounding, and exactly the same for empty sets and `+inf` point
    /// masses.
    #[test]
    fn shares_combine_as_pairs_do() {
        let mut next = crate::xorshift(0x2545_F491_4F6C_DD1D);
        for trial in 0..20_000 {
            let n = 1 + (next() % 32) as usize;
            let all: [Lse; 32] = core::array::from_fn(|_| match next() % 10 {
                0 => Lse::EMPTY,
                1 if trial % 3 == 0 => Lse { max: f32::INFINITY, sum: (1 + next() % 4) as f32 },
                _ => Lse { max: (next() % 4000) as f32 / 100.0 - 20.0, sum: 1.0 + (next() % 1000) as f32 / 10.0 },
            });
            let sets = &all[..n];
            let paired = sets.iter().fold(Lse::EMPTY, |a, &b| a.combine(b));
            let max = sets.iter().fold(f32::NEG_INFINITY, |m, s| m.max(s.max));
            let sum: f32 = sets.iter().map(|s| s.share(max, exp)).sum();
            assert_eq!(max, paired.max, "trial {trial}: {sets:?}");
            if max.is_finite() {
                assert!(((sum - paired.sum) / paired.sum).abs() < 1e-5, "trial {trial}: {sum} vs {paired:?}");
            } else {
                assert_eq!(sum, paired.sum, "trial {trial}: {sets:?}");
            }
        }
    }

    fn rel(a: f32, b: f64) -> f64 {
        if b == 0.0 { a.abs() as f64 } else { ((a as f64 - b) / b).abs() }
    }

    /// A target and draft row's statistics and overlap, reduced in chunks of
    /// `chunk` and combined as the kernels combine them.
    fn blockwise(t: &[f32], d: &[f32], chunk: usize) -> (Lse, Lse, f32) {
        let mut acc = (Lse::EMPTY, Lse::EMPTY, 0.0f32);
        for (tc, dc) in t.chunks(chunk).zip(d.chunks(chunk)) {
            let (lt, ld) =
                (tc.iter().fold(Lse::EMPTY, |s, &x| s.push(x)), dc.iter().fold(Lse::EMPTY, |s, &x| s.push(x)));
            let c = centre(lt.max, ld.max);
            let part: f32 = if c == f32::NEG_INFINITY {
                0.0
            } else {
                tc.iter().zip(dc).map(|(&a, &b)| exp(0.5 * a + 0.5 * b - c)).sum()
            };
            let (to, dr) = (acc.0.combine(lt), acc.1.combine(ld));
            let at = centre(to.max, dr.max);
            acc = (to, dr, recentre(acc.2, centre(acc.0.max, acc.1.max), at, exp) + recentre(part, c, at, exp));
        }
        acc
    }

    /// The overlap, reduced blockwise, is the rows' Bhattacharyya
    /// coefficient, and the bound from it never exceeds the residual's mass
    /// (the total variation), on peaked, flat, disjoint, equal and
    /// `-inf`-holding rows, in chunks of every size.
    #[test]
    fn the_overlap_bound_is_below_the_residual_mass() {
        let mut bounded = 0;
        for trial in 0..400u32 {
            let h = |salt: u32, i: usize| {
                crate::rng::random_u32(trial as u64, salt as u64, crate::rng::Stream::Accept, i as u32)
            };
            let v = 1 + (h(0, 0) % 3000) as usize;
            let spread = [0.3f32, 1.0, 3.0, 8.0][trial as usize % 4];
            let uniform = |salt: u32, i: usize| ((h(salt, i) % 1000) as f32 / 1000.0 - 0.5) * spread;
            let t: [f32; 3000] = core::array::from_fn(|i| uniform(1, i));
            let d: [f32; 3000] = core::array::from_fn(|i| match trial % 5 {
                0 => t[i],                                                 // equal: no residual
                1 if i % 2 == (h(3, 0) % 2) as usize => f32::NEG_INFINITY, // half the support
                2 => t[i] * 0.8 + uniform(2, i) * 0.6,                     // a draft model's
                _ => uniform(2, i),
            });
            let (t, d) = (&t[..v], &d[..v]);
            // Exact probabilities, in f64.
            let norm = |r: &[f32]| {
                let m = r.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
                (m, r.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>())
            };
            let ((mt, zt), (md, zd)) = (norm(t), norm(d));
            let (mut bc, mut tv) = (0.0f64, 0.0f64);
            for i in 0..v {
                let (a, b) = ((t[i] as f64 - mt).exp() / zt, (d[i] as f64 - md).exp() / zd);
                bc += (a * b).sqrt();
                tv += (a - b).max(0.0);
            }
            for chunk in [1, 4, 64, 1000, v] {
                let (lt, ld, overlap) = blockwise(t, d, chunk);
                let coefficient = overlap as f64 / ((lt.sum as f64) * (ld.sum as f64)).sqrt();
                assert!(
                    (coefficient - bc).abs() < 2e-5,
                    "trial {trial}, V = {v}, chunk {chunk}: BC {coefficient} vs {bc}"
                );
                let bound = residual_mass_bound(lt, ld, overlap, |x| 1.0 / x.sqrt()) as f64;
                assert!(
                    bound <= tv * (1.0 + 1e-4) + 1e-6,
                    "trial {trial}, V = {v}, chunk {chunk}: bound {bound} > TV {tv}"
                );
                if trial % 5 == 0 {
                    assert_eq!(bound, 0.0, "trial {trial}: equal rows bound nothing");
                }
                bounded += (bound > 0.0) as u32;
            }
        }
        assert!(bounded > 1000, "{bounded} bounds of 2000: the rows test too little");
        // One empty row: no bound (NaN), never a wrong one.
        let (lt, ld, overlap) = blockwise(&[1.0, 2.0], &[f32::NEG_INFINITY; 2], 1);
        assert!(residual_mass_bound(lt, ld, overlap, |x| 1.0 / x.sqrt()).is_nan());
        // Disjoint supports: the whole mass.
        let ninf = f32::NEG_INFINITY;
        let (lt, ld, overlap) = blockwise(&[0.0, ninf], &[ninf, 0.0], 1);
        assert_eq!(residual_mass_bound(lt, ld, overlap, |x| 1.0 / x.sqrt()), 1.0);
    }

    #[test]
    fn exp_is_accurate() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let e = rel(exp(x), (x as f64).exp());
            assert!(e < 4e-7, "exp({x}) = {} vs {}", exp(x), (x as f64).exp());
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(-100.0), 0.0);
    }

    #[test]
    fn ln_one_minus_exp_keeps_precision_near_zero() {
        for z in [-1e-7f32, -1e-4, -0.3, -0.69, -0.7, -2.0, -20.0, -90.0] {
            let exact = (-(z as f64).exp_m1()).ln();
            let got = ln_one_minus_exp(z);
            assert!((got as f64 - exact).abs() <= 2e-6 * exact.abs().max(1.0), "z={z}: {got} vs {exact}");
        }
        assert_eq!(ln_one_minus_exp(0.0), f32::NEG_INFINITY);
        assert_eq!(ln_one_minus_exp(1.0), f32::NEG_INFINITY);
    }

    #[test]
    fn residual_matches_direct_difference() {
        let (p, q) = (0.3f64, 0.1f64);
        let got = ln_residual(p.ln() as f32, q.ln() as f32);
        assert!((got as f64 - (p - q).ln()).abs() < 1e-6);
        assert_eq!(ln_residual(q.ln() as f32, p.ln() as f32), f32::NEG_INFINITY);
        assert_eq!(ln_residual(-1.0, f32::NEG_INFINITY), -1.0);
    }

    #[test]
    fn lse_blockwise_equals_direct() {
        let xs: [f32; 11] = [0.5, -3.0, 2.0, f32::NEG_INFINITY, 7.5, 7.5, -0.25, 1.0, 3.0, -10.0, 0.0];
        let exact = xs.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
        let all = xs.iter().fold(Lse::EMPTY, |s, &x| s.push(x));
        assert!((all.value() as f64 - exact).abs() < 1e-6);
        for split in 0..xs.len() {
            let a = xs[..split].iter().fold(Lse::EMPTY, |s, &x| s.push(x));
            let b = xs[split..].iter().fold(Lse::EMPTY, |s, &x| s.push(x));
            assert!((a.combine(b).value() as f64 - exact).abs() < 1e-6, "split {split}");
            assert!((b.combine(a).value() as f64 - exact).abs() < 1e-6, "split {split}");
        }
        // Empty and all -inf sets contribute nothing.
        assert_eq!(Lse::EMPTY.push(f32::NEG_INFINITY), Lse::EMPTY);
        assert_eq!(all.combine(Lse::EMPTY).value(), all.value());
        assert_eq!(Lse::EMPTY.value(), f32::NEG_INFINITY);
        // NaN is skipped, +inf dominates.
        assert_eq!(all.push(f32::NAN), all);
        assert_eq!(all.push(f32::INFINITY).value(), f32::INFINITY);
        // Four at a time: the same sums up to rounding, the same special cases.
        let quads = xs.chunks(4).fold(Lse::EMPTY, |s, q| {
            let mut v = [0.0; 4];
            v[..q.len()].copy_from_slice(q);
            s.push_quad(v, q.len() as u32, exp)
        });
        assert!((quads.value() as f64 - exact).abs() < 1e-6);
        let specials = [f32::NAN, f32::NEG_INFINITY, 2.0, f32::INFINITY];
        assert_eq!(Lse::EMPTY.push_quad(specials, 2, exp), Lse::EMPTY);
        assert_eq!(Lse::EMPTY.push_quad(specials, 3, exp), Lse::EMPTY.push(2.0));
        assert_eq!(Lse::EMPTY.push_quad(specials, 4, exp).value(), f32::INFINITY);
    }
}
