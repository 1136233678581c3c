//! Sampling filters (SPEC §7): top-k, top-p and min-p as one value
//! threshold `τ` on a row's scaled logits, `S = {i : x_i >= τ}`.
//!
//! The threshold is a function of the multiset of the row's values only:
//! [`threshold`] reads the row's tie groups (distinct values, largest first,
//! each with its count and its mass), so whoever lists the groups — the CPU
//! twin from a selection over the row, a kernel from per-block summaries —
//! gets the same `τ`. The masses that decide top-p are integers
//! ([`mass`]: `e^(x − M)` in fixed point with [`exp`]), summed exactly in
//! any order, and compared with `top_p` exactly ([`top_p_reached`]); no
//! float sum is on the decision's path (SPEC §7.4).

use crate::gumbel::ln;
use crate::logspace::exp;

/// One slot's filters, validated ([`top_k_is_valid`], [`top_p_is_valid`],
/// [`min_p_is_valid`]). Each value that disables itself (`top_k = 0` or
/// `>= V`, `top_p = 1`, `min_p = 0`) is the same as its absence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Filter {
    /// Keep the `top_k` largest values, ties kept; `0`: off.
    pub top_k: u32,
    /// Keep the smallest top group of mass `>= top_p` (of the survivors of
    /// min-p and top-k), ties kept; `1`: off.
    pub top_p: f32,
    /// Keep values within `ln(min_p)` of the maximum; `0`: off.
    pub min_p: f32,
}

impl Filter {
    /// No filter: every id is kept.
    pub const OFF: Filter = Filter { top_k: 0, top_p: 1.0, min_p: 0.0 };

    /// Whether top-k filters a row of `vocab` ids.
    #[inline(always)]
    pub fn has_top_k(&self, vocab: usize) -> bool {
        self.top_k != 0 && (self.top_k as usize) < vocab
    }

    /// Whether top-p filters.
    #[inline(always)]
    pub fn has_top_p(&self) -> bool {
        self.top_p < 1.0
    }

    /// Whether min-p filters.
    #[inline(always)]
    pub fn has_min_p(&self) -> bool {
        self.min_p > 0.0
    }

    /// Whether no filter acts on a row of `vocab` ids (the row is sampled as unfiltered).
    #[inline(always)]
    pub fn is_off(&self, vocab: usize) -> bool {
        !self.has_top_k(vocab) && !self.has_top_p() && !self.has_min_p()
    }
}

/// `top_k` is valid when it is not negative (`0`: off).
#[inline(always)]
pub fn top_k_is_valid(k: i32) -> bool {
    k >= 0
}

/// `top_p` is valid in `(0, 1]` (`1`: off); NaN is not.
#[inline(always)]
pub fn top_p_is_valid(p: f32) -> bool {
    p > 0.0 && p <= 1.0
}

/// `min_p` is valid in `[0, 1]` (`0`: off); NaN is not.
#[inline(always)]
pub fn min_p_is_valid(m: f32) -> bool {
    (0.0..=1.0).contains(&m)
}

/// Fractional bits of a [`mass`]: the row's maximum has mass `2^MASS_BITS`.
/// A row of up to 2^30 ids (the host's vocabulary limit) sums to under 2^62,
/// so sums fit a `u64`.
pub const MASS_BITS: u32 = 32;

/// The mass of value `x` in a row whose maximum is `max` (`x <= max`, both
/// finite): `⌊e^(x − max) · 2^MASS_BITS⌋`, with [`exp`] (IEEE-only, so every
/// backend computes it alike). Values more than ~22.2 below the maximum have
/// mass 0: a relative resolution of 2^-32 of the maximum's probability per id.
#[inline(always)]
pub fn mass(x: f32, max: f32) -> u64 {
    // The product is exact (a power of two); the conversion truncates.
    (exp(x - max) * (1u64 << MASS_BITS) as f32) as u64
}

