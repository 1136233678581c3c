//! The only `unsafe` launches of the crate, one function per operation. Each
//! is reached through a safe function that has validated every host-visible
//! value.

use super::Kernel;
use crate::error::Result;
use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use specdec_core::layout::{BLOCK_THREADS, GumbelParams, RejectionParams, SHARED_BYTES};

/// A `#[repr(C)]` parameter block passed to a kernel by value.
#[repr(transparent)]
struct Params<P>(P);

// SAFETY: both parameter blocks are #[repr(C)], Copy, and made only of
// integers: the layout the kernels declare for their single by-value parameter.
unsafe impl DeviceRepr for Params<GumbelParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for Params<RejectionParams> {}

fn blocks(grid: (u32, u32)) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (BLOCK_THREADS, 1, 1), shared_mem_bytes: SHARED_BYTES }
}

/// Launches `gumbel_sample` (one kernel).
///
/// # Safety
/// `p` must have been built by `cuda::gumbel` from checked arguments: every
/// pointer valid on `stream` for the extent its shape fields imply, `rows ·
/// chunks` partials and `rows` zeroed counters in the workspace, `chunk ·
/// chunks >= vocab`.
pub(super) unsafe fn gumbel_sample(kernel: &Kernel, stream: &CudaStream, p: GumbelParams) -> Result<()> {
    if p.rows == 0 {
        return Ok(());
    }
    let params = Params(p);
    // SAFETY: the caller guarantees `p`; the grid covers rows × chunks, block
    // size and shared memory are what the kernel's reductions expect.
    unsafe { stream.launch_builder(&kernel.function).arg(&params).launch(blocks((p.rows, p.chunks))) }?;
    Ok(())
}

/// Launches the two passes of `rejection_sample`.
///
/// # Safety
/// `p` must have been built by `cuda::rejection` from checked arguments: every
/// pointer valid on `stream` for the extent its shape fields imply; the
/// workspace regions hold `requests·(K+1)·chunks` stats, `requests` jobs,
/// `requests·resample_chunks` partials and `requests` zeroed counters; `chunk ·
/// chunks >= vocab` and `resample_chunk · resample_chunks >= vocab`.
pub(super) unsafe fn rejection_sample(
    (stats, resample): (&Kernel, &Kernel),
    stream: &CudaStream,
    p: RejectionParams,
) -> Result<()> {
    if p.requests == 0 {
        return Ok(());
    }
    let params = Params(p);
    let pairs = p.requests * (p.max_drafts + 1);
    // SAFETY: the caller guarantees `p`; each grid matches its pass (module
    // docs of kernels::rejection), and the passes run in order on one stream.
    unsafe {
        stream.launch_builder(&stats.function).arg(&params).launch(blocks((pairs, p.chunks)))?;
        stream.launch_builder(&resample.function).arg(&params).launch(blocks((p.requests, p.resample_chunks)))?;
    }
    Ok(())
}
