//! The caller-owned, reusable device scratch of the CUDA backend.

use crate::error::{Error, Result};
use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtrMut, DriverError};
use specdec_core::layout::{MAX_SYNTHETIC_DRAFTS, SUMMARY_CHUNKS, THRESHOLD_CHUNK, TILE};
use specdec_core::scratch::{
    BlockRow, BlockState, FilterScratch, LogprobsLse, LogprobsPartial, PARTIAL_BYTES, ResampleJob, Stats, TopPartial,
};
use specdec_core::shard;
use std::mem::size_of;
use std::sync::Arc;

/// Bytes of one row-chunk statistic of the verifier's pass 1.
const STATS_BYTES: usize = size_of::<Stats>();
// The log-probability kernels' partials live in the stats region (`Regions`).
const _: () = assert!(size_of::<LogprobsPartial>() <= STATS_BYTES);
/// Bytes of one resample job.
const JOB_BYTES: usize = size_of::<ResampleJob>();
/// Bytes of a position's log-sum-exps (the log-probability kernels).
const LSE_BYTES: usize = size_of::<LogprobsLse>();
/// Bytes of one block's top-n candidates (the log-probability kernels).
const TOP_BYTES: usize = size_of::<TopPartial>();
/// Bytes of a synthetic-acceptance call's rates.
const RATES_BYTES: usize = MAX_SYNTHETIC_DRAFTS * size_of::<f32>();
/// Bytes of a row's filter thresholds: the target's `τ` and the draft's (f32 each).
const THRESHOLD_BYTES: usize = 2 * size_of::<f32>();
/// The most filtered rows (threshold entries: a `rejection_sample` call's
/// target and draft rows, a `gumbel_sample` call's rows) a workspace keeps a
/// threshold kernel's scratch for (20,032 bytes each: 82 MB): a call with
/// more splits its rows one block each, which needs none (and is slower).
const FILTER_ENTRIES: usize = 4096;

/// Device scratch for calls of up to `max_rows` rows (`gumbel_sample`) or
/// `requests · (max_drafts + 1)` rows (`rejection_sample`): per-block partial
/// results, O(rows + SMs) entries, never rows × V; a filtered row's two
/// thresholds (8 bytes a row) and, for up to `FILTER_ENTRIES` of them, the
/// threshold kernel's scratch (its blocks' summaries and candidates); one
/// arrival counter per row
/// (zero between calls: the kernels reset what they count); and the status
/// word the kernels OR their flags into. Create it once; calls then allocate
/// nothing. It is used on the stream it was made on only
/// ([`Error::WorkspaceStream`] otherwise): its calls run in that stream's
/// order, which is all the ordering its buffers need. A workspace for
/// sharded calls ([`Cuda::sharded_workspace`](crate::Cuda::sharded_workspace))
/// also holds a rank's message and the messages of up to `ranks` ranks.
pub struct Workspace {
    scratch: CudaSlice<u8>,
    /// A sharded call's message, then every rank's (`ranks` of them), and
    /// its device address (taken once, as `addresses`); none for a workspace
    /// of unsharded calls.
    messages: Option<(CudaSlice<u8>, u64)>,
    ranks: usize,
    /// Read through `addresses` only; held for its memory.
    _counters: CudaSlice<u32>,
    status: CudaSlice<u32>,
    /// The three buffers' device addresses, taken once ([`Workspace::on`]).
    addresses: Addresses,
    sm_count: u32,
    max_rows: usize,
    /// Where each kernel's scratch lies in `scratch`.
    regions: Regions,
}

/// Device addresses of a workspace's buffers.
#[derive(Clone, Copy)]
pub(crate) struct Addresses {
    pub scratch: u64,
    pub counters: u64,
    /// `max_rows` more counters, for pass 1's rows while `counters` counts its requests.
    pub row_counters: u64,
    pub status: u64,
}

/// How a call's rows are split over blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// Elements per block, a multiple of `TILE`.
    pub chunk: u32,
    /// Blocks per row.
    pub chunks: u32,
}

/// The most chunks a row may take whatever its call's rows: the scratch
/// holds `1 + EXTRA_CHUNKS` entries per row ([`entries`]).
pub(crate) const MOST_CHUNKS: u32 = 1 + EXTRA_CHUNKS as u32;

impl Split {
    /// This split of rows of `vocab >= 1` ids, or one of at least `chunks
    /// <= MOST_CHUNKS` chunks a row where it has fewer (and the row that
    /// many tiles): within the scratch for any number of rows.
    pub(crate) fn at_least(self, chunks: u32, vocab: usize) -> Split {
        debug_assert!(chunks <= MOST_CHUNKS);
        if self.chunks >= chunks {
            return self;
        }
        let chunk = vocab.div_ceil(TILE as usize).div_ceil(chunks as usize) * TILE as usize;
        Split { chunk: chunk as u32, chunks: vocab.div_ceil(chunk) as u32 }
    }
}