/// [`mass`] of each of `ys` (not NaN, `<= max`) against `max` (finite) into
/// `out`, bit for bit, written without branches so that a compiler
/// vectorises it (the CPU twin's top-p computes one per candidate): [`exp`]'s
/// operations, in its order, on `x - max` raised to `-87` first, where
/// below its range [`exp`] is 0 and at and above `-87` a mass is 0 anyway
/// (`e^-87 · 2^32 < 1`); on `x <= max` its rounding `k` is `⌊t − 0.5⌉`;
/// the conversion goes through `u32` below `2^32` (the same truncation),
/// which vector units have. Inlined, so that a caller compiled for wider
/// vectors gets them.
#[inline(always)]
pub fn masses(ys: &[f32], max: f32, out: &mut [u64]) {
    use crate::logspace::{LOG2E, exp_reduced};
    for (m, &y) in out.iter_mut().zip(ys) {
        let d = (y - max).max(-87.0);
        let e = exp_reduced(d, (d * LOG2E - 0.5) as i32);
        let v = e * (1u64 << MASS_BITS) as f32;
        // e <= 1: v <= 2^32, and 2^32 only at the maximum.
        *m = if v >= (1u64 << MASS_BITS) as f32 { 1 << MASS_BITS } else { (v as u32) as u64 };
    }
}

/// `τ_m = max + ln(min_p)` (`-inf` when min-p is off; `max` itself at
/// `min_p = 1`, as `ln(1) = 0` exactly). A subnormal `min_p` is scaled into
/// the normal range first (exactly), since [`ln`] takes normal values.
#[inline(always)]
pub fn min_p_threshold(max: f32, min_p: f32) -> f32 {
    if min_p <= 0.0 {
        return f32::NEG_INFINITY;
    }
    let ln_m = if min_p < f32::MIN_POSITIVE {
        const TWO_POW_64: f32 = 18_446_744_073_709_551_616.0;
        ln(min_p * TWO_POW_64) - 64.0 * core::f32::consts::LN_2
    } else {
        ln(min_p)
    };
    max + ln_m
}

/// Whether a top mass `acc` reaches `top_p` of the survivors' mass `total`:
/// `acc >= top_p · total` exactly, as rationals (`top_p` in `(0, 1)` is
/// `mant · 2^-s` with an integer `mant < 2^24` and `s >= 24`).
#[inline(always)]
pub fn top_p_reached(acc: u64, total: u64, top_p: f32) -> bool {
    let bits = top_p.to_bits();
    let field = (bits >> 23) & 0xff;
    let (mant, s) = if field == 0 { (bits & 0x7f_ffff, 149) } else { ((bits & 0x7f_ffff) | 0x80_0000, 150 - field) };
    // acc · 2^s >= total · mant  ⟺  acc >= ⌈total · mant / 2^s⌉ (total · mant < 2^86).
    let x = total as u128 * mant as u128;
    let need = if s >= 128 { (x > 0) as u128 } else { (x >> s) + ((x & ((1u128 << s) - 1)) != 0) as u128 };
    acc as u128 >= need
}

/// A tie group of a row: every id whose scaled value is `value`, `count` of
/// them, of total [`mass`] `mass`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Group {
    pub value: f32,
    pub count: u32,
    pub mass: u64,
}

/// The tie groups of entries `all` sorted largest value first (by [`key`];
/// entries of `count` 0, which end the values, last), in place at its
/// front, as [`threshold`] takes them: equal values joined (`==`: `-0` and
/// `+0` are one), each group's mass against the first value (none where it
/// is `+inf`). Returns how many. The CPU twin's groups of a row and the
/// merge of a sharded call's lists on the GPU both form them so.
#[inline(always)]
pub fn merge_groups(all: &mut [Group]) -> usize {
    let mut g = 0;
    for j in 0..all.len() {
        let e = all[j];
        if e.count == 0 {
            break;
        }
        if g > 0 && all[g - 1].value == e.value {
            all[g - 1].count += e.count;
        } else {
            all[g] = e;
            g += 1;
        }
    }
    if g > 0 && all[0].value < f32::INFINITY {
        let max = all[0].value;
        for group in &mut all[..g] {
            group.mass = group.count as u64 * mass(group.value, max);
        }
    }
    g
}

