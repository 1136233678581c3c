//! Log-probabilities of a call's emitted tokens (REFERENCE §8), after
//! either operation, over its positions (`layout::LogprobsParams`): the
//! CPU twin is `specdec::cpu::logprobs`, which reads each emitted row
//! again the same way.
//!
//! 1. `logprobs_lse_{values}_{values}`: grid `(positions, chunks)`. Block
//!    `(at, c)` sums chunk `c` of position `at`'s row by runs (REFERENCE
//!    §2.6: the same bits however the row is split) into the log-sum-exps
//!    the call asks for ([`LogprobsPartial`]: the raw values at `T = 1`, the
//!    processed ones scaled and masked to the kept set); the position's last
//!    block combines them, writes the emitted token's log-probabilities and
//!    keeps the sums ([`LogprobsLse`]) for the second kernel. A position past
//!    its request's tokens gets NaN and `-1` from its block 0.
//! 2. `logprobs_top_{values}_{values}` (where a top-n or rank is asked), the
//!    same grid: each block reads its chunk again, now that the
//!    log-sum-exp is known, and keeps the chunk's `top_n` best ids in a
//!    warp's registers ([`WarpTop`]: each candidate's order is that of its
//!    reported `f32` log-probability, as the CPU's) and counts the ids above
//!    the emitted token's; the position's last block merges the chunks'
//!    lists and writes the top-n, their ids and the rank.
//!
//! A rank of a sharded call (`LogprobsParams::send`; REFERENCE §9) runs
//! `logprobs_lse_sharded_{values}_{values}` instead of the first kernel:
//! where it would write the outputs, the position's last block writes its
//! sums over the rank's ids and the token's value where the rank holds it
//! into the rank's message (`shard::PositionSums`); after the exchange,
//! `logprobs_combine_sharded` ([`combine_sharded`]) writes the outputs from
//! every rank's. Where a top-n or rank is asked, `logprobs_top_sharded_{values}_{values}`
//! then writes each position's top-n over the rank's ids (keys of global
//! ids), their log-probabilities and its count into a message of its own
//! (`shard::PositionTop`), and after one more exchange
//! `logprobs_top_combine_sharded` ([`top_combine_sharded`]) merges the
//! ranks' lists, a block a position.

use crate::block::{ExactSum, block_reduce};
use crate::fold::push_run_sum;
use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, for_each_run, load_quad, quad_aligned, widen};
use crate::row::chunk_range;
use crate::shard::{block_unfit, warp_unfit};
use crate::shared::{self, Shared};
use crate::threshold::{mask, processed_log_prob, raw_log_prob};
use crate::walk_sum::{WalkSum, block_sums, gather_sum};
use core::mem::offset_of;
use specdec_core::argmax::floor_value;
use specdec_core::dtype::{Bf16, F16};
use specdec_core::exp_sum::ExpSum;
use specdec_core::kernel_symbol;
use specdec_core::layout::{
    LogprobsParams, MAX_TOP_LOGPROBS, POSITIONS_REJECTION, TILE, TOP_SHARED_BYTES, WARPS,
};
use specdec_core::rng::Stream;
use specdec_core::sample::Sampler;
use specdec_core::scratch::{LogprobsLse, LogprobsPartial, TopPartial, top_key, top_key_id};
use specdec_core::shard::{self, Header, PositionSums};

/// An emitted position as the kernels read it.
struct Emitted<V> {
    /// The values its token was drawn from (`vocab` of them).
    row: *const V,
    /// Its slot's temperature (`0`: greedy, whose processed distribution is the raw one).
    sampler: Sampler,
    greedy: bool,
    /// Its kept set's `τ` (`-inf`: the whole row).
    tau: f32,
    token: u32,
}

/// What a launch does at a position.
enum At<V> {
    /// Nothing was emitted there: NaN and `-1` (REFERENCE §8).
    Past,
    /// Another launch of the call takes it (`LogprobsParams::source`).
    Other,
    Emitted(Emitted<V>),
}

