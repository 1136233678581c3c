//! Reading rows four elements at a time: one aligned vector load where the
//! row allows it, else four scalar loads with the tail masked.

use crate::gpu;
use specdec_core::dtype::{Bf16, Element, F16};
use specdec_core::layout::{BLOCK_THREADS, TILE, WARPS};

/// Elements that can be read four at a time with one aligned vector load.
pub trait Load: Element + Default {
    /// # Safety
    /// `p` is valid for four elements and aligned to four elements' size.
    unsafe fn load4(p: *const Self) -> [Self; 4];

    /// The value as f32, by the hardware's conversion where it has one: the
    /// same value as [`Element::to_f32`] (the widening is exact), NaN
    /// payloads aside, which no fold reads.
    #[inline(always)]
    fn as_f32(self) -> f32 {
        self.to_f32()
    }

    /// `x` rounded to this dtype (to nearest, ties to even) and widened back:
    /// the value [`Element::convert_from`] stores, by the hardware's
    /// conversion (NaN stays NaN, payloads aside, which no fold reads).
    #[inline(always)]
    fn rounded(x: f32) -> f32 {
        x
    }
}

#[repr(C, align(16))]
struct Align16<T>([T; 4]);
#[repr(C, align(8))]
struct Align8<T>([T; 4]);

impl Load for f32 {
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> [Self; 4] {
        // SAFETY: valid and 16-byte aligned (caller).
        unsafe { (*(p as *const Align16<f32>)).0 }
    }
}

impl Load for Bf16 {
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> [Self; 4] {
        // SAFETY: valid and 8-byte aligned (caller).
        unsafe { (*(p as *const Align8<Bf16>)).0 }
    }

    /// One `cvt.rn.bf16.f32` (sm_80) where `f32_to_bf16`'s bit operations
    /// take several instructions and a NaN test.
    #[inline(always)]
    fn rounded(x: f32) -> f32 {
        let h: u16;
        // SAFETY: a pure conversion instruction.
        unsafe {
            core::arch::asm!("cvt.rn.bf16.f32 {0}, {1};", out(reg16) h, in(reg32) x, options(pure, nomem, nostack, preserves_flags))
        };
        f32::from_bits((h as u32) << 16)
    }
}

impl Load for F16 {
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> [Self; 4] {
        // SAFETY: valid and 8-byte aligned (caller).
        unsafe { (*(p as *const Align8<F16>)).0 }
    }

    /// One `cvt.f32.f16` where `f16_to_f32`'s bit operations take a dozen
    /// instructions and the registers of its subnormal path: with them the
    /// verifier's pass 1 with f16 logits spilled.
    #[inline(always)]
    fn as_f32(self) -> f32 {
        let x: f32;
        // SAFETY: a pure conversion instruction.
        unsafe {
            core::arch::asm!("cvt.f32.f16 {0}, {1};", out(reg32) x, in(reg16) self.0, options(pure, nomem, nostack, preserves_flags))
        };
        x
    }

    /// `cvt.rn.f16.f32` then `cvt.f32.f16`.
    #[inline(always)]
    fn rounded(x: f32) -> f32 {
        let h: u16;
        // SAFETY: a pure conversion instruction.
        unsafe {
            core::arch::asm!("cvt.rn.f16.f32 {0}, {1};", out(reg16) h, in(reg32) x, options(pure, nomem, nostack, preserves_flags))
        };
        F16(h).as_f32()
    }
}

/// Whether a row starting at `row` can use [`Load::load4`] at every multiple of 4.
#[inline(always)]
pub fn quad_aligned<L>(row: *const L) -> bool {
    (row as usize).is_multiple_of(4 * core::mem::size_of::<L>())
}

