//! The order-free row sum `Σ e^y` behind a log-sum-exp (REFERENCE §2.6):
//! its value is a function of the multiset of the terms alone, so every
//! order, every split into lanes, blocks, threads or vocabulary shards, and
//! every backend gives the same bits.
//!
//! Each finite term `y` is written in base 2 with a rule that needs no
//! maximum ([`term`]): `u = y·log2(e)` in `f64`, `k` = `u` rounded to the
//! nearest integer, `m = round(2^(u − k) · 2^33)`, an integer in `[2^32.5,
//! 2^33.5]`, so `e^y ≈ m · 2^(k − 33)` (to `2^-33` of itself). A set's sum
//! is **the exact sum of `m · 2^(k − 33)` over its terms with `k >= K −
//! WINDOW`**, `K` the largest `k`: every term within `2^-56` of the largest
//! is added exactly, as integers, every smaller one is dropped (together at
//! most `2^-26` of the largest, for `2^30` terms). Its log-sum-exp is
//! [`lse`]: `M + ln(A / (m_M · 2^56))`, `M` the set's maximum and `A` the
//! sum in units of `2^(K − 56 − 33)`.
//!
//! [`ExpSum`] keeps the sum of any set as buckets of `m` by `k` (what a
//! vocabulary shard sends), [`window_part`] one term's part of `A` where `K`
//! is already known (the CPU's fast path: one pass for the maximum, one for
//! the sum). Only IEEE-rounded `+ −` and `×` and integer operations, so every
//! backend forms the same `(k, m)` from the same `y`.

use crate::gumbel::ln;

/// Terms more than this many binades below the largest are dropped.
pub const WINDOW: i32 = 56;
/// Buckets of an [`ExpSum`]: `k = K, K − 1, …, K − WINDOW`.
pub const BUCKETS: usize = WINDOW as usize + 1;
/// Bits of `m` below its leading one, about: `m` is in `[2^32.5, 2^33.5]`, so a
/// bucket of `2^30` terms (`MAX_VOCAB`) stays below `2^64`.
const FRACTION_BITS: i32 = 33;
/// `|u|` is clamped here, so that `k` fits an `i32`. A scaled logit this large
/// (`|y| > 7.4e8`) has an `f32` spacing of 64 or more, which any
/// `ln(count) <= 21` a tie adds to its log-sum-exp rounds away.
pub const U_MAX: f64 = (1u64 << 30) as f64;
/// `1.5·2^52`: `(u + ROUND) − ROUND` is `u` rounded to an integer (ties to
/// even) for `|u| < 2^51`, and `bits(u + ROUND) − bits(ROUND)` that integer.
pub const ROUND: f64 = 6_755_399_441_055_744.0;
/// `2^52`: `bits(x + TWO52) − bits(TWO52)` is `x` rounded to an integer, for
/// `0 <= x < 2^52`.
pub const TWO52: f64 = 4_503_599_627_370_496.0;
/// `2^FRACTION_BITS`.
pub const SCALE: f64 = (1u64 << FRACTION_BITS) as f64;

/// `(ln 2)^n / n!` for `n = 1..=9`, by a running product (what matters is
/// that every backend reads the same constants): `2^r = 1 + Σ c_n r^n`,
/// truncated below `2^-37` for `|r| <= 1/2`.
pub const EXP2_COEFFICIENTS: [f64; 9] = {
    let mut c = [0.0; 9];
    let mut term = 1.0;
    let mut n = 0;
    while n < 9 {
        term = term * core::f64::consts::LN_2 / (n + 1) as f64;
        c[n] = term;
        n += 1;
    }
    c
};

/// A finite `e^y` as `m · 2^(k − 33)` ([`term`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    pub k: i32,
    pub m: u64,
}

/// The term of a finite `y` (module docs): `u = clamp(y·log2 e, ±2^30)`,
/// `k = round(u)` (ties to even), `r = u − k` (exact, `|r| <= 1/2`), `2^r` by
/// Horner over [`EXP2_COEFFICIENTS`], `m = round(2^r · 2^33)`. The vector
/// code in the CPU backend follows it operation for operation.
#[inline(always)]
pub fn term(y: f32) -> Term {
    let u = f64::from(y) * core::f64::consts::LOG2_E;
    let u = u.clamp(-U_MAX, U_MAX);
    let t = u + ROUND;
    let k = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = u - (t - ROUND);
    let c = &EXP2_COEFFICIENTS;
    let mut p = c[8];
    let mut n = 8;
    while n > 0 {
        n -= 1;
        p = p * r + c[n];
    }
    let p = p * r + 1.0;
    let m = (p * SCALE + TWO52).to_bits() - TWO52.to_bits();
    Term { k, m }
}

/// `t`'s part of the window sum `A` of a set whose largest term has `k = top`:
/// `m · 2^(k − top + WINDOW)`, 0 below the window.
#[inline(always)]
pub fn window_part(t: Term, top: i32) -> u128 {
    let s = i64::from(t.k) - i64::from(top) + i64::from(WINDOW);
    if s < 0 { 0 } else { u128::from(t.m) << s }
}