/// A sharded call's messages in a workspace: for `units` rows
/// (`gumbel_sample`) or (request, row) pairs (`rejection_sample`), at most
/// its `max_rows`; `slot` bytes for the rank's own, its longest round's
/// message; then every rank's, `ranks` of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Messages {
    pub units: usize,
    pub slot: usize,
    pub ranks: usize,
}

/// The bytes of a rank's own message in a workspace of `max_rows`: its
/// longest, a filtered `rejection_sample`'s first round at `max_rows` pairs,
/// with room for a last round's padding before two log-probability rounds
/// (`shard::last_round_bytes`: a call of no rows needs it) (none: too large for memory).
fn message_slot(max_rows: usize) -> Option<usize> {
    let pair = core::mem::size_of::<shard::PairRecord>() + 2 * core::mem::size_of::<shard::TopList>();
    max_rows.checked_mul(pair)?.checked_add(shard::last_round_bytes(core::mem::size_of::<shard::Header>(), 2))
}

impl Workspace {
    /// A workspace for calls of up to `max_rows` rows, sharded over up to
    /// `ranks` ranks (0: unsharded calls only).
    pub(crate) fn new(stream: &Arc<CudaStream>, sm_count: u32, max_rows: usize, ranks: usize) -> Result<Self> {
        let too_large = || Error::OutOfMemory { bytes: usize::MAX, max_rows };
        let entries = entries(sm_count, max_rows).ok_or_else(too_large)?;
        let regions = Regions::of(entries, max_rows).ok_or_else(too_large)?;
        let bytes = usize::try_from(regions.end).map_err(|_| too_large())?;
        let out_of_memory = |e: DriverError| match e.0 {
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { bytes, max_rows },
            _ => Error::Driver(e),
        };
        let mut scratch = stream.alloc_zeros::<u8>(bytes).map_err(out_of_memory)?;
        // Two regions of `max_rows`: a launch's per-row or per-request counters, then pass 1's per-row ones.
        let mut counters = stream.alloc_zeros::<u32>(2 * max_rows.max(1)).map_err(out_of_memory)?;
        let mut status = stream.alloc_zeros::<u32>(1).map_err(out_of_memory)?;
        let messages = match ranks {
            0 => None,
            _ => {
                let slot = message_slot(max_rows).ok_or_else(too_large)?;
                let bytes = ranks.checked_add(1).and_then(|n| n.checked_mul(slot));
                let bytes = bytes.ok_or_else(too_large)?;
                let mut m = stream.alloc_zeros::<u8>(bytes).map_err(out_of_memory)?;
                let address = m.device_ptr_mut(stream).0;
                Some((m, address))
            }
        };
        let counters_at = counters.device_ptr_mut(stream).0;
        let addresses = Addresses {
            scratch: scratch.device_ptr_mut(stream).0,
            counters: counters_at,
            row_counters: counters_at + 4 * max_rows.max(1) as u64,
            status: status.device_ptr_mut(stream).0,
        };
        Ok(Workspace { scratch, messages, ranks, _counters: counters, status, addresses, sm_count, max_rows, regions })
    }

    /// The device addresses of a sharded call's messages (`m`): the rank's
    /// own at the buffer's start, every rank's `m.slot` bytes on: 16-byte
    /// aligned.
    ///
    /// # Errors
    /// [`Error::WorkspaceTooSmall`] past `max_rows` rows (or pairs),
    /// [`Error::WorkspaceRanks`] past the ranks the workspace was made for.
    pub(crate) fn message_addresses(&self, m: Messages) -> Result<(u64, u64)> {
        if m.units > self.max_rows {
            return Err(Error::WorkspaceTooSmall { needed: m.units, capacity: self.max_rows });
        }
        match &self.messages {
            Some((_, base)) if m.ranks <= self.ranks => Ok((*base, base + m.slot as u64)),
            _ => Err(Error::WorkspaceRanks { needed: m.ranks, capacity: self.ranks }),
        }
    }

    /// Runs `gather` on a round's buffers of a sharded call's messages `m`,
    /// as [`Workspace::message_addresses`] places them: the rank's message
    /// of `len <= m.slot` bytes, zeroed first where `failed` (a failed
    /// rank's: its header's `ok`, or the round's word, is 0), and every
    /// rank's; on empty buffers where the workspace holds none for `m`, so
    /// that the exchange still runs (and fails on every rank, as lengths differ).
    pub(crate) fn exchange_messages(
        &mut self,
        m: Messages,
        len: usize,
        failed: bool,
        gather: impl FnOnce(CudaView<'_, u8>, CudaViewMut<'_, u8>) -> Result<()>,
    ) -> Result<()> {
        let fits = self.message_addresses(m).is_ok() && len <= m.slot;
        match &mut self.messages {
            Some((buffer, _)) if fits => {
                let stream = buffer.stream().clone();
                let (mut own, mut rest) = buffer.split_at_mut(m.slot);
                let (mut send, _) = own.split_at_mut(len);
                // Gathered even where the zeroing failed: no rank may wait for this one.
                let zeroed = if failed { stream.memset_zeros(&mut send) } else { Ok(()) };
                let (recv, _) = rest.split_at_mut(m.ranks * len);
                let gathered = gather(send.as_view(), recv);
                zeroed?;
                gathered
            }
            _ => {
                let (send, mut rest) = self.scratch.split_at_mut(0);
                let (recv, _) = rest.split_at_mut(0);
                gather(send.as_view(), recv)
            }
        }
    }

