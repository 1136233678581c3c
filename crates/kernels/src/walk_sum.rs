//! A thread's order-free sum ([`ExpSum`]) while it walks its ids: its
//! maximum and largest group in registers, its three group sums in the
//! block's shared memory ([`crate::shared::walk_sums`]), so that the walk
//! keeps the float sums' registers (and the kernels their blocks per SM).

use crate::block::warp_sum_u128;
use crate::gpu::{self, WARP};
use crate::shared;
use specdec_core::argmax::{floor_key, floor_value};
use specdec_core::exp_sum::{self, ExpSum, GROUPS, Term};
use specdec_core::layout::{BLOCK_THREADS, WARPS};

/// The sum of the terms pushed so far; [`block_sums`] gives the block's
/// [`ExpSum`] of them.
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
    /// region of shared memory, used by nothing else until [`block_sums`].
    #[inline(always)]
    pub unsafe fn new(sums: *mut u128) -> WalkSum {
        for j in 0..GROUPS {
            // SAFETY: inside the column (caller).
            unsafe { Self::at(sums, j).write(0) };
        }
        WalkSum { max: f32::NEG_INFINITY, top: i32::MIN, sums }
    }

    /// A sum holding `e`, its group sums written to this thread's column
    /// `sums` (for a block's reduction of sums combined in registers).
    ///
    /// # Safety
    /// As for [`WalkSum::new`].
    #[inline(always)]
    pub unsafe fn holding(sums: *mut u128, e: ExpSum) -> WalkSum {
        // Its own sums where its maximum is finite, zeros where it holds nothing or a point mass.
        let shares = e.aligned(e.top());
        for j in 0..GROUPS {
            // SAFETY: inside the column (caller).
            unsafe { Self::at(sums, j).write(shares[j]) };
        }
        WalkSum { max: e.max(), top: e.top(), sums }
    }

    #[inline(always)]
    unsafe fn at(sums: *mut u128, j: usize) -> *mut u128 {
        // SAFETY: j < GROUPS: inside the column (caller).
        unsafe { sums.add(j * BLOCK_THREADS as usize) }
    }

    /// The largest value pushed (`-inf` for none).
    #[inline(always)]
    pub fn max(&self) -> f32 {
        self.max
    }

    /// As [`ExpSum::push_term`].
    #[inline(always)]
    pub fn push_term(&mut self, max: f32, t: Term) {
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
    pub fn push_infinity(&mut self) {
        self.max = f32::INFINITY;
    }

    /// This sum and one value by the CPU's rule ([`ExpSum::push`]: its own
    /// [`exp_sum::term`]): NaN and `-inf` add nothing, `+inf` makes the sum
    /// a point mass. Not inlined: its callers push few values, and inlined
    /// in a walk its registers made the walk spill.
    #[inline(never)]
    pub fn with(mut self, y: f32) -> WalkSum {
        if y == f32::INFINITY {
            self.push_infinity();
        } else if y > f32::NEG_INFINITY {
            self.push_term(y, exp_sum::term(y));
        }
        self
    }

    /// Moves the sums down to a largest group `top >= self.top` in place
    /// (`ExpSum::aligned`): this thread's share of the block's sum.
    ///
    /// # Safety
    /// The column is this thread's (`new`).
    #[inline(always)]
    unsafe fn align(&self, top: i32) {
        // SAFETY (all): the column (caller).
        let at = |j: usize| unsafe { Self::at(self.sums, j) };
        let [a, b] = unsafe { [at(0).read(), at(1).read()] };
        let d = if self.max.is_finite() { i64::from(top) - i64::from(self.top) } else { i64::MAX };
        let moved = match d {
            0 => return,
            1 => [0, a, b],
            2 => [0, 0, a],
            _ => [0; GROUPS],
        };
        // Indexed, not `into_iter`: an array's iterator stays in local memory.
        for j in 0..GROUPS {
            unsafe { at(j).write(moved[j]) };
        }
    }
}

