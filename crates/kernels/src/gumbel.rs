//! `gumbel_sample` (SPEC §3): one token per row by Gumbel-max (or argmax when
//! greedy), optionally storing the row's raw logits into the draft logits.
//!
//! One launch, `gumbel_sample_{logits}_{draft}` (`specdec_core::names`):
//! grid `(rows, chunks)`, `layout::BLOCK_THREADS` threads,
//! `layout::SHARED_BYTES` of dynamic shared memory ([`shared::Shared`]).
//! Block `(r, c)` reads ids `c·chunk .. (c+1)·chunk` of row `r`, each thread
//! four consecutive ids per step (one Philox call, one vector load when the
//! row is aligned), writes them to the draft logits, and reduces its best candidate.
//! With one chunk per row that block writes the row's outputs; otherwise it
//! publishes its candidate in `partials[r·chunks + c]` and the row's last
//! block ([`last_block`]) combines them and writes the token (`-1` for an
//! invalid row), the row's flags, and ORs them into the call's status word.
//!
//! The winner is the same for any chunking (total order, noise keyed by id),
//! and for any sharding: a sharded call (`p.send` set) reads the rank's ids
//! `p.shard.offset ..` of each row, keys noise by global id, and writes its
//! rows' results and header to its message instead of outputs (`crate::shard`).
//! A random row writing draft logits whose dtype rounds the logits samples
//! them as the draft logits store them (SPEC §3.3), so the verifier's `q` is the law drawn.
//!
//! A call with sampling filters (SPEC §7) runs `gumbel_threshold_{logits}_{draft}`
//! first, grid `(rows, threshold_chunks)`, the blocks of a row writing its
//! `τ` into `thresholds` (`crate::threshold`), then `gumbel_sample_filtered_{logits}_{draft}`,
//! this kernel with every sampled value outside the row's kept set at `-inf`
//! and rows of bad filter values flagged `INVALID_FILTER`. In a sharded
//! call with filters the threshold kernel's sharded entry,
//! `gumbel_threshold_sharded_{logits}_{draft}`, writes each rank's top-k list of
//! each filtered row into its round-1 message (`shard::TopList`), and after
//! that exchange `gumbel_merge_sharded` ([`gumbel_merge`]) writes the rows'
//! `τ` from every rank's lists, before the sampling kernel.
//!
//! Calls without draft logits may take `gumbel_sample_lean_{logits}_{logits}`
//! instead: the same in 64 registers, whose noise loop loads a batch's quads
//! two at a time, and which writes no draft logits (the host takes it for grids of
//! more than one wave). Calls of one wave of short chunks take
//! `gumbel_sample_small_{logits}_{draft}`, whose greedy loop reads one quad a
//! batch: less code, which a small call waits for, fetched cold.

use crate::block::{Partial, block_reduce};
use crate::fold::{block_floor, fold_greedy};
use crate::gpu::{self, WARP};
use crate::last_block;
use crate::load::{Load, any_nan, for_each_quad, for_each_quad_shared, widen};
use crate::merge::merge_lists;
use crate::row::{SlotState, chunk_range, write_token};
use crate::shared;
use crate::threshold::{chunk_threshold, filter_words, load_filter, mask, search_round};
use core::cell::Cell;
use specdec_core::argmax::{ArgMax, Floored};
use specdec_core::dtype::{Bf16, F16};
use specdec_core::filter::Filter;
use specdec_core::kernel_symbol;
use specdec_core::layout::GumbelParams;
use specdec_core::rng::Stream;
use specdec_core::sample::{NO_LANE, Sampler};
use specdec_core::scratch::FilterScratch;
use specdec_core::shard::{self, MAX_TOP_K, TopList};
use specdec_core::status::{INVALID, INVALID_COLUMN, INVALID_FILTER, NAN_LOGITS};