/// The threshold `τ` of the kept set `S = {x >= τ}` (SPEC §7.2) of a row
/// of `vocab` ids filtered by `filter`, from its tie groups: distinct
/// values, not NaN, above `-inf`, largest first, with the masses of
/// [`mass`] against the first group's value (the row's maximum `M`).
///
/// `groups` must hold every group `>= τ_1 = max(τ_m, τ_k)`: all groups, or
/// at least the top `top_k` values counted with multiplicity and at least
/// every value `>= τ_m`; when the row has fewer than `top_k` such values,
/// every one of them. Returns `-inf` for a row without such values (every
/// id is kept) and `+inf` when the maximum is `+inf` (the `+inf` ids).
pub fn threshold(groups: &[Group], filter: Filter, vocab: usize) -> f32 {
    let Some(top) = groups.first() else {
        return f32::NEG_INFINITY;
    };
    let max = top.value;
    if max == f32::INFINITY {
        return f32::INFINITY;
    }
    let tau_m = if filter.has_min_p() { min_p_threshold(max, filter.min_p) } else { f32::NEG_INFINITY };
    let mut tau_k = f32::NEG_INFINITY;
    if filter.has_top_k(vocab) {
        let mut seen = 0u64;
        for g in groups {
            // The last group if the row has fewer than k values: every one is kept.
            tau_k = g.value;
            seen += g.count as u64;
            if seen >= filter.top_k as u64 {
                break;
            }
        }
    }
    let tau_1 = tau_m.max(tau_k);
    if !filter.has_top_p() {
        return tau_1;
    }
    let survivors = groups.iter().take_while(|g| g.value >= tau_1);
    let total: u64 = survivors.clone().map(|g| g.mass).sum();
    let mut acc = 0u64;
    for g in survivors {
        acc += g.mass;
        if top_p_reached(acc, total, filter.top_p) {
            return g.value;
        }
    }
    // Unreachable for top_p < 1 (acc = total reaches it); kept total.
    tau_1
}

/// The order-preserving key of a value: larger values have larger keys; `-0`
/// is keyed as `+0` (one value), NaN is not a value.
#[inline(always)]
pub fn key(y: f32) -> u32 {
    let b = (y + 0.0).to_bits();
    if b >> 31 == 1 { !b } else { b | 1 << 31 }
}

/// The value of a [`key`].
#[inline(always)]
pub fn from_key(k: u32) -> f32 {
    f32::from_bits(if k >> 31 == 1 { k & !(1 << 31) } else { !k })
}

/// Digits of a radix search over keys, 8 bits a round from the top.
pub const DIGITS: usize = 256;
/// Rounds of a radix search: four 8-bit digits of a 32-bit key.
pub const ROUNDS: u32 = 4;

/// A radix search for one key among a row's values, digit by digit from the
/// top: the digits chosen so far. A round histograms the values whose key
/// [`Radix::matches`] by their [`Radix::digit`] (counts for a rank, masses for
/// top-p), picks a digit ([`count_digit`], [`mass_digit`]) and descends; after
/// [`ROUNDS`] the prefix is the key. It is how a block of threads finds `τ`
/// without sorting; the CPU twin runs it too ([`radix_threshold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Radix {
    pub prefix: u32,
    pub round: u32,
}

impl Radix {
    pub const START: Radix = Radix { prefix: 0, round: 0 };

    /// Whether `key` agrees with the digits chosen so far.
    #[inline(always)]
    pub fn matches(self, key: u32) -> bool {
        self.round == 0 || key >> (32 - 8 * self.round) == self.prefix >> (32 - 8 * self.round)
    }

    /// `key`'s digit in this round.
    #[inline(always)]
    pub fn digit(self, key: u32) -> usize {
        ((key >> (24 - 8 * self.round)) & 0xff) as usize
    }

    /// The search after choosing `digit` this round.
    #[inline(always)]
    pub fn descend(self, digit: usize) -> Radix {
        Radix { prefix: self.prefix | (digit as u32) << (24 - 8 * self.round), round: self.round + 1 }
    }
}

/// The digit, from the top, that holds the `rank`-th largest key (`1 <=
/// rank <=` the histogram's total), and that key's rank within the digit.
/// `hist` is a round's [`DIGITS`] counts, or a run of consecutive digits of
/// them, the digit then its index in the run (a kernel's warp gives each lane
/// a run, and the lane whose run holds the key searches it, `rank` less the
/// counts above the run).
#[inline(always)]
pub fn count_digit(hist: &[u32], mut rank: u32) -> (usize, u32) {
    let mut d = hist.len() - 1;
    while d > 0 && rank > hist[d] {
        rank -= hist[d];
        d -= 1;
    }
    (d, rank)
}

