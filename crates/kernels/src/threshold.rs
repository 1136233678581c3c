//! Sampling filters on the device (SPEC §7): a slot's filters as read and
//! checked where they live ([`load_filter`]), the threshold `τ` of a
//! filtered row's kept set `S = {x >= τ}` ([`chunk_threshold`], in the
//! threshold kernels that run before the filtered sampling kernels), and
//! what those kernels do with it ([`mask`], [`kept`]).
//!
//! `τ` is `specdec_core::filter`'s: the row's maximum, then for top-k and
//! for top-p a radix search each over the values' keys (`filter::Radix`),
//! the search the CPU twin runs (`filter::radix_threshold`). A filtered row
//! is read by several blocks, each a chunk of [`CAP`] ids held in
//! registers: each block summarises its chunk (maximum, minimum, count) and,
//! where the filters bound the values that can decide `τ` from the chunk
//! alone ([`Keep`]: top-k, or min-p with top-p), appends those candidates
//! to the row's pool in the workspace (`FilterScratch`); the row's last block
//! to arrive merges the summaries and searches the pool in shared memory —
//! one read of the row; the pool then holds all of `S`, from which the
//! verifier's pass 1 takes `LSE(S)` without reading the row
//! (`FilterScratch::pooled`). Where no bound exists (top-p alone) or a block's
//! candidates overflowed, the row is searched whole, up to four more reads:
//! top-p on a row of several blocks by all its blocks, in four launches of
//! the search kernels that follow (one round each, [`search_round`], the
//! search's state in the row's `scratch::Search`); otherwise by its last block
//! (`Row::search`), fewer reads where the candidates narrow into shared
//! memory. A search round histograms the values that agree with the digits
//! chosen so far by integer atomics — counts, and for top-p the values'
//! `filter::mass`es — exact in any order (SPEC §7.4); warp 0 picks the
//! digit, each lane a run of [`RUN`] digits, the lane whose run holds it
//! searching the run (`filter::count_digit`, `filter::mass_digit`).

use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, for_each_quad, load_quad, quad_aligned};
use specdec_core::filter::{
    self, DIGITS, Filter, ROUNDS, Radix, count_digit, from_key, key, mass, mass_digit, min_p_threshold, top_p_reached,
};
use specdec_core::layout::{BLOCK_THREADS, FilterTables, THRESHOLD_CHUNK, THRESHOLD_SHARED_BYTES, TILE, WARPS};
use specdec_core::sample::Sampler;
use specdec_core::scratch::{FilterScratch, POOL, Pooled, Search, Summary};
use specdec_core::shard::{MAX_TOP_K, TopList};

/// The most values a block keeps in shared memory: its chunk's, or a
/// search's.
pub const CAP: usize = THRESHOLD_CHUNK as usize;
/// The most candidates a block of a filtered row keeps ([`Keep`]); a block
/// with more overflows (its row is searched whole).
const CANDIDATES: usize = 512;
/// Quads a thread holds of a chunk it keeps candidates from.
const QUADS: usize = CAP / (4 * BLOCK_THREADS as usize);
const _: () = assert!(QUADS * 4 * BLOCK_THREADS as usize == CAP && TILE == 4 * BLOCK_THREADS);
/// `f(0), f(1), …, f(QUADS − 1)`: constant indices, which keep the arrays
/// they index in registers (a loop the compiler leaves rolled puts them in
/// local memory).
#[inline(always)]
fn each_quad(mut f: impl FnMut(usize)) {
    const { assert!(QUADS == 8) };
    f(0);
    f(1);
    f(2);
    f(3);
    f(4);
    f(5);
    f(6);
    f(7);
}

/// `f(0), …, f(3)`, as [`each_quad`] for the lanes of a quad.
#[inline(always)]
fn each_lane(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
    f(2);
    f(3);
}

/// Digits per lane of warp 0's pick.
const RUN: usize = DIGITS / WARP as usize;

/// The dynamic shared memory of a threshold kernel.
#[repr(C)]
pub struct ThresholdShared {
    masses: [u64; DIGITS],
    counts: [u32; DIGITS],
    /// In a row's last block, the values a search keeps (the pool's above
    /// the row's floor, or the row's once they fit).
    values: [f32; CAP],
    /// The block's candidates ([`Keep`]), before they go to the pool.
    candidates: [f32; CANDIDATES],
    scans: [Scan; WARPS as usize],
    pick: Pick,
    /// The row's summaries merged, in its last block.
    merged: Summary,
    /// Values kept in `values` by the round that keeps them.
    kept: u32,
    /// The block's candidates found, then the row's in its pool.
    found: u32,
    /// Where the block's candidates go in the pool.
    base: u32,
    /// The row's floor (`FilterScratch::floor`): as a block found it when
    /// it started, then in the row's last block as merged.
    floor: u32,
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

impl Scan {
    const EMPTY: Scan = Scan { max: f32::NEG_INFINITY, min: f32::INFINITY, count: 0 };

    #[inline(always)]
    fn push(self, y: f32) -> Scan {
        Scan { max: self.max.max(y), min: self.min.min(y), count: self.count + 1 }
    }