/// Position `at` of the call, read from its buffers (`At::Other` where
/// another launch of the call takes it, unless `every_source`).
///
/// # Safety
/// `at < p.positions`; `p` was built by the host from the call's checked buffers.
#[inline(always)]
unsafe fn position<V: Load>(p: &LogprobsParams, at: u32, every_source: bool) -> At<V> {
    // SAFETY (all): the tables hold what `LogprobsParams` says (host-checked).
    let (row, slot) = if p.op == POSITIONS_REJECTION {
        // max_drafts < u32::MAX (host-checked); keeps the panic path out.
        let k1 = (p.max_drafts + 1).max(1);
        let (r, i) = ((at / k1) as usize, at % k1);
        let (emitted, offset, slot) = unsafe {
            (*(p.num_emitted as *const i32).add(r), *(p.offsets as *const i32).add(r), *(p.slots as *const i32).add(r))
        };
        // num_emitted <= K + 1 of a valid request; 0 for an invalid one.
        if i as i32 >= emitted {
            return At::Past;
        }
        (offset as u32 + i, slot)
    } else {
        (at, unsafe { *(p.slots as *const i32).add(at as usize) })
    };
    let token = unsafe {
        if p.tokens_i64 != 0 {
            *(p.tokens as *const i64).add(at as usize)
        } else {
            *(p.tokens as *const i32).add(at as usize) as i64
        }
    };
    // A row with a bad slot, temperature or column emitted `-1` (SPEC §3.5);
    // tokens are ids of the whole row.
    let vocab = if sharded(p) { p.shard.vocab } else { p.vocab };
    if token < 0 || token >= vocab as i64 || slot < -1 || (slot >= 0 && slot as u32 >= p.num_slots) {
        return At::Past;
    }
    let rounded = p.rounded != 0 && slot >= 0;
    if rounded as u32 != p.source && !every_source {
        return At::Other;
    }
    let row_ptr = if rounded {
        let column = if p.draft_columns != 0 {
            unsafe { *(p.draft_columns as *const i32).add(row as usize) as u32 }
        } else {
            p.draft_column
        };
        let offset = slot as usize * p.draft_stride0 as usize + column as usize * p.draft_stride1 as usize;
        unsafe { (p.draft_logits as *const V).add(offset) }
    } else {
        unsafe { (p.values as *const V).add(row as usize * p.row_stride as usize) }
    };
    let temperature = if slot >= 0 { unsafe { *(p.temperature as *const f32).add(slot as usize) } } else { 0.0 };
    let tau =
        if p.thresholds != 0 { unsafe { *(p.thresholds as *const f32).add(at as usize) } } else { f32::NEG_INFINITY };
    At::Emitted(Emitted {
        row: row_ptr,
        sampler: Sampler::new(temperature, 0, 0, Stream::Target),
        greedy: temperature == 0.0,
        tau,
        token: token as u32,
    })
}

/// Whether `p` is a rank's part of a sharded call (`LogprobsParams::send`).
#[inline(always)]
fn sharded(p: &LogprobsParams) -> bool {
    p.send != 0
}

impl<V> Emitted<V> {
    /// Which of the position's sums the first kernel takes, `[raw,
    /// processed]`: the raw where a raw output or top-n is asked or the
    /// row is greedy (its processed distribution is the raw one); the
    /// processed where the call's own kernels did not (`processed_in_passes`).
    #[inline(always)]
    fn sums(&self, p: &LogprobsParams) -> [bool; 2] {
        let top = p.ranks != 0;
        let raw = p.raw != 0 || self.greedy || (top && p.top_raw != 0);
        let processed = p.processed_in_passes == 0 && !self.greedy && (p.processed != 0 || (top && p.top_raw == 0));
        [raw, processed]
    }

    /// The processed log-probability of a value `x`, under log-sum-exps `lse`
    /// (a greedy position's is the raw one).
    #[inline(always)]
    fn processed(&self, x: f32, lse: LogprobsLse) -> f32 {
        if self.greedy {
            raw_log_prob(x, lse.raw)
        } else {
            processed_log_prob(x, &self.sampler, self.tau, lse.processed)
        }
    }

    /// The log-probability of `x` under the top-n's distribution.
    #[inline(always)]
    fn top_logprob(&self, p: &LogprobsParams, x: f32, lse: LogprobsLse) -> f32 {
        if p.top_raw != 0 { raw_log_prob(x, lse.raw) } else { self.processed(x, lse) }
    }
}

