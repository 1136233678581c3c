//! The order-free row sum `Σ e^y` behind a log-sum-exp (REFERENCE §2.6):
//! its value is a function of the multiset of the terms alone, so every
//! order, every split into lanes, blocks, threads or vocabulary shards, and
//! every backend gives the same bits.
//!
//! Each finite term `y` is written in base 2 with a rule that needs no
//! maximum ([`term`]), in `f32` arithmetic: `u = y·log2(e)` as an unevaluated
//! sum `a + b` (exact products by a split of `y`), `k` near `a + b` (each
//! half rounded), `m = 2^(u − k) · 2^24` from a polynomial, an integer near
//! `[2^23.5, 2^24.5]`, so `e^y ≈ m · 2^(k − 24)` (to about `2^-22` of
//! itself, as an `f32` exponential). Terms fall in **groups** of 32 binades
//! by `k` (`g = ⌊k / 32⌋`), where a term is the integer `m · 2^(k mod 32)`
//! (below `2^57`) in units of `2^(32g − 24)`. A set's sum is **the exact
//! sum of its terms in its top three groups**, `g >= G − 2` with `G` the
//! largest term's group: every term within `2^-64` of the largest is added
//! exactly, as integers, and every one below `2^-96` of it dropped (the
//! dropped ones together at most `2^-33` of the largest, for `2^30` terms). Its log-sum-exp is
//! [`lse`]: `M + ln(S)` from `M`, the set's maximum, and the three group sums.
//!
//! [`ExpSum`] keeps a set's sum (its maximum and three `u128` group sums:
//! what a vocabulary shard sends, and what a GPU thread keeps in
//! registers), [`group_part`] one term's group and part where `G` is already
//! known (the CPU's fast path: one pass for the maximum, one for the sums).
//! Only IEEE-rounded `f32` `+ − ×`, truncating conversions and integer
//! operations, so every backend (a GPU's `f32` units too) forms the same
//! `(k, m)` from the same `y`.

use crate::gumbel::ln;
use crate::logspace::Lse;

/// Binades of a group (`k` from `32g` to `32g + 31`): a term's part
/// `m << (k mod 32)` stays below `2^57`, and a group's sum of `2^30` of
/// them below `2^87`.
pub const GROUP_BITS: u32 = 5;
/// Groups of a sum: the largest term's and the two below it.
pub const GROUPS: usize = 3;
/// `m` is `2^r · 2^FRACTION_BITS`, `|r| <= 1/2` (a little more far out).
const FRACTION_BITS: i32 = 24;
/// `|y|` is clamped here, so that `k` fits an `i32` and `y·4097` is finite.
/// A scaled logit this large has an `f32` spacing of 32 or more, which any
/// `ln(count) <= 21` a tie adds to its log-sum-exp rounds away.
pub const Y_MAX: f32 = 536_870_912.0;
/// `2^12 + 1`: `y·SPLIT − (y·SPLIT − y)` is `y`'s top 12 bits (Veltkamp).
pub const SPLIT: f32 = 4097.0;
/// `log2(e)` to 12 bits (`0x3fb8a000`: products with 12-bit halves of `y`
/// are exact) and the rest, rounded.
pub const LOG2E_HI: f32 = f32::from_bits(0x3fb8_a000);
pub const LOG2E_LO: f32 = f32::from_bits(0x39a3_b296);
/// `2^FRACTION_BITS`: `m = p·SCALE` is an integer for any `f32` `p` in `[1/2, 2)`.
pub const SCALE: f32 = (1u32 << FRACTION_BITS) as f32;

/// `(ln 2)^n / n!` for `n = 1..=7`, rounded once to `f32` from `f64`:
/// `2^r = 1 + Σ c_n r^n`, truncated below `2^-27` for `|r| <= 1/2`.
pub const EXP2_COEFFICIENTS: [f32; 7] = {
    let mut c = [0.0; 7];
    let mut term = 1.0f64;
    let mut n = 0;
    while n < 7 {
        term = term * core::f64::consts::LN_2 / (n + 1) as f64;
        c[n] = term as f32;
        n += 1;
    }
    c
};