    #[inline(always)]
    fn combine(self, o: Scan) -> Scan {
        Scan { max: self.max.max(o.max), min: self.min.min(o.min), count: self.count + o.count }
    }
}

/// The block's [`Scan`] of each thread's `s`, in every thread.
///
/// # Safety
/// Every thread of the block calls this together; the launch's shared memory.
#[inline(always)]
unsafe fn block_scan(s: Scan) -> Scan {
    let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
    // SAFETY (all): every thread is here (caller), so every warp is full;
    // the slots are this scan's alone, read after the barrier, and the
    // barrier before it orders them after any earlier scan's reads.
    unsafe {
        let s = Scan {
            max: crate::block::warp_fold(s.max, gpu::shfl_bfly_f32, f32::max),
            min: crate::block::warp_fold(s.min, gpu::shfl_bfly_f32, f32::min),
            count: crate::block::warp_fold(s.count, gpu::shfl_bfly_u32, |a, b| a + b),
        };
        let scans = &raw mut (*shared()).scans as *mut Scan;
        gpu::sync_threads();
        if lane == 0 {
            scans.add(warp as usize).write(s);
        }
        gpu::sync_threads();
        let mut all = Scan::EMPTY;
        for w in 0..WARPS as usize {
            all = all.combine(scans.add(w).read());
        }
        all
    }
}

/// Bits of the key [`kth_largest`] finds.
const KTH_BITS: u32 = 20;

/// The `k`-th largest (`k >= 1`) of the block's per-thread values `mine`
/// (`-inf`: the thread has none), `-inf` if fewer than `k` threads have
/// one, or a value a little below it: the top [`KTH_BITS`] of its key
/// found bit by bit from the top, one counting barrier a bit. At least `k`
/// of the values are at or above what it returns.
///
/// # Safety
/// Every thread of the block calls this together.
#[inline(always)]
unsafe fn kth_largest(mine: f32, k: u32) -> f32 {
    // Every value's key is above 0 (that of -inf is 0x007f_ffff).
    let my = if mine > f32::NEG_INFINITY { key(mine) } else { 0 };
    let mut prefix = 0u32;
    let mut bit = 1u32 << 31;
    // The top KTH_BITS bits (sign, exponent, 11 of the mantissa): a cut at
    // most 2^-11 of its value below the exact one, for a third of the barriers.
    while bit >= 1 << (32 - KTH_BITS) {
        // SAFETY: every thread is here (caller); the loop is uniform.
        if unsafe { gpu::sync_threads_count(my >= prefix | bit) } >= k {
            prefix |= bit;
        }
        bit >>= 1;
    }
    if prefix == 0 { f32::NEG_INFINITY } else { from_key(prefix) }
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

/// Slot `slot`'s filter values in `tables` as stored, as words (`top_k`,
/// `top_p`, `min_p`; 0 for a table not given): what a sharded call's ranks
/// must read alike (`shard::row_digest`, `shard::pair_digest`).
///
/// # Safety
/// Each given table holds more than `slot` elements.
#[inline(always)]
pub unsafe fn filter_words(tables: &FilterTables, slot: usize) -> [u32; 3] {
    // SAFETY: inside each given table (caller).
    let word = |table: u64| if table == 0 { 0 } else { unsafe { *(table as *const u32).add(slot) } };
    [word(tables.top_k), word(tables.top_p), word(tables.min_p)]
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

/// The log-probability of a raw value `x` of a row sampled by `sampler`,
/// as the distribution it was sampled from sees it (REFERENCE §8.1): of its
/// scaled value ([`log_prob`], kept set `{y >= tau}`, log-sum-exp `lse`);
/// a NaN logit is an impossible id, as on the CPU.
#[inline(always)]
pub fn processed_log_prob(x: f32, sampler: &Sampler, tau: f32, lse: f32) -> f32 {
    if x.is_nan() { f32::NEG_INFINITY } else { log_prob(sampler.scaled(x), tau, lse) }
}

/// The raw log-probability of a value `x` in a row of log-sum-exp `lse` at
/// `T = 1` (REFERENCE §8.1; a greedy row's processed one too): a NaN logit
/// is an impossible id, as on the CPU.
#[inline(always)]
pub fn raw_log_prob(x: f32, lse: f32) -> f32 {
    if x.is_nan() { f32::NEG_INFINITY } else { x - lse }
}

/// A quad of raw values `v` of a row sampled by `sampler`, masked to its
/// kept set as [`kept`] says of their scaled values.
#[inline(always)]
pub fn mask(v: [f32; 4], tau: f32, sampler: &Sampler) -> [f32; 4] {
    // A row kept whole (its filters off): as it is, a `-inf` scaled value
    // aside, which every fold takes as `-inf` anyway.
    if tau == f32::NEG_INFINITY {
        return v;
    }
    // A quad whose largest value is below `τ` (most quads of a filtered
    // row): masked whole, on one bound (`scaled_bound >= scaled`, both
    // monotone); NaN lanes go with it, as `kept` takes them out.
    if sampler.scaled_bound(v[0].max(v[1]).max(v[2].max(v[3]))) < tau {
        return [f32::NEG_INFINITY; 4];
    }
    v.map(|x| if kept(sampler.scaled(x), tau) == f32::NEG_INFINITY { f32::NEG_INFINITY } else { x })
}

/// Whether a row of `ids` ids filtered by `filter` may be pooled: whether
/// the filter bounds the values that decide `τ` from a chunk alone
/// ([`Keep`]: a top-k, or min-p with top-p). The verifier sums such a row's
/// kept set a term a kept value, pooled or not (REFERENCE §7.4).
#[inline(always)]
pub fn pools(filter: Filter, ids: usize) -> bool {
    filter.has_top_k(ids) || (filter.has_min_p() && filter.has_top_p())
}

/// What the blocks of a filtered row keep of their chunks as candidates
/// for the row's merge ([`chunk_threshold`]): a superset of the values that
/// decide `τ`, found from the chunk alone.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    /// Top-k (with or without top-p and min-p): every value `>=` the
    /// `top_k`-th largest of the block's per-thread maxima. At least
    /// `top_k` of the block's values are `>=` it, so it is at most the
    /// row's `τ_k`, and every value `>= τ_k` (all of `S_1`) is kept. A
    /// block that finds such a cut of another block of the row published
    /// (the row's floor) keeps at that one, which bounds `τ_k` as well.
    TopK(u32),
    /// Top-p with min-p, no top-k: every value `>=` the block's maximum
    /// plus `ln(min_p)`, at most `τ_m` (the row's maximum is at least the
    /// block's): all of `S_1`.
    MinP(f32),
    /// None: min-p alone needs only the maximum, and top-p alone searches
    /// the row (its survivors can be most of it).
    Nothing,
}

/// Block `c` of the `chunks` blocks of a filtered row of `vocab` raw values
/// at `row` (`ids` of the whole row, which the filter's top-k is taken
/// against: `vocab`, or a sharded call's row's), whose value as sampled is `value` of the raw value widened to
/// f32 (scaled, and rounded where the sampler rounds), filtered by `filter` (not off), `chunk` ids a
/// block; with a `list` (not null; `filter` a top-k alone), the row's
/// [`TopList`] written there by its last block ([`Row::write_list`]): `τ` (SPEC §7.2, as `specdec_core::filter::threshold` gives it) in
/// every thread of the row's last block to arrive, `None` in the others and
/// where the row is left to [`search_round`].
///
/// Each block reads its chunk once, keeps its values in shared memory,
/// writes its [`Summary`] and, as [`Keep`] says, its candidates to the
/// row's pool; the last block merges: the maximum, `τ_m`, and `τ_k` and
/// `τ_p` by radix searches over the pool (`Row::search`), or over the row
/// where a block's candidates overflowed or top-p has no top-k or min-p to
/// bound it — for top-p, where the row has several blocks, by all of them in
/// the [`ROUNDS`] launches of [`search_round`] that follow where `search`
/// says so (the search kernels). A row
/// without a value above `-inf` gets `-f32::MAX`: every
/// `-inf` stays, and its NaN become `-inf` as in the CPU twin's kept set
/// ([`kept`]; `-inf` would mean "not filtered").
///
/// # Safety
/// Every thread of the block calls this together (it holds barriers), and
/// every block `0..chunks` of the row once in the launch; the launch
/// requested `layout::THRESHOLD_SHARED_BYTES`; `row` is valid for `vocab`
/// elements; `scratch` is the row's, its counter, cursor, floor, histogram
/// and search as the last call left them (zero), unless `chunks = 1` (then never
/// read: it may be past the workspace's); `chunks <= SUMMARY_CHUNKS`,
/// `chunk · chunks >= vocab`, `c < chunks`; with `search` (only where
/// `chunks > 1`), [`ROUNDS`] launches of [`search_round`] over the same rows
/// follow on its stream.
#[inline(always)]
pub unsafe fn chunk_threshold<L: Load>(
    row: *const L,
    (vocab, ids): (u32, u32),
    value: impl Fn(f32) -> f32,
    filter: Filter,
    scratch: *mut FilterScratch,
    (chunk, c, chunks): (u32, u32, u32),
    (search, list): (bool, *mut TopList),
) -> Option<f32> {
    let row = Row { row, vocab, value };
    // One block a row needs no candidates: it searches the row itself.
    let staged = chunk as usize <= CAP && chunks > 1;
    let keep = if !staged || !pools(filter, ids as usize) {
        Keep::Nothing
    } else if filter.has_top_k(ids as usize) {
        Keep::TopK(filter.top_k)
    } else {
        Keep::MinP(filter.min_p)
    };
    // SAFETY (all): forwarded; `scratch` is the row's where `chunks > 1`
    // (a block that keeps nothing touches no scratch).
    let summary = unsafe { row.summarize(keep, scratch, chunk * c, (chunk * c).saturating_add(chunk).min(vocab)) };
    let merged =
        if chunks == 1 { Some((summary, 0, f32::NEG_INFINITY)) } else { unsafe { merge(scratch, summary, c, chunks) } };
    let (all, pooled, floor) = merged?;
    // The pool holds every value that can decide `τ`, so all of `S` (a row
    // without values: none; pass 1 does not take the record of a `τ` of
    // `+inf`, a point mass on the row's `+inf`s).
    let holds_s = keep != Keep::Nothing && all.overflow == 0;
    if chunks > 1 && gpu::thread_idx_x() == 0 {
        // SAFETY: the row's scratch (`chunks > 1`), read by the next launch.
        unsafe { (&raw mut (*scratch).pooled).write(if holds_s { Pooled { count: pooled, max: all.max } } else { Pooled::NONE }) };
    }
    if all.count == 0 || all.max == f32::INFINITY {
        let tau = if all.count == 0 { -f32::MAX } else { f32::INFINITY };
        if !list.is_null() && gpu::thread_idx_x() == 0 {
            // SAFETY: the row's list (caller).
            unsafe { write_list_head(list, tau, (all.count != 0) as u32, 0) };
        }
        return Some(tau);
    }
    // The pool holds every value that decides `τ`: search it in shared memory.
    let kept = if holds_s {
        // SAFETY: `pooled <= POOL <= CAP` values, published before the blocks were counted in.
        Some(unsafe { load_pool(scratch, pooled, floor) })
    } else {
        None
    };
    let tau_m = if filter.has_min_p() { min_p_threshold(all.max, filter.min_p) } else { f32::NEG_INFINITY };
    let (mut tau_k, mut above) = (f32::NEG_INFINITY, all.count);
    if filter.has_top_k(ids as usize) {
        if filter.top_k >= all.count {
            // Every value is kept: the smallest (`-0` as `+0`, as keys have it).
            tau_k = all.min + 0.0;
        } else {
            let members = kept.unwrap_or(all.count);
            let (tau, pick) = unsafe { row.search(By::Count, all.max, f32::NEG_INFINITY, filter, members, kept) };
            // The values at or above `τ_k`: an upper bound on top-p's survivors.
            (tau_k, above) = (tau, filter.top_k - pick.rank + pick.members);
        }
    }
    let tau_1 = tau_m.max(tau_k);
    if !list.is_null() {
        // SAFETY: the whole block (caller); the row's list; `kept` as loaded.
        unsafe { row.write_list(kept, tau_1, list) };
    }
    if !filter.has_top_p() {
        return Some(tau_1);
    }
    if kept.is_none() && search && chunks > 1 {
        // No candidates bound it: the launches that follow search the row with all its blocks.
        if gpu::thread_idx_x() == 0 {
            let search =
                Search { active: 1, prefix: 0, round: 0, top_p: filter.top_p, floor: tau_1, max: all.max, acc: 0, total: 0 };
            // SAFETY: the row's scratch (`chunks > 1`), read by the next launch.
            unsafe { (&raw mut (*scratch).search).write(search) };
        }
        return None;
    }
    Some(unsafe { row.search(By::Mass, all.max, tau_1, filter, kept.map_or(above, |n| n.min(above)), kept) }.0)
}

/// Block `c` of the `chunks > 1` blocks of a filtered row (as for
/// [`chunk_threshold`]) in a launch of a search kernel: a round of the
/// row's top-p search by all its blocks, where [`chunk_threshold`] left the
/// row to it (`scratch::Search`; the round's digit from the row's histogram,
/// `Row::search_round`): `τ` in every thread of the row's last block in the
/// last of the [`ROUNDS`] launches, `None` in the others and in every block
/// of a row that is not searched.
///
/// # Safety
/// As for [`chunk_threshold`], with `chunks > 1` (`scratch` is the row's),
/// in the launches after its own, in order on its stream.
#[inline(always)]
pub unsafe fn search_round<L: Load>(
    row: *const L,
    vocab: u32,
    value: impl Fn(f32) -> f32,
    scratch: *mut FilterScratch,
    split: (u32, u32, u32),
) -> Option<f32> {
    // SAFETY: forwarded.
    unsafe { Row { row, vocab, value }.search_round(scratch, split) }
}

/// Block `c` of a row of `chunks > 1` blocks with its `summary`: publishes
/// it to the row's scratch and, in every thread of the row's last block to
/// arrive, returns the row's summaries merged (`overflow` also where the pool
/// overflowed), the number of candidates in its pool and the row's floor
/// (the largest of its blocks' cuts); `None` in the others.
///
/// # Safety
/// As for [`chunk_threshold`]; every thread of the block calls this together.
#[inline(always)]
unsafe fn merge(scratch: *mut FilterScratch, summary: Summary, c: u32, chunks: u32) -> Option<(Summary, u32, f32)> {
    let tid = gpu::thread_idx_x();
    // SAFETY (all): the row's scratch (caller); the launch's shared memory,
    // written by thread 0 and read after the barrier.
    let sh = unsafe { shared() };
    let summaries = unsafe { &raw mut (*scratch).summaries as *mut Summary };
    if tid == 0 {
        // SAFETY: c < chunks <= SUMMARY_CHUNKS (caller).
        unsafe { summaries.add(c as usize).write(summary) };
    }
    // Warp 0 counts the block in; the row's last block merges with all its warps.
    let last = tid < WARP && unsafe { last_block::arrive(&raw mut (*scratch).counter, chunks) };
    if !unsafe { gpu::sync_threads_or(last) } {
        return None;
    }
    gpu::fence_device();
    let merged = unsafe { (&raw mut (*sh).merged) };
    if tid < WARP {
        // SAFETY: every block published its summary before it was counted in (fenced).
        let s = if tid < chunks {
            // SAFETY: tid < chunks <= SUMMARY_CHUNKS.
            unsafe { gpu::load_relaxed(summaries.add(tid as usize)) }
        } else {
            Summary { max: f32::NEG_INFINITY, min: f32::INFINITY, count: 0, overflow: 0 }
        };
        let all = unsafe {
            Summary {
                max: crate::block::warp_fold(s.max, gpu::shfl_bfly_f32, f32::max),
                min: crate::block::warp_fold(s.min, gpu::shfl_bfly_f32, f32::min),
                count: crate::block::warp_fold(s.count, gpu::shfl_bfly_u32, |a, b| a + b),
                overflow: gpu::warp_or_u32(s.overflow),
            }
        };
        if tid == 0 {
            let cursor = unsafe { &raw mut (*scratch).cursor };
            // The blocks' candidates; past the pool, some did not fit (overflowed).
            let n = unsafe { gpu::atomic_add_u32(cursor, 0) };
            unsafe { gpu::atomic_store(cursor, 0) };
            let overflow = all.overflow | (n as usize > POOL) as u32;
            unsafe { merged.write(Summary { overflow, ..all }) };
            unsafe { (&raw mut (*sh).found).write(n) };
            let floor = unsafe { &raw mut (*scratch).floor };
            unsafe { (&raw mut (*sh).floor).write(gpu::atomic_add_u32(floor, 0)) };
            unsafe { gpu::atomic_store(floor, 0) };
        }
    }
    unsafe { gpu::sync_threads() };
    let all = unsafe { merged.read() };
    let pooled = unsafe { (&raw const (*sh).found).read() };
    let floor = unsafe { (&raw const (*sh).floor).read() };
    Some((all, pooled, if floor == 0 { f32::NEG_INFINITY } else { from_key(floor) }))
}

/// The values at or above `floor` of the first `n` of the row's pool into
/// the shared `values` (the search's kept values, in any order), read 16
/// bytes a load from L2: how many.
///
/// # Safety
/// Every thread of the block calls this together; `n <= POOL` values were
/// published to the pool by blocks counted in before (fenced).
#[inline(always)]
unsafe fn load_pool(scratch: *const FilterScratch, n: u32, floor: f32) -> u32 {
    const { assert!(POOL <= CAP) };
    let tid = gpu::thread_idx_x();
    // SAFETY (all): the pool is 16-byte aligned and holds POOL values;
    // the launch's shared memory, `kept` zeroed before the barrier and read
    // after the last; the values read by the search after it.
    unsafe {
        let sh = shared();
        let pool = &raw const (*scratch).pool as *const [f32; 4];
        let values = &raw mut (*sh).values as *mut f32;
        let kept = &raw mut (*sh).kept;
        if tid == 0 {
            kept.write(0);
        }
        gpu::sync_threads();
        let mut q = tid;
        while q * 4 < n {
            let v = gpu::load_relaxed(pool.add(q as usize));
            for (l, &y) in v.iter().enumerate() {
                if q * 4 + (l as u32) < n && y >= floor {
                    // At most n <= CAP values are kept.
                    values.add(gpu::atomic_add_u32(kept, 1) as usize).write(y);
                }
            }
            q += BLOCK_THREADS;
        }
        gpu::sync_threads();
        kept.read()
    }
}

/// A [`TopList`]'s `tie`, `ties` and `above` (its values written apart).
///
/// # Safety
/// `list` is valid for a [`TopList`].
#[inline(always)]
unsafe fn write_list_head(list: *mut TopList, tie: f32, ties: u32, above: u32) {
    // SAFETY (all): inside the list (caller).
    unsafe {
        (&raw mut (*list).tie).write(tie);
        (&raw mut (*list).ties).write(ties);
        (&raw mut (*list).above).write(above.min(MAX_TOP_K - 1));
    }
}

/// The row a block searches.
struct Row<L, F> {
    row: *const L,
    vocab: u32,
    value: F,
}

impl<L: Load, F: Fn(f32) -> f32> Row<L, F> {
    /// The row's [`TopList`] at `list` for a top-k threshold `tau` (its
    /// `top_k`-th largest value, finite): the values above it and the count
    /// of those equal to it, from the `n` values kept in shared memory
    /// (`kept = Some(n)`: they hold every value `>= tau`) or from the row.
    ///
    /// # Safety
    /// As for [`Row::for_each`], every thread of the block together; `list`
    /// is valid for a [`TopList`]. Not inlined: a sharded call's alone, its
    /// registers made the threshold kernels spill.
    #[inline(never)]
    unsafe fn write_list(&self, kept: Option<u32>, tau: f32, list: *mut TopList) {
        // SAFETY (all): the launch's shared memory: counters no thread reads
        // meanwhile, zeroed between barriers; the list's values below
        // `MAX_TOP_K − 1` (fewer than `top_k <= MAX_TOP_K` values lie above `tau`).
        unsafe {
            let sh = shared();
            let (above, ties) = (&raw mut (*sh).found, &raw mut (*sh).base);
            gpu::sync_threads();
            if gpu::thread_idx_x() == 0 {
                above.write(0);
                ties.write(0);
            }
            gpu::sync_threads();
            let values = &raw mut (*list).values as *mut f32;
            self.for_each(kept, |y| {
                if y > tau {
                    let at = gpu::atomic_add_u32(above, 1);
                    if (at as usize) < MAX_TOP_K as usize - 1 {
                        values.add(at as usize).write(y);
                    }
                } else if y == tau {
                    gpu::atomic_add_u32(ties, 1);
                }
            });
            gpu::sync_threads();
            if gpu::thread_idx_x() == 0 {
                write_list_head(list, tau, ties.read(), above.read());
            }
        }
    }

    /// Calls `f` with every value that counts (not NaN, above `-inf`) of the
    /// row or, with `kept = Some(n)`, of the `n` values kept in shared memory;
    /// each thread some of them.
    ///
    /// # Safety
    /// As for [`chunk_threshold`] (its last block); `n <= CAP` values were kept.
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
        // SAFETY: the row holds `vocab` elements (caller).
        unsafe { self.for_each_in(0, self.vocab, f) };
    }

    /// Calls `f` with every value that counts (not NaN, above `-inf`) of ids
    /// `start .. end` of the row, each thread some of them.
    ///
    /// # Safety
    /// As for [`chunk_threshold`]; `start` is a multiple of 4, `end <= vocab`.
    #[inline(always)]
    unsafe fn for_each_in(&self, start: u32, end: u32, mut f: impl FnMut(f32)) {
        let none: *const L = core::ptr::null();
        // SAFETY: the row holds `vocab >= end` elements (caller).
        unsafe {
            for_each_quad::<false, 2, L, L>(self.row, none, start, end, gpu::thread_idx_x(), |_, raw, _, n| {
                // Constant lane indices keep `raw` in registers.
                let mut lane = |i: usize| {
                    if (i as u32) < n {
                        let y = (self.value)(raw[i].as_f32());
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

    /// This block's chunk `start .. end` of the row: its [`Summary`] and,
    /// as `keep` says, its candidates appended to the row's pool and its
    /// cut raised into the row's `floor` (the chunk's values held in
    /// registers on the way: [`QUADS`] quads a thread).
    ///
    /// # Safety
    /// As for [`chunk_threshold`]; `end - start <= CAP` unless `keep` is
    /// [`Keep::Nothing`].
    #[inline(always)]
    unsafe fn summarize(&self, keep: Keep, scratch: *mut FilterScratch, start: u32, end: u32) -> Summary {
        let tid = gpu::thread_idx_x();
        if keep == Keep::Nothing {
            let mut s = Scan::EMPTY;
            let none: *const L = core::ptr::null();
            // SAFETY: the row holds `vocab >= end` elements (caller).
            unsafe {
                for_each_quad::<true, 4, L, L>(self.row, none, start, end, tid, |_, raw, _, n| {
                    // Constant lane indices keep `raw` in registers.
                    let mut lane = |i: usize| {
                        let y = (self.value)(raw[i].as_f32());
                        if (i as u32) < n && y > f32::NEG_INFINITY {
                            s = s.push(y);
                        }
                    };
                    lane(0);
                    lane(1);
                    lane(2);
                    lane(3);
                })
            };
            // SAFETY: every thread of the block is here (caller).
            let block = unsafe { block_scan(s) };
            return Summary { max: block.max, min: block.min, count: block.count, overflow: 0 };
        }
        // SAFETY (all): the launch's shared memory (caller); every access to
        // another thread's slots is between barriers all threads reach.
        let sh = unsafe { shared() };
        let (found, floor) = unsafe { (&raw mut (*sh).found, &raw mut (*sh).floor) };
        if tid == 0 {
            // Read after the scan's barriers.
            unsafe { found.write(0) };
            // The row's floor so far: another block's cut, if one published
            // it (only top-k blocks borrow one).
            let published =
                if matches!(keep, Keep::TopK(_)) { unsafe { gpu::atomic_add_u32(&raw mut (*scratch).floor, 0) } } else { 0 };
            unsafe { floor.write(published) };
        }
        // The thread's quads `start + 4·tid + q·TILE`, values that do not
        // count as -inf; every load issues before the first use.
        let aligned = quad_aligned(self.row);
        let x = |q: usize| start + 4 * tid + q as u32 * TILE;
        // Widened as loaded, then each value in place as sampled (`-inf`
        // past `end` and where it does not count).
        let mut values = [[f32::NEG_INFINITY; 4]; QUADS];
        if aligned && end - start == CAP as u32 {
            // A whole chunk: one vector load a quad, in a path of its own (where
            // one path serves both, LLVM splits each into three narrower loads).
            // SAFETY: x + 4 <= end <= vocab, 16-byte aligned (start is a multiple of TILE).
            each_quad(|q| values[q] = unsafe { L::load4(self.row.add(x(q) as usize)) }.map(L::as_f32));
        } else {
            each_quad(|q| {
                if x(q) < end {
                    // SAFETY: x < end <= vocab, x % 4 == 0 (start is a multiple of TILE).
                    values[q] = unsafe { load_quad(self.row, x(q), end, aligned) }.0.map(L::as_f32);
                }
            });
        }
        let (mut s, mut nan) = (Scan::EMPTY, false);
        each_quad(|q| {
            each_lane(|i| {
                let y = (self.value)(values[q][i]);
                nan |= y.is_nan();
                let counts = x(q) + (i as u32) < end && y > f32::NEG_INFINITY;
                if counts {
                    s = s.push(y);
                }
                values[q][i] = if counts { y } else { f32::NEG_INFINITY };
            });
        });
        // Recomputed where it is needed, not kept live through the barriers
        // (the registers it took made a threshold kernel spill).
        let own_max = |values: &[[f32; 4]; QUADS]| {
            let mut m = f32::NEG_INFINITY;
            each_quad(|q| each_lane(|i| m = m.max(values[q][i])));
            m
        };
        // SAFETY (both): every thread of the block is here (caller).
        let nan = unsafe { gpu::sync_threads_or(nan) };
        let block = unsafe { block_scan(s) };
        let mut summary = Summary { max: block.max, min: block.min, count: block.count, overflow: 0 };
        if nan {
            // A row with NaN has no pool: pass 1 reads it (and flags it).
            summary.overflow = 1;
            return summary;
        }
        // Block-uniform: written before the scan's barriers.
        let row_floor = unsafe { floor.read() };
        let (mut cut, mut borrowed) = match keep {
            Keep::Nothing => return summary,
            Keep::MinP(min_p) => (min_p_threshold(block.max, min_p), false),
            // Any block's cut is at most the row's `τ_k`: a block that finds
            // one published takes it and spares its own search.
            Keep::TopK(_) if row_floor != 0 => (from_key(row_floor), true),
            // SAFETY: block-uniform (the count is every thread's).
            Keep::TopK(k) if block.count > k => (unsafe { kth_largest(own_max(&values), k) }, false),
            Keep::TopK(_) => (f32::NEG_INFINITY, false),
        };
        // SAFETY: every thread of the block is here, `found` zeroed before a barrier.
        let mut n = unsafe { self.keep_candidates(&values, own_max(&values), cut) };
        if let Keep::TopK(k) = keep
            && borrowed
            && n as usize > CANDIDATES
            && block.count > k
        {
            // Too many at a borrowed cut (the chunk's values lie above those
            // of the chunk that set it): the block's own cut, higher.
            // SAFETY: block-uniform (`n` and the count are every thread's).
            cut = cut.max(unsafe { kth_largest(own_max(&values), k) });
            borrowed = false;
            if tid == 0 {
                // Every thread read `n` before `kth_largest`'s barriers.
                unsafe { found.write(0) };
            }
            unsafe { gpu::sync_threads() };
            n = unsafe { self.keep_candidates(&values, own_max(&values), cut) };
        }
        if tid == 0 && cut > f32::NEG_INFINITY && !borrowed {
            // Read by the row's last block after every block arrived (fenced
            // below), and by blocks of the row that start after this one.
            unsafe { gpu::atomic_max_u32(&raw mut (*scratch).floor, key(cut)) };
        }
        if n as usize > CANDIDATES {
            summary.overflow = 1;
            return summary;
        }
        let (candidates, base) = unsafe { (&raw const (*sh).candidates as *const f32, &raw mut (*sh).base) };
        if tid == 0 {
            // Past the pool, the merge sees the cursor overflowed.
            unsafe { base.write(gpu::atomic_add_u32(&raw mut (*scratch).cursor, n)) };
        }
        unsafe { gpu::sync_threads() };
        let at = unsafe { base.read() } as usize;
        if at + n as usize > POOL {
            summary.overflow = 1;
            return summary;
        }
        let pool = unsafe { &raw mut (*scratch).pool as *mut f32 };
        let mut j = tid;
        while j < n {
            // SAFETY: at + j < at + n <= POOL; j < n <= CANDIDATES.
            unsafe { pool.add(at + j as usize).write(*candidates.add(j as usize)) };
            j += BLOCK_THREADS;
        }
        // Published before warp 0 counts the block in (`last_block::arrive`).
        gpu::fence_device();
        unsafe { gpu::sync_threads() };
        summary
    }

    /// The block's values at or above `cut` (each thread's `values`, whose
    /// largest is `own_max`) into the shared `candidates`, as many as fit:
    /// how many there are, in every thread.
    ///
    /// # Safety
    /// Every thread of the block calls this together, the shared `found`
    /// zeroed before a barrier they all passed.
    #[inline(always)]
    unsafe fn keep_candidates(&self, values: &[[f32; 4]; QUADS], own_max: f32, cut: f32) -> u32 {
        // SAFETY (all): the launch's shared memory (caller).
        let sh = unsafe { shared() };
        let (candidates, found) = unsafe { (&raw mut (*sh).candidates as *mut f32, &raw mut (*sh).found) };
        // Only threads whose largest value reaches the cut hold candidates
        // (with top-k, at least `k` of them and few more).
        if own_max >= cut {
            each_quad(|q| {
                each_lane(|i| {
                    let y = values[q][i];
                    if y >= cut && y > f32::NEG_INFINITY {
                        // SAFETY: shared memory; `at` checked.
                        let at = unsafe { gpu::atomic_add_u32(found, 1) } as usize;
                        if at < CANDIDATES {
                            unsafe { candidates.add(at).write(y) };
                        }
                    }
                })
            });
        }
        unsafe { gpu::sync_threads() };
        unsafe { found.read() }
    }

    /// A round of the row's top-p search by all its blocks (a search
    /// kernel's launch, [`Search`]): block `c` histograms the survivors of
    /// its chunk that agree with the digits chosen so far (counts and
    /// masses, exact in any order) into the row's histogram in `scratch`,
    /// and the row's last block to arrive picks the round's digit: `τ` after
    /// the last round, in every thread of that block; `None` in the others,
    /// and in every block of a row that is not searched.
    ///
    /// # Safety
    /// As for [`chunk_threshold`], with `chunks > 1`: `scratch` is the row's.
    #[inline(always)]
    unsafe fn search_round(&self, scratch: *mut FilterScratch, (chunk, c, chunks): (u32, u32, u32)) -> Option<f32> {
        let tid = gpu::thread_idx_x();
        // SAFETY (all): the row's scratch (caller), its search written by an
        // earlier launch (the same value in every thread), its histogram
        // only touched atomically in this launch; the launch's shared memory,
        // every access to another thread's slots between barriers all threads reach.
        let at = unsafe { &raw mut (*scratch).search };
        // The fields the walk needs; the others are read where they are used.
        if unsafe { (&raw const (*at).active).read() } == 0 {
            return None; // whole block
        }
        let (floor, max) = unsafe { ((&raw const (*at).floor).read(), (&raw const (*at).max).read()) };
        let radix = unsafe { Radix { prefix: (&raw const (*at).prefix).read(), round: (&raw const (*at).round).read() } };
        let sh = unsafe { shared() };
        let (counts, masses) = unsafe { (&raw mut (*sh).counts as *mut u32, &raw mut (*sh).masses as *mut u64) };
        unsafe {
            counts.add(tid as usize).write(0);
            masses.add(tid as usize).write(0);
            gpu::sync_threads();
        }
        let start = chunk * c;
        // SAFETY: the row holds `vocab` elements; start % TILE == 0; shared
        // memory, cleared before the barrier above.
        unsafe {
            self.for_each_in(start, start.saturating_add(chunk).min(self.vocab), |y| {
                let k = key(y);
                if y >= floor && radix.matches(k) {
                    let d = radix.digit(k);
                    gpu::atomic_add_u32(counts.add(d), 1);
                    gpu::atomic_add_u64(masses.add(d), mass(y, max));
                }
            })
        };
        let (row_counts, row_masses) =
            unsafe { (&raw mut (*scratch).counts as *mut u32, &raw mut (*scratch).masses as *mut u64) };
        unsafe {
            gpu::sync_threads();
            // Thread `tid` adds digit `tid` (DIGITS = BLOCK_THREADS).
            let n = counts.add(tid as usize).read();
            if n != 0 {
                gpu::atomic_add_u32(row_counts.add(tid as usize), n);
                gpu::atomic_add_u64(row_masses.add(tid as usize), masses.add(tid as usize).read());
            }
            // Published before warp 0 counts the block in.
            gpu::fence_device();
            gpu::sync_threads();
        }
        let last = tid < WARP && unsafe { last_block::arrive(&raw mut (*scratch).counter, chunks) };
        if !unsafe { gpu::sync_threads_or(last) } {
            return None;
        }
        gpu::fence_device();
        unsafe {
            // The row's histogram into shared memory, cleared for the next round.
            counts.add(tid as usize).write(gpu::atomic_swap_u32(row_counts.add(tid as usize), 0));
            masses.add(tid as usize).write(gpu::atomic_swap_u64(row_masses.add(tid as usize), 0));
            gpu::sync_threads();
            if tid < WARP {
                let s = at.read();
                let mut pick = Pick { acc: s.acc, total: s.total, digit: 0, rank: 0, members: 0 };
                pick_digit(By::Mass, radix, &mut pick, s.top_p);
            }
            gpu::sync_threads();
        }
        let pick = unsafe { (&raw const (*sh).pick).read() };
        let next = radix.descend(pick.digit as usize);
        let done = next.round == ROUNDS;
        if tid == 0 {
            // SAFETY: read by the next launch (every read of this one is before the barrier above).
            unsafe {
                let s = at.read();
                at.write(if done {
                    Search { active: 0, ..s }
                } else {
                    Search { prefix: next.prefix, round: next.round, acc: pick.acc, total: pick.total, ..s }
                })
            };
        }
        done.then(|| from_key(next.prefix))
    }

    /// The radix search of `by` over the row's values `>= floor`, `max` the
    /// row's maximum (finite), `members` an upper bound on those values:
    /// `τ` and the last round's [`Pick`]. For [`By::Count`], `τ` is the
    /// `filter.top_k`-th largest (`top_k < members`); for [`By::Mass`], the
    /// value where the top mass first reaches `filter.top_p` of theirs. With
    /// `kept = Some(n)`, over the `n` values in the shared `values`, which
    /// hold every value of the row that can decide it; else over the row,
    /// its candidates kept in shared memory from the first round where they fit.
    ///
    /// # Safety
    /// As for [`chunk_threshold`] (its last block).
    #[inline(always)]
    unsafe fn search(
        &self,
        by: By,
        max: f32,
        floor: f32,
        filter: Filter,
        mut members: u32,
        mut kept: Option<u32>,
    ) -> (f32, Pick) {
        let tid = gpu::thread_idx_x();
        // SAFETY: the launch's shared memory (caller).
        let sh = unsafe { shared() };
        let (counts, masses) = unsafe { (&raw mut (*sh).counts as *mut u32, &raw mut (*sh).masses as *mut u64) };
        let values = unsafe { &raw mut (*sh).values as *mut f32 };
        let kept_at = unsafe { &raw mut (*sh).kept };
        let mut pick = Pick { acc: 0, total: 0, digit: 0, rank: filter.top_k, members };
        let mut radix = Radix::START;
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