/// The first kernel (see module docs); with `SHARDED`, a rank's part of a
/// sharded call's: each position's sums over the rank's ids and its
/// token's value into the rank's message (`shard::PositionSums`), which
/// [`combine_sharded`] turns into the outputs after the exchange.
///
/// # Safety
/// Launched by the host's checked launcher after the call, on its stream,
/// with `layout::WALK_SHARED_BYTES` of dynamic shared memory; with
/// `SHARDED`, `p.send` holds the rank's message.
#[inline(always)]
unsafe fn lse<V: Load, const SHARDED: bool>(p: &LogprobsParams) {
    let tid = gpu::thread_idx_x();
    if SHARDED {
        // SAFETY: forwarded.
        unsafe { write_header(p) };
    }
    // SAFETY: forwarded.
    let Some((at, c, e)) = (unsafe { block_position::<V, false, SHARDED>(p) }) else {
        return; // block-uniform
    };
    let [raw, processed] = e.sums(p);
    let unit = Sampler::new(1.0, 0, 0, Stream::Target);
    let (start, end) = chunk_range(p.vocab, p.chunk, c);
    let none: *const V = core::ptr::null();
    // SAFETY: the launch has layout::WALK_SHARED_BYTES; each thread its own columns.
    let (mut walk_raw, mut walk_processed) =
        unsafe { (WalkSum::new(shared::walk_sums(0)), WalkSum::new(shared::walk_sums(1))) };
    // SAFETY: the row holds `vocab >= end` values; start is a multiple of TILE, so of RUN.
    unsafe {
        for_each_run(
            e.row,
            none,
            start,
            end,
            tid,
            #[inline(always)]
            |_, v, _, n| {
                let v: [[f32; 4]; 4] = core::array::from_fn(|j| widen(v[j]));
                if raw {
                    walk_raw = push_run_sum(walk_raw, v, n, &unit).0;
                }
                if processed {
                    let kept = v.map(|q| mask(q, e.tau, &e.sampler));
                    walk_processed = push_run_sum(walk_processed, kept, n, &e.sampler).0;
                }
            },
        )
    };
    // SAFETY: every thread of the block is here (the returns above are block-uniform).
    let [raw_sum, processed_sum] = unsafe { block_sums([walk_raw, walk_processed]) };
    if tid >= WARP {
        return;
    }
    let chunks = p.chunks;
    let total = if chunks == 1 {
        LogprobsPartial { raw: raw_sum, processed: processed_sum }
    } else {
        // SAFETY (all): warp 0, once per block of the position; partials holds
        // positions·chunks entries, counters `positions`.
        unsafe {
            let partials = (p.partials as *mut LogprobsPartial).add(at as usize * chunks as usize);
            if tid == 0 {
                partials.add(c as usize).write(LogprobsPartial { raw: raw_sum, processed: processed_sum });
            }
            if !last_block::arrive((p.counters as *mut u32).add(at as usize), chunks) {
                return;
            }
            // Every partial was published (arrive); the whole warp is here;
            // `raw` and `processed` are the position's.
            let (first, stride) = (partials as *const u8, core::mem::size_of::<LogprobsPartial>());
            let sum = |asked: bool, field: usize| {
                if asked { gather_sum(first, stride, chunks, field) } else { ExpSum::EMPTY }
            };
            LogprobsPartial {
                raw: sum(raw, offset_of!(LogprobsPartial, raw)),
                processed: sum(processed, offset_of!(LogprobsPartial, processed)),
            }
        }
    };
    if tid != 0 {
        return;
    }
    if SHARDED {
        // The token's value where this rank holds it.
        let local = e.token.wrapping_sub(p.shard.offset);
        let held = local < p.vocab;
        // SAFETY: local < vocab where held; the message holds `positions` entries (host-sized).
        unsafe {
            let x = if held { (*e.row.add(local as usize)).as_f32() } else { f32::NAN };
            shard::position_at(p.send, at as usize).write(PositionSums { sums: total, x, held: held as u32 });
        }
        return;
    }
    let raw_lse = total.raw.lse();
    let lse = LogprobsLse { raw: raw_lse, processed: if e.greedy { raw_lse } else { total.processed.lse() } };
    // SAFETY (both): token < vocab; at < positions, one thread.
    let x = unsafe { (*e.row.add(e.token as usize)).as_f32() };
    unsafe { write_outputs(p, at, &e, x, lse) };
}

/// Position `at`'s processed and raw log-probabilities, where asked, from
/// its token's value `x` and its log-sum-exps `lse`; where a top-n or rank
/// is asked, `lse` for the top-n kernel (its raw half where the call's
/// kernels wrote the processed one, `processed_in_passes`).
///
/// # Safety
/// `at < positions`; one thread; the outputs hold `positions` entries where asked.
#[inline(always)]
unsafe fn write_outputs<V>(p: &LogprobsParams, at: u32, e: &Emitted<V>, x: f32, lse: LogprobsLse) {
    let at = at as usize;
    // SAFETY: as the caller's.
    unsafe {
        if p.processed != 0 {
            (p.processed as *mut f32).add(at).write(e.processed(x, lse));
        }
        if p.raw != 0 {
            (p.raw as *mut f32).add(at).write(raw_log_prob(x, lse.raw));
        }
        if p.ranks != 0 {
            let lse_at = (p.lse as *mut LogprobsLse).add(at);
            if p.processed_in_passes != 0 {
                (&raw mut (*lse_at).raw).write(lse.raw);
            } else {
                lse_at.write(lse);
            }
        }
    }
}

/// The emitted position that block `(at, c)` of a log-probability kernel
/// (the top-n kernel if `TOP`) works on, or none: the block has nothing to
/// do (block-uniform). A position past its request's emitted tokens gets
/// its NaN and `-1` outputs here, once: from block `(at, 0)` of the launch
/// of source 0 of the last kernel the call runs (the top-n kernel where it
/// runs, `p.ranks`, else the first); in a `SHARDED` call, from the combine.
///
/// # Safety
/// `p` was built by the host from the call's checked buffers.
#[inline(always)]
unsafe fn block_position<V: Load, const TOP: bool, const SHARDED: bool>(
    p: &LogprobsParams,
) -> Option<(u32, u32, Emitted<V>)> {
    let (at, c) = (gpu::block_idx_x(), gpu::block_idx_y());
    if at >= p.positions || c >= p.chunks {
        return None;
    }
    // SAFETY: at < positions.
    match unsafe { position::<V>(p, at, false) } {
        At::Past => {
            if !SHARDED && c == 0 && gpu::thread_idx_x() == 0 && p.source == 0 && (TOP || p.ranks == 0) {
                // SAFETY: at < positions.
                unsafe { write_past(p, at) };
            }
            None
        }
        At::Other => None,
        At::Emitted(e) => Some((at, c, e)),
    }
}

