//! The only `unsafe` launches of the crate, one per kernel. Each is reached
//! through a safe function that has validated every host-visible value.

use super::Kernels;
use crate::error::Result;
use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use specdec_core::layout::{BLOCK_THREADS, GumbelParams};

/// A `#[repr(C)]` parameter block passed to a kernel by value.
#[repr(transparent)]
struct Params(GumbelParams);

// SAFETY: GumbelParams is #[repr(C)], Copy, and made only of integers, the
// layout the kernels declare for their single by-value parameter.
unsafe impl DeviceRepr for Params {}

/// Dynamic shared memory of `block_reduce` (`WARPS × 16` bytes).
const BLOCK_REDUCE_SHARED_BYTES: u32 = (BLOCK_THREADS / 32) * 16;

/// Launches both passes of `gumbel_sample`.
///
/// # Safety
/// `p` must have been built by `cuda::gumbel` from checked arguments: every
/// pointer valid on `stream` for the extent its shape fields imply, `chunks ·
/// rows` partials in the workspace, `chunk · chunks >= vocab`.
pub(super) unsafe fn gumbel_sample(
    kernels: &Kernels,
    stream: &CudaStream,
    name: &'static str,
    p: GumbelParams,
) -> Result<()> {
    if p.rows == 0 {
        return Ok(());
    }
    let params = Params(p);
    let pass1 = kernels.function(name)?;
    let cfg = LaunchConfig {
        grid_dim: (p.rows, p.chunks, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: BLOCK_REDUCE_SHARED_BYTES,
    };
    // SAFETY: the caller guarantees `p` (see above); the grid covers rows ×
    // chunks and the block size and shared memory are what the kernel expects.
    unsafe { stream.launch_builder(&pass1).arg(&params).launch(cfg) }?;
    let pass2 = kernels.function("gumbel_sample_finish")?;
    let cfg = LaunchConfig { grid_dim: (p.rows, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: as above; pass 2 reads the partials pass 1 wrote on this stream.
    unsafe { stream.launch_builder(&pass2).arg(&params).launch(cfg) }?;
    Ok(())
}
