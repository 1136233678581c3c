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
            return g.value.max(tau_1);
        }
    }
    // Unreachable for top_p < 1 (acc = total reaches it); kept total.
    tau_1
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
}
