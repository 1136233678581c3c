//! The only `unsafe` launches of the crate, one function per operation. Each
//! is reached through a safe function that has validated every host-visible
//! value.
//!
//! Launches go straight to `cuLaunchKernel` (cudarc's `result` layer), not
//! through cudarc's `LaunchArgs`, which allocates its argument list on the
//! heap for every launch and binds the context again for each: a call
//! allocates nothing on the host either, and binds once.

use super::Kernel;
use crate::error::Result;
use cudarc::driver::{CudaStream, result};
use specdec_core::filter::{Group, ROUNDS};
use specdec_core::layout::{
    BLOCK_THREADS, GumbelCombineParams, GumbelParams, LogprobsParams, RatesParams, RejectionParams, SHARED_BYTES,
    THRESHOLD_SHARED_BYTES, TOP_SHARED_BYTES, WALK_SHARED_BYTES, WARPS,
};
use specdec_core::shard;
use std::ffi::c_void;

/// Launches `kernel` over `grid` with `params`, a `#[repr(C)]` block of
/// integers, as its one by-value parameter. The context must be current.
///
/// # Safety
/// `params` is the parameter block `kernel` declares and every pointer in it
/// is valid for what the kernel does over `grid`.
unsafe fn launch<P>(kernel: &Kernel, stream: &CudaStream, grid: (u32, u32), params: &P) -> Result<()> {
    // SAFETY: forwarded; the sampling kernels' shared memory.
    unsafe { launch_shared(kernel, stream, grid, SHARED_BYTES, params) }
}

/// [`launch`] with `shared` bytes of dynamic shared memory.
///
/// # Safety
/// As for [`launch`]; `shared` is what `kernel` expects.
unsafe fn launch_shared<P>(
    kernel: &Kernel,
    stream: &CudaStream,
    grid: (u32, u32),
    shared: u32,
    params: &P,
) -> Result<()> {
    let mut args = [params as *const P as *mut c_void];
    // SAFETY: the caller guarantees `params`; block size and shared memory
    // are what the kernels' reductions expect; the driver copies the
    // parameter block before it returns.
    unsafe {
        result::launch_kernel(
            kernel.function.cu_function(),
            (grid.0, grid.1, 1),
            (BLOCK_THREADS, 1, 1),
            shared,
            stream.cu_stream(),
            &mut args,
        )
    }?;
    Ok(())
}

/// The threshold kernel over `grid` and then, where the call has a search
/// kernel (`p`'s `threshold_search`), the search kernel once for each of
/// its `filter::ROUNDS` rounds, over the same grid, in order on `stream`.
///
/// # Safety
/// As for [`launch`], with the threshold kernels' shared memory.
unsafe fn launch_thresholds<P>(threshold: &Threshold, stream: &CudaStream, grid: (u32, u32), p: &P) -> Result<()> {
    // SAFETY (both): forwarded.
    unsafe { launch_shared(threshold.kernel, stream, grid, THRESHOLD_SHARED_BYTES, p)? };
    if let Some(search) = threshold.search {
        for _ in 0..ROUNDS {
            unsafe { launch_shared(search, stream, grid, THRESHOLD_SHARED_BYTES, p)? };
        }
    }
    Ok(())
}

/// A call's threshold kernel, and its search kernel where it leaves rows
/// to it (`Filters::searches`, rows of more than one block).
pub(super) struct Threshold<'k> {
    pub kernel: &'k Kernel,
    pub search: Option<&'k Kernel>,
}

/// Launches `gumbel_sample` (one kernel).
///
/// # Safety
/// `p` must have been built by `cuda::gumbel` from checked arguments: every
/// pointer valid on `stream` for the extent its shape fields imply, `rows ·
/// chunks` partials and `rows` zeroed counters in the workspace, `chunk ·
/// chunks >= vocab`.
/// With filters (`threshold`, the kernel that writes `p.thresholds` first),
/// also `rows` thresholds and (unless `threshold_chunks = 1`) zeroed filter scratch entries in the
/// workspace, `threshold_chunk · threshold_chunks >= vocab` and
/// `threshold_chunks <= SUMMARY_CHUNKS`.
pub(super) unsafe fn gumbel_sample(
    kernel: &Kernel,
    threshold: Option<Threshold<'_>>,
    stream: &CudaStream,
    p: GumbelParams,
) -> Result<()> {
    if p.rows == 0 {
        return Ok(());
    }
    stream.context().bind_to_thread()?;
    // SAFETY: the caller guarantees `p`; the threshold grid covers rows ×
    // threshold_chunks, the sampling grid rows × chunks, in order on one stream.
    unsafe {
        if let Some(threshold) = &threshold {
            launch_thresholds(threshold, stream, (p.rows, p.threshold_chunks), &p)?;
        }
        launch(kernel, stream, (p.rows, p.chunks), &p)
    }
}