    /// The buffers' device addresses, for a call enqueued on `stream`, which
    /// must be the workspace's own. Taken once, not as a view per call: with
    /// cudarc's event tracking on (its default once a context has a stream
    /// of its own), each view costs two event waits and an event record, 9
    /// driver calls a call for these three, which stream order makes moot.
    /// The addresses stay valid while `self` lives; its buffers are freed in
    /// their stream's order (cudarc's `cuMemFreeAsync` on that stream), so
    /// after every call enqueued there.
    ///
    /// # Errors
    /// [`Error::WorkspaceContext`] for a stream of another context,
    /// [`Error::WorkspaceStream`] for another stream of the same one.
    pub(crate) fn on(&self, stream: &CudaStream) -> Result<Addresses> {
        let own = self.scratch.stream();
        if own.context().cu_ctx() != stream.context().cu_ctx() {
            return Err(Error::WorkspaceContext);
        }
        if own.cu_stream() != stream.cu_stream() {
            return Err(Error::WorkspaceStream);
        }
        Ok(self.addresses)
    }

    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Reads and clears the status word: the OR of the
    /// [`status`](crate::status) flags raised since the last call of this.
    /// Synchronises with the workspace's stream (the only method that does).
    pub fn take_status(&mut self) -> Result<u32> {
        let stream = self.status.stream().clone();
        let word = stream.clone_dtoh(&self.status)?;
        stream.memset_zeros(&mut self.status)?;
        Ok(word[0])
    }

    /// How rows of `vocab` ids are split over the blocks of a kernel that
    /// keeps `blocks_per_sm` of them on each SM, for a call over `rows` rows:
    /// enough blocks to fill the GPU at small batch, one block per row at
    /// large batch; where that takes one to two waves, the chunks that fill
    /// them best ([`balance_waves`]). `rows · chunks <= target_blocks +
    /// (1 + EXTRA_CHUNKS)·rows` always holds, which is what the scratch
    /// regions are sized for ([`entries`]).
    pub(crate) fn split(&self, rows: usize, vocab: usize, blocks_per_sm: u32, spread: Spread) -> Result<Split> {
        if rows > self.max_rows {
            return Err(Error::WorkspaceTooSmall { needed: rows, capacity: self.max_rows });
        }
        Ok(split(self.sm_count, rows, vocab, blocks_per_sm, spread))
    }

    /// Whether a call over `rows` rows split as `split`, by a kernel that
    /// keeps `blocks_per_sm` blocks on each SM, should rather take that
    /// kernel's lean variant (64 registers, 4 blocks per SM): where its
    /// blocks take more than one wave. The lean variants lose at small
    /// batch, where blocks are few and each one's speed counts, and gain
    /// where more blocks in flight hide memory latency (measured:
    /// benches/results/2026-12-02-design-measurements.md).
    pub(crate) fn lean(&self, rows: usize, split: Split, blocks_per_sm: u32) -> bool {
        !one_wave(self.sm_count, rows, split, blocks_per_sm)
    }

    /// Whether a call over `rows` rows split as `split`, by a kernel that
    /// keeps `blocks_per_sm` blocks on each SM, should rather take that
    /// kernel's small variant, whose loops read one quad a batch where the
    /// other's read up to four: where its blocks fit one wave and its chunks
    /// are at most [`SMALL_CHUNK_TILES`] tiles, a few batches of four quads a
    /// thread, so that the unrolled batch buys little in flight, while its
    /// code is up to twice the size (fetched cold after a flushed L2:
    /// benches/results/2026-12-02-nvidia-h200-latency.md). The bound keeps
    /// the calls each small variant measured faster with and leaves those of
    /// longer chunks, which it measured slower with
    /// (benches/results/2026-11-30-nvidia-h200-small-kernels-ab.md; figures
    /// by variant: benches/results/2026-12-02-design-measurements.md).
    pub(crate) fn small(&self, rows: usize, split: Split, blocks_per_sm: u32) -> bool {
        small(self.sm_count, rows, split, blocks_per_sm)
    }

    /// Byte offsets of the rejection regions (stats, jobs, partials) in `scratch`.
    pub(crate) fn rejection_regions(&self) -> (u64, u64, u64) {
        (self.regions.stats, self.regions.jobs, self.regions.partials)
    }

    /// Byte offset in `scratch` of the filters' thresholds (both operations' `thresholds`).
    pub(crate) fn thresholds_region(&self) -> u64 {
        self.regions.thresholds
    }

    /// Byte offset in `scratch` of the threshold kernel's [`FilterScratch`]
    /// entries (both operations' `filter_scratch`).
    pub(crate) fn filter_scratch_region(&self) -> u64 {
        self.regions.filter_scratch
    }

