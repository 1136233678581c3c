//! Fast paths in front of the per-quad folds of `specdec_core`, for the
//! common quad (or run): finite values. Pass 1 of both kernels reads every
//! element of every row, and the exact folds spend tens of instructions per
//! element on cases (NaN, infinities, saturation, masked lanes) that almost
//! never occur; here a quad or run is tested for them once and, if present,
//! handed to the exact path. And [`block_floor`], which lets the noise folds
//! prune against their block's best at the cost of one value per lane.

use crate::gpu;
use crate::load::{RUN, any_nan};
use crate::walk_sum::WalkSum;
use specdec_core::argmax::{ArgMax, Floored, floor_key, floor_value};
use specdec_core::exp_sum::{self, SCALE, Term};
use specdec_core::logspace::recentre;
use specdec_core::sample::Sampler;

/// Folds the `n` lanes of `v` (ids `x ..`) into `best` by the argmax rule of
/// a greedy `sampler`, raising `nan` for NaN lanes. The result is the exact
/// fold's; most quads are dismissed in five instructions.
///
/// The skip is exact because a thread meets its ids in increasing order
/// (`load::for_each_quad`): a lane equal to `best.value` has a larger id and
/// loses the tie, so a full quad whose maximum is `<= best.value` changes
/// nothing. A NaN lane fails `<=`, so a quad holding one takes the exact
/// path, which flags it; so does everything while `best` is still the
/// identity (a `-inf` lane must still claim its id).
#[inline(always)]
pub fn fold_greedy(sampler: &Sampler, best: ArgMax, x: u32, v: [f32; 4], n: u32, nan: &mut bool) -> ArgMax {
    let b = best.value;
    // `&`, not `&&`: four compares into one predicate, no branches.
    let below = (v[0] <= b) & (v[1] <= b) & (v[2] <= b) & (v[3] <= b);
    if n == 4 && below && best.index != ArgMax::IDENTITY.index {
        return best;
    }
    *nan |= any_nan(v, n);
    sampler.fold_quad(best, x, v, n)
}

/// Adds the scaled values `v[q][i]·(1/T)` of a run of [`RUN`] consecutive
/// ids (`n` valid, ids `4q + i`) to `sum` as one term, by the GPU's run rule:
/// `y`, the run's largest scaled value, written `y·log2(e) = k + r` by
/// [`exp_sum::split`]; the lanes' `ex2((x·(1/T) − y)·log2(e) + r)` added
/// in a fixed order (each quad's, then the quads'), `s`; the term
/// `(k, ⌊s·2^24⌋)`, below `2^28.5`. A function of the run's values alone,
/// so that any split of a row on run boundaries (chunks, threads, shards)
/// sums to the same bits; NaN lanes are skipped (returns whether one was),
/// `-inf` ones add 0, a `+inf` one makes `sum` a point mass.
#[inline(always)]
pub fn push_run_sum(mut sum: WalkSum, v: [[f32; 4]; 4], n: u32, sampler: &Sampler) -> (WalkSum, bool) {
    let quad_max = |q: [f32; 4]| q[0].max(q[1]).max(q[2].max(q[3]));
    // `max` ignores NaN; the scale is positive, so it commutes with scaling.
    let top = quad_max(v[0]).max(quad_max(v[1])).max(quad_max(v[2]).max(quad_max(v[3])));
    let nan = |v: [[f32; 4]; 4]| {
        let quad = |q: usize| any_nan(v[q], n.saturating_sub(4 * q as u32).min(4));
        quad(0) | quad(1) | quad(2) | quad(3)
    };
    if top == f32::NEG_INFINITY {
        return (sum, nan(v));
    }
    let y = top * sampler.scale;
    if n == RUN && y.is_finite() {
        let (k, s) = run_term(y, |q, i| fma(v[q][i], sampler.scale, -y));
        // A NaN lane makes `s` NaN.
        if s >= 0.0 {
            sum.push_term(y, Term { k, m: (s * SCALE) as u64 });
            return (sum, false);
        }
    }
    let lane = |q: usize, i: usize| {
        if ((4 * q + i) as u32) < n && !v[q][i].is_nan() { v[q][i] } else { f32::NEG_INFINITY }
    };
    let x: [[f32; 4]; 4] = core::array::from_fn(|q| core::array::from_fn(|i| lane(q, i)));
    let top = quad_max(x[0]).max(quad_max(x[1])).max(quad_max(x[2]).max(quad_max(x[3])));
    let nan = nan(v);
    if top == f32::NEG_INFINITY {
        return (sum, nan);
    }
    let y = sampler.scaled(top);
    if y == f32::INFINITY {
        sum.push_infinity();
    } else {
        let (k, s) = run_term(y, |q, i| sampler.scaled(x[q][i]) - y);
        sum.push_term(y, Term { k, m: (s * SCALE) as u64 });
    }
    (sum, nan)
}

