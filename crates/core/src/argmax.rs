//! The argmax reduction rule shared by every block, warp and CPU loop.
//!
//! `combine` picks the larger value, and on equal values the smaller index. That
//! is a total order on `(value, index)` pairs, so the reduction is associative
//! and commutative: the winner never depends on block size, grid shape, chunking
//! or backend. NaN never enters: [`ArgMax::new`] maps it to `-inf`, so an
//! all-NaN or all-`-inf` row yields its smallest id, and `-inf` loses to any
//! finite value.

/// A candidate: a score and the token id it belongs to.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct ArgMax {
    pub value: f32,
    pub index: u32,
}

impl ArgMax {
    /// Loses to every candidate (tail lanes and empty blocks load this).
    pub const IDENTITY: ArgMax = ArgMax { value: f32::NEG_INFINITY, index: u32::MAX };

    #[inline(always)]
    pub fn new(value: f32, index: u32) -> Self {
        let value = if value.is_nan() { f32::NEG_INFINITY } else { value };
        ArgMax { value, index }
    }

    #[inline(always)]
    pub fn beats(self, other: ArgMax) -> bool {
        self.value > other.value || (self.value == other.value && self.index < other.index)
    }

    #[inline(always)]
    pub fn combine(self, other: ArgMax) -> ArgMax {
        if other.beats(self) { other } else { self }
    }
}

/// A candidate, and a floor under the best of a group it is folded beside
/// (a GPU block's lanes): the largest value any member held when the floor
/// was last raised. Folding against [`Floored::probe`] rules out every score
/// below the floor, which some member's own candidate beats, so the group's
/// combined result is unchanged; and the members share one value to raise
/// it, not a candidate (value and index).
///
/// A floor may also start at a guess no member has reached ([`Floored::seeded`]):
/// scores below it are then ruled out though nothing beats them, and the
/// group's result is the true best exactly when that best is at least the
/// guess, i.e. exactly when the result itself is (a score at the floor
/// still enters). A result below the guess says nothing, and the fold must be
/// repeated unseeded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Floored {
    pub own: ArgMax,
    pub floor: f32,
}

impl Floored {
    pub const EMPTY: Floored = Floored { own: ArgMax::IDENTITY, floor: f32::NEG_INFINITY };

    /// No candidate yet, and a floor at `guess` (see the type's docs).
    #[inline(always)]
    pub fn seeded(guess: f32) -> Floored {
        Floored { own: ArgMax::IDENTITY, floor: guess }
    }

    /// What to fold against: the own candidate or, where the floor is above
    /// it, a stand-in at the floor with the identity's index, which loses
    /// every tie (real indices are below it), so a score equal to the floor
    /// still enters.
    #[inline(always)]
    pub fn probe(self) -> ArgMax {
        if self.floor > self.own.value { ArgMax { value: self.floor, index: ArgMax::IDENTITY.index } } else { self.own }
    }

    /// Takes a fold's result from [`Floored::probe`]: a new candidate, unless
    /// only the stand-in (or the identity) came back.
    #[inline(always)]
    pub fn settle(self, folded: ArgMax) -> Floored {
        if folded.index == ArgMax::IDENTITY.index { self } else { Floored { own: folded, floor: self.floor } }
    }
}

/// `v`'s bits as an `i32` that orders as `v` does (for non-NaN `v`; `-0.0`
/// just below `0.0`): the GPU's block floors take their `max` by an integer
/// atomic in shared memory.
#[inline(always)]
pub fn floor_key(v: f32) -> i32 {
    flip_negative(v.to_bits() as i32)
}

/// The value whose [`floor_key`] is `k`.
#[inline(always)]
pub fn floor_value(k: i32) -> f32 {
    f32::from_bits(flip_negative(k) as u32)
}