/// Launches a rank's part of a sharded `gumbel_sample`: with `filters`
/// (the threshold kernel, which writes the rank's lists into its round-1
/// message, and the merge kernel), the threshold kernel, `exchange` (the
/// lists' round) and the merge; then the sampling kernel, `exchange` (the
/// rows' round), and `gumbel_combine` over the ranks' messages (a thread a
/// row, with `combined` as its parameters). Every exchange runs whatever
/// the call's size, so that no rank waits for this one.
///
/// # Safety
/// `p` as for [`gumbel_sample`] without search launches, and `p.send`,
/// `p.recv` the rank's message and every rank's (`p.shard_ranks` of them,
/// at most `shard::MAX_FILTERED_RANKS` with filters) of every round for
/// `rows` rows, which `exchange` gathers on `stream` in order; `combine`
/// reads `recv` and writes `p`'s outputs, `rows` entries.
pub(super) unsafe fn sharded_gumbel_sample(
    (filters, kernel, combine): (Option<(&Kernel, &Kernel)>, &Kernel, &Kernel),
    stream: &CudaStream,
    (p, combined): (GumbelParams, GumbelCombineParams),
    mut exchange: impl FnMut() -> Result<()>,
) -> Result<()> {
    // SAFETY (all): the caller guarantees `p` and `combined`; each grid
    // matches its kernel (`kernels::gumbel`, `kernels::shard`), in order on
    // one stream.
    unsafe {
        stream.context().bind_to_thread()?;
        if let Some((threshold, merge)) = filters {
            if p.rows > 0 {
                launch_shared(threshold, stream, (p.rows, p.threshold_chunks), THRESHOLD_SHARED_BYTES, &p)?;
            }
            exchange()?;
            stream.context().bind_to_thread()?;
            if p.rows > 0 {
                let bytes = shard::merge_entries(p.shard_ranks as usize) * core::mem::size_of::<Group>();
                launch_shared(merge, stream, (p.rows, 1), bytes as u32, &p)?;
            }
        }
        if p.rows > 0 {
            launch(kernel, stream, (p.rows, p.chunks), &p)?;
        }
        exchange()?;
        stream.context().bind_to_thread()?;
        if p.rows > 0 {
            launch_shared(combine, stream, (p.rows.div_ceil(BLOCK_THREADS), 1), 0, &combined)?;
        }
    }
    Ok(())
}

/// Launches the two passes of `rejection_sample`, and between them, for
/// block verification, the block kernel.
///
/// # Safety
/// `p` must have been built by `cuda::rejection` from checked arguments: every
/// pointer valid on `stream` for the extent its shape fields imply; the
/// workspace regions hold `requests·(K+1)·chunks` stats, `requests` jobs,
/// `requests·resample_chunks` partials and `requests` zeroed counters (with
/// `rates`, the kernel that writes `p.rates` first, `rates.count` entries
/// there); with `block`, `max_drafts >= 2`, `requests·(K−1)·block_chunks`
/// partials, `requests·(K−1)` counters and the zeroed block notes and
/// states of `p.block_rows` / `p.block_states`; `chunk ·
/// chunks >= vocab` and `resample_chunk · resample_chunks >= vocab`. With
/// filters (`threshold`, which writes `p.thresholds` first), also
/// `2·requests·(K+1)` thresholds and (unless `threshold_chunks = 1`) zeroed
/// filter scratch entries, and the
/// threshold split as for [`gumbel_sample`].
#[allow(clippy::type_complexity)]
pub(super) unsafe fn rejection_sample(
    (rates, threshold, stats, block, resample): (
        Option<(&Kernel, RatesParams)>,
        Option<Threshold<'_>>,
        [Option<&Kernel>; 2],
        Option<&Kernel>,
        &Kernel,
    ),
    stream: &CudaStream,
    p: RejectionParams,
) -> Result<()> {
    if p.requests == 0 {
        return Ok(());
    }
    let pairs = p.requests * (p.max_drafts + 1);
    stream.context().bind_to_thread()?;
    // SAFETY: the caller guarantees `p`; each grid matches its pass (module
    // docs of kernels::rejection), and the passes run in order on one stream.
    unsafe {
        if let Some((kernel, params)) = &rates {
            launch_shared(kernel, stream, (1, 1), 0, params)?;
        }
        if let Some(threshold) = &threshold {
            launch_thresholds(threshold, stream, (2 * pairs, p.threshold_chunks), &p)?;
        }
        pass_1(stats, stream, pairs, &p)?;
        if let Some(block) = block {
            launch(block, stream, (p.requests * (p.max_drafts - 1) * p.block_chunks, 1), &p)?;
        }
        launch(resample, stream, (p.requests, p.resample_chunks), &p)
    }
}