/// The rank's header at the start of its message, from one thread of a
/// sharded call's launch over source 0.
///
/// # Safety
/// `p.send` holds the rank's message (host-sized).
#[inline(always)]
unsafe fn write_header(p: &LogprobsParams) {
    if gpu::block_idx_x() == 0 && gpu::block_idx_y() == 0 && gpu::thread_idx_x() == 0 && p.source == 0 {
        // SAFETY: the message starts with the rank's header (caller).
        unsafe { (p.send as *mut Header).write(p.shard) };
    }
}

/// Position `at`'s outputs where nothing was emitted: NaN log-probabilities, `-1` ids and rank.
///
/// # Safety
/// `at < positions`; one thread.
#[inline(always)]
unsafe fn write_past(p: &LogprobsParams, at: u32) {
    let at = at as usize;
    // SAFETY: the outputs hold `positions` (· top_n) entries where asked.
    unsafe {
        if p.processed != 0 {
            (p.processed as *mut f32).add(at).write(f32::NAN);
        }
        if p.raw != 0 {
            (p.raw as *mut f32).add(at).write(f32::NAN);
        }
        if p.ranks != 0 {
            (p.ranks as *mut i32).add(at).write(-1);
            let n = p.top_n as usize;
            for k in 0..n {
                (p.top_logprobs as *mut f32).add(at * n + k).write(f32::NAN);
                (p.top_ids as *mut i32).add(at * n + k).write(-1);
            }
        }
    }
}

/// A warp's best `n` keys so far (`scratch::top_key`), best first: lane
/// `l < n` holds entry `l` (0: none yet), and every lane the last entry,
/// the bar a new key must pass.
#[derive(Clone, Copy)]
struct WarpTop {
    key: u64,
    last: u64,
    n: u32,
}

/// `v` of lane `lane`, in every lane.
///
/// # Safety
/// All 32 lanes of the warp, converged.
#[inline(always)]
unsafe fn shfl_idx_u64(v: u64, lane: u32) -> u64 {
    // SAFETY: forwarded.
    unsafe { (gpu::shfl_idx_u32((v >> 32) as u32, lane) as u64) << 32 | gpu::shfl_idx_u32(v as u32, lane) as u64 }
}

impl WarpTop {
    #[inline(always)]
    fn new(n: u32) -> WarpTop {
        WarpTop { key: 0, last: 0, n }
    }

    /// The value of the last entry (`-inf` while the list is not full): a
    /// value below it cannot enter the list.
    #[inline(always)]
    fn last_value(&self) -> f32 {
        if self.last == 0 { f32::NEG_INFINITY } else { floor_value(((self.last >> 32) as u32 ^ 0x8000_0000) as i32) }
    }

    /// Offers each lane's key `cand` (0: none); keys offered are distinct
    /// and not yet held.
    ///
    /// # Safety
    /// All 32 lanes of the warp, converged.
    #[inline(always)]
    unsafe fn offer(&mut self, mut cand: u64) {
        let lane = gpu::thread_idx_x() % WARP;
        loop {
            // SAFETY (all): the caller's full warp.
            let from = unsafe { gpu::warp_min_u32(if cand > self.last { lane } else { WARP }) };
            if from == WARP {
                return;
            }
            let k = unsafe { shfl_idx_u64(cand, from) };
            if lane == from {
                cand = 0;
            }
            // The first entry `k` beats (entries are distinct, best first).
            let to = unsafe { gpu::warp_min_u32(if lane < self.n && self.key < k { lane } else { self.n }) };
            let up = unsafe { (gpu::shfl_up_u32((self.key >> 32) as u32, 1) as u64) << 32 }
                | unsafe { gpu::shfl_up_u32(self.key as u32, 1) } as u64;
            if lane < self.n && lane >= to {
                self.key = if lane == to { k } else { up };
            }
            self.last = unsafe { shfl_idx_u64(self.key, self.n - 1) };
        }
    }
}

/// The top-n kernel's dynamic shared memory: the sampling kernels' (for
/// the block's reductions), then each warp's list for the block's merge.
#[repr(C)]
struct TopShared {
    shared: Shared,
    lists: [[u64; MAX_TOP_LOGPROBS]; WARPS as usize],
}

const _: () = assert!(core::mem::size_of::<TopShared>() as u32 == TOP_SHARED_BYTES);