    /// Byte offsets in `scratch` of the log-probability kernels' regions:
    /// their partials (the stats region), log-sum-exps and top partials.
    pub(crate) fn logprobs_regions(&self) -> (u64, u64, u64) {
        (self.regions.stats, self.regions.lse, self.regions.top)
    }

    /// Byte offset in `scratch` of a synthetic-acceptance call's rates.
    pub(crate) fn rates_region(&self) -> u64 {
        self.regions.rates
    }

    /// Byte offsets in `scratch` of block verification's notes and request
    /// states, which the kernels keep zero between calls, and of a sharded
    /// call's pass-2 jobs a pair.
    pub(crate) fn block_regions(&self) -> (u64, u64, u64) {
        (self.regions.block_rows, self.regions.block_states, self.regions.pair_jobs)
    }

    /// The threshold kernel's scratch entries: a call of more filtered rows
    /// (threshold entries) takes [`threshold_split`]'s one block a row.
    pub(crate) fn filter_entries(&self) -> usize {
        filter_entries(self.max_rows)
    }
}

/// [`Workspace::filter_entries`] of a workspace of `max_rows` rows.
fn filter_entries(max_rows: usize) -> usize {
    max_rows.saturating_mul(2).min(FILTER_ENTRIES)
}

/// Byte offsets in a workspace's `scratch` of each region, one after
/// another, and the end of the last (the scratch's size). With `entries`
/// stats and partials entries ([`entries`]) and `max_rows` rows:
///
/// - `stats`: `entries` pass-1 [`Stats`] (also the log-probability kernels'
///   partials, which no kernel of theirs needs beside a call's own passes);
/// - `partials`: `entries` partials of `PARTIAL_BYTES` (gumbel_sample's, the
///   resample's, block verification's masses). Both 16-byte aligned: the
///   kernels gather them 16 bytes a load; the jobs, whose size is not a
///   multiple of 16, come after them;
/// - `jobs`, `pair_jobs`: `max_rows` [`ResampleJob`]s each (a request's,
///   and in a sharded call with block verification a (request, row) pair's);
/// - `thresholds`: `2 · max_rows` f32, a filtered call's `τ` of each row;
/// - `filter_scratch`: [`filter_entries`] [`FilterScratch`]es, 16-byte aligned;
/// - `lse`: `max_rows` [`LogprobsLse`]s;
/// - `top`: `entries` [`TopPartial`]s, 16-byte aligned (read 16 bytes a load);
/// - `rates`: `MAX_SYNTHETIC_DRAFTS` f32;
/// - `block_rows`, `block_states`: `max_rows` [`BlockRow`]s (8-byte aligned)
///   and `max_rows` [`BlockState`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Regions {
    stats: u64,
    partials: u64,
    jobs: u64,
    pair_jobs: u64,
    thresholds: u64,
    filter_scratch: u64,
    lse: u64,
    top: u64,
    rates: u64,
    block_rows: u64,
    block_states: u64,
    end: u64,
}

impl Regions {
    /// The regions of `entries` entries and `max_rows` rows; `None` past `u64`.
    fn of(entries: usize, max_rows: usize) -> Option<Regions> {
        let (entries, rows) = (entries as u64, max_rows as u64);
        let bytes = |n: u64, each: usize| n.checked_mul(each as u64);
        let after = |at: u64, n: u64, each: usize| at.checked_add(bytes(n, each)?);
        let align = |at: u64, to: u64| at.checked_next_multiple_of(to);
        let stats = 0;
        let partials = after(stats, entries, STATS_BYTES)?;
        let jobs = after(partials, entries, PARTIAL_BYTES)?;
        let pair_jobs = after(jobs, rows, JOB_BYTES)?;
        let thresholds = after(pair_jobs, rows, JOB_BYTES)?;
        let filter_scratch = align(after(thresholds, rows, THRESHOLD_BYTES)?, 16)?;
        let lse = after(filter_scratch, filter_entries(max_rows) as u64, size_of::<FilterScratch>())?;
        let top = align(after(lse, rows, LSE_BYTES)?, 16)?;
        let rates = after(top, entries, TOP_BYTES)?;
        let block_rows = align(rates.checked_add(RATES_BYTES as u64)?, 8)?;
        let block_states = after(block_rows, rows, size_of::<BlockRow>())?;
        let end = after(block_states, rows, size_of::<BlockState>())?;
        Some(Regions {
            stats,
            partials,
            jobs,
            pair_jobs,
            thresholds,
            filter_scratch,
            lse,
            top,
            rates,
            block_rows,
            block_states,
            end,
        })
    }
}