/// Negative floats order backwards: their magnitude bits flipped, they order
/// as integers. Its own inverse (the sign bit stays).
#[inline(always)]
fn flip_negative(i: i32) -> i32 {
    i ^ ((i >> 31) & i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorshift;

    /// Members folding against floors raised to the group's best value
    /// between batches give the group the candidate of folding every score
    /// into one, exact ties (to the floor, across members) included.
    #[test]
    fn floors_leave_the_group_result_unchanged() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let (members, batches, per) = (1 + next() as usize % 8, 1 + next() as usize % 5, 1 + next() as usize % 4);
            // Few distinct values, so scores tie with each other and with floors.
            let score = |v: u64| if v.is_multiple_of(11) { f32::NEG_INFINITY } else { (v % 7) as f32 - 3.0 };
            let mut lanes = [Floored::EMPTY; 8];
            let mut all = ArgMax::IDENTITY;
            for batch in 0..batches {
                for (m, lane) in lanes.iter_mut().enumerate().take(members) {
                    for k in 0..per {
                        let id = ((batch * members + m) * per + k) as u32 ^ (next() as u32 & 3) << 20;
                        let c = ArgMax::new(score(next()), id);
                        all = all.combine(c);
                        *lane = lane.settle(lane.probe().combine(c));
                    }
                }
                let best = lanes[..members].iter().map(|l| l.own.value).fold(f32::NEG_INFINITY, f32::max);
                for lane in &mut lanes[..members] {
                    lane.floor = best;
                }
            }
            let group = lanes[..members].iter().fold(ArgMax::IDENTITY, |b, l| b.combine(l.own));
            assert_eq!(group, all);
        }
    }

    /// A fold against a seeded floor returns the unseeded result whenever
    /// that result is at least the seed (ties included), and something below
    /// the seed otherwise.
    #[test]
    fn a_seeded_floor_keeps_every_best_at_or_above_it() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let score = |v: u64| if v.is_multiple_of(13) { f32::NEG_INFINITY } else { (v % 9) as f32 - 4.0 };
        for _ in 0..5000 {
            let n = 1 + next() as usize % 12;
            let all_cands: [ArgMax; 12] = core::array::from_fn(|i| ArgMax::new(score(next()), i as u32));
            let cands = &all_cands[..n];
            let all = cands.iter().fold(ArgMax::IDENTITY, |b, &c| b.combine(c));
            let guess = [f32::NEG_INFINITY, -4.0, -1.0, 0.0, 2.0, 4.0, 9.0][next() as usize % 7];
            let mut f = Floored::seeded(guess);
            for &c in cands {
                // Prune as the samplers do: a score below the probe is never folded.
                #[allow(clippy::neg_cmp_op_on_partial_ord)]
                if !(c.value < f.probe().value) {
                    f = f.settle(f.probe().combine(c));
                }
            }
            if all.value >= guess {
                assert_eq!(f.own, all, "guess {guess}");
            } else {
                assert!(f.own.value < guess, "guess {guess}: {:?} of {all:?}", f.own);
            }
        }
    }

    #[test]
    fn floor_keys_order_as_their_values() {
        let mut next = xorshift(0x51_7cc1_b727_220a);
        let special = [
            f32::NEG_INFINITY,
            -f32::MAX,
            -1.0,
            -f32::MIN_POSITIVE,
            -1e-45,
            -0.0,
            0.0,
            1e-45,
            1.0,
            f32::MAX,
            f32::INFINITY,
        ];
        let values: [f32; 256] = core::array::from_fn(|i| match special.get(i) {
            Some(&v) => v,
            // Random bits, NaN patterns made finite by clearing an exponent bit.
            None => f32::from_bits(next() as u32 & !(1 << 23)),
        });
        for a in values {
            assert_eq!(floor_value(floor_key(a)).to_bits(), a.to_bits());
            for b in values {
                let below = a < b || (a == b && a.is_sign_negative() && b.is_sign_positive());
                assert_eq!(floor_key(a) < floor_key(b), below, "{a} {b}");
            }
        }
    }

    #[test]
    fn ties_go_to_the_smaller_index() {
        let a = ArgMax::new(1.0, 5);
        let b = ArgMax::new(1.0, 3);
        assert_eq!(a.combine(b), b);
        assert_eq!(b.combine(a), b);
    }

    #[test]
    fn nan_and_neg_inf_lose() {
        let nan = ArgMax::new(f32::NAN, 0);
        let ninf = ArgMax::new(f32::NEG_INFINITY, 1);
        let x = ArgMax::new(-1e30, 7);
        assert_eq!(nan.combine(x), x);
        assert_eq!(ninf.combine(x), x);
        // All non-finite: smallest id wins, the identity never does.
        assert_eq!(ArgMax::IDENTITY.combine(ninf).combine(nan), nan);
        assert_eq!(nan.index, 0);
    }

    #[test]
    fn combine_is_associative_and_commutative() {
        let vals = [0.0f32, 1.0, 1.0, f32::NEG_INFINITY, -0.0, 2.5, f32::NAN, 2.5];
        let items: [ArgMax; 8] = core::array::from_fn(|i| ArgMax::new(vals[i], (i as u32 * 5) % 8));
        for a in items {
            for b in items {
                assert_eq!(a.combine(b), b.combine(a));
                for c in items {
                    assert_eq!(a.combine(b).combine(c), a.combine(b.combine(c)));
                }
            }
        }
    }
}