/// The second kernel (see module docs); with `SHARDED`, a rank's part of
/// a sharded call's: each position's top-n over the rank's ids (keys of
/// global ids), their log-probabilities and its count of ids above the
/// token into the rank's message (`shard::PositionTop`), which
/// [`top_combine_sharded`] merges after the exchange.
///
/// # Safety
/// Launched by the host's checked launcher after the log-sum-exps are known
/// (`lse`, the verifier's passes, or `combine_sharded`: `LogprobsParams::lse`),
/// on the call's stream, with `layout::TOP_SHARED_BYTES` of dynamic shared
/// memory; with `SHARDED`, `p.send` holds the rank's message and `p.recv`
/// still every rank's [`PositionSums`] (the token's value).
#[inline(always)]
unsafe fn top<V: Load, const SHARDED: bool>(p: &LogprobsParams) {
    if SHARDED {
        // SAFETY: forwarded.
        unsafe { write_header(p) };
    }
    // SAFETY: forwarded.
    let Some((at, c, e)) = (unsafe { block_position::<V, true, SHARDED>(p) }) else {
        return; // block-uniform
    };
    let tid = gpu::thread_idx_x();
    let (warp, lane) = (tid / WARP, tid % WARP);
    // SAFETY: written for an emitted position before this launch.
    let lse = unsafe { *(p.lse as *const LogprobsLse).add(at as usize) };
    // The token's value: from the rank that holds it where sharded.
    // SAFETY (both): token < vocab; the ranks' records of `at` (caller).
    let x = if SHARDED { unsafe { held_value(p, at) } } else { unsafe { (*e.row.add(e.token as usize)).as_f32() } };
    let mine = order(e.top_logprob(p, x, lse));
    // The global id of the row's first id.
    let base = if SHARDED { p.shard.offset } else { 0 };
    let (start, end) = chunk_range(p.vocab, p.chunk, c);
    let aligned = quad_aligned(e.row);
    let mut list = WarpTop::new(p.top_n);
    let mut larger = 0u32;
    // Every lane of a warp walks the same number of quads (the list is the warp's).
    let mut x = start + 4 * tid;
    let mut warp_x = x - 4 * lane;
    while warp_x < end {
        let (v, n) = if x < end {
            // SAFETY: x < end <= vocab, x % 4 == 0.
            let (q, n) = unsafe { load_quad(e.row, x, end, aligned) };
            (widen(q), n)
        } else {
            ([0.0; 4], 0)
        };
        // The bar in f32 first: a key only for a value that can enter the list.
        let bar = list.last_value();
        let mut key = #[inline(always)]
        |k: u32| {
            if k >= n {
                return 0;
            }
            let lp = order(e.top_logprob(p, v[k as usize], lse));
            larger += (lp > mine) as u32;
            if lp >= bar { top_key(lp, base + x + k) } else { 0 }
        };
        // Constant lane indices keep the quad and its keys in registers.
        let keys = [key(0), key(1), key(2), key(3)];
        let best = keys[0].max(keys[1]).max(keys[2].max(keys[3]));
        // SAFETY (all): the whole warp (uniform loop).
        if list.n > 0 && unsafe { gpu::warp_or_u32((best > list.last) as u32) } != 0 {
            unsafe {
                list.offer(keys[0]);
                list.offer(keys[1]);
                list.offer(keys[2]);
                list.offer(keys[3]);
            }
        }
        x += TILE;
        warp_x += TILE;
    }
    // SAFETY: every thread of the block is here (block-uniform returns).
    let (list, larger) = unsafe { block_top(list, larger) };
    let chunks = p.chunks;
    let (list, larger) = if chunks == 1 {
        (list, larger)
    } else {
        // SAFETY: top_partials holds positions·chunks entries.
        let partials = unsafe { (p.top_partials as *mut TopPartial).add(at as usize * chunks as usize) };
        let mut last = false;
        if warp == 0 {
            // SAFETY: entry c of the position's; all of warp 0.
            unsafe { write_partial(partials.add(c as usize), list, larger) };
            // SAFETY: all of warp 0 after the block's entry; counters holds `positions`.
            last = unsafe { last_block::arrive((p.counters as *mut u32).add(at as usize), chunks) };
        }
        // SAFETY: block-uniform (every thread is here); then the whole last block merges.
        if !unsafe { gpu::sync_threads_or(last) } {
            return;
        }
        gpu::fence_device();
        // SAFETY (both): every block of the position published (arrive); all threads.
        let (list, larger) = unsafe { merge(partials as *const u8, core::mem::size_of::<TopPartial>(), chunks, p.top_n) };
        unsafe { block_top(list, larger) }
    };
    if warp != 0 {
        return;
    }
    // An entry's log-probability: NaN for one the row had too few ids for.
    let logprob = |key: u64| {
        if key == 0 {
            return f32::NAN;
        }
        // SAFETY: a key's id is one of this row's (global ids from `base`).
        let y = unsafe { (*e.row.add((top_key_id(key) - base) as usize)).as_f32() };
        e.top_logprob(p, y, lse)
    };
    let key = if lane < list.n { list.key } else { 0 };
    if SHARDED {
        // SAFETY (both): the message holds `positions` records; all of warp 0.
        unsafe {
            let record = shard::position_top_at(p.send, at as usize);
            write_partial(&raw mut (*record).top, list, larger);
            if (lane as usize) < MAX_TOP_LOGPROBS {
                (&raw mut (*record).logprobs).cast::<f32>().add(lane as usize).write(logprob(key));
            }
        }
        return;
    }
    // SAFETY: the outputs hold positions · top_n entries.
    unsafe { write_top(p, at, list.n, (key, logprob(key)), larger) };
}