/// Launches pass 1 of `rejection_sample`: its kernels (a filtered call's
/// run-rule and kept-rule kernels, else one) one after the other, each over
/// the pass's grid.
///
/// # Safety
/// As for [`rejection_sample`]; the kernels are pass 1's for `p`.
unsafe fn pass_1(kernels: [Option<&Kernel>; 2], stream: &CudaStream, pairs: u32, p: &RejectionParams) -> Result<()> {
    for kernel in kernels.into_iter().flatten() {
        // SAFETY: forwarded (caller).
        unsafe { launch_shared(kernel, stream, (pairs, p.chunks), WALK_SHARED_BYTES, p)? };
    }
    Ok(())
}

/// Launches a rank's part of a sharded `rejection_sample`
/// (`kernels::rejection::sharded`): pass 1, `exchange` (round 1), the
/// decision, pass 2, `exchange` (round 2), the combine; both exchanges run
/// whatever the call's size, so that no rank waits for this one.
///
/// With block verification (`p.pair_jobs`), the block kernel (`block`,
/// with draft logits) after the decision, and pass 2 over the pair jobs in
/// one launch (`requests·(K+1)` jobs, the resample split sized for as many
/// rows; each job's candidates go to the round-2 message at its index).
///
/// With `filters` (the threshold kernel, which writes each rank's lists
/// into its round-1 message, and the merge kernel after round 1), a call
/// with filters.
///
/// # Safety
/// As for [`rejection_sample`] without block verification or search
/// launches; and `p.send`, `p.recv` the rank's message and every rank's
/// (`p.shard_ranks` of them, at most `shard::MAX_FILTERED_RANKS` with
/// filters) of both rounds for `requests·(K+1)` pairs, which `exchange`
/// gathers on `stream` (its first call round 1's, its second round 2's).
#[allow(clippy::type_complexity)]
pub(super) unsafe fn sharded_rejection_sample(
    (rates, filters, stats, decide, block, resample, combine): (
        Option<(&Kernel, RatesParams)>,
        Option<(&Kernel, &Kernel)>,
        [Option<&Kernel>; 2],
        &Kernel,
        Option<&Kernel>,
        &Kernel,
        &Kernel,
    ),
    stream: &CudaStream,
    p: RejectionParams,
    mut exchange: impl FnMut() -> Result<()>,
) -> Result<()> {
    let (requests, pairs) = (p.requests, p.requests * (p.max_drafts + 1));
    // SAFETY (all): the caller guarantees `p`; each grid matches its kernel
    // (`kernels::rejection::sharded`'s module docs), in order on one stream.
    unsafe {
        stream.context().bind_to_thread()?;
        if requests > 0 {
            if let Some((kernel, params)) = &rates {
                launch_shared(kernel, stream, (1, 1), 0, params)?;
            }
            if let Some((threshold, _)) = filters {
                launch_shared(threshold, stream, (2 * pairs, p.threshold_chunks), THRESHOLD_SHARED_BYTES, &p)?;
            }
            pass_1(stats, stream, pairs, &p)?;
        }
        exchange()?;
        stream.context().bind_to_thread()?;
        if requests > 0 {
            if let Some((_, merge)) = filters {
                let bytes = shard::merge_entries(p.shard_ranks as usize) * core::mem::size_of::<Group>();
                launch_shared(merge, stream, (2 * pairs, 1), bytes as u32, &p)?;
            }
            launch(decide, stream, (requests, 1), &p)?;
            if let Some(block) = block {
                launch(block, stream, (requests * (p.max_drafts - 1) * p.block_chunks, 1), &p)?;
            }
            if p.pair_jobs == 0 {
                launch(resample, stream, (requests, p.resample_chunks), &p)?;
            } else {
                // Pass 2 reads nothing of a job's request but the job: one
                // launch over every row's, as `requests·(K+1)` jobs.
                let jobs = RejectionParams { jobs: p.pair_jobs, requests: pairs, ..p };
                launch(resample, stream, (pairs, p.resample_chunks), &jobs)?;
            }
        }
        exchange()?;
        stream.context().bind_to_thread()?;
        if requests > 0 {
            launch_shared(combine, stream, (requests.div_ceil(BLOCK_THREADS), 1), 0, &p)?;
        }
    }
    Ok(())
}