/// How the threshold kernel of a filtered call splits rows of `vocab >= 1`
/// ids, for `entries` threshold entries of a workspace with scratch for
/// `capacity`. Past that capacity, one block a row, which needs no scratch.
/// Where its blocks may keep candidates (`keeps`), chunks of
/// `THRESHOLD_CHUNK` ids, which they hold in shared memory, up to
/// `SUMMARY_CHUNKS` a row (a longer row in `SUMMARY_CHUNKS` chunks, which
/// they do not hold: its filtered rows are searched whole). Where none can,
/// a block only scans its chunk: the rows split as `wide` (the call's pass
/// over the same rows, which fills the GPU) in at most `SUMMARY_CHUNKS`.
pub(crate) fn threshold_split(vocab: usize, keeps: bool, wide: Split, (entries, capacity): (usize, usize)) -> Split {
    let most = SUMMARY_CHUNKS as usize * THRESHOLD_CHUNK as usize;
    let tiles = vocab.div_ceil(TILE as usize);
    let chunk = if entries > capacity {
        tiles * TILE as usize
    } else if keeps && vocab <= most {
        THRESHOLD_CHUNK as usize
    } else {
        let chunks = if keeps { SUMMARY_CHUNKS } else { wide.chunks.clamp(1, SUMMARY_CHUNKS) };
        tiles.div_ceil(chunks as usize) * TILE as usize
    };
    Split { chunk: chunk as u32, chunks: vocab.div_ceil(chunk) as u32 }
}

/// [`Workspace::split`] on a GPU of `sm_count` SMs, for `vocab >= 1`.
fn split(sm_count: u32, rows: usize, vocab: usize, blocks_per_sm: u32, spread: Spread) -> Split {
    let tiles = vocab.div_ceil(TILE as usize);
    let wanted = target_blocks(sm_count, rows, spread).div_ceil(rows.max(1)).clamp(1, tiles);
    let wanted = balance_waves(rows, wanted, tiles, sm_count as usize * blocks_per_sm as usize);
    let chunk = tiles.div_ceil(wanted) * TILE as usize;
    Split { chunk: chunk as u32, chunks: vocab.div_ceil(chunk) as u32 }
}

/// Whether `rows` rows split as `split` take at most one wave of blocks on
/// `sm_count` SMs holding `blocks_per_sm` each.
fn one_wave(sm_count: u32, rows: usize, split: Split, blocks_per_sm: u32) -> bool {
    rows * split.chunks as usize <= sm_count as usize * blocks_per_sm as usize
}

/// [`Workspace::small`] on a GPU of `sm_count` SMs.
fn small(sm_count: u32, rows: usize, split: Split, blocks_per_sm: u32) -> bool {
    split.chunk <= SMALL_CHUNK_TILES * TILE && one_wave(sm_count, rows, split, blocks_per_sm)
}

/// How many blocks per SM a kernel's split aims for at small batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spread {
    /// `gumbel_sample`: two per SM, not more: each block pays a fixed cost
    /// (its row's chain of dependent loads, a reduction, an arrival), and
    /// larger chunks prune more noise; four per SM measured slower at small
    /// batch (benches/results/2026-12-02-design-measurements.md).
    Streaming,
    /// The verifier's pass 1, latency-bound on too few warps at small and
    /// medium batch (benches/results/2026-12-02-nvidia-h200-medium-batch-profile.md):
    /// four per SM (then fitted to the kernel's waves) for up to one of its
    /// rows per SM, two above, where four per SM measured slower
    /// (benches/results/2026-12-04-nvidia-h200-worst-cases-profile.md).
    Statistics,
    /// The verifier's resample: as [`Spread::Statistics`] up to one request
    /// per two SMs, two above
    /// (benches/results/2026-12-02-nvidia-h200-resample-spread-ab.md).
    Resample,
}

/// The most blocks per SM any [`Spread`] aims for (what the scratch is sized for).
const MOST_BLOCKS_PER_SM: usize = 4;

/// Blocks that keep every SM busy at small batch, for `spread` over `rows` rows.
fn target_blocks(sm_count: u32, rows: usize, spread: Spread) -> usize {
    let sm_count = sm_count.max(1) as usize;
    let per_sm = match spread {
        Spread::Statistics if rows <= sm_count => MOST_BLOCKS_PER_SM,
        Spread::Resample if rows <= sm_count / 2 => MOST_BLOCKS_PER_SM,
        _ => 2,
    };
    per_sm * sm_count
}

/// The longest chunk, in tiles, of a kernel's small variant ([`Workspace::small`]).
const SMALL_CHUNK_TILES: u32 = 16;

/// The shortest chunk, in tiles, that a split makes by choice.
const MIN_CHUNK_TILES: usize = 24;

/// The most chunks per row [`Workspace::split`] adds to fill a last wave.
const EXTRA_CHUNKS: usize = 2;

/// Scratch entries (stats, partials) for calls of up to `max_rows` rows.
fn entries(sm_count: u32, max_rows: usize) -> Option<usize> {
    max_rows.checked_mul(1 + EXTRA_CHUNKS)?.checked_add(MOST_BLOCKS_PER_SM * sm_count.max(1) as usize)
}