/// A position's top-n and rank, from warp 0 of the block that merged its
/// lists: lane `l < n` writes entry `l` (its key and log-probability; an
/// empty key: NaN and `-1`), lane 0 the rank `larger + 1`.
///
/// # Safety
/// `at < positions`; the outputs hold `positions · top_n` entries; `n <= top_n`.
#[inline(always)]
unsafe fn write_top(p: &LogprobsParams, at: u32, n: u32, (key, lp): (u64, f32), larger: u32) {
    let lane = gpu::thread_idx_x() % WARP;
    // SAFETY: as the caller's.
    unsafe {
        if lane < n {
            let id = if key == 0 { -1 } else { top_key_id(key) as i32 };
            let k = at as usize * p.top_n as usize + lane as usize;
            (p.top_logprobs as *mut f32).add(k).write(lp);
            (p.top_ids as *mut i32).add(k).write(id);
        }
        if lane == 0 {
            (p.ranks as *mut i32).add(at as usize).write(larger as i32 + 1);
        }
    }
}

/// A warp's list and count into `entry`: its `MAX_TOP_LOGPROBS` keys
/// (zeros past `n`: [`merge`] reads them in pairs) and `larger`.
///
/// # Safety
/// All of a warp; `entry` is valid for writes.
#[inline(always)]
unsafe fn write_partial(entry: *mut TopPartial, list: WarpTop, larger: u32) {
    let lane = gpu::thread_idx_x() % WARP;
    // SAFETY (both): lane < MAX_TOP_LOGPROBS; the caller's entry.
    if (lane as usize) < MAX_TOP_LOGPROBS {
        let key = if lane < list.n { list.key } else { 0 };
        unsafe { (&raw mut (*entry).keys).cast::<u64>().add(lane as usize).write(key) };
    }
    if lane == 0 {
        unsafe { (&raw mut (*entry).larger).write(larger) };
    }
}

/// The emitted token's raw value at position `at` of a sharded call, from
/// the rank that holds it (NaN where none does: the ranks' headers do not fit).
///
/// # Safety
/// `p.recv` holds `p.shard_ranks` messages of `p.positions` [`PositionSums`]; `at < positions`.
#[inline(always)]
unsafe fn held_value(p: &LogprobsParams, at: u32) -> f32 {
    let len = shard::positions_message_bytes(p.positions as usize);
    let first = shard::position_at(p.recv, at as usize) as *const u8;
    let mut x = f32::NAN;
    for q in 0..p.shard_ranks as usize {
        // SAFETY: rank q's record of the position, inside `recv` (caller).
        let record = unsafe { *(first.add(q * len) as *const PositionSums) };
        if record.held != 0 {
            x = record.x;
        }
    }
    x
}

/// A log-probability in the order of the top-n and the rank: NaN as `-inf`.
#[inline(always)]
fn order(v: f32) -> f32 {
    if v.is_nan() { f32::NEG_INFINITY } else { v }
}

/// The block's warps' lists merged, and their counts summed: valid in warp 0.
///
/// # Safety
/// Every thread of the block calls this together (barriers), launched with
/// `layout::TOP_SHARED_BYTES`.
#[inline(always)]
unsafe fn block_top(mut list: WarpTop, larger: u32) -> (WarpTop, u32) {
    let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
    // SAFETY: every thread of the block is here (caller).
    let larger = unsafe { block_reduce(ExactSum::new(larger as u64)) }.get() as u32;
    // SAFETY: the launch has TOP_SHARED_BYTES; barriers order the lists' writes and reads.
    let lists = unsafe { (&raw mut (*gpu::dynamic_shared::<TopShared>()).lists).cast::<u64>() };
    let entry = |w: u32| (w * MAX_TOP_LOGPROBS as u32 + lane) as usize;
    if lane < list.n {
        // SAFETY: warp < WARPS, lane < n <= MAX_TOP_LOGPROBS.
        unsafe { lists.add(entry(warp)).write(list.key) };
    }
    // SAFETY: block-uniform.
    unsafe { gpu::sync_threads() };
    if warp == 0 {
        for w in 1..WARPS {
            // SAFETY: written before the barrier; warp 0, converged.
            let key = if lane < list.n { unsafe { lists.add(entry(w)).read() } } else { 0 };
            unsafe { list.offer(key) };
        }
    }
    // The lists are read before any later use of the memory.
    // SAFETY: block-uniform.
    unsafe { gpu::sync_threads() };
    // larger: valid in thread 0 (block_reduce); lane 0 of warp 0 writes the rank.
    (list, larger)
}

/// The lists and counts of `count` [`TopPartial`]s `stride` bytes apart
/// from `first` (a position's chunks, or a sharded call's ranks), merged by
/// the whole block: warp `w` takes entries `w, w + WARPS, …` (each warp's
/// list, to be merged by [`block_top`]).
///
/// # Safety
/// Every thread of the block; the entries are valid, 16-byte aligned and
/// published (fenced).
#[inline(always)]
unsafe fn merge(first: *const u8, stride: usize, count: u32, n: u32) -> (WarpTop, u32) {
    let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
    let mut list = WarpTop::new(n);
    let mut larger = 0u32;
    let mut c = warp;
    while c < count {
        // SAFETY (all): c < count; 16-byte aligned pairs of keys, read from L2.
        let entry = unsafe { first.add(c as usize * stride) } as *const TopPartial;
        let pair: [u64; 2] = if 2 * lane < n {
            unsafe { gpu::load_relaxed((&raw const (*entry).keys).cast::<[u64; 2]>().add(lane as usize)) }
        } else {
            [0, 0]
        };
        unsafe {
            list.offer(pair[0]);
            list.offer(pair[1]);
        }
        if lane == 0 {
            // The count's 16 bytes: `larger` and the entry's padding.
            let tail: [u32; 4] =
                unsafe { gpu::load_relaxed((&raw const (*entry).keys).cast::<[u32; 4]>().add(MAX_TOP_LOGPROBS / 2)) };
            larger += tail[0];
        }
        c += WARPS;
    }
    (list, larger)
}

