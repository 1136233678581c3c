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

#[cfg(test)]
mod tests {
    use super::*;

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