/// A finite `e^y` as `m · 2^(k − 24)` ([`term`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    pub k: i32,
    pub m: u64,
}

/// The term of a finite `y` (module docs), step by step (the vector code
/// in the CPU backend follows it operation for operation):
///
/// 1. `y` clamped to `±Y_MAX`, split exactly into `yh + yl` (12 bits each);
/// 2. `u = a + b`: `a = yh·LOG2E_HI` (exact), `b = yl·LOG2E_HI + y·LOG2E_LO`;
/// 3. `k = ka + kb`, `r = (a − ka) + (b − kb)` (both differences exact), with
///    `ka`, `kb` the halves rounded ([`round_half_away`]); then `r` moved into
///    `[-1/2, 1/2]` by one, and `k` the other way, where it is past it;
/// 4. `p = 2^r` by Horner over [`EXP2_COEFFICIENTS`], `m = p·2^24`, exact.
///
/// `k` never decreases as `y` grows (a scan of every `f32` up to `Y_MAX`
/// found none), so the largest value's `k` is the set's largest `k`: what
/// the two-pass sums ([`group_part`]) and [`ExpSum::from_parts`] rely on.
#[inline(always)]
pub fn term(y: f32) -> Term {
    let (k, r) = split(y);
    let c = &EXP2_COEFFICIENTS;
    let mut p = c[6];
    let mut n = 6;
    while n > 0 {
        n -= 1;
        p = p * r + c[n];
    }
    let p = p * r + 1.0;
    Term { k, m: (p * SCALE) as u64 }
}

/// `y·log2(e)` as `k + r`, `k` an integer and `|r| <= 1/2` ([`term`]'s
/// steps 1 to 3, `y` clamped to `±Y_MAX`): `r` within a few `f32` roundings
/// of the exact reduction wherever `|y| < 2^24`, and every backend's alike.
#[inline(always)]
pub fn split(y: f32) -> (i32, f32) {
    let y = y.clamp(-Y_MAX, Y_MAX);
    let c = y * SPLIT;
    let yh = c - (c - y);
    let yl = y - yh;
    let a = yh * LOG2E_HI;
    let b = yl * LOG2E_HI + y * LOG2E_LO;
    let (ka, kb) = (round_half_away(a), round_half_away(b));
    let r = (a - ka as f32) + (b - kb as f32);
    if r > 0.5 {
        (ka + kb + 1, r - 1.0)
    } else if r < -0.5 {
        (ka + kb - 1, r + 1.0)
    } else {
        (ka + kb, r)
    }
}

/// `x` (`|x| < 2^30`) to an integer: `trunc(x ± 1/2)`, the sign of `x`, in
/// `f32`; within a hair of `1/2` of `x` (the sum rounds), and every backend's.
#[inline(always)]
pub fn round_half_away(x: f32) -> i32 {
    let half = f32::from_bits((x.to_bits() & 0x8000_0000) | 0.5f32.to_bits());
    (x + half) as i32
}

impl Term {
    /// The term's group, `⌊k / 32⌋`.
    #[inline(always)]
    pub fn group(&self) -> i32 {
        self.k >> GROUP_BITS
    }

    /// The term in units of its group's `2^(32g − 24)`: `m << (k mod 32)`, below `2^57`.
    #[inline(always)]
    pub fn part(&self) -> u64 {
        self.m << (self.k & ((1 << GROUP_BITS) - 1))
    }
}

/// Where `t` goes in the sum of a set whose largest group is `top`: its
/// place `j = top − g` among the set's groups (`0..GROUPS`) and its part;
/// `None` below them (dropped).
#[inline(always)]
pub fn group_part(t: Term, top: i32) -> Option<(usize, u64)> {
    let j = i64::from(top) - i64::from(t.group());
    (0..GROUPS as i64).contains(&j).then(|| (j as usize, t.part()))
}

