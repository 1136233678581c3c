//! Sampling filters on the device (SPEC §7): a slot's filters as read and
//! checked where they live ([`load_filter`]), the threshold `τ` of a
//! filtered row's kept set `S = {x >= τ}` ([`row_threshold`], one block per
//! row, in the threshold kernels that run before the filtered sampling
//! kernels), and what those kernels do with it ([`mask`], [`kept`]).
//!
//! `τ` is `specdec_core::filter`'s: the row's maximum, then for top-k and
//! for top-p a radix search each over the values' keys (`filter::Radix`),
//! the search the CPU twin runs (`filter::radix_threshold`). A round
//! histograms the values that agree with the digits chosen so far in shared
//! memory by integer atomics — counts, and for top-p the values'
//! `filter::mass`es — exact in any order (SPEC §7.4); warp 0 picks the digit,
//! each lane a run of [`RUN`] digits, the lane whose run holds it searching
//! the run (`filter::count_digit`, `filter::mass_digit`). A round whose
//! values fit [`CAP`] copies them into shared memory as it reads them, and
//! the rounds after it read them there: the row is read once for its maximum
//! and at most four times a search, fewer where the candidates narrow fast.

use crate::gpu::{self, WARP};
use crate::load::{Load, for_each_quad};
use specdec_core::filter::{
    self, DIGITS, Filter, ROUNDS, Radix, count_digit, from_key, key, mass, mass_digit, min_p_threshold, top_p_reached,
};
use specdec_core::layout::{BLOCK_THREADS, FilterTables, THRESHOLD_SHARED_BYTES, WARPS};
use specdec_core::sample::Sampler;

/// The most values a search keeps in shared memory.
pub const CAP: usize = 2048;
/// Digits per lane of warp 0's pick.
const RUN: usize = DIGITS / WARP as usize;

/// The dynamic shared memory of a threshold kernel.
#[repr(C)]
pub struct ThresholdShared {
    masses: [u64; DIGITS],
    counts: [u32; DIGITS],
    values: [f32; CAP],
    scans: [Scan; WARPS as usize],
    pick: Pick,
    /// Values kept in `values` by the round that keeps them.
    kept: u32,
    _pad: u32,
}

const _: () = assert!(core::mem::size_of::<ThresholdShared>() as u32 == THRESHOLD_SHARED_BYTES);
const _: () = assert!(DIGITS == BLOCK_THREADS as usize, "a thread clears one digit of each histogram");

/// The launch's dynamic shared memory.
///
/// # Safety
/// The launch requested `layout::THRESHOLD_SHARED_BYTES`.
#[inline(always)]
unsafe fn shared() -> *mut ThresholdShared {
    // SAFETY: forwarded.
    unsafe { gpu::dynamic_shared::<ThresholdShared>() }
}

/// A row's values that count (not NaN, above `-inf`): their largest,
/// smallest and number.
#[derive(Clone, Copy)]
#[repr(C)]
struct Scan {
    max: f32,
    min: f32,
    count: u32,
}

/// A round's outcome, from warp 0 to the block.
#[derive(Clone, Copy)]
#[repr(C)]
struct Pick {
    /// Top-p: the survivors' mass above the chosen digit's values, and all of it.
    acc: u64,
    total: u64,
    digit: u32,
    /// Top-k: the key's rank among the chosen digit's values.
    rank: u32,
    /// The values of the chosen digit (of the next round).
    members: u32,
}

/// What a search ranks by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    /// The `rank`-th largest value (top-k).
    Count,
    /// The value where the top mass reaches `top_p` (top-p).
    Mass,
}

/// Slot `slot`'s filters from `tables`, or `None` if a given value is out of
/// its range (SPEC §5: the caller flags the row).
///
/// # Safety
/// Each given table holds more than `slot` elements.
#[inline(always)]
pub unsafe fn load_filter(tables: &FilterTables, slot: usize) -> Option<Filter> {
    let mut f = Filter::OFF;
    // SAFETY (all): slot < num_slots, each table's length (host-checked).
    if tables.top_k != 0 {
        let k = unsafe { *(tables.top_k as *const i32).add(slot) };
        if !filter::top_k_is_valid(k) {
            return None;
        }
        f.top_k = k as u32;
    }
    if tables.top_p != 0 {
        f.top_p = unsafe { *(tables.top_p as *const f32).add(slot) };
        if !filter::top_p_is_valid(f.top_p) {
            return None;
        }
    }
    if tables.min_p != 0 {
        f.min_p = unsafe { *(tables.min_p as *const f32).add(slot) };
        if !filter::min_p_is_valid(f.min_p) {
            return None;
        }
    }
    Some(f)
}