/// The two log-probability kernels for one dtype of values, exported under
/// their `names` symbols (both dtypes of the pair the values').
macro_rules! logprobs_kernels {
    ($($module:ident: $v:ident;)*) => {$(
        #[doc = concat!("The log-probability kernels over ", stringify!($v), " values.")]
        pub mod $module {
            use super::*;

            /// `names::LOGPROBS_LSE`.
            ///
            /// # Safety
            /// Launched by the host's checked launcher, with `layout::WALK_SHARED_BYTES`.
            #[unsafe(export_name = kernel_symbol!(LOGPROBS_LSE, $v, $v))]
            pub unsafe extern "ptx-kernel" fn logprobs_lse(p: LogprobsParams) {
                // SAFETY: forwarded.
                unsafe { super::lse::<$v, false>(&p) }
            }

            /// `names::LOGPROBS_LSE_SHARDED`.
            ///
            /// # Safety
            /// As `logprobs_lse`, in a sharded call (`p.send` its message).
            #[unsafe(export_name = kernel_symbol!(LOGPROBS_LSE_SHARDED, $v, $v))]
            pub unsafe extern "ptx-kernel" fn logprobs_lse_sharded(p: LogprobsParams) {
                // SAFETY: forwarded.
                unsafe { super::lse::<$v, true>(&p) }
            }

            /// `names::LOGPROBS_TOP`.
            ///
            /// # Safety
            /// Launched by the host's checked launcher, with `layout::TOP_SHARED_BYTES`.
            #[unsafe(export_name = kernel_symbol!(LOGPROBS_TOP, $v, $v))]
            pub unsafe extern "ptx-kernel" fn logprobs_top(p: LogprobsParams) {
                // SAFETY: forwarded.
                unsafe { super::top::<$v, false>(&p) }
            }

            /// `names::LOGPROBS_TOP_SHARDED`.
            ///
            /// # Safety
            /// As `logprobs_top`, in a sharded call (`p.send` its message,
            /// `p.recv` still the ranks' sums).
            #[unsafe(export_name = kernel_symbol!(LOGPROBS_TOP_SHARDED, $v, $v))]
            pub unsafe extern "ptx-kernel" fn logprobs_top_sharded(p: LogprobsParams) {
                // SAFETY: forwarded.
                unsafe { super::top::<$v, true>(&p) }
            }
        }
    )*};
}

logprobs_kernels! {
    f32_f32: f32;
    bf16_bf16: Bf16;
    f16_f16: F16;
}

/// A sharded call's log-probabilities (`names::LOGPROBS_COMBINE_SHARDED`):
/// warp `w` of block `b` takes position `b·WARPS + w`, combines the ranks'
/// sums of it (`walk_sum::gather_sum`: order-free, so the unsharded call's
/// bits), takes the token's value from the rank that holds it and the
/// processed log-sum-exp from the call's kernels where they wrote it
/// (`processed_in_passes`), and writes the outputs as the unsharded first
/// kernel does; NaN where a position is past its tokens or the ranks'
/// headers do not fit (a rank failed: the call flagged its rows already).
///
/// # Safety
/// Launched by the host's checked launcher after the exchange of the
/// messages `lse::<_, true>` wrote: `recv` holds `shard_ranks >= 1` of
/// them; grid `(⌈positions / WARPS⌉)`, no shared memory; no top-n asked.
#[unsafe(export_name = kernel_symbol!(LOGPROBS_COMBINE_SHARDED, f32, f32))]
pub unsafe extern "ptx-kernel" fn combine_sharded(p: LogprobsParams) {
    let (warp, lane) = (gpu::thread_idx_x() / WARP, gpu::thread_idx_x() % WARP);
    let at = gpu::block_idx_x() * WARPS + warp;
    if at >= p.positions {
        return; // warp-uniform
    }
    let (ranks, len) = (p.shard_ranks, shard::positions_message_bytes(p.positions as usize));
    // SAFETY (all): the whole warp is here (the return above is warp-uniform);
    // `recv` holds the ranks' messages (caller).
    let unfit = unsafe { warp_unfit(p.recv, len, ranks) };
    // The rows' values are not read here: any dtype's view of them will do.
    // SAFETY: at < positions.
    let e = match unsafe { position::<f32>(&p, at, true) } {
        At::Emitted(e) if !unfit => e,
        _ => {
            if lane == 0 {
                // SAFETY: at < positions; one thread.
                unsafe { write_past(&p, at) };
            }
            return;
        }
    };
    let [raw, processed] = e.sums(&p);
    let first = shard::position_at(p.recv, at as usize) as *const u8;
    // SAFETY (both): the whole warp, converged; `field` an `ExpSum` field of
    // the records, a message apart in `recv`, 16-byte aligned.
    let sum = |asked: bool, field: usize| {
        if asked {
            unsafe { gather_sum(first, len, ranks, offset_of!(PositionSums, sums) + field) }
        } else {
            ExpSum::EMPTY
        }
    };
    let raw_sum = sum(raw, offset_of!(LogprobsPartial, raw));
    let processed_sum = sum(processed, offset_of!(LogprobsPartial, processed));
    if lane != 0 {
        return;
    }
    // SAFETY: every rank's records of `positions` positions (caller); at < positions.
    let x = unsafe { held_value(&p, at) };
    let raw_lse = raw_sum.lse();
    let processed_lse = if e.greedy {
        raw_lse
    } else if p.processed_in_passes != 0 {
        // SAFETY: the call wrote the log-sum-exps of its emitted positions (`lse`, caller).
        unsafe { (*(p.lse as *const LogprobsLse).add(at as usize)).processed }
    } else {
        processed_sum.lse()
    };
    let lse = LogprobsLse { raw: raw_lse, processed: processed_lse };
    // SAFETY: at < positions; lane 0 alone.
    unsafe { write_outputs(&p, at, &e, x, lse) };
}