/// A group sum's `u128` to `f64`: `hi·2^64 + lo`, two roundings (the same on every backend).
#[inline(always)]
fn to_f64(x: u128) -> f64 {
    ((x >> 64) as u64 as f64) * 18_446_744_073_709_551_616.0 + (x as u64 as f64)
}

/// The log-sum-exp of a set from its maximum `max`, its largest group `top`
/// and its group sums `sums` (the module docs; `sums[j]` of group
/// `top − j`): `max` itself where it is infinite (`-inf`: the set is empty;
/// `+inf`: a point mass), else `max + ln(S)`, `S = Σ_j sums[j]·2^(−32j) /
/// (m_M · 2^(k_M − 32·top))` with `(k_M, m_M)` the maximum's [`term`] (about
/// 1 or more: the maximum's own term, whatever rule formed the terms), each
/// sum to `f64` as [`to_f64`], added from the smallest group up, divided
/// exactly, and rounded to `f32` once, with the IEEE-only `ln`.
#[inline(always)]
pub fn lse(max: f32, top: i32, sums: &[u128; GROUPS]) -> f32 {
    if max.is_infinite() || max.is_nan() {
        return max;
    }
    max + ln(relative(max, top, sums))
}

/// `S` of [`lse`]: a finite set's sum over `e^max`, as `f32`.
#[inline(always)]
fn relative(max: f32, top: i32, sums: &[u128; GROUPS]) -> f32 {
    const UNIT: f64 = 1.0 / 4_294_967_296.0;
    let a = (to_f64(sums[2]) * UNIT + to_f64(sums[1])) * UNIT + to_f64(sums[0]);
    let t = term(max);
    // `m_M · 2^(k_M − 32·top)`, exact (`m_M` has 25 bits); the exponent is a
    // few dozen from 0 (`top` is a term's group near the maximum's), clamped
    // to stay a normal `f64`.
    let e = (i64::from(t.k) - (i64::from(top) << GROUP_BITS)).clamp(-1000, 1000);
    let scale = f64::from_bits(((e + 1023) as u64) << 52);
    (a / (t.m as f64 * scale)) as f32
}

/// The sum of a set of terms by groups (module docs): the set's maximum
/// and, for `j = 0..GROUPS`, the sum of the parts of its terms in group
/// `G − j`. NaN and `-inf` add nothing; a `+inf` makes the set a point mass
/// (its [`ExpSum::lse`] is `+inf`). Sums any multiset to the same value in
/// any order and any grouping ([`ExpSum::combine`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct ExpSum {
    max: f32,
    top: i32,
    sums: [u128; GROUPS],
}

/// Where an [`ExpSum`]'s fields lie in its `#[repr(C)]` bytes, for device
/// code that reads a record's maximum and top group before its sums: the
/// maximum (`f32`) and top group (`i32`) at [`HEAD_OFFSET`], the group sums
/// (`u128`s) from [`SUMS_OFFSET`].
pub const HEAD_OFFSET: usize = 0;
pub const SUMS_OFFSET: usize = 16;

const _: () = assert!(core::mem::offset_of!(ExpSum, max) == HEAD_OFFSET);
const _: () = assert!(core::mem::offset_of!(ExpSum, top) == HEAD_OFFSET + 4);
const _: () = assert!(core::mem::offset_of!(ExpSum, sums) == SUMS_OFFSET);

impl ExpSum {
    pub const EMPTY: ExpSum = ExpSum { max: f32::NEG_INFINITY, top: i32::MIN, sums: [0; GROUPS] };