/// A scaled value `y` as its row's distribution sees it, given the row's
/// `tau`: itself if the row is kept whole (`tau = -inf`: the row's filters
/// are off) or `y` is in `S`, else `-inf` (NaN included: the CPU twin masks
/// a filtered row's NaN to `-inf`, and keeps an unfiltered row's).
#[inline(always)]
pub fn kept(y: f32, tau: f32) -> f32 {
    if tau == f32::NEG_INFINITY || y >= tau { y } else { f32::NEG_INFINITY }
}

/// `log p` of an id of scaled value `y` in a row of kept set `{x >= tau}`
/// and log-sum-exp `lse` (of that set): `-inf` outside it, as the CPU twin
/// has it (`tau = -inf`: the whole row's). A `-inf` value gives `y - lse`
/// whatever `tau`: `-inf` where `lse` is not, and NaN in a row without a
/// value above `-inf` (`tau = -f32::MAX`, `lse = -inf`), where the CPU
/// twin's `τ` is `-inf` and keeps it.
#[inline(always)]
pub fn log_prob(y: f32, tau: f32, lse: f32) -> f32 {
    if tau == f32::NEG_INFINITY || y >= tau || y == f32::NEG_INFINITY { y - lse } else { f32::NEG_INFINITY }
}

/// A quad of raw values `v` of a row sampled by `sampler`, masked to its
/// kept set as [`kept`] says of their scaled values.
#[inline(always)]
pub fn mask(v: [f32; 4], tau: f32, sampler: &Sampler) -> [f32; 4] {
    v.map(|x| if kept(sampler.scaled(x), tau) == f32::NEG_INFINITY { f32::NEG_INFINITY } else { x })
}

/// `τ` of a row of `vocab` raw values at `row` whose value as sampled is
/// `value(raw)` (scaled, and rounded where the sampler rounds), filtered by
/// `filter` (not off): SPEC §7.2, as `specdec_core::filter::threshold`
/// gives it. A row without a value above `-inf` gets `-f32::MAX`: every
/// `-inf` stays, and its NaN become `-inf` as in the CPU twin's kept set
/// ([`kept`]; `-inf` would mean "not filtered").
///
/// # Safety
/// Every thread of the block calls this together (it holds barriers); the
/// launch requested `layout::THRESHOLD_SHARED_BYTES`; `row` is valid for
/// `vocab` elements.
#[inline(always)]
pub unsafe fn row_threshold<L: Load>(row: *const L, vocab: u32, value: impl Fn(L) -> f32, filter: Filter) -> f32 {
    let row = Row { row, vocab, value };
    // SAFETY (all): forwarded.
    let scan = unsafe { row.scan() };
    if scan.count == 0 {
        return -f32::MAX;
    }
    if scan.max == f32::INFINITY {
        return f32::INFINITY;
    }
    let tau_m = if filter.has_min_p() { min_p_threshold(scan.max, filter.min_p) } else { f32::NEG_INFINITY };
    let (mut tau_k, mut above) = (f32::NEG_INFINITY, scan.count);
    if filter.has_top_k(vocab as usize) {
        if filter.top_k >= scan.count {
            // Every value is kept: the smallest (`-0` as `+0`, as keys have it).
            tau_k = scan.min + 0.0;
        } else {
            let (tau, pick) = unsafe { row.search(By::Count, scan.max, f32::NEG_INFINITY, filter, scan.count) };
            // The values at or above `τ_k`: an upper bound on top-p's survivors.
            (tau_k, above) = (tau, filter.top_k - pick.rank + pick.members);
        }
    }
    let tau_1 = tau_m.max(tau_k);
    if !filter.has_top_p() {
        return tau_1;
    }
    unsafe { row.search(By::Mass, scan.max, tau_1, filter, above) }.0
}

/// The row a block searches.
struct Row<L, F> {
    row: *const L,
    vocab: u32,
    value: F,
}