/// The log-sum-exp of a set from its maximum `max` and its window sum `a`
/// (module docs): `max` itself where it is infinite (`-inf`: the set is
/// empty; `+inf`: a point mass), else `max + ln(S)`, `S = A / (m_M · 2^56)`
/// (at least 1: the maximum's own term) rounded to `f32`, with the
/// IEEE-only `ln`. `A` is taken to `f64` as `hi·2^64 + lo`, two roundings.
#[inline(always)]
pub fn lse(max: f32, a: u128) -> f32 {
    if max.is_infinite() || max.is_nan() {
        return max;
    }
    let a = ((a >> 64) as u64 as f64) * 18_446_744_073_709_551_616.0 + (a as u64 as f64);
    let top = term(max).m as f64 * (1u64 << WINDOW) as f64;
    max + ln((a / top) as f32)
}

/// The sum of a set of terms in buckets (module docs): the set's maximum
/// and, for `j = 0..=WINDOW`, the sum of `m` over its terms with `k = K − j`.
/// NaN and `-inf` add nothing; a `+inf` makes the set a point mass (its
/// [`ExpSum::lse`] is `+inf`). Sums any multiset to the same value in any
/// order and any grouping ([`ExpSum::combine`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpSum {
    max: f32,
    top: i32,
    buckets: [u64; BUCKETS],
}

impl ExpSum {
    pub const EMPTY: ExpSum = ExpSum { max: f32::NEG_INFINITY, top: i32::MIN, buckets: [0; BUCKETS] };

    /// The sum of a set with maximum `max` and these buckets (as
    /// [`ExpSum::max`] and [`ExpSum::buckets`] gave them).
    pub fn from_parts(max: f32, buckets: [u64; BUCKETS]) -> ExpSum {
        let top = if max.is_finite() { term(max).k } else { i32::MIN };
        ExpSum { max, top, buckets }
    }

    /// The largest term (`-inf` for none, `+inf` for a point mass).
    pub fn max(&self) -> f32 {
        self.max
    }

    /// `Σ m` of the terms with `k = K − j`, for `j = 0..=WINDOW`.
    pub fn buckets(&self) -> &[u64; BUCKETS] {
        &self.buckets
    }

    /// Adds one value.
    #[inline]
    pub fn push(&mut self, y: f32) {
        if y.is_nan() || y == f32::NEG_INFINITY || self.max == f32::INFINITY {
            return; // NaN, -inf, or a point mass already
        }
        if y == f32::INFINITY {
            *self = ExpSum { max: y, top: i32::MIN, buckets: [0; BUCKETS] };
            return;
        }
        let t = term(y);
        self.raise(t.k);
        if y > self.max {
            self.max = y;
        }
        let j = i64::from(self.top) - i64::from(t.k);
        if j <= i64::from(WINDOW) {
            self.buckets[j as usize] += t.m;
        }
    }

    /// Adds another set's terms.
    pub fn combine(&mut self, other: &ExpSum) {
        if self.max == f32::INFINITY || other.max == f32::NEG_INFINITY {
            return;
        }
        if other.max == f32::INFINITY {
            *self = *other;
            return;
        }
        self.raise(other.top);
        if other.max > self.max {
            self.max = other.max;
        }
        let shift = i64::from(self.top) - i64::from(other.top);
        for (j, &b) in other.buckets.iter().enumerate() {
            let to = j as i64 + shift;
            if to <= i64::from(WINDOW) {
                self.buckets[to as usize] += b;
            }
        }
    }

    /// Moves the buckets so that the largest `k` is at least `k`, dropping
    /// what falls out of the window.
    fn raise(&mut self, k: i32) {
        if self.max == f32::NEG_INFINITY {
            self.top = k;
            return;
        }
        if k <= self.top {
            return;
        }
        let shift = (i64::from(k) - i64::from(self.top)).min(BUCKETS as i64) as usize;
        self.buckets.copy_within(0..BUCKETS - shift, shift);
        self.buckets[..shift].fill(0);
        self.top = k;
    }

    /// The window sum `A` (module docs); 0 for an empty set or a point mass.
    pub fn window_sum(&self) -> u128 {
        if !self.max.is_finite() {
            return 0;
        }
        self.buckets.iter().enumerate().map(|(j, &b)| u128::from(b) << (WINDOW as usize - j)).sum()
    }