/// The chunks per row for a call whose `wanted` chunks per row would take
/// between one and two waves of `slots` resident blocks; otherwise `wanted`.
/// Blocks of one call take about the same time, so 1.3 waves of them take
/// as long as 2 full ones, most SMs idle in the second. So the
/// blocks either fit one wave, if it stays at least `ONE_WAVE_FILL` full,
/// or fill two better with up to [`EXTRA_CHUNKS`] more chunks, each added
/// only for a fill better by `MIN_GAIN`, and none shorter than
/// `MIN_CHUNK_TILES`; where no chunk can be added, they fit one wave
/// however empty (256 rows of V = 32,000 whole, not halves). Past two waves
/// the gain is small and more chunks cost more: each block has fixed work,
/// and a shorter chunk prunes less noise. Each choice measured faster than
/// its alternative: benches/results/2026-12-02-design-measurements.md.
fn balance_waves(rows: usize, wanted: usize, tiles: usize, slots: usize) -> usize {
    const ONE_WAVE_FILL: f64 = 0.8;
    const MIN_GAIN: f64 = 0.05;
    let slots = slots.max(1);
    if rows * wanted <= slots || rows * wanted > 2 * slots {
        return wanted;
    }
    let one_wave = slots / rows;
    if one_wave >= 1 && (rows * one_wave) as f64 >= ONE_WAVE_FILL * slots as f64 {
        return one_wave;
    }
    let fill = |chunks: usize| {
        let blocks = rows * chunks;
        blocks as f64 / (blocks.div_ceil(slots) * slots) as f64
    };
    let mut best = wanted;
    for chunks in wanted + 1..=(wanted + EXTRA_CHUNKS).min(tiles / MIN_CHUNK_TILES) {
        if fill(chunks) >= fill(best) + MIN_GAIN {
            best = chunks;
        }
    }
    if best == wanted && one_wave >= 1 { one_wave } else { best }
}

#[cfg(test)]
mod tests {
    use super::{Split, Spread, balance_waves, entries, message_slot, small, split, threshold_split};
    use crate::tensor::MAX_VOCAB;
    use specdec_core::layout::TILE;
    use specdec_core::layout::{SUMMARY_CHUNKS, THRESHOLD_CHUNK};
    use specdec_core::shard;

    /// A rank's own message fits every message a call of `max_rows` rows
    /// (or pairs, or requests, or positions) sends, its last round's
    /// padding for two log-probability rounds included.
    #[test]
    fn the_message_slot_holds_every_round() {
        for rows in [0, 1, 7, 2048, 1 << 20] {
            let slot = message_slot(rows).unwrap();
            assert_eq!(slot, shard::pairs_message_bytes(rows, true) + 32);
            let last = |bytes| shard::last_round_bytes(bytes, 2);
            let rounds = [
                shard::lists_message_bytes(rows),
                last(shard::message_bytes(rows)),
                last(shard::candidates_message_bytes(rows)),
                last(shard::block_candidates_message_bytes(rows)),
                shard::positions_message_bytes(rows),
                shard::tops_message_bytes(rows),
            ];
            assert!(rounds.into_iter().all(|b| b <= slot), "{rows}");
        }
        assert_eq!(message_slot(usize::MAX / 2), None);
    }

    /// Every split covers the row in chunks of whole tiles, none of them
    /// empty, and stays within the scratch the workspace sized for its rows
    /// (`entries`): the kernels index their partials and statistics by
    /// `row · chunks + chunk`, unchecked on the device.
    #[test]
    fn splits_cover_rows_and_fit_the_scratch() {
        let vocabs = [1, 3, 1023, 1024, 1025, 24 * 1024 + 1, 32000, 128256, 151936, 262144, MAX_VOCAB];
        let rows = (1..=600).chain([1000, 1024, 2047, 2048, 4097, 10_000, 65_536]);
        for rows in rows {
            for sm_count in [1, 2, 7, 108, 132, 144] {
                for blocks_per_sm in [1, 2, 3, 4, 8] {
                    for (vocab, spread) in vocabs
                        .iter()
                        .flat_map(|&v| [(v, Spread::Streaming), (v, Spread::Statistics), (v, Spread::Resample)])
                    {
                        let s = split(sm_count, rows, vocab, blocks_per_sm, spread);
                        let at = format!("{rows} rows of {vocab}, {sm_count} SMs × {blocks_per_sm}, {spread:?}: {s:?}");
                        assert!(s.chunk > 0 && s.chunk.is_multiple_of(TILE), "{at}");
                        assert!(s.chunks as usize * s.chunk as usize >= vocab, "{at}: the row is not covered");
                        assert!(((s.chunks - 1) * s.chunk) < vocab as u32, "{at}: an empty chunk");
                        assert!(rows * s.chunks as usize <= entries(sm_count, rows).unwrap(), "{at}: past the scratch");
                    }
                }
            }
        }
    }