impl<L: Load, F: Fn(L) -> f32> Row<L, F> {
    /// Calls `f` with every value that counts (not NaN, above `-inf`) of the
    /// row or, with `kept = Some(n)`, of the `n` values kept in shared memory;
    /// each thread some of them.
    ///
    /// # Safety
    /// As for [`row_threshold`]; `n <= CAP` values were kept.
    #[inline(always)]
    unsafe fn for_each(&self, kept: Option<u32>, mut f: impl FnMut(f32)) {
        let tid = gpu::thread_idx_x();
        if let Some(n) = kept {
            // SAFETY: the launch's shared memory (caller).
            let values = unsafe { &raw const (*shared()).values } as *const f32;
            let mut i = tid;
            while i < n {
                // SAFETY: i < n <= CAP.
                f(unsafe { *values.add(i as usize) });
                i += BLOCK_THREADS;
            }
            return;
        }
        let none: *const L = core::ptr::null();
        // SAFETY: the row holds `vocab` elements (caller).
        unsafe {
            for_each_quad::<false, 4, L, L>(self.row, none, 0, self.vocab, tid, |_, raw, _, n| {
                // Constant lane indices keep `raw` in registers.
                let mut lane = |i: usize| {
                    if (i as u32) < n {
                        let y = (self.value)(raw[i]);
                        if y > f32::NEG_INFINITY {
                            f(y);
                        }
                    }
                };
                lane(0);
                lane(1);
                lane(2);
                lane(3);
            })
        };
    }

    /// The row's [`Scan`], in every thread.
    ///
    /// # Safety
    /// As for [`row_threshold`].
    #[inline(always)]
    unsafe fn scan(&self) -> Scan {
        let mut s = Scan { max: f32::NEG_INFINITY, min: f32::INFINITY, count: 0 };
        // SAFETY: forwarded.
        unsafe {
            self.for_each(None, |y| {
                s = Scan { max: s.max.max(y), min: s.min.min(y), count: s.count + 1 };
            })
        };
        let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
        // SAFETY (all): every thread is here (caller), so every warp is full;
        // the slots are the scan's alone, read after the barrier.
        unsafe {
            s = Scan {
                max: crate::block::warp_fold(s.max, gpu::shfl_bfly_f32, f32::max),
                min: crate::block::warp_fold(s.min, gpu::shfl_bfly_f32, f32::min),
                count: crate::block::warp_fold(s.count, gpu::shfl_bfly_u32, |a, b| a + b),
            };
            let scans = &raw mut (*shared()).scans as *mut Scan;
            if lane == 0 {
                scans.add(warp as usize).write(s);
            }
            gpu::sync_threads();
            let mut all = Scan { max: f32::NEG_INFINITY, min: f32::INFINITY, count: 0 };
            for w in 0..WARPS as usize {
                let o = scans.add(w).read();
                all = Scan { max: all.max.max(o.max), min: all.min.min(o.min), count: all.count + o.count };
            }
            all
        }
    }

    /// The radix search of `by` over the row's values `>= floor`, `max` the
    /// row's maximum (finite), `members` an upper bound on those values:
    /// `τ` and the last round's [`Pick`]. For [`By::Count`], `τ` is the
    /// `filter.top_k`-th largest (`top_k < members`); for [`By::Mass`], the
    /// value where the top mass first reaches `filter.top_p` of theirs.
    ///
    /// # Safety
    /// As for [`row_threshold`].
    #[inline(always)]
    unsafe fn search(&self, by: By, max: f32, floor: f32, filter: Filter, mut members: u32) -> (f32, Pick) {
        let tid = gpu::thread_idx_x();
        // SAFETY: the launch's shared memory (caller).
        let sh = unsafe { shared() };
        let (counts, masses) = unsafe { (&raw mut (*sh).counts as *mut u32, &raw mut (*sh).masses as *mut u64) };
        let values = unsafe { &raw mut (*sh).values as *mut f32 };
        let kept_at = unsafe { &raw mut (*sh).kept };
        let mut pick = Pick { acc: 0, total: 0, digit: 0, rank: filter.top_k, members };
        let mut radix = Radix::START;
        let mut kept: Option<u32> = None;
        while radix.round < ROUNDS {
            let keep = kept.is_none() && members as usize <= CAP;
            // SAFETY (all below): shared memory of the launch, every access
            // between barriers that all threads reach (uniform loop).
            unsafe {
                counts.add(tid as usize).write(0);
                masses.add(tid as usize).write(0);
                if keep && tid == 0 {
                    kept_at.write(0);
                }
                gpu::sync_threads();
                self.for_each(kept, |y| {
                    let k = key(y);
                    if y >= floor && radix.matches(k) {
                        let d = radix.digit(k);
                        gpu::atomic_add_u32(counts.add(d), 1);
                        if by == By::Mass {
                            gpu::atomic_add_u64(masses.add(d), mass(y, max));
                        }
                        if keep {
                            let at = gpu::atomic_add_u32(kept_at, 1) as usize;
                            // `members` bounds the values that agree: `at < CAP`.
                            if at < CAP {
                                values.add(at).write(y);
                            }
                        }
                    }
                });
                gpu::sync_threads();
                if keep {
                    kept = Some(kept_at.read().min(CAP as u32));
                }
                if tid < WARP {
                    pick_digit(by, radix, &mut pick, filter.top_p);
                }
                gpu::sync_threads();
                pick = (&raw const (*sh).pick).read();
                // The next round's writes to the pick come after its first barrier.
            }
            members = pick.members;
            radix = radix.descend(pick.digit as usize);
        }
        (from_key(radix.prefix), pick)
    }
}