/// A sharded call's top-n and rank (`names::LOGPROBS_TOP_COMBINE_SHARDED`):
/// block `at` merges the ranks' lists of position `at` (`shard::PositionTop`,
/// their keys of global ids: the unsharded call's order), adds up their
/// counts, and writes each entry with the log-probability the rank that
/// holds its id sent; NaN and `-1` where a position is past its tokens or
/// the ranks' headers do not fit.
///
/// # Safety
/// Launched by the host's checked launcher after the exchange of the
/// messages `top::<_, true>` wrote: `recv` holds `shard_ranks >= 1` of
/// them; grid `(positions)`, `layout::TOP_SHARED_BYTES` of dynamic shared
/// memory; a top-n or rank asked (`p.ranks`).
#[unsafe(export_name = kernel_symbol!(LOGPROBS_TOP_COMBINE_SHARDED, f32, f32))]
pub unsafe extern "ptx-kernel" fn top_combine_sharded(p: LogprobsParams) {
    let (tid, at) = (gpu::thread_idx_x(), gpu::block_idx_x());
    if at >= p.positions {
        return; // block-uniform
    }
    let (ranks, len) = (p.shard_ranks, shard::tops_message_bytes(p.positions as usize));
    // SAFETY: block-uniform (the return above is); `recv` holds the ranks' messages (caller).
    let unfit = unsafe { block_unfit(p.recv, len, ranks) };
    // SAFETY: rank q < ranks: its message is inside `recv` (caller).
    let header = |q: u32| unsafe { *((p.recv + (q as usize * len) as u64) as *const Header) };
    // The rows' values are not read here: any dtype's view of them will do.
    // SAFETY: at < positions.
    if unfit || !matches!(unsafe { position::<f32>(&p, at, true) }, At::Emitted(_)) {
        if tid == 0 {
            // SAFETY: at < positions; one thread.
            unsafe { write_past(&p, at) };
        }
        return; // block-uniform
    }
    let first = shard::position_top_at(p.recv, at as usize);
    // SAFETY (both): every thread of the block; the ranks' records, a message
    // apart in `recv`, 16-byte aligned, written before this launch.
    let (list, larger) = unsafe { merge(first as *const u8, len, ranks, p.top_n) };
    let (list, larger) = unsafe { block_top(list, larger) };
    if tid >= WARP {
        return;
    }
    let key = if tid < list.n { list.key } else { 0 };
    // The entry's log-probability, from the record of the rank that holds its id.
    let mut lp = f32::NAN;
    if key != 0 {
        let id = top_key_id(key);
        for q in 0..ranks {
            let h = header(q);
            if h.holds(id) {
                // SAFETY: rank q's record of the position, inside `recv`.
                let record = unsafe { first.byte_add(q as usize * len) };
                for j in 0..MAX_TOP_LOGPROBS {
                    // SAFETY: j < MAX_TOP_LOGPROBS.
                    unsafe {
                        if (&raw const (*record).top.keys).cast::<u64>().add(j).read() == key {
                            lp = (&raw const (*record).logprobs).cast::<f32>().add(j).read();
                        }
                    }
                }
            }
        }
    }
    // SAFETY: at < positions; the outputs hold positions · top_n entries; warp 0.
    unsafe { write_top(&p, at, list.n, (key, lp), larger) };
}

// The partials share the verifier's stats region.
const _: () = assert!(core::mem::size_of::<LogprobsPartial>() <= core::mem::size_of::<specdec_core::scratch::Stats>());
const _: () = assert!(core::mem::size_of::<TopPartial>() == 176);
// The messages' layout, as the host sizes them (`shard` tests).
const _: () = assert!(core::mem::size_of::<PositionSums>() == 144);
const _: () = assert!(core::mem::size_of::<shard::PositionTop>() == 256);
