//! A thread's order-free sum ([`ExpSum`]) while it walks its ids: its
//! maximum and largest group in registers, its three group sums in the
//! block's shared memory ([`crate::shared::walk_sums`]), so that the walk
//! keeps the float sums' registers (and the kernels their blocks per SM).

use crate::fold::QuadSum;
use specdec_core::exp_sum::{ExpSum, GROUPS, Term};
use specdec_core::layout::BLOCK_THREADS;

/// The sum of the terms pushed so far; [`WalkSum::get`] is the
/// [`ExpSum`] of the same pushes.
#[derive(Clone, Copy)]
pub struct WalkSum {
    max: f32,
    top: i32,
    /// Group `top − j`'s sum at `sums.add(j · BLOCK_THREADS)`: this thread's
    /// column of a `[GROUPS][BLOCK_THREADS]` region.
    sums: *mut u128,
}

impl WalkSum {
    /// An empty sum over this thread's column `sums` (zeroed here).
    ///
    /// # Safety
    /// `sums` is this thread's column of a `[GROUPS][BLOCK_THREADS]` `u128`
    /// region of shared memory, used by nothing else until [`WalkSum::get`].
    #[inline(always)]
    pub unsafe fn new(sums: *mut u128) -> WalkSum {
        for j in 0..GROUPS {
            // SAFETY: inside the column (caller).
            unsafe { Self::at(sums, j).write(0) };
        }
        WalkSum { max: f32::NEG_INFINITY, top: i32::MIN, sums }
    }

    #[inline(always)]
    unsafe fn at(sums: *mut u128, j: usize) -> *mut u128 {
        // SAFETY: j < GROUPS: inside the column (caller).
        unsafe { sums.add(j * BLOCK_THREADS as usize) }
    }

    /// The sums as an [`ExpSum`].
    #[inline(always)]
    pub fn get(&self) -> ExpSum {
        // SAFETY: the column (`new`).
        let s = |j: usize| unsafe { Self::at(self.sums, j).read() };
        ExpSum::from_shares(self.max, self.top, [s(0), s(1), s(2)])
    }
}

impl QuadSum for WalkSum {
    #[inline(always)]
    fn max(&self) -> f32 {
        self.max
    }

    /// As [`ExpSum::push_term`].
    #[inline(always)]
    fn push_term(&mut self, max: f32, t: Term) {
        if self.max == f32::INFINITY {
            return;
        }
        let g = t.group();
        if self.max == f32::NEG_INFINITY {
            self.top = g;
        } else if g > self.top {
            // Rare: the sums move down by the groups' difference.
            let d = i64::from(g) - i64::from(self.top);
            // SAFETY (all): the column (`new`).
            unsafe {
                let (a, b) = (Self::at(self.sums, 0).read(), Self::at(self.sums, 1).read());
                let (s0, s1, s2) = match d {
                    1 => (0, a, b),
                    2 => (0, 0, a),
                    _ => (0, 0, 0),
                };
                Self::at(self.sums, 0).write(s0);
                Self::at(self.sums, 1).write(s1);
                Self::at(self.sums, 2).write(s2);
            }
            self.top = g;
        }
        if max > self.max {
            self.max = max;
        }
        let j = i64::from(self.top) - i64::from(g);
        if j < GROUPS as i64 {
            // SAFETY: 0 <= j < GROUPS (g <= top): the column.
            unsafe {
                let at = Self::at(self.sums, j as usize);
                at.write(at.read() + u128::from(t.part()));
            }
        }
    }

    /// A `+inf`: the sum becomes a point mass ([`ExpSum::push`]).
    #[inline(always)]
    fn push_infinity(&mut self) {
        self.max = f32::INFINITY;
    }
}