/// The digit, from the top, where the top mass first reaches `top_p` of
/// `total` ([`top_p_reached`]), given `acc` of the digits above this round's
/// values, and the mass above that digit. The walk of [`threshold`], a
/// digit's values at a time; `hist` a round's masses or a run of them, as
/// for [`count_digit`].
#[inline(always)]
pub fn mass_digit(hist: &[u64], mut acc: u64, total: u64, top_p: f32) -> (usize, u64) {
    let mut d = hist.len() - 1;
    while d > 0 && !top_p_reached(acc + hist[d], total, top_p) {
        acc += hist[d];
        d -= 1;
    }
    (d, acc)
}

/// [`threshold`] by radix search over `ys`, every value of a row that can
/// decide it (not NaN, above `-inf`; all of them, or with top-k at least the
/// top `top_k` and their ties, with top-p at least every value with a mass
/// `>= τ_1`), `max` the row's maximum (finite), `masses[i] = mass(ys[i], max)`.
/// Equal to [`threshold`] over the same values' tie groups.
pub fn radix_threshold(ys: &[f32], masses: &[u64], max: f32, filter: Filter, vocab: usize) -> f32 {
    let tau_m = if filter.has_min_p() { min_p_threshold(max, filter.min_p) } else { f32::NEG_INFINITY };
    let mut tau_k = f32::NEG_INFINITY;
    if filter.has_top_k(vocab) {
        let k = filter.top_k as usize;
        tau_k = if k > ys.len() {
            // Fewer values than k: the smallest (-0 as +0, as keys have it).
            ys.iter().copied().fold(f32::INFINITY, f32::min) + 0.0
        } else {
            let (mut radix, mut rank) = (Radix::START, k as u32);
            while radix.round < ROUNDS {
                let mut hist = [0u32; DIGITS];
                for &y in ys {
                    let k = key(y);
                    if radix.matches(k) {
                        hist[radix.digit(k)] += 1;
                    }
                }
                let (d, r) = count_digit(&hist, rank);
                (radix, rank) = (radix.descend(d), r);
            }
            from_key(radix.prefix)
        };
    }
    let tau_1 = tau_m.max(tau_k);
    if !filter.has_top_p() {
        return tau_1;
    }
    let survivors = || ys.iter().zip(masses).filter(move |&(&y, _)| y >= tau_1);
    let total: u64 = survivors().map(|(_, &m)| m).sum();
    let (mut radix, mut acc) = (Radix::START, 0u64);
    while radix.round < ROUNDS {
        let mut hist = [0u64; DIGITS];
        for (&y, &m) in survivors() {
            let k = key(y);
            if radix.matches(k) {
                hist[radix.digit(k)] += m;
            }
        }
        let (d, a) = mass_digit(&hist, acc, total, filter.top_p);
        (radix, acc) = (radix.descend(d), a);
    }
    from_key(radix.prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(values: &[(f32, u32)]) -> [Group; 8] {
        let max = values[0].0;
        let mut g = [Group { value: 0.0, count: 0, mass: 0 }; 8];
        for (slot, &(value, count)) in g.iter_mut().zip(values) {
            *slot = Group { value, count, mass: count as u64 * mass(value, max) };
        }
        g
    }

    #[test]
    fn the_maximum_has_the_unit_mass_and_far_values_none() {
        assert_eq!(mass(3.5, 3.5), 1 << MASS_BITS);
        assert_eq!(mass(-30.0, 0.0), 0);
        assert!(mass(-1.0, 0.0) > 0 && mass(-1.0, 0.0) < 1 << MASS_BITS);
    }

    /// `masses` is `mass`, bit for bit: at and around the ends of `exp`'s
    /// range and of the masses' (about 22.18 below the maximum), at the
    /// maximum and just below it, and over a spread of values and maxima.
    #[test]
    fn the_batch_masses_are_the_masses() {
        let mut next = crate::xorshift(0x3A55);
        let mut ys = [0f32; 4096];
        for round in 0..64 {
            let max = match round % 4 {
                0 => 0.0,
                1 => 3.75,
                2 => -41.5,
                _ => (next() % 20_000) as f32 * 0.01 - 100.0,
            };
            for (i, y) in ys.iter_mut().enumerate() {
                let d = match i % 8 {
                    0 => -((next() % 100_000) as f32) * 0.001,
                    1 => -22.18 + ((next() % 2000) as f32 - 1000.0) * 1e-5,
                    2 => -87.33 + ((next() % 2000) as f32 - 1000.0) * 1e-4,
                    3 => -f32::from_bits(next() as u32 % 0x4300_0000),
                    4 => 0.0,
                    5 => -f32::EPSILON * (next() % 64) as f32,
                    _ => -((next() % 3000) as f32) * 0.01,
                };
                *y = max + d;
            }
            let mut got = [0u64; 4096];
            masses(&ys, max, &mut got);
            for (y, g) in ys.iter().zip(got) {
                assert_eq!(g, mass(*y, max), "y {y} max {max}");
            }
        }
        let mut one = [0u64; 2];
        masses(&[-f32::MAX, 1.0], f32::MAX, &mut one);
        assert_eq!(one, [mass(-f32::MAX, f32::MAX), mass(1.0, f32::MAX)]);
    }

    #[test]
    fn min_p_one_keeps_the_maximum_and_zero_is_off() {
        assert_eq!(min_p_threshold(2.5, 1.0), 2.5);
        assert_eq!(min_p_threshold(2.5, 0.0), f32::NEG_INFINITY);
        let sub = min_p_threshold(0.0, 1e-40);
        assert!((sub - (1e-40f64).ln() as f32).abs() < 1e-4, "{sub}");
        assert!((min_p_threshold(0.0, 0.05) - 0.05f32.ln()).abs() < 1e-6);
    }

    /// `top_p_reached` against exact rational arithmetic, at the boundary
    /// (`acc = top_p · total` exactly), one below it, and for tiny and
    /// subnormal `top_p`.
    #[test]
    fn top_p_is_compared_exactly() {
        assert!(top_p_reached(50, 100, 0.5));
        assert!(!top_p_reached(49, 100, 0.5));
        assert!(top_p_reached(3, 4, 0.75) && !top_p_reached(2, 4, 0.75));
        // 0.1 is 13421773 · 2^-27, a little above 1/10.
        let total = 1u64 << 40;
        let exact = (total as u128 * 13_421_773).div_ceil(1 << 27) as u64;
        assert!(top_p_reached(exact, total, 0.1) && !top_p_reached(exact - 1, total, 0.1));
        assert!(top_p_reached(1, u64::MAX >> 2, f32::from_bits(1)));
        assert!(!top_p_reached(0, 1, f32::from_bits(1)));
        assert!(top_p_reached(1, 1 << 62, 1e-30) && !top_p_reached(0, 1 << 62, 1e-30));
    }

    #[test]
    fn top_k_keeps_the_tie_group_that_crosses_k() {
        let g = groups(&[(3.0, 1), (2.0, 3), (1.0, 2)]);
        let at = |k| threshold(&g[..3], Filter { top_k: k, ..Filter::OFF }, 100);
        assert_eq!(at(1), 3.0);
        assert_eq!(at(2), 2.0);
        assert_eq!(at(4), 2.0);
        assert_eq!(at(5), 1.0);
        // Fewer than k values: all of them.
        assert_eq!(at(50), 1.0);
        // k >= V is off.
        assert_eq!(threshold(&g[..3], Filter { top_k: 100, ..Filter::OFF }, 100), f32::NEG_INFINITY);
    }

    #[test]
    fn top_p_keeps_the_group_that_crosses_p_of_the_survivors() {
        // Masses 1, 3·m(-1), 2·m(-2) relative to the maximum.
        let g = groups(&[(0.0, 1), (-1.0, 3), (-2.0, 2)]);
        let total: u64 = g[..3].iter().map(|g| g.mass).sum();
        let p_of = |acc: u64| acc as f64 / total as f64;
        let first = p_of(g[0].mass);
        let at = |p: f32, k: u32| threshold(&g[..3], Filter { top_p: p, top_k: k, ..Filter::OFF }, 100);
        assert_eq!(at((first * 0.5) as f32, 0), 0.0);
        assert_eq!(at((first * 1.01) as f32, 0), -1.0);
        assert_eq!(at(0.999, 0), -2.0);
        // Measured on the survivors of top-k = 1..4: the top group's share is 1/(1 + 3m).
        let share = g[0].mass as f64 / (g[0].mass + g[1].mass) as f64;
        assert_eq!(at((share * 1.01) as f32, 4), -1.0);
        assert_eq!(at((share * 0.99) as f32, 4), 0.0);
        // min-p leaves only the maximum: top-p keeps it.
        assert_eq!(threshold(&g[..3], Filter { min_p: 0.5, top_p: 0.9, ..Filter::OFF }, 100), 0.0);
    }

    #[test]
    fn rows_without_values_keep_everything_and_inf_keeps_the_inf_ids() {
        let f = Filter { top_k: 1, top_p: 0.5, min_p: 0.5 };
        assert_eq!(threshold(&[], f, 10), f32::NEG_INFINITY);
        let g = [Group { value: f32::INFINITY, count: 2, mass: 0 }, Group { value: 1.0, count: 1, mass: 0 }];
        assert_eq!(threshold(&g, f, 10), f32::INFINITY);
    }

    /// A row's tie groups, largest first, as `threshold` takes them.
    fn groups_of(ys: &[f32], max: f32) -> [Group; 64] {
        let mut sorted = [0f32; 64];
        sorted[..ys.len()].copy_from_slice(ys);
        let sorted = &mut sorted[..ys.len()];
        sorted.sort_unstable_by(|a, b| b.total_cmp(a));
        let mut g = [Group { value: 0.0, count: 0, mass: 0 }; 64];
        let mut n = 0;
        for &y in sorted.iter() {
            if n > 0 && g[n - 1].value == y {
                g[n - 1].count += 1;
                g[n - 1].mass += mass(y, max);
            } else {
                g[n] = Group { value: y, count: 1, mass: mass(y, max) };
                n += 1;
            }
        }
        g
    }

    #[test]
    fn keys_order_values_and_round_trip() {
        let vals = [f32::NEG_INFINITY, -3.5, -1e-40, -0.0, 0.0, 1e-40, 2.0, f32::INFINITY];
        for w in vals.windows(2) {
            assert!(key(w[0]) <= key(w[1]), "{w:?}");
        }
        assert_eq!(key(-0.0), key(0.0));
        for &v in &vals {
            assert_eq!(from_key(key(v)), v + 0.0, "{v}");
        }
    }

    /// The radix search finds the same `τ` as the walk over tie groups, on
    /// rows of few distinct values (ties across every digit boundary), with
    /// ±0, subnormals and far values, for every kind of filter.
    #[test]
    fn the_radix_search_is_the_group_walk() {
        let mut next = crate::xorshift(0x5EA5C4);
        for case in 0..400 {
            let n = 1 + (next() % 63) as usize;
            let levels = 1 + next() % 9;
            let mut ys = [0f32; 64];
            for y in ys[..n].iter_mut() {
                let r = next();
                *y = match r % 11 {
                    0 => -0.0,
                    1 => 1e-40,
                    2 => -30.0,
                    _ => ((r >> 8) % levels) as f32 * 0.37 - 1.0 + ((r >> 20) % levels) as f32 * 0.125,
                };
            }
            let ys = &ys[..n];
            let max = ys.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut masses = [0u64; 64];
            for (m, &y) in masses.iter_mut().zip(ys) {
                *m = mass(y, max);
            }
            let groups = groups_of(ys, max);
            let ng = groups.iter().take_while(|g| g.count > 0).count();
            for filter in [
                Filter { top_k: 1 + (next() % 70) as u32, ..Filter::OFF },
                Filter { top_p: (next() % 1000) as f32 / 1000.0 + 0.0005, ..Filter::OFF },
                Filter { top_k: 1 + (next() % 20) as u32, top_p: 0.6, min_p: 0.2 },
                Filter { min_p: 0.4, top_p: 0.3, ..Filter::OFF },
            ] {
                let want = threshold(&groups[..ng], filter, 1000);
                let got = radix_threshold(ys, &masses[..n], max, filter, 1000);
                assert_eq!(got.to_bits(), (want + 0.0).to_bits(), "case {case}, {filter:?}, {ys:?}");
            }
        }
    }
}