/// Elements `x .. x + n` of `row` (`n = min(4, end − x)`), lanes past `n`
/// holding `L::default()`, and `n`.
///
/// # Safety
/// `row` is valid for `end` elements, `x < end` and `x % 4 == 0`; `aligned`
/// is [`quad_aligned`] of `row`.
#[inline(always)]
pub unsafe fn load_quad<L: Load>(row: *const L, x: u32, end: u32, aligned: bool) -> ([L; 4], u32) {
    let n = if end - x < 4 { end - x } else { 4 };
    if n == 4 && aligned {
        // SAFETY: x + 4 <= end, and x % 4 == 0 keeps the alignment (caller).
        return (unsafe { L::load4(row.add(x as usize)) }, 4);
    }
    // Constant lane indices keep the array in registers.
    // SAFETY: each read is below `end`.
    let lane = |i: usize| if (i as u32) < n { unsafe { *row.add(x as usize + i) } } else { L::default() };
    ([lane(0), lane(1), lane(2), lane(3)], n)
}

/// The quad at `x` of row `a` and, unless `b` is null (then all default),
/// of row `b`, and its valid lanes: with `whole`, one vector load per row
/// and `n = 4`; else as [`load_quad`]. Callers pass `whole` as a constant,
/// so each keeps the vector loads in a path of their own (where one path
/// serves both, LLVM splits a vector load into a 64-bit and two 32-bit loads).
///
/// # Safety
/// As for [`load_quad`], for `a` and for `b` if not null (`aligned` is both
/// rows' [`quad_aligned`]); with `whole`, also `x + 4 <= end` and both rows aligned.
#[inline(always)]
unsafe fn load_pair<A: Load, B: Load>(
    a: *const A,
    b: *const B,
    x: u32,
    end: u32,
    (a_aligned, b_aligned): (bool, bool),
    whole: bool,
) -> ([A; 4], [B; 4], u32) {
    if whole {
        // SAFETY: x + 4 <= end, x % 4 == 0 and the rows are aligned (caller).
        let qa = unsafe { A::load4(a.add(x as usize)) };
        // SAFETY: as above, for `b` when it is given.
        let qb = if b.is_null() { [B::default(); 4] } else { unsafe { B::load4(b.add(x as usize)) } };
        return (qa, qb, 4);
    }
    // SAFETY: x < end, x % 4 == 0, the rows valid for `end` (caller).
    let (qa, n) = unsafe { load_quad(a, x, end, a_aligned) };
    // SAFETY: as above, for `b` when it is given.
    let qb = if b.is_null() { [B::default(); 4] } else { unsafe { load_quad(b, x, end, b_aligned) }.0 };
    (qa, qb, n)
}