    /// The regions follow one another, each as aligned as its kernels read
    /// it, and the last ends the scratch; past `u64`, none.
    #[test]
    fn regions_follow_one_another_within_the_scratch() {
        use super::*;
        for max_rows in [0, 1, 3, 7, 1000, 2047, 4097, 65_536] {
            let entries = entries(132, max_rows).unwrap();
            let r = Regions::of(entries, max_rows).unwrap();
            let (e, m) = (entries as u64, max_rows as u64);
            let size = |n: u64, each: usize| n * each as u64;
            let spans = [
                (r.stats, size(e, STATS_BYTES), 16),
                (r.partials, size(e, PARTIAL_BYTES), 16),
                (r.jobs, size(m, JOB_BYTES), 8),
                (r.pair_jobs, size(m, JOB_BYTES), 8),
                (r.thresholds, size(m, THRESHOLD_BYTES), 4),
                (r.filter_scratch, size(filter_entries(max_rows) as u64, size_of::<FilterScratch>()), 16),
                (r.lse, size(m, LSE_BYTES), 4),
                (r.top, size(e, TOP_BYTES), 16),
                (r.rates, RATES_BYTES as u64, 4),
                (r.block_rows, size(m, size_of::<BlockRow>()), 8),
                (r.block_states, size(m, size_of::<BlockState>()), 4),
            ];
            for (k, &(at, len, align)) in spans.iter().enumerate() {
                assert_eq!(at % align, 0, "{max_rows} rows: region {k} at {at}");
                let next = spans.get(k + 1).map_or(r.end, |s| s.0);
                assert!(at + len <= next, "{max_rows} rows: region {k} overlaps the next");
            }
            assert_eq!(r.block_states + size(m, size_of::<BlockState>()), r.end);
        }
        assert_eq!(Regions::of(usize::MAX, 1), None);
    }

    /// A split raised to `MOST_CHUNKS` chunks a row covers the row, no chunk
    /// empty, within the scratch for its rows.
    #[test]
    fn raised_splits_cover_rows_and_fit_the_scratch() {
        for rows in [1, 6, 42, 256, 1536, 4096] {
            for vocab in [1, 3, 1024, 1025, 4097, 32000, 151_936, MAX_VOCAB] {
                for bps in [3, 4] {
                    let s = split(132, rows, vocab, bps, Spread::Statistics).at_least(super::MOST_CHUNKS, vocab);
                    let at = format!("{rows} rows of {vocab}: {s:?}");
                    assert!(s.chunk > 0 && s.chunk.is_multiple_of(TILE), "{at}");
                    assert!(s.chunks as usize * s.chunk as usize >= vocab && ((s.chunks - 1) * s.chunk) < vocab as u32);
                    let tiles = vocab.div_ceil(TILE as usize) as u32;
                    assert!(s.chunks >= super::MOST_CHUNKS.min(tiles), "{at}");
                    assert!(rows * s.chunks as usize <= entries(132, rows).unwrap(), "{at}: past the scratch");
                }
            }
        }
    }

    /// The threshold kernel's split covers every row in at most
    /// `SUMMARY_CHUNKS` chunks (the summaries a row's scratch holds), none
    /// empty; where blocks keep candidates, each of `THRESHOLD_CHUNK` ids (kept
    /// in shared memory) up to rows of 262,144; where none can, as the call's
    /// wide split, capped.
    #[test]
    fn threshold_splits_cover_rows_in_the_summaries() {
        for vocab in [1, 3, 4096, 8192, 8193, 151_936, 262_144, 262_145, 1 << 20, MAX_VOCAB] {
            for keeps in [true, false] {
                for wide_chunks in [1, 5, 32, 149] {
                    let wide = Split { chunk: vocab.div_ceil(wide_chunks).next_multiple_of(1024) as u32, chunks: 0 };
                    let wide = Split { chunks: vocab.div_ceil(wide.chunk as usize) as u32, ..wide };
                    let s = threshold_split(vocab, keeps, wide, (4096, 4096));
                    let at = format!("{vocab} keeps {keeps} wide {wide:?}: {s:?}");
                    assert!(s.chunks >= 1 && s.chunks <= SUMMARY_CHUNKS, "{at}");
                    assert!(s.chunk as usize * s.chunks as usize >= vocab && ((s.chunks - 1) * s.chunk) < vocab as u32);
                    assert!(s.chunk.is_multiple_of(TILE), "{at}");
                    if keeps {
                        assert_eq!(s.chunk == THRESHOLD_CHUNK, vocab <= 262_144, "{at}");
                    } else {
                        assert!(s.chunks <= wide.chunks.max(1), "{at}");
                    }
                }
            }
        }
        let one = Split { chunk: 151_552, chunks: 1 };
        assert_eq!(threshold_split(151_936, true, one, (4096, 4096)).chunks, 19);
        assert_eq!(threshold_split(151_936, false, one, (16, 4096)).chunks, 1);
        // Past the workspace's scratch: one block a row, whatever the filters.
        let many = Split { chunk: 8192, chunks: 19 };
        assert_eq!(threshold_split(151_936, true, many, (4097, 4096)), Split { chunk: 152_576, chunks: 1 });
    }

    /// H200 (132 SMs): a partial second wave that more chunks cannot fill
    /// gives way to one wave of whole rows.
    #[test]
    fn short_rows_fit_one_wave_rather_than_a_partial_second() {
        // V = 32,000 (32 tiles), 256 rows: halves (512 blocks) are 1.3 waves at 3 blocks per SM.
        assert_eq!(balance_waves(256, 2, 32, 396), 1);
        // ... but one wave at 4 blocks per SM: halves.
        assert_eq!(balance_waves(256, 2, 32, 528), 2);
        // Rows long enough for more chunks still get them (below).
        assert_eq!(balance_waves(256, 2, 149, 396), 3);
    }