/// The row state plus its draft-logits column check.
///
/// # Safety
/// `row < p.rows` and `p` describes valid buffers (the host validated shapes).
#[inline(always)]
unsafe fn row_state(p: &GumbelParams, row: u32) -> (SlotState, u64, u32) {
    // SAFETY: slots and pos hold `rows` elements; the tables `num_slots` (host-checked).
    let (mut state, pos) = unsafe {
        let slot = *(p.slots as *const i32).add(row as usize);
        let state = SlotState::load(slot, p.temperature as *const f32, p.seed as *const u64, p.num_slots);
        (state, *(p.pos as *const u64).add(row as usize))
    };
    let mut column = p.draft_column;
    if p.draft_logits != 0 && state.slot >= 0 {
        if p.draft_columns != 0 {
            // SAFETY: draft_columns holds `rows` elements (host-checked).
            let c = unsafe { *(p.draft_columns as *const i32).add(row as usize) };
            column = c as u32;
        }
        if column >= p.draft_k {
            state.flags |= INVALID_COLUMN;
        }
    }
    (state, pos, column)
}

/// Row `row` of the logits.
///
/// # Safety
/// `row < p.rows`.
#[inline(always)]
unsafe fn logits_row<L>(p: &GumbelParams, row: u32) -> *const L {
    // SAFETY: the host checked (rows-1)·row_stride + vocab fits the buffer.
    unsafe { (p.logits as *const L).add(row as usize * p.row_stride as usize) }
}

/// `Q`: the quads a batch of the greedy loop; `FILTERED`: a call with
/// filters, after the threshold kernel.
///
/// # Safety
/// Launched as described in the module docs, with a validated `p`.
#[inline(always)]
unsafe fn gumbel_sample<L: Load, D: Load, const LEAN: bool, const Q: u32, const FILTERED: bool>(p: &GumbelParams) {
    let (row, chunk_idx, tid) = (gpu::block_idx_x(), gpu::block_idx_y(), gpu::thread_idx_x());
    if row >= p.rows || chunk_idx >= p.chunks {
        return; // whole block: no barrier is skipped by part of it
    }
    // The row state is a chain of dependent loads; meanwhile bring this
    // thread's first quad into L2 (at small batch it is the only one).
    let first = chunk_idx * p.chunk + 4 * tid;
    if first < p.vocab {
        // SAFETY: row < rows and first < vocab: inside the row (host-checked).
        unsafe { gpu::prefetch_l2(logits_row::<L>(p, row).add(first as usize)) };
    }
    // SAFETY: row < rows.
    let (mut state, pos, column) = unsafe { row_state(p, row) };
    // SAFETY: thresholds holds `rows` entries, written by the threshold kernel.
    let tau = if FILTERED { unsafe { *(p.thresholds as *const f32).add(row as usize) } } else { f32::NEG_INFINITY };
    if tau.is_nan() {
        state.flags |= INVALID_FILTER;
    }
    // A sharded call's message: its header once, each row's digest.
    let digest = if p.send != 0 {
        if row == 0 && chunk_idx == 0 && tid == 0 {
            // SAFETY: send holds a message of `rows` rows (workspace, host-sized).
            unsafe { (p.send as *mut shard::Header).write(p.shard) };
        }
        // SAFETY: a valid state's slot is below num_slots, each table's length.
        let filters = if state.is_valid() && state.slot >= 0 { unsafe { filter_words(&p.filters, state.slot as usize) } } else { [0; 3] };
        shard::row_digest(state.slot, state.temperature, state.seed, pos, column, filters)
    } else {
        0
    };
    let partial = if state.is_valid() {
        // SAFETY: forwarded (valid state and column, block-uniform call).
        unsafe { fold_chunk::<L, D, LEAN, Q, FILTERED>(p, row, chunk_idx, state, pos, column, tau) }
    } else {
        Partial::new(ArgMax::IDENTITY, state.flags) // block-uniform
    };
    // Warp 0 holds the block's result.
    if tid < WARP {
        // SAFETY: all of warp 0, once per block.
        unsafe { complete(p, row, chunk_idx, partial, digest) };
    }
}