/// Walks this thread's quads of `start .. end` (ids `start + 4·tid + k·TILE`)
/// in increasing order, reading row `a` and, unless it is null, row `b` at
/// the same ids, `Q <= 4` quads at a time (all `Q` loads issue before the first
/// use: enough bytes in flight to approach the memory bandwidth, for `Q`
/// quads' registers); with `PIPELINED`, the
/// next batch loads while the current one is folded (twice the bytes in
/// flight for more registers: it pays where occupancy was not the limit); a
/// batch of whole quads of aligned rows loads each with one vector load
/// (fewer instructions a batch, which pays at large batch: measured in
/// benches/results/2026-12-02-design-measurements.md); calls `f(x, qa, qb, n)`
/// per quad (`n` valid lanes; `qb` is all default when `b` is null). Every
/// lane of a warp runs the same number of batches (lanes past `end` fold
/// nothing).
///
/// # Safety
/// `a` (and `b` if not null) are valid for `end` elements; `start % 4 == 0`.
#[inline(always)]
pub unsafe fn for_each_quad<const PIPELINED: bool, const Q: u32, A: Load, B: Load>(
    a: *const A,
    b: *const B,
    start: u32,
    end: u32,
    tid: u32,
    mut f: impl FnMut(u32, [A; 4], [B; 4], u32),
) {
    const { assert!(Q >= 1 && Q <= 4) };
    let aligned = (quad_aligned(a), quad_aligned(b));
    let vectors = aligned.0 && (b.is_null() || aligned.1);
    // The quads at `x + k·TILE`, k < Q; the loads all issue before any use.
    let batch = #[inline(always)]
    |x: u32| {
        // A batch of whole quads of aligned rows: vector loads (`load_pair`).
        if vectors && x + (Q - 1) * TILE + 4 <= end {
            let get = #[inline(always)]
            |k: u32| {
                if k >= Q {
                    return ([A::default(); 4], [B::default(); 4], 0);
                }
                // SAFETY: x + k·TILE + 4 <= end, a multiple of 4, rows aligned.
                unsafe { load_pair(a, b, x + k * TILE, end, aligned, true) }
            };
            return [get(0), get(1), get(2), get(3)];
        }
        let get = #[inline(always)]
        |k: u32| {
            let xk = x + k * TILE;
            if k >= Q || xk >= end {
                return ([A::default(); 4], [B::default(); 4], 0);
            }
            // SAFETY: xk < end, xk % 4 == 0 (caller: rows valid for `end`).
            unsafe { load_pair(a, b, xk, end, aligned, false) }
        };
        [get(0), get(1), get(2), get(3)]
    };
    let mut x = start + 4 * tid;
    // The warp's first lane's id: the same loop count in every lane.
    let mut warp_x = x - 4 * (tid % 32);
    let mut cur = batch(x);
    while warp_x < end {
        let next_x = x + Q * TILE;
        // Pipelined: issue the next batch's loads before folding this one.
        let next = if PIPELINED { batch(next_x) } else { cur };
        let [q0, q1, q2, q3] = cur;
        let mut step = #[inline(always)]
        |k: u32, (qa, qb, n): ([A; 4], [B; 4], u32)| {
            if n > 0 {
                f(x + k * TILE, qa, qb, n);
            }
        };
        step(0, q0);
        step(1, q1);
        step(2, q2);
        step(3, q3);
        cur = if PIPELINED { next } else { batch(next_x) };
        x = next_x;
        warp_x += Q * TILE;
    }
}

/// Block shared memory of a [`for_each_quad_shared`] walk
/// (`shared::BlockRecord::walk`).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Walk {
    /// The next batch to take.
    counter: u32,
    /// Words the folds share between the block's warps (the best value each
    /// candidate has reached, as `fold::block_floor` keeps it), reset to
    /// `i32::MIN`.
    pub best: [i32; 2],
}