    /// H200 (132 SMs) cases measured: the ones that gain, and ones that must not change.
    #[test]
    fn a_last_wave_is_filled_only_where_it_pays() {
        // Resample of 256 requests, 3 blocks per SM: 512 blocks are 1.3 waves; 768 are 1.94.
        assert_eq!(balance_waves(256, 2, 149, 396), 3);
        // 1024 rows of one block: 2.59 waves, left alone (3 chunks were slower).
        assert_eq!(balance_waves(1024, 1, 149, 396), 1);
        // Pass 1 of 256 requests × 8 rows at 4 blocks per SM: 3.88 waves already.
        assert_eq!(balance_waves(2048, 1, 149, 528), 1);
        // One partial wave, and rows too short to split further.
        assert_eq!(balance_waves(64, 5, 149, 396), 5);
        // Just past one wave (272 blocks, 264 resident): one full wave instead.
        assert_eq!(balance_waves(16, 17, 149, 264), 16);
        assert_eq!(balance_waves(64, 5, 149, 264), 4);
        assert_eq!(balance_waves(1024, 1, 1, 396), 1);
        // V = 32,000 (32 tiles): 512 rows stay in one chunk each.
        assert_eq!(balance_waves(512, 1, 32, 396), 1);
    }

    /// Above one row per SM (pass 1) or per two SMs (the resample) the
    /// verifier's passes split as `gumbel_sample` does (four per SM measured
    /// slower there); below, they take more chunks.
    #[test]
    fn the_verifier_spreads_only_up_to_its_rows_bound() {
        for sm_count in [2, 7, 108, 132, 144] {
            for bps in [3, 4] {
                let at = |rows: usize, spread| split(sm_count, rows, 151_936, bps, spread);
                for (spread, bound) in
                    [(Spread::Statistics, sm_count as usize), (Spread::Resample, sm_count as usize / 2)]
                {
                    for rows in bound + 1..=4 * sm_count as usize {
                        assert_eq!(at(rows, spread), at(rows, Spread::Streaming), "{rows} rows, {sm_count} SMs");
                    }
                    // Below, at least as many chunks as the streaming split.
                    if bound >= 1 {
                        assert!(at(bound, spread).chunks >= at(bound, Spread::Streaming).chunks, "{sm_count} SMs");
                    }
                }
            }
        }
        // An H200's 16 requests: 22 chunks a row where the streaming split makes 17.
        assert_eq!(
            (split(132, 16, 151_936, 3, Spread::Resample).chunks, split(132, 16, 151_936, 3, Spread::Streaming).chunks),
            (22, 17)
        );
        // Pass 1 of 32 requests of K = 2 (96 rows): 5 chunks a row, not 3.
        assert_eq!(
            (
                split(132, 96, 151_936, 4, Spread::Statistics).chunks,
                split(132, 96, 151_936, 4, Spread::Streaming).chunks
            ),
            (5, 3)
        );
    }

    /// H200 (132 SMs, pass 1 at 4 blocks per SM, the resample at 3): the
    /// small variants take the calls measured faster with them, not those
    /// measured slower, nor a grid of more than one wave of short rows.
    #[test]
    fn the_small_variants_take_small_calls() {
        // Pass 1 at 4 blocks per SM, the resample at 3.
        let takes = |rows: usize, vocab: usize, bps: u32| {
            let spread = if bps == 4 { Spread::Statistics } else { Spread::Resample };
            small(132, rows, split(132, rows, vocab, bps, spread), bps)
        };
        for k1 in [2, 4, 5, 8] {
            assert!(takes(k1, 151_936, 4) && takes(k1, 32_000, 4), "pass 1 of one request of {k1} rows");
        }
        assert!(takes(16 * 4, 32_000, 4), "pass 1 of 16 requests of K = 3 at V = 32,000: 7 tiles");
        assert!(takes(16 * 8, 32_000, 4), "pass 1 of 16 requests of K = 7 at V = 32,000: 11 tiles");
        assert!(takes(1, 151_936, 3) && takes(16, 32_000, 3), "the resample of 1 request, and of 16 at V = 32,000");
        assert!(!takes(16 * 4, 151_936, 4), "pass 1 of 16 requests of K = 3: chunks of 30 tiles");
        assert!(!takes(64, 151_936, 3), "the resample of 64 requests: chunks of 30 tiles");
        assert!(!takes(256 * 8, 151_936, 4) && !takes(256 * 8, 32_000, 4), "256 requests of K = 7");
        assert!(!takes(40_960, 4096, 4), "40,960 rows of 4 tiles: many waves");
        // The statistical suite's calls of one request (V = 4096, K = 3) on any GPU of 4 SMs or more.
        for sm_count in 4..=144 {
            assert!(small(sm_count, 4, split(sm_count, 4, 4096, 4, Spread::Statistics), 4), "{sm_count} SMs");
        }
    }
}
