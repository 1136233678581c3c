//! A row's distribution as a sampler drew from it: the softmax of the whole
//! scaled row, or of a filter's kept set (SPEC §7.3). The verifier's `p'`
//! and `q`, and the processed log-probabilities (REFERENCE §8), are these.

use super::filter::{Kept, kept, masked};
use super::simd::{self, Level, Logit};
use specdec_core::filter::Filter;
use specdec_core::sample::Sampler;
use std::borrow::Cow;

pub(super) enum Dist {
    Full { lse: f32 },
    Kept { kept: Kept, lse: f32 },
}

impl Dist {
    /// Row `row`'s distribution under `filter`, scaled by `s`.
    pub fn of<L: Logit>(level: Level, s: &Sampler, row: &[L], filter: Filter) -> Dist {
        if filter.is_off(row.len()) {
            Dist::Full { lse: simd::lse(level, s, row) }
        } else {
            let kept = kept(level, s, row, filter);
            Dist::Kept { lse: kept.lse(level, s, row), kept }
        }
    }

    /// Its log-sum-exp: `LSE(S)`, or the whole row's.
    pub fn lse(&self) -> f32 {
        match self {
            Dist::Full { lse } => *lse,
            Dist::Kept { lse, .. } => *lse,
        }
    }

    /// The kept set's `τ`: `-inf` where the row is kept whole.
    pub fn tau(&self) -> f32 {
        match self {
            Dist::Full { .. } => f32::NEG_INFINITY,
            Dist::Kept { kept, .. } => kept.tau,
        }
    }

    /// `log p` of an id of scaled value `y`.
    pub fn log_prob(&self, y: f32) -> f32 {
        match self {
            Dist::Full { lse } => y - lse,
            Dist::Kept { kept, lse } if kept.holds(y) => y - lse,
            Dist::Kept { .. } => f32::NEG_INFINITY,
        }
    }

    /// The distribution weighted by `w` (`ln_w = ln w`): every log-probability
    /// plus `ln_w`, the kept set unchanged (block verification's `p_τ·p`).
    pub fn weighted(self, ln_w: f32) -> Dist {
        match self {
            Dist::Full { lse } => Dist::Full { lse: lse - ln_w },
            Dist::Kept { kept, lse } => Dist::Kept { kept, lse: lse - ln_w },
        }
    }

    /// `row` as the distribution's logits: itself, or its kept set (every other id `-inf`).
    pub fn row<'r, L: Logit>(&self, s: &Sampler, row: &'r [L]) -> Cow<'r, [L]> {
        match self {
            Dist::Full { .. } => row.into(),
            Dist::Kept { kept, .. } => masked(s, row, kept.tau),
        }
    }
}