/// Launches the log-probability kernels of a call (`cuda::logprobs`): the
/// log-sum-exps (unless the call's passes wrote them: `lse` none), then,
/// where a top-n or rank is asked (`p.ranks`), the top-n.
///
/// # Safety
/// `p` must have been built by `cuda::logprobs` from a checked call enqueued
/// before on `stream`: every pointer valid for the extent its shape fields
/// imply; the workspace holds `positions · chunks` partials and top
/// partials, `positions` log-sum-exps (written, without `lse`) and zeroed
/// counters; `chunk · chunks >= vocab`.
pub(super) unsafe fn logprobs(
    (lse, top): (Option<&Kernel>, &Kernel),
    stream: &CudaStream,
    p: LogprobsParams,
) -> Result<()> {
    stream.context().bind_to_thread()?;
    // SAFETY: the caller guarantees `p`; both grids are positions × chunks,
    // in order on one stream; each kernel's shared memory.
    unsafe {
        if let Some(lse) = lse {
            launch_shared(lse, stream, (p.positions, p.chunks), WALK_SHARED_BYTES, &p)?;
        }
        if p.ranks != 0 {
            launch_shared(top, stream, (p.positions, p.chunks), TOP_SHARED_BYTES, &p)?;
        }
    }
    Ok(())
}

/// Launches a sharded call's log-probabilities after its own launches: the
/// first kernel of each of its `sources` (the rank's ids of the positions
/// that read the call's values, then of those that read stored draft
/// values, `LogprobsParams::rounded`), the exchange of the messages it
/// wrote, and the combine, a warp a position; where a top-n or rank is
/// asked (`p.ranks`), then each source's top-n kernel, another exchange and
/// `top_combine`, a block a position.
///
/// # Safety
/// As [`logprobs`], with the sharded kernels; `p.send` and `p.recv` hold the
/// rank's and every rank's message of `positions` positions' sums
/// (`shard::positions_message_bytes`) and, with a top-n, lists
/// (`shard::tops_message_bytes`), and `exchange` gathers the one into the
/// other on `stream`.
pub(super) unsafe fn sharded_logprobs(
    (sources, combine, top_combine): ([Option<&(Kernel, Kernel)>; 2], &Kernel, &Kernel),
    stream: &CudaStream,
    mut p: LogprobsParams,
    mut exchange: impl FnMut() -> Result<()>,
) -> Result<()> {
    let each_source = |p: &mut LogprobsParams, kernel: fn(&(Kernel, Kernel)) -> &Kernel, shared: u32| -> Result<()> {
        for (source, kernels) in sources.iter().enumerate() {
            if let Some(kernels) = kernels {
                p.source = source as u32;
                // SAFETY: the caller's `p`; the grid is positions × chunks.
                unsafe { launch_shared(kernel(kernels), stream, (p.positions, p.chunks), shared, &*p)? };
            }
        }
        Ok(())
    };
    // SAFETY (all): the caller guarantees `p`; each grid matches its kernel
    // (`kernels::logprobs`), in order on one stream.
    unsafe {
        stream.context().bind_to_thread()?;
        if p.positions > 0 {
            each_source(&mut p, |k| &k.0, WALK_SHARED_BYTES)?;
        }
        exchange()?;
        stream.context().bind_to_thread()?;
        if p.positions > 0 {
            launch_shared(combine, stream, (p.positions.div_ceil(WARPS), 1), 0, &p)?;
        }
        if p.ranks != 0 {
            if p.positions > 0 {
                each_source(&mut p, |k| &k.1, TOP_SHARED_BYTES)?;
            }
            exchange()?;
            stream.context().bind_to_thread()?;
            if p.positions > 0 {
                launch_shared(top_combine, stream, (p.positions, 1), TOP_SHARED_BYTES, &p)?;
            }
        }
    }
    Ok(())
}