/// This block's chunk of the row, reduced over the block (valid in warp 0);
/// greedy rows `Q` quads a batch; with `FILTERED`, a random row's values
/// masked to `{x >= tau}` (`crate::threshold::mask`).
///
/// # Safety
/// Called by every thread of the block; `state` is valid and `column` checked.
#[inline(always)]
unsafe fn fold_chunk<L: Load, D: Load, const LEAN: bool, const Q: u32, const FILTERED: bool>(
    p: &GumbelParams,
    row: u32,
    chunk_idx: u32,
    state: SlotState,
    pos: u64,
    column: u32,
    tau: f32,
) -> Partial {
    let tid = gpu::thread_idx_x();
    let (start, end) = chunk_range(p.vocab, p.chunk, chunk_idx);
    // SAFETY: row < rows.
    let logits = unsafe { logits_row::<L>(p, row) };
    let draft_row = if !LEAN && p.draft_logits != 0 && state.slot >= 0 {
        let offset = state.slot as usize * p.draft_stride0 as usize + column as usize * p.draft_stride1 as usize;
        // SAFETY: slot < num_slots and column < draft_k were checked; the host checked the extent.
        unsafe { (p.draft_logits as *mut D).add(offset) }
    } else {
        core::ptr::null_mut()
    };
    let stream = if p.drafting != 0 { Stream::Draft } else { Stream::Target };
    // Ids are global: noise is keyed by them and the argmax rule compares
    // them; loads and draft-logits stores take the rank's own (`x`).
    let base = p.shard.offset;
    let sampler = Sampler::new(state.temperature, state.seed, pos, stream);

    // The values a random row samples: the logits as the draft logits store
    // them where their dtype rounds them (SPEC §3.3: the verifier's `q` is
    // then the law sampled). A padding row (no draft row) is greedy, and the
    // host launches a rounding pair only with draft logits.
    let stored = L::DTYPE.rounds_into(D::DTYPE) && !draft_row.is_null();
    let as_stored = #[inline(always)]
    |raw: [L; 4]| {
        let v = widen(raw);
        if stored { v.map(D::rounded) } else { v }
    };
    // Those values masked to the row's kept set (NaN are flagged before).
    let sampled = #[inline(always)]
    |v: [f32; 4]| if FILTERED { mask(v, tau, &sampler) } else { v };

    let mut best = ArgMax::IDENTITY;
    let mut nan = false;
    let none: *const L = core::ptr::null();
    // Stores the quad's raw logits into the draft row, if there is one.
    let store = #[inline(always)]
    |x: u32, raw: [L; 4], n: u32| {
        if !draft_row.is_null() {
            // Constant lane indices keep `raw` in registers.
            let lane = |i: usize| {
                if (i as u32) < n {
                    // SAFETY: id < vocab <= draft-logits width (the host's "narrower" check).
                    unsafe { draft_row.add(x as usize + i).write(D::convert_from(raw[i])) };
                }
            };
            lane(0);
            lane(1);
            lane(2);
            lane(3);
        }
    };
    // Two loops, not one with a branch per quad: registers are allocated for
    // the loop that needs the most, and the greedy loop keeps twice the loads
    // in flight (pipelined) while the random one holds Philox state instead.
    // SAFETY (both): the row holds `end <= vocab` elements; start % 4 == 0.
    if sampler.greedy {
        unsafe {
            for_each_quad::<true, Q, _, _>(logits, none, start, end, tid, |x, raw, _, n| {
                store(x, raw, n);
                best = fold_greedy(&sampler, best, base + x, widen(raw), n, &mut nan);
            })
        };
    } else {
        // The block's best value after each batch floors every lane's (see
        // Floored): a lane then rules ids out against the best of the
        // block's ids so far rather than its own, and the warp evaluates
        // noise far less often for a lane that could not.
        let cell = Cell::new(Floored::EMPTY);
        // The lane a quad's lead folded (for_each_quad_shared), which its fold skips.
        let led = Cell::new(NO_LANE);
        // SAFETY: the launch has layout::SHARED_BYTES, the walk below its one user.
        let walk = unsafe { shared::walk() };
        unsafe {
            for_each_quad_shared::<4, LEAN, true, true, _>(
                logits,
                start,
                end,
                walk,
                |x, raw, n| {
                    let c = cell.get();
                    let (folded, lead) = sampler.fold_quad_lead(c.probe(), base + x, sampled(as_stored(raw)), n);
                    cell.set(c.settle(folded));
                    led.set(lead);
                },
                |x, raw, n| {
                    store(x, raw, n);
                    let vals = as_stored(raw);
                    nan |= any_nan(vals, n);
                    let vals = sampled(vals);
                    let c = cell.get();
                    let skip = led.replace(NO_LANE);
                    cell.set(c.settle(sampler.fold_quad_skipping(c.probe(), base + x, vals, n, skip)));
                },
                // SAFETY: for_each_quad_shared calls this in all lanes of the
                // warp together; the walk's shared words are the floor's alone.
                || cell.set(block_floor(cell.get(), &raw mut (*walk).best[0])),
            )
        };
        best = cell.get().own;
    }
    // A valid state has no flags: row_state raises only INVALID ones.
    let flags = if nan { NAN_LOGITS } else { 0 };
    // SAFETY: every thread of the block reaches this reduction (caller).
    unsafe { block_reduce(Partial::new(best, flags)) }
}