/// Adds the values of a run of a filtered row (as for [`push_run_sum`])
/// that its kept set `{scaled >= tau}` holds (`tau > -inf`) to `sum`, a
/// term each, by the CPU's rule ([`WalkSum::with`]): `LSE(S)` is then a
/// function of `S`'s values alone, whether pass 1 reads them from the row
/// or from the threshold kernel's pool, and a sharded call's ranks form it
/// from their lists of the row's largest values (REFERENCE §7.4). A run
/// below `tau` (most of a filtered row's) costs one test.
#[inline(always)]
pub fn push_kept(mut sum: WalkSum, v: [[f32; 4]; 4], n: u32, sampler: &Sampler, tau: f32) -> WalkSum {
    let quad_max = |q: [f32; 4]| q[0].max(q[1]).max(q[2].max(q[3]));
    // `max` ignores NaN, which no kept set holds.
    let top = quad_max(v[0]).max(quad_max(v[1])).max(quad_max(v[2]).max(quad_max(v[3])));
    if sampler.scaled_bound(top) < tau {
        return sum;
    }
    // The kept lanes as bits, then one push a kept lane (few), its value
    // picked by selects: a loop over the lanes with the push inside stays
    // rolled and puts the run in local memory.
    let mut kept = 0u32;
    for l in 0..RUN as usize {
        if (l as u32) < n && sampler.scaled(v[l / 4][l % 4]) >= tau {
            kept |= 1 << l;
        }
    }
    while kept != 0 {
        let at = kept.trailing_zeros() as usize;
        kept &= kept - 1;
        let mut x = v[0][0];
        for l in 1..RUN as usize {
            if at == l {
                x = v[l / 4][l % 4];
            }
        }
        sum = sum.with(sampler.scaled(x));
    }
    sum
}

/// [`push_run_sum`]'s term of a run with largest scaled value `y` (finite)
/// whose lanes lie `d(q, i)` below it: `k` and the lanes' sum `s`.
#[inline(always)]
fn run_term(y: f32, d: impl Fn(usize, usize) -> f32) -> (i32, f32) {
    let (k, r) = exp_sum::split(y);
    let t = |q: usize, i: usize| gpu::fast_exp2(fma(d(q, i), core::f32::consts::LOG2_E, r));
    let quad = |q: usize| (t(q, 0) + t(q, 1)) + (t(q, 2) + t(q, 3));
    (k, (quad(0) + quad(1)) + (quad(2) + quad(3)))
}

#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    core::intrinsics::fmaf32(a, b, c)
}

/// The maximum of a sum of maximum `max` once [`push_run_sum`] has pushed
/// the first `n` lanes of quad `v` of a run, wherever its fast path runs (elsewhere its
/// saturation and `+inf` cases may differ: callers that need it to agree
/// check).
#[inline(always)]
pub fn pushed_max(max: f32, v: [f32; 4], n: u32, sampler: &Sampler) -> f32 {
    let lane = |i: usize| if (i as u32) < n { v[i] } else { f32::NEG_INFINITY };
    let m = lane(0).max(lane(1)).max(lane(2).max(lane(3))) * sampler.scale;
    if m > max { m } else { max }
}

/// Adds the overlap terms `e^((t + d)·(1/T)/2 − after)` of the `n` lanes of
/// a quad of target and draft logits `t`, `d` to `sum`, an overlap kept
/// relative to centre `before` ([`specdec_core::logspace::centre`]), now
/// relative to `after`: the centre of the rows' statistics with this quad
/// pushed. A lane with a `-inf` logit adds 0; a NaN or `+inf` one makes the
/// sum NaN (no bound, never a wrong one). Nothing is added while one row
/// holds nothing finite (its centre `-inf`): no pair can overlap yet.
#[inline(always)]
pub fn push_overlap(sum: f32, before: f32, after: f32, t: [f32; 4], d: [f32; 4], n: u32, sampler: &Sampler) -> f32 {
    if after == f32::NEG_INFINITY {
        return sum;
    }
    let half = 0.5 * sampler.scale;
    let term = |i: usize| {
        let x = gpu::fast_exp(core::intrinsics::fmaf32(t[i] + d[i], half, -after));
        if (i as u32) < n { x } else { 0.0 }
    };
    recentre(sum, before, after, gpu::fast_exp) + ((term(0) + term(1)) + (term(2) + term(3)))
}

/// Raises `f`'s floor to the best value its block has reached: its warp's
/// best (every lane's [`Floored::probe`]) goes into `best`, the block's in
/// shared memory, which the other warps read at their next batch. A warp
/// sees an eighth of the block's ids, so its own best lags the block's by
/// about `ln 8` (more early in the walk), and a warp evaluates the noise
/// whenever one lane's id might beat its floor, so against the block's
/// floor it evaluates far fewer quads (measured:
/// benches/results/2026-12-02-design-measurements.md). Exact for the
/// block's result: every floor is a value some lane of the block holds (or
/// a seed, which `Floored` accounts for), and lanes only ever improve.
///
/// # Safety
/// All 32 lanes of the warp must be active and call this together; `best`
/// is block shared memory, written only by this function meanwhile, and
/// holds a key it wrote or `i32::MIN` (none yet).
#[inline(always)]
pub unsafe fn block_floor(f: Floored, best: *mut i32) -> Floored {
    // SAFETY: forwarded.
    let key = unsafe { gpu::warp_max_i32(floor_key(f.probe().value)) };
    let lane0 = if gpu::thread_idx_x() % gpu::WARP == 0 {
        // SAFETY: shared memory accessed only atomically meanwhile (caller).
        unsafe { gpu::atomic_max_i32(best, key) }
    } else {
        i32::MIN
    };
    // SAFETY: forwarded.
    let block = unsafe { gpu::shfl_idx_u32(lane0 as u32, 0) } as i32;
    Floored { own: f.own, floor: floor_value(block.max(key)) }
}