/// [`for_each_quad`] over one row `a`, for compute-bound folds, with the
/// block's warps sharing the work: each warp takes the next batch of `128·q`
/// consecutive ids from the walk's shared counter (lane `l` folds quads
/// `4·l + 128·k`, `k < q`, loads coalesced) until `start .. end` is done, so
/// all warps finish within about one batch of each other rather than
/// waiting at the block's reduction for the slowest.
/// `q` is `Q`, or fewer for a short range, so that every warp still gets
/// two batches (a one-tile chunk, at small batch, is one quad per lane).
/// With `WHOLE`, batches of whole quads get their own copy of the loop body,
/// with `n = 4` known to `f`: for blocks that walk many batches, at twice
/// the code (which callers whose blocks walk a batch or two, the resample,
/// would wait for). The batch's
/// loads issue together, or with `HALVES` two at a time (registers for half
/// of them, for a kernel capped at 64), the second half's lines prefetched
/// to L1 as the first half loads. `after_batch()` also runs after the first
/// quad of a warp's first batch: its best candidate so far then prunes the
/// rest of that batch.
/// With `LEAD`, where a lane walks one quad a batch (a one-tile chunk, at
/// small batch), each quad is folded in two halves: `lead(x, quad, n)` folds
/// the lane most likely to win (the caller's `f` then skips it),
/// `after_batch()` raises the floor to the best of the warp's leads (and of
/// the block so far), and `f` folds the rest, which that floor mostly rules
/// out. A warp evaluates one lane's noise at a time, so against the cold
/// floor of a warp's first quad it would evaluate all four, where the
/// lead's floor spares most. (Not in `HALVES` mode: its kernels run grids
/// of more than one wave, whose chunks are longer, and the path does not fit
/// their registers. The resample takes none: its floors start seeded.) The
/// walk resets `walk` (its counter, and the words the folds share between
/// warps: [`Walk::best`]) before its first batch. The measurements behind
/// each mode: benches/results/2026-12-02-design-measurements.md.
///
/// # Safety
/// As for [`for_each_quad`]; called by every thread of the block together
/// (it starts with a barrier), `walk` is block shared memory no other
/// code uses meanwhile.
#[inline(always)]
pub unsafe fn for_each_quad_shared<const Q: u32, const HALVES: bool, const WHOLE: bool, const LEAD: bool, A: Load>(
    a: *const A,
    start: u32,
    end: u32,
    walk: *mut Walk,
    mut lead: impl FnMut(u32, [A; 4], u32),
    mut f: impl FnMut(u32, [A; 4], u32),
    mut after_batch: impl FnMut(),
) {
    const { assert!(Q >= 1 && Q <= 4) };
    let aligned = quad_aligned(a);
    let lane = gpu::thread_idx_x() % 32;
    if gpu::thread_idx_x() == 0 {
        // SAFETY: block shared memory (caller), read only after the barrier.
        unsafe { walk.write(Walk { counter: 0, best: [i32::MIN; 2] }) };
    }
    // SAFETY: a field of the caller's shared memory (no access).
    let counter = unsafe { &raw mut (*walk).counter };
    // SAFETY: every thread of the block is here (caller).
    unsafe { gpu::sync_threads() };
    let q = ((end - start) / (2 * WARPS * 128)).clamp(1, Q);
    let batches = (end - start).div_ceil(128 * q);
    // SAFETY (both loops): lane 0 alone takes the batch, by an atomic on the
    // 4-aligned shared counter (its one plain access, the reset, is ordered
    // before by the barrier); all 32 lanes are here for the shuffle.
    if LEAD && !HALVES && q == 1 {
        // One quad a lane a batch: the lead, the floor, the rest.
        loop {
            let batch = unsafe { gpu::shfl_idx_u32(if lane == 0 { gpu::atomic_inc(counter) } else { 0 }, 0) };
            if batch >= batches {
                return; // warp-uniform
            }
            let x = start + batch * 128 + 4 * lane;
            // SAFETY: x < end, x % 4 == 0 (as below).
            let (qa, n) = if x < end { unsafe { load_quad(a, x, end, aligned) } } else { ([A::default(); 4], 0) };
            if n > 0 {
                lead(x, qa, n);
            }
            after_batch(); // warp-uniform
            if n > 0 {
                f(x, qa, n);
            }
            // No `after_batch()`: the next batch's leads raise the floor
            // before its folds, to the best of this batch's too.
        }
    }
    let mut first = q > 1;
    loop {
        let batch = unsafe { gpu::shfl_idx_u32(if lane == 0 { gpu::atomic_inc(counter) } else { 0 }, 0) };
        if batch >= batches {
            return; // warp-uniform
        }
        let base = start + batch * 128 * q;
        // With `WHOLE`, a batch of whole, aligned quads (all but a row's
        // last, as a rule) is walked by its own copy of the loop, where `f`
        // sees `n = 4`: the per-lane masks and the scalar load path fold away.
        let whole = WHOLE && aligned && end - base >= 128 * q;
        let mut run = #[inline(always)]
        |whole: bool| {
            let get = #[inline(always)]
            |k: u32| {
                let x = base + 128 * k + 4 * lane;
                if k >= Q || k >= q || x >= end {
                    return (x, [A::default(); 4], 0);
                }
                if whole {
                    // SAFETY: a whole batch has x + 4 <= end, the row aligned.
                    return (x, unsafe { A::load4(a.add(x as usize)) }, 4);
                }
                // SAFETY: x < end, x % 4 == 0 (start % 4 == 0; caller: the row
                // is valid for `end`).
                let (qa, n) = unsafe { load_quad(a, x, end, aligned) };
                (x, qa, n)
            };
            let mut step = #[inline(always)]
            |(x, qa, n): (u32, [A; 4], u32)| {
                if n > 0 {
                    f(x, qa, if whole { 4 } else { n });
                }
            };
            // The loads (of each half) issue before any use; constant
            // indices keep them in registers.
            let none = (0, [A::default(); 4], 0);
            if HALVES {
                // The second half's lines start for L1 now (lane l the
                // (l % 8)-th; past a short batch, lines of the row beyond
                // it), so that its loads, issued after the first half is
                // folded, find them there.
                let x = base + 256 + 32 * (lane % 8);
                if x < end {
                    // SAFETY: x < end: inside the row (caller).
                    unsafe { gpu::prefetch_l1(a.add(x as usize)) };
                }
            }
            let (q0, q1) = (get(0), get(1));
            let (q2, q3) = if HALVES { (none, none) } else { (get(2), get(3)) };
            step(q0);
            if first {
                after_batch();
                first = false;
            }
            step(q1);
            let (q2, q3) = if HALVES { (get(2), get(3)) } else { (q2, q3) };
            step(q2);
            step(q3);
        };
        if whole {
            run(true);
        } else {
            run(false);
        }
        after_batch();
    }
}