/// Warp 0 of block `(row, chunk_idx)` with the block's `partial`: writes the
/// row's outputs if the row is one chunk, else publishes the partial, and the
/// row's last block combines them all and writes the outputs; in a sharded
/// call, the row's part of the message (with the row's `digest`) instead.
///
/// # Safety
/// All 32 lanes of warp 0 call this together, once per block; `row < rows`.
#[inline(always)]
unsafe fn complete(p: &GumbelParams, row: u32, chunk_idx: u32, partial: Partial, digest: u32) {
    // SAFETY: all of warp 0, once per block; partials holds rows × chunks
    // entries (workspace sized by the host), counters `rows`.
    let Some(acc) = (unsafe {
        last_block::combine(
            (p.partials as *mut Partial).add(row as usize * p.chunks as usize),
            chunk_idx,
            p.chunks,
            (p.counters as *mut u32).add(row as usize),
            partial,
        )
    }) else {
        return;
    };
    if gpu::thread_idx_x() != 0 {
        return;
    }
    if p.send != 0 {
        let mine = shard::Row { best: acc.best, flags: acc.flags, digest };
        // SAFETY: send holds a header and `rows` rows (workspace, host-sized).
        unsafe { shard::row_at(p.send, row as usize).write(mine) };
        return;
    }
    let token = if acc.flags & INVALID != 0 { -1 } else { acc.best.index as i64 };
    // SAFETY: tokens holds `rows` elements of the flagged width; row_status
    // (when given) `rows` u32; status one u32 (host-allocated).
    unsafe {
        write_token(p.tokens, p.tokens_i64, row as usize, token);
        if p.row_status != 0 {
            (p.row_status as *mut u32).add(row as usize).write(acc.flags);
        }
        if acc.flags != 0 {
            gpu::atomic_or(p.status as *mut u32, acc.flags);
        }
    }
}