/// The block's sums of its threads' walk sums `w` (`[target, draft]`, as
/// `ExpSum::combine` of them all would give), in every thread: the largest
/// maxima and groups by `redux.sync` and a word a warp; each thread's
/// column aligned to the block's group in place; then warp `d·GROUPS + g`
/// adds group row `g` of sum `d` (eight columns a lane, then a butterfly of
/// 32-bit words): integers, in any order. Six warps at once, where a
/// butterfly of whole `ExpSum`s would shuffle 24 words on every level of
/// the warp's and again of the block's reduction.
///
/// # Safety
/// Every thread of the block calls this together with its own walk sums
/// (`shared::walk_sums`); the per-warp slots are not in use.
#[inline(always)]
pub unsafe fn block_sums(w: [WalkSum; 2]) -> [ExpSum; 2] {
    const { assert!(2 * GROUPS <= WARPS as usize) };
    let tid = gpu::thread_idx_x();
    let (warp, lane) = (tid / WARP, tid % WARP);
    // SAFETY (all): every thread of the block is here, the slots and the
    // columns as the caller guarantees; barriers order the phases.
    unsafe {
        let slots = shared::warp_slots::<[i32; 4]>();
        // Maxima are never NaN (the pushes skip NaN), as `floor_key` needs.
        let keys = [floor_key(w[0].max), w[0].top, floor_key(w[1].max), w[1].top];
        let warp_keys = keys.map(|k| gpu::warp_max_i32(k));
        if lane == 0 {
            slots.add(warp as usize).write(warp_keys);
        }
        gpu::sync_threads();
        let mut block = [i32::MIN; 4];
        for v in 0..WARPS as usize {
            let s = slots.add(v).read();
            block = core::array::from_fn(|j| block[j].max(s[j]));
        }
        w[0].align(block[1]);
        w[1].align(block[3]);
        gpu::sync_threads();
        if warp < 2 * GROUPS as u32 {
            let row = shared::walk_sum_row(warp as usize / GROUPS, warp as usize % GROUPS);
            let mut sum = 0u128;
            let mut c = lane;
            while c < BLOCK_THREADS {
                sum += row.add(c as usize).read();
                c += WARP;
            }
            let sum = warp_sum_u128(sum);
            if lane == 0 {
                row.write(sum);
            }
        }
        gpu::sync_threads();
        let get = |d: usize| {
            let sums = core::array::from_fn(|g| shared::walk_sum_row(d, g).read());
            ExpSum::from_shares(floor_value(block[2 * d]), block[2 * d + 1], sums)
        };
        [get(0), get(1)]
    }
}

/// The sum of the warp's 32 [`ExpSum`]s, in every lane: the largest
/// maximum and top group by `redux.sync`, then each group of the lanes'
/// aligned shares added ([`ExpSum::from_shares`]: what combining them gives,
/// in any order).
///
/// # Safety
/// All 32 lanes of the warp call this together, converged.
#[inline(always)]
pub unsafe fn warp_exp_sum(s: ExpSum) -> ExpSum {
    // Maxima are never NaN (pushes skip NaN), as `floor_key` needs.
    let top = if s.max().is_finite() { s.top() } else { i32::MIN };
    // SAFETY (all): a full, converged warp (caller).
    let (max, top) = unsafe { (floor_value(gpu::warp_max_i32(floor_key(s.max()))), gpu::warp_max_i32(top)) };
    if !max.is_finite() {
        return ExpSum::from_shares(max, top, [0; GROUPS]);
    }
    let shares = s.aligned(top);
    ExpSum::from_shares(max, top, core::array::from_fn(|g| unsafe { warp_sum_u128(shares[g]) }))
}

/// The [`ExpSum`] at byte `field` of `n` records, the first at `first` and
/// each `stride` bytes after the last, combined (`ExpSum::combine` of them
/// all), in every lane: the largest maximum and top group `G` by
/// `redux.sync`, then group by group each lane adds its records' sums of
/// group `G − g` (a record's `j`-th sum is of group `top − j`): integers, in
/// any order, one `u128` live at a time.
///
/// # Safety
/// All 32 lanes of the warp call this together, converged; the `n` records
/// are each published before (fenced, as `last_block::arrive` does, or by
/// an earlier launch); `field` is the byte offset of an `ExpSum` field of
/// a record, and `first`, `stride` and `field` multiples of 16.
#[inline(always)]
pub unsafe fn gather_sum(first: *const u8, stride: usize, n: u32, field: usize) -> ExpSum {
    let lane = gpu::thread_idx_x() % WARP;
    // SAFETY (all): c < n, a record (caller); the record's head and its
    // j-th sum (j < GROUPS), 16-byte aligned pieces of the field.
    let base = |c: u32| unsafe { first.add(c as usize * stride + field) };
    let head = |c: u32| unsafe { gpu::load_relaxed(base(c).add(exp_sum::HEAD_OFFSET) as *const [u32; 4]) };
    let sum = |c: u32, j: usize| unsafe { gpu::load_relaxed(base(c).add(exp_sum::SUMS_OFFSET + 16 * j) as *const u128) };
    let (mut key, mut top) = (i32::MIN, i32::MIN);
    let mut c = lane;
    while c < n {
        let h = head(c);
        // Maxima are never NaN (the pushes skip NaN), as `floor_key` needs.
        key = key.max(floor_key(f32::from_bits(h[0])));
        if f32::from_bits(h[0]).is_finite() {
            top = top.max(h[1] as i32);
        }
        c += WARP;
    }
    // SAFETY (both): a full, converged warp (caller).
    let (max, top) = unsafe { (floor_value(gpu::warp_max_i32(key)), gpu::warp_max_i32(top)) };
    if !max.is_finite() {
        return ExpSum::from_shares(max, top, [0; GROUPS]);
    }
    let sums: [u128; GROUPS] = core::array::from_fn(|g| {
        let mut s = 0u128;
        let mut c = lane;
        while c < n {
            let h = head(c);
            // Group `top − g` is this record's `j`-th sum, if it has one.
            let j = g as i64 - (i64::from(top) - i64::from(h[1] as i32));
            if f32::from_bits(h[0]).is_finite() && (0..GROUPS as i64).contains(&j) {
                s += sum(c, j as usize);
            }
            c += WARP;
        }
        // SAFETY: a full, converged warp (caller).
        unsafe { warp_sum_u128(s) }
    });
    ExpSum::from_shares(max, top, sums)
}