/// The four elements widened to f32 ([`Load::as_f32`]).
#[inline(always)]
pub fn widen<L: Load>(q: [L; 4]) -> [f32; 4] {
    [q[0].as_f32(), q[1].as_f32(), q[2].as_f32(), q[3].as_f32()]
}

/// Whether any of the first `n` values is NaN.
#[inline(always)]
pub fn any_nan(v: [f32; 4], n: u32) -> bool {
    let lane = |i: usize| (i as u32) < n && v[i].is_nan();
    lane(0) | lane(1) | lane(2) | lane(3)
}

pub use specdec_core::layout::RUN;

/// Walks this thread's runs of [`RUN`] consecutive ids of `start .. end`
/// (ids `start + RUN·tid + k·RUN·BLOCK_THREADS`) in increasing order,
/// reading row `a` and, unless it is null, row `b` at the same ids, each
/// run's four quads by one vector load each where the rows allow it; calls
/// `f(x, qa, qb, n)` per run (`n` valid ids of it, lanes past `n` default;
/// `qb` all default when `b` is null).
///
/// # Safety
/// `a` (and `b` if not null) are valid for `end` elements; `start % RUN == 0`.
#[inline(always)]
pub unsafe fn for_each_run<A: Load, B: Load>(
    a: *const A,
    b: *const B,
    start: u32,
    end: u32,
    tid: u32,
    mut f: impl FnMut(u32, [[A; 4]; 4], [[B; 4]; 4], u32),
) {
    let aligned = (quad_aligned(a), quad_aligned(b));
    let vectors = aligned.0 && (b.is_null() || aligned.1);
    let mut x = start + RUN * tid;
    while x < end {
        let run = if vectors && x + RUN <= end {
            // SAFETY: x + 16 <= end, a multiple of 4, rows aligned.
            let get = |j: u32| unsafe { load_pair(a, b, x + 4 * j, end, aligned, true) };
            [get(0), get(1), get(2), get(3)]
        } else {
            let get = |j: u32| {
                let xj = x + 4 * j;
                if xj >= end {
                    return ([A::default(); 4], [B::default(); 4], 0);
                }
                // SAFETY: xj < end, a multiple of 4 (caller: rows valid for `end`).
                unsafe { load_pair(a, b, xj, end, aligned, false) }
            };
            [get(0), get(1), get(2), get(3)]
        };
        let n = run[0].2 + run[1].2 + run[2].2 + run[3].2;
        f(x, [run[0].0, run[1].0, run[2].0, run[3].0], [run[0].1, run[1].1, run[2].1, run[3].1], n);
        x += RUN * BLOCK_THREADS;
    }
}