/// The threshold kernel (see module docs), block `(row, c)`: chunk `c` of
/// row `row` for its `τ` in `thresholds`, written by the row's last block
/// (`crate::threshold::chunk_threshold`); for a row not filtered block 0
/// writes the value [`row_filter`] gives. With `SHARDED` (a sharded call's),
/// the rank's own top-k threshold of its ids, and the row's `shard::TopList`
/// in the rank's round-1 message. The values searched are those the row samples (rounded to
/// the draft logits' dtype where they store a rounding one: SPEC §3.3).
/// With `SEARCH`, the search kernel: a round of the top-p search of the
/// rows the threshold kernel left to all their blocks
/// (`crate::threshold::search_round`), the `τ` written by the last round.
///
/// # Safety
/// Launched by the host's validated launcher, grid `(rows,
/// threshold_chunks)`, with `layout::THRESHOLD_SHARED_BYTES` of shared memory
/// (with `SEARCH`, after the threshold kernel, once a round).
#[inline(always)]
unsafe fn gumbel_threshold<L: Load, D: Load, const SEARCH: bool, const SHARDED: bool>(p: &GumbelParams) {
    let (row, c) = (gpu::block_idx_x(), gpu::block_idx_y());
    if row >= p.rows || c >= p.threshold_chunks {
        return; // whole block
    }
    // SAFETY: row < rows.
    let (state, _, _) = unsafe { row_state(p, row) };
    // SAFETY: a state of the call's.
    let filter = unsafe { row_filter(p, &state) };
    let tau = match filter {
        Err(tau) if c == 0 && !SEARCH => Some(tau),
        Err(_) => None,
        Ok(f) => {
            let sampler = Sampler::new(state.temperature, 0, 0, Stream::Target);
            let stored = L::DTYPE.rounds_into(D::DTYPE) && p.draft_logits != 0;
            let value = |v: f32| sampler.scaled(if stored { D::rounded(v) } else { v });
            // Past the workspace's entries only where `threshold_chunks = 1` (never read).
            let scratch = (p.filter_scratch as *mut FilterScratch).wrapping_add(row as usize);
            let split = (p.threshold_chunk, c, p.threshold_chunks);
            // SAFETY: every thread of the block is here (the state is
            // block-uniform), and each block of the row once; the row holds
            // `vocab` elements.
            unsafe {
                if SEARCH {
                    search_round(logits_row::<L>(p, row), p.vocab, value, scratch, split)
                } else {
                    // A rank of a sharded call finds its own top-k list of the
                    // row, whose ranks' lists the merge kernel's filter then
                    // runs on (`gumbel_merge`).
                    let (f, ids, list) = if SHARDED {
                        let top_k = Filter { top_k: f.top_k, ..Filter::OFF };
                        (top_k, p.shard.vocab, shard::row_list_at(p.send, row as usize))
                    } else {
                        (f, p.vocab, core::ptr::null_mut())
                    };
                    let row = logits_row::<L>(p, row);
                    chunk_threshold(row, (p.vocab, ids), value, f, scratch, split, (p.threshold_search != 0, list))
                }
            }
        }
    };
    if let Some(tau) = tau
        && gpu::thread_idx_x() == 0
    {
        // SAFETY: thresholds holds `rows` entries (workspace, host-sized).
        unsafe { (p.thresholds as *mut f32).add(row as usize).write(tau) };
    }
}

/// The filter of a row of `state` (its row's, as [`row_state`] read it), or
/// the `τ` of a row that is not filtered: `-inf` where it is sampled whole
/// (padding, greedy, filters off, or a bad slot, temperature or column,
/// which the sampling kernel flags), NaN where the slot's filter values are
/// bad (SPEC §5: checked for greedy slots too, as the CPU twin does) or, in
/// a sharded call, a sampling row's filter has no top-k of at most
/// `shard::MAX_TOP_K` (its lists could not hold the kept set: REFERENCE §9).
///
/// # Safety
/// `state` was read by [`row_state`] from `p`'s buffers.
#[inline(always)]
unsafe fn row_filter(p: &GumbelParams, state: &SlotState) -> Result<Filter, f32> {
    if !state.is_valid() || state.slot < 0 {
        return Err(f32::NEG_INFINITY);
    }
    let vocab = if p.send != 0 { p.shard.vocab } else { p.vocab } as usize;
    // SAFETY: 0 <= slot < num_slots (a valid state).
    match unsafe { load_filter(&p.filters, state.slot as usize) } {
        None => Err(f32::NAN),
        Some(f) if state.greedy() || f.is_off(vocab) => Err(f32::NEG_INFINITY),
        Some(f) if p.send != 0 && !(f.has_top_k(vocab) && f.top_k <= MAX_TOP_K) => Err(f32::NAN),
        Some(f) => Ok(f),
    }
}