    /// `log Σ e^y` by the module's rule ([`lse`]).
    pub fn lse(&self) -> f32 {
        lse(self.max, self.window_sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    fn rows() -> Vec<Vec<f32>> {
        let mut next = crate::xorshift(0x5eed_5eed);
        let mut uniform = move || (next() >> 11) as f64 / (1u64 << 53) as f64;
        let mut rows = Vec::new();
        for (n, scale) in
            [(1usize, 1.0f64), (7, 1.0), (100, 3.0), (1000, 10.0), (4099, 30.0), (20_000, 5.0), (333, 1e4)]
        {
            for shift in [0.0, -50.0, 80.0] {
                let mut row: Vec<f32> = (0..n).map(|_| ((uniform() - 0.5) * 2.0 * scale + shift) as f32).collect();
                if n > 7 {
                    row[3] = f32::NEG_INFINITY;
                    row[5] = f32::NAN;
                    row[6] = row[1]; // a tie
                }
                rows.push(row);
            }
        }
        rows
    }

    /// `log Σ e^y` in f64, NaN left out.
    fn exact_lse(row: &[f32]) -> f64 {
        let m = row.iter().filter(|y| !y.is_nan()).fold(f64::NEG_INFINITY, |m, &y| m.max(f64::from(y)));
        m + row.iter().filter(|y| !y.is_nan()).map(|&y| (f64::from(y) - m).exp()).sum::<f64>().ln()
    }

    fn sum_of(values: impl IntoIterator<Item = f32>) -> ExpSum {
        let mut s = ExpSum::EMPTY;
        values.into_iter().for_each(|y| s.push(y));
        s
    }

    /// Every split of a row into up to 64 parts, summed in any order and
    /// combined in any order, gives the same buckets and log-sum-exp; and the
    /// one-pass [`window_part`] gives the same window sum.
    #[test]
    fn splits_give_the_same_bits() {
        let mut next = crate::xorshift(0xa11_5917);
        for row in rows() {
            let whole = sum_of(row.iter().copied());
            let max = row.iter().copied().fold(f32::NEG_INFINITY, |m, y| if y > m { y } else { m });
            let top = term(max).k;
            let fast: u128 = row.iter().filter(|y| y.is_finite()).map(|&y| window_part(term(y), top)).sum();
            assert_eq!(fast, whole.window_sum());
            assert_eq!(lse(max, fast).to_bits(), whole.lse().to_bits());
            for _ in 0..20 {
                let parts = 1 + (next() % 64) as usize;
                let mut sums = std::vec![ExpSum::EMPTY; parts];
                // Every value to a random part, from the back of the row.
                for &y in row.iter().rev() {
                    sums[(next() % parts as u64) as usize].push(y);
                }
                let mut total = ExpSum::EMPTY;
                let start = (next() % parts as u64) as usize;
                for i in 0..parts {
                    total.combine(&sums[(start + i) % parts]);
                }
                assert_eq!(total, whole, "{parts} parts of a row of {}", row.len());
            }
        }
    }

    /// The log-sum-exp is within a few f32 roundings of an f64 one.
    #[test]
    fn lse_is_accurate() {
        for row in rows() {
            let (got, want) = (f64::from(sum_of(row.iter().copied()).lse()), exact_lse(&row));
            assert!((got - want).abs() <= 3.0 * f64::from(f32::EPSILON) * want.abs().max(1.0), "{got} vs {want}");
        }
    }

    /// `m` is `2^r·2^33` to within one unit and a half, at the ends of `r`'s range too.
    #[test]
    fn terms_are_accurate() {
        for y in [0.0f32, 1.0, -1.0, 0.346_573_6, 0.346_573_62, -0.346_573_6, 12.345, -87.5, 1000.0, 1e6, -3e5] {
            let t = term(y);
            let want = (f64::from(y) * core::f64::consts::LOG2_E - f64::from(t.k)).exp2() * SCALE;
            assert!((t.m as f64 - want).abs() <= 1.5, "term({y}) = {t:?}, want m = {want}");
            assert!(t.m >= (SCALE * core::f64::consts::FRAC_1_SQRT_2) as u64 - 1);
            assert!(t.m <= (SCALE * core::f64::consts::SQRT_2) as u64 + 1);
        }
        // Clamped far out: ties.
        assert_eq!(term(1e9), term(f32::MAX));
        assert_eq!(term(-1e9), term(-f32::MAX));
    }

    #[test]
    fn special_values() {
        assert_eq!(sum_of([]).lse(), f32::NEG_INFINITY);
        assert_eq!(sum_of([f32::NEG_INFINITY, f32::NAN]).lse(), f32::NEG_INFINITY);
        assert_eq!(sum_of([1.0, f32::INFINITY, 2.0]).lse(), f32::INFINITY);
        assert_eq!(sum_of([3.5]).lse(), 3.5);
        assert_eq!(sum_of([0.0, 0.0]).lse(), core::f32::consts::LN_2);
        // A term far below the window is dropped; one inside it is not.
        assert_eq!(sum_of([0.0, -60.0]).lse(), 0.0);
        assert_eq!(sum_of([0.0, -60.0]).window_sum(), sum_of([0.0]).window_sum());
        assert!(sum_of([0.0, -30.0]).window_sum() > sum_of([0.0]).window_sum());
        // Huge values tie, and their count rounds away.
        assert_eq!(sum_of([2e9, 1e9, 1.5e9]).lse(), 2e9);
        assert_eq!(sum_of([-2e9, -1e9]).lse(), -1e9);
    }
}