    /// The sum of a set with maximum `max` and these group sums (as
    /// [`ExpSum::max`] and [`ExpSum::sums`] gave them) of terms by [`term`],
    /// whose largest group is the maximum's.
    pub fn from_parts(max: f32, sums: [u128; GROUPS]) -> ExpSum {
        let top = if max.is_finite() { term(max).group() } else { i32::MIN };
        ExpSum { max, top, sums }
    }

    /// The largest term (`-inf` for none, `+inf` for a point mass).
    pub fn max(&self) -> f32 {
        self.max
    }

    /// The largest group of the terms (`i32::MIN` where there are none).
    pub fn top(&self) -> i32 {
        self.top
    }

    /// The parts' sums of the terms in group `top − j`, for `j = 0..GROUPS`.
    pub fn sums(&self) -> &[u128; GROUPS] {
        &self.sums
    }

    /// Adds one value.
    #[inline]
    pub fn push(&mut self, y: f32) {
        if y.is_nan() || y == f32::NEG_INFINITY || self.max == f32::INFINITY {
            return; // NaN, -inf, or a point mass already
        }
        if y == f32::INFINITY {
            *self = ExpSum { max: y, top: i32::MIN, sums: [0; GROUPS] };
            return;
        }
        self.push_term(y, term(y));
    }

    /// Adds `n` values `y` ([`ExpSum::push`] `n` times, as one product:
    /// the same bits).
    #[inline(always)]
    pub fn push_count(&mut self, y: f32, n: u32) {
        if n == 0 || y.is_nan() || y == f32::NEG_INFINITY || self.max == f32::INFINITY {
            return;
        }
        if y == f32::INFINITY {
            *self = ExpSum { max: y, top: i32::MIN, sums: [0; GROUPS] };
            return;
        }
        let t = term(y);
        self.raise(t.group());
        if y > self.max {
            self.max = y;
        }
        let part = u128::from(t.part()) * u128::from(n);
        match i64::from(self.top) - i64::from(t.group()) {
            0 => self.sums[0] += part,
            1 => self.sums[1] += part,
            2 => self.sums[2] += part,
            _ => {}
        }
    }

    /// Adds a term `t` of values whose largest is `max` (finite): one value's
    /// [`term`] ([`ExpSum::push`]), or a term by another rule (the GPU's
    /// runs, REFERENCE §2.6), whose `k` must not exceed `term(max).k` by
    /// more than one group.
    #[inline(always)]
    pub fn push_term(&mut self, max: f32, t: Term) {
        if self.max == f32::INFINITY {
            return;
        }
        self.raise(t.group());
        if max > self.max {
            self.max = max;
        }
        let part = u128::from(t.part());
        // Constant indices: registers on the GPU.
        match i64::from(self.top) - i64::from(t.group()) {
            0 => self.sums[0] += part,
            1 => self.sums[1] += part,
            2 => self.sums[2] += part,
            _ => {}
        }
    }