/// The filtered rows of a sharded call after round 1
/// (`names::GUMBEL_MERGE_SHARDED`): block `row` takes the row where it is
/// filtered ([`row_filter`]: every rank finds the same rows) and writes its
/// `τ` into `thresholds`, where the sampling kernel reads it, from the
/// ranks' `shard::TopList`s of the row (`crate::merge::merge_lists`: the
/// unsharded call's `τ`); other rows keep the threshold kernel's.
///
/// # Safety
/// Launched by the host's checked launcher after round 1 of a call with
/// filters, with its parameters: `recv` holds `shard_ranks` round-1
/// messages of `rows` lists; grid `(rows)`, `shard::merge_entries(shard_ranks)`
/// `filter::Group`s of dynamic shared memory.
#[unsafe(export_name = kernel_symbol!(GUMBEL_MERGE_SHARDED, f32, f32))]
pub unsafe extern "ptx-kernel" fn gumbel_merge(p: GumbelParams) {
    let row = gpu::block_idx_x();
    if row >= p.rows {
        return;
    }
    // SAFETY (both): row < rows; a state of the call's.
    let (state, _, _) = unsafe { row_state(&p, row) };
    let Ok(filter) = (unsafe { row_filter(&p, &state) }) else {
        return; // block-uniform: the threshold kernel's `τ` stands
    };
    let len = shard::lists_message_bytes(p.rows as usize) as u64;
    let list = |q: u32| shard::row_list_at(p.recv + q as u64 * len, row as usize) as *const TopList;
    // SAFETY: every thread of the block is here; rank q's list is inside
    // `recv`, thresholds holds `rows` entries, the shared memory as
    // `merge_lists` needs it (caller).
    unsafe {
        let tau_at = (p.thresholds as *mut f32).add(row as usize);
        merge_lists(p.shard_ranks, list, filter, p.shard.vocab as usize, tau_at);
    }
}