/// Warp 0: the digit of this round's histograms where the search goes on,
/// and what it carries ([`Pick`]), into `pick` and the shared pick (lane
/// `l` sums digits `DIGITS − RUN·(l + 1) ..`, from the top, and the lane
/// whose run holds the digit searches it).
///
/// # Safety
/// All 32 lanes of warp 0 call this together, after the round's histograms
/// were complete (a barrier); the launch's shared memory.
#[inline(always)]
unsafe fn pick_digit(by: By, radix: Radix, pick: &mut Pick, top_p: f32) {
    let lane = gpu::thread_idx_x() % WARP;
    let base = DIGITS - RUN * (lane as usize + 1);
    // SAFETY: the launch's shared memory (caller); base + RUN <= DIGITS.
    let sh = unsafe { shared() };
    let counts = unsafe { &*(&raw const (*sh).counts) };
    let masses = unsafe { &*(&raw const (*sh).masses) };
    let (run_counts, run_masses) = (&counts[base..base + RUN], &masses[base..base + RUN]);
    // The counts (masses) of this lane's run and of the runs above it.
    let run: u32 = run_counts.iter().sum();
    // SAFETY (all shuffles): a full warp (caller).
    let upto = unsafe { scan_u32(run) };
    let (run_mass, upto_mass) = if by == By::Mass {
        let m: u64 = run_masses.iter().sum();
        (m, unsafe { scan_u64(m) })
    } else {
        (0, 0)
    };
    if by == By::Mass && radix.round == 0 {
        // Every survivor agrees with the empty prefix: their total.
        let lo = unsafe { gpu::shfl_idx_u32(upto_mass as u32, WARP - 1) } as u64;
        let hi = unsafe { gpu::shfl_idx_u32((upto_mass >> 32) as u32, WARP - 1) } as u64;
        pick.total = hi << 32 | lo;
    }
    let reached = match by {
        By::Count => upto >= pick.rank,
        By::Mass => top_p_reached(pick.acc + upto_mass, pick.total, top_p),
    };
    // The first run from the top that reaches it (the last, if none: the
    // CPU's walk then ends at digit 0 too).
    let chosen = unsafe { gpu::warp_min_u32(if reached { lane } else { WARP - 1 }) };
    if lane == chosen {
        let (at, rank, acc) = match by {
            By::Count => {
                let (at, rank) = count_digit(run_counts, pick.rank - (upto - run));
                (at, rank, 0)
            }
            By::Mass => {
                let (at, acc) = mass_digit(run_masses, pick.acc + (upto_mass - run_mass), pick.total, top_p);
                (at, 0, acc)
            }
        };
        let digit = base + at;
        let out = Pick { acc, total: pick.total, digit: digit as u32, rank, members: counts[digit] };
        // SAFETY: the launch's shared memory; read by the block after a barrier.
        unsafe { (&raw mut (*sh).pick).write(out) };
    }
}

/// The sum of `v` over lanes `0..=lane`, in each lane.
///
/// # Safety
/// All 32 lanes of the warp call this together.
#[inline(always)]
unsafe fn scan_u32(mut v: u32) -> u32 {
    let lane = gpu::thread_idx_x() % WARP;
    let mut d = 1;
    while d < WARP {
        // SAFETY: a full warp (caller).
        let below = unsafe { gpu::shfl_up_u32(v, d) };
        if lane >= d {
            v += below;
        }
        d *= 2;
    }
    v
}

/// [`scan_u32`] of a `u64`.
///
/// # Safety
/// As for [`scan_u32`].
#[inline(always)]
unsafe fn scan_u64(mut v: u64) -> u64 {
    let lane = gpu::thread_idx_x() % WARP;
    let mut d = 1;
    while d < WARP {
        // SAFETY: a full warp (caller).
        let (lo, hi) = unsafe { (gpu::shfl_up_u32(v as u32, d), gpu::shfl_up_u32((v >> 32) as u32, d)) };
        if lane >= d {
            v += (hi as u64) << 32 | lo as u64;
        }
        d *= 2;
    }
    v
}