    /// Adds another set's terms.
    #[inline(always)]
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
        let add = other.aligned(self.top);
        self.sums = [self.sums[0] + add[0], self.sums[1] + add[1], self.sums[2] + add[2]];
    }

    /// This set's group sums moved down to a largest group `top >=
    /// self.top()`, what falls below the top three dropped: its share of a
    /// combined set whose largest group is `top` (a GPU warp finds the
    /// largest group first, then adds the shares: [`ExpSum::from_shares`]).
    #[inline(always)]
    pub fn aligned(&self, top: i32) -> [u128; GROUPS] {
        if !self.max.is_finite() {
            return [0; GROUPS];
        }
        let [a, b, _] = self.sums;
        match i64::from(top) - i64::from(self.top) {
            0 => self.sums,
            1 => [0, a, b],
            2 => [0, 0, a],
            _ => [0; GROUPS],
        }
    }

    /// A combined set from its largest maximum `max`, its largest group
    /// `top` and the sum of its parts' [`ExpSum::aligned`] shares: what
    /// [`ExpSum::combine`] gives, combining them in any order.
    #[inline(always)]
    pub fn from_shares(max: f32, top: i32, sums: [u128; GROUPS]) -> ExpSum {
        if max == f32::INFINITY {
            ExpSum { max, top: i32::MIN, sums: [0; GROUPS] }
        } else if max == f32::NEG_INFINITY {
            ExpSum::EMPTY
        } else {
            ExpSum { max, top, sums }
        }
    }

    /// Moves the sums so that the largest group is at least `g`, dropping
    /// what falls below the top three.
    #[inline(always)]
    fn raise(&mut self, g: i32) {
        if self.max == f32::NEG_INFINITY {
            self.top = g;
            return;
        }
        if g <= self.top {
            return;
        }
        let [a, b, _] = self.sums;
        self.sums = match i64::from(g) - i64::from(self.top) {
            1 => [0, a, b],
            2 => [0, 0, a],
            _ => [0; GROUPS],
        };
        self.top = g;
    }

    /// `log Σ e^y` by the module's rule ([`lse`]).
    #[inline(always)]
    pub fn lse(&self) -> f32 {
        lse(self.max, self.top, &self.sums)
    }

    /// The sum over `e^max` (`S` of [`lse`], so that `lse = max + ln(S)`):
    /// the statistics the float sums keep (`logspace::Lse`), `(-inf, 0)`
    /// empty and `(+inf, 1)` for a point mass.
    #[inline(always)]
    pub fn to_lse(&self) -> Lse {
        if self.max == f32::NEG_INFINITY {
            Lse::EMPTY
        } else if self.max == f32::INFINITY {
            Lse { max: self.max, sum: 1.0 }
        } else {
            Lse { max: self.max, sum: relative(self.max, self.top, &self.sums) }
        }
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
    /// combined in any order, gives the same group sums and log-sum-exp; and the
    /// two-pass [`group_part`] gives the same sums.
    #[test]
    fn splits_give_the_same_bits() {
        let mut next = crate::xorshift(0xa11_5917);
        for row in rows() {
            let whole = sum_of(row.iter().copied());
            let max = row.iter().copied().fold(f32::NEG_INFINITY, |m, y| if y > m { y } else { m });
            let top = term(max).group();
            let mut fast = [0u128; GROUPS];
            for &y in row.iter().filter(|y| y.is_finite()) {
                if let Some((j, part)) = group_part(term(y), top) {
                    fast[j] += u128::from(part);
                }
            }
            if max.is_finite() {
                assert_eq!(&fast, whole.sums());
            }
            assert_eq!(lse(max, top, &fast).to_bits(), whole.lse().to_bits());
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

    /// The terms of a row's runs of 16 ids by a stand-in for the GPU's run
    /// rule (the kernels' `fold::push_run_sum`): the run's largest value
    /// `y`, `(k, r)` its [`split`], the lanes' `2^((x − y)·log2 e + r)`
    /// summed in a fixed order (each quad's, then the quads'), `m` that sum
    /// times `2^24`; here the lanes' exponentials in `f64`, where the GPU
    /// has its `ex2`.
    fn run_terms(row: &[f32]) -> Vec<(f32, Term)> {
        row.chunks(16)
            .filter_map(|run| {
                let y = run.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
                if !y.is_finite() {
                    return None; // empty, or a point mass: `push(+inf)` in the kernels
                }
                let (k, r) = split(y);
                let lane = |x: f32| {
                    if x.is_nan() {
                        0.0
                    } else {
                        ((f64::from(x) - f64::from(y)) * core::f64::consts::LOG2_E + f64::from(r)).exp2() as f32
                    }
                };
                let quad = |q: &[f32]| q.iter().map(|&x| lane(x)).fold(0.0f32, |s, t| s + t);
                let s = run.chunks(4).map(quad).fold(0.0f32, |s, t| s + t);
                Some((y, Term { k, m: (s * SCALE) as u64 }))
            })
            .collect()
    }

    /// Sums of run terms ([`ExpSum::push_term`]) are order-free too: every
    /// split of a row on run boundaries into up to 64 parts, combined pair
    /// by pair in any order or as a warp combines them (the largest group
    /// first, then the [`ExpSum::aligned`] shares), gives the same bits, and
    /// the log-sum-exp is within a few `f32` roundings of an `f64` one.
    #[test]
    fn run_terms_give_the_same_bits() {
        let mut next = crate::xorshift(0x9ad5_0b1e);
        for row in rows() {
            let terms = run_terms(&row);
            let sum_of_terms = |terms: &[(f32, Term)]| {
                let mut s = ExpSum::EMPTY;
                terms.iter().for_each(|&(y, t)| s.push_term(y, t));
                s
            };
            let whole = sum_of_terms(&terms);
            let (got, want) = (f64::from(whole.lse()), exact_lse(&row));
            assert!((got - want).abs() <= 2e-6 * want.abs().max(1.0), "{got} vs {want}");
            for _ in 0..20 {
                let parts = 1 + (next() % 64) as usize;
                let mut cuts: Vec<usize> =
                    (0..parts - 1).map(|_| (next() % (terms.len() as u64 + 1)) as usize).collect();
                cuts.extend([0, terms.len()]);
                cuts.sort();
                let sums: Vec<ExpSum> = cuts.windows(2).map(|w| sum_of_terms(&terms[w[0]..w[1]])).collect();
                let mut paired = ExpSum::EMPTY;
                let start = (next() % sums.len() as u64) as usize;
                for i in 0..sums.len() {
                    paired.combine(&sums[(start + i) % sums.len()]);
                }
                assert_eq!(paired, whole, "{parts} parts of a row of {}", row.len());
                let max = sums.iter().fold(f32::NEG_INFINITY, |m, s| m.max(s.max()));
                let top = sums.iter().map(ExpSum::top).max().unwrap();
                let mut shares = [0u128; GROUPS];
                for s in &sums {
                    for (total, share) in shares.iter_mut().zip(s.aligned(top)) {
                        *total += share;
                    }
                }
                assert_eq!(ExpSum::from_shares(max, top, shares), whole, "{parts} shares of a row of {}", row.len());
            }
        }
    }

    /// A term whose group is above the maximum's (a kept set's
    /// log-sum-exp `L` added as one term, `L >= max`) sums right:
    /// [`lse`] divides by the maximum's term at the set's largest group.
    #[test]
    fn a_term_above_the_maximum_sums_right() {
        for (max, l) in [(0.0f32, 3.0f32), (21.0, 23.5), (-22.0, -21.0), (30.0, 45.0), (-200.0, -190.0)] {
            let mut s = ExpSum::EMPTY;
            s.push_term(max, term(l));
            assert!(s.top() >= term(max).group());
            assert!((s.lse() - l).abs() <= 4e-6 * l.abs().max(1.0), "max {max}, L {l}: {}", s.lse());
            let lse = s.to_lse();
            assert!((lse.value() - l).abs() <= 4e-6 * l.abs().max(1.0));
        }
    }

    /// The log-sum-exp is within a few f32 roundings of an f64 one.
    #[test]
    fn lse_is_accurate() {
        for row in rows() {
            let (got, want) = (f64::from(sum_of(row.iter().copied()).lse()), exact_lse(&row));
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{got} vs {want}");
        }
    }

    /// `m` is `2^(u − k)·2^24` to within an f32 exponential's error, `k` is
    /// `u` rounded, and the split makes `u` exact enough far from 0.
    #[test]
    fn terms_are_accurate() {
        let mut ys =
            std::vec![0.0f32, -0.0, 1.0, -1.0, 0.346_573_6, -0.346_573_6, 12.345, -87.5, 1000.0, 1e6, -3e5, 5e8];
        let mut next = crate::xorshift(0x7e57);
        ys.extend((0..10_000).map(|_| ((next() >> 11) as f64 / (1u64 << 53) as f64 * 400.0 - 200.0) as f32));
        for y in ys {
            let t = term(y);
            let u = f64::from(y) * core::f64::consts::LOG2_E;
            assert!((u - f64::from(t.k)).abs() <= 0.5 + 1e-6, "term({y}) = {t:?}: k is not u rounded");
            let want = (u - f64::from(t.k)).exp2() * f64::from(SCALE);
            // `y·LOG2E_LO` rounds: far out, by a part of `u` much finer than `y`'s own spacing.
            let tolerance = 4e-7 + u.abs() * 4e-11;
            assert!((t.m as f64 - want).abs() <= tolerance * want, "term({y}) = {t:?}, want m = {want}");
        }
        // Clamped far out: ties.
        assert_eq!(term(1e9), term(f32::MAX));
        assert_eq!(term(-1e9), term(-f32::MAX));
    }

    /// `k` never decreases as `y` grows, on random pairs of neighbouring
    /// `f32`s over the whole range (every pair was checked once: see [`term`]).
    #[test]
    fn k_never_decreases() {
        let mut next = crate::xorshift(0xc0ffee);
        for _ in 0..1 << 22 {
            let bits = (next() >> 33) as u32 % 0x4e00_0000;
            let (y, up) = (f32::from_bits(bits), f32::from_bits(bits + 1));
            assert!(term(up).k >= term(y).k, "term({up}).k < term({y}).k");
            assert!(term(-y).k >= term(-up).k, "term({}).k < term({}).k", -y, -up);
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(sum_of([]).lse(), f32::NEG_INFINITY);
        assert_eq!(sum_of([f32::NEG_INFINITY, f32::NAN]).lse(), f32::NEG_INFINITY);
        assert_eq!(sum_of([1.0, f32::INFINITY, 2.0]).lse(), f32::INFINITY);
        assert_eq!(sum_of([3.5]).lse(), 3.5);
        assert_eq!(sum_of([0.0, 0.0]).lse(), core::f32::consts::LN_2);
        // A term below the top three groups is dropped; one inside them is not
        // (0 is in group 0; -60 has k = -87, group -3; -30 has k = -43, group -2).
        assert_eq!(sum_of([0.0, -60.0]).lse(), 0.0);
        assert_eq!(sum_of([0.0, -60.0]).sums(), sum_of([0.0]).sums());
        assert!(sum_of([0.0, -30.0]).sums()[2] > 0);
        // Every term within 2^-64 of the largest is kept, wherever the largest sits in its group.
        for top in [0.0f32, 21.0, -21.5, 40.0] {
            let near = top - 64.0 * core::f32::consts::LN_2;
            assert!(sum_of([top, near]).sums() != sum_of([top]).sums(), "{top}: {near} is dropped");
        }
        // Huge values tie, and their count rounds away.
        assert_eq!(sum_of([2e9, 1e9, 1.5e9]).lse(), 2e9);
        assert_eq!(sum_of([-2e9, -1e9]).lse(), -1e9);
    }
    #[test]
    fn a_count_of_one_value_is_that_many_pushes() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2_000 {
            let (mut one, mut many) = (ExpSum::EMPTY, ExpSum::EMPTY);
            for _ in 0..1 + (rng % 5) {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let y = match rng >> 60 {
                    0 => f32::INFINITY,
                    1 => f32::NEG_INFINITY,
                    2 => f32::NAN,
                    _ => ((rng >> 32) as u32 as f32 / u32::MAX as f32 - 0.5) * 200.0,
                };
                let n = (rng >> 8) as u32 % 40;
                (0..n).for_each(|_| one.push(y));
                many.push_count(y, n);
            }
            assert_eq!((one.max().to_bits(), one.top(), one.sums()), (many.max().to_bits(), many.top(), many.sums()));
        }
    }
}