/// `gumbel_sample`'s six entry points (plain, filtered, threshold, sharded threshold, threshold search, small) for each (logits, draft logits) dtype
/// pair, in a module per pair, exported under their `names` symbols.
macro_rules! gumbel_kernels {
    ($($pair:ident: $l:ident => $d:ident;)*) => {$(
        #[doc = concat!(
            "`gumbel_sample`'s kernels for ", stringify!($l), " logits and ", stringify!($d), " draft logits."
        )]
        pub mod $pair {
            use super::*;

            /// `gumbel_sample` (`names::GUMBEL_SAMPLE`; see module docs).
            ///
            /// # Safety
            /// Launched by the host's validated launcher.
            #[unsafe(export_name = kernel_symbol!(GUMBEL_SAMPLE, $l, $d))]
            pub unsafe extern "ptx-kernel" fn plain(p: GumbelParams) {
                // SAFETY: the launcher validated `p` and the launch shape.
                unsafe { gumbel_sample::<$l, $d, false, 4, false>(&p) }
            }

            /// The same for a call with filters, after `threshold`
            /// (`names::GUMBEL_SAMPLE_FILTERED`; see module docs).
            ///
            /// # Safety
            /// Launched by the host's validated launcher after `threshold` on the same stream.
            #[unsafe(export_name = kernel_symbol!(GUMBEL_SAMPLE_FILTERED, $l, $d))]
            pub unsafe extern "ptx-kernel" fn filtered(p: GumbelParams) {
                // SAFETY: the launcher validated `p` and the launch shape.
                unsafe { gumbel_sample::<$l, $d, false, 4, true>(&p) }
            }

            /// The rows' thresholds of a call with filters
            /// (`names::GUMBEL_THRESHOLD`; see module docs).
            ///
            /// # Safety
            /// Launched by the host's validated launcher, grid `(rows)`, with
            /// `layout::THRESHOLD_SHARED_BYTES` of shared memory.
            #[unsafe(export_name = kernel_symbol!(GUMBEL_THRESHOLD, $l, $d))]
            pub unsafe extern "ptx-kernel" fn threshold(p: GumbelParams) {
                // SAFETY: the launcher validated `p` and the launch shape.
                unsafe { gumbel_threshold::<$l, $d, false, false>(&p) }
            }

            /// The rows' thresholds and top-k lists of a sharded call with
            /// filters (`names::GUMBEL_THRESHOLD_SHARDED`; see module docs).
            ///
            /// # Safety
            /// As `threshold`, in a sharded call: `send` holds the rank's
            /// round-1 message of `rows` lists.
            #[unsafe(export_name = kernel_symbol!(GUMBEL_THRESHOLD_SHARDED, $l, $d))]
            pub unsafe extern "ptx-kernel" fn threshold_sharded(p: GumbelParams) {
                // SAFETY: the launcher validated `p` and the launch shape.
                unsafe { gumbel_threshold::<$l, $d, false, true>(&p) }
            }

            /// A round of the top-p search of the rows `threshold` left to
            /// all their blocks (`names::GUMBEL_THRESHOLD_SEARCH`).
            ///
            /// # Safety
            /// Launched by the host's validated launcher after `threshold`,
            /// with its grid and shared memory, once a round.
            #[unsafe(export_name = kernel_symbol!(GUMBEL_THRESHOLD_SEARCH, $l, $d))]
            pub unsafe extern "ptx-kernel" fn threshold_search(p: GumbelParams) {
                // SAFETY: the launcher validated `p` and the launch shape.
                unsafe { gumbel_threshold::<$l, $d, true, false>(&p) }
            }

            /// The same, its greedy loop one quad a batch
            /// (`names::GUMBEL_SAMPLE_SMALL`): the host's pick for chunks of a
            /// few tiles (see module docs).
            ///
            /// # Safety
            /// Launched by the host's validated launcher.
            #[unsafe(export_name = kernel_symbol!(GUMBEL_SAMPLE_SMALL, $l, $d))]
            pub unsafe extern "ptx-kernel" fn small(p: GumbelParams) {
                // SAFETY: the launcher validated `p` and the launch shape.
                unsafe { gumbel_sample::<$l, $d, false, 1, false>(&p) }
            }
        }
    )*};
}

/// `gumbel_sample` without draft logits for these logits
/// (`names::GUMBEL_SAMPLE_LEAN`, 64 registers), its noise loop loading two
/// quads at a time: the host's pick for a grid of more than one wave (see
/// module docs). Exported for the pair of the logits' dtype twice.
macro_rules! gumbel_lean_kernels {
    ($($name:ident: $l:ident;)*) => {$(
        /// `gumbel_sample` without draft logits, in 64 registers (see the macro).
        ///
        /// # Safety
        /// Launched by the host's validated launcher, for a call without
        /// draft logits (it writes none).
        #[unsafe(export_name = kernel_symbol!(GUMBEL_SAMPLE_LEAN, $l, $l))]
        pub unsafe extern "ptx-kernel" fn $name(p: GumbelParams) {
            // SAFETY: the launcher validated `p` and the launch shape.
            unsafe { gumbel_sample::<$l, $l, true, 4, false>(&p) }
        }
    )*};
}

for_each_dtype_pair!(gumbel_kernels);

gumbel_lean_kernels! {
    lean_f32: f32;
    lean_bf16: Bf16;
    lean_f16: F16;
}
