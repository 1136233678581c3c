//! The caller-owned, reusable device scratch of the CUDA backend.

use crate::error::{Error, Result};
use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use specdec_core::layout::TILE;
use std::sync::Arc;

/// Bytes of one reduction partial (`kernels::block::Partial`).
const PARTIAL_BYTES: usize = 16;
/// Bytes of one row-chunk statistic (`kernels::rejection::Stats`).
const STATS_BYTES: usize = 32;
/// Bytes of one resample job (`kernels::rejection::Job`).
const JOB_BYTES: usize = 32;

/// Device scratch for calls of up to `max_rows` rows (`gumbel_sample`) or
/// `requests · (max_drafts + 1)` rows (`rejection_sample`): per-block partial
/// results, O(rows + SMs) entries, never rows × V; one arrival counter per row
/// (zero between calls: the kernels reset what they count); and the status
/// word the kernels OR their flags into. Create it once; calls then allocate
/// nothing.
pub struct Workspace {
    pub(crate) scratch: CudaSlice<u8>,
    pub(crate) counters: CudaSlice<u32>,
    pub(crate) status: CudaSlice<u32>,
    sm_count: u32,
    max_rows: usize,
}

/// How a call's rows are split over blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    /// Elements per block, a multiple of `TILE`.
    pub chunk: u32,
    /// Blocks per row.
    pub chunks: u32,
}

impl Workspace {
    pub(crate) fn new(stream: &Arc<CudaStream>, sm_count: u32, max_rows: usize) -> Result<Self> {
        let bytes = target_blocks(sm_count)
            .checked_add(max_rows)
            .and_then(|entries| entries.checked_mul(STATS_BYTES + PARTIAL_BYTES))
            .and_then(|b| max_rows.checked_mul(JOB_BYTES).and_then(|j| b.checked_add(j)))
            .ok_or(Error::OutOfMemory { bytes: usize::MAX, max_rows })?;
        let out_of_memory = |e: DriverError| match e.0 {
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { bytes, max_rows },
            _ => Error::Driver(e),
        };
        let scratch = stream.alloc_zeros::<u8>(bytes).map_err(out_of_memory)?;
        let counters = stream.alloc_zeros::<u32>(max_rows.max(1)).map_err(out_of_memory)?;
        let status = stream.alloc_zeros::<u32>(1).map_err(out_of_memory)?;
        Ok(Workspace { scratch, counters, status, sm_count, max_rows })
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

    /// How rows of `vocab` ids are split over blocks for a call over `rows`
    /// rows: enough blocks to fill the GPU at small batch, one block per row at
    /// large batch. `rows · chunks <= target_blocks + rows` always holds, which
    /// is what the scratch regions are sized for.
    pub(crate) fn split(&self, rows: usize, vocab: usize) -> Result<Split> {
        if rows > self.max_rows {
            return Err(Error::WorkspaceTooSmall { needed: rows, capacity: self.max_rows });
        }
        let tiles = vocab.div_ceil(TILE as usize);
        let wanted = target_blocks(self.sm_count).div_ceil(rows.max(1)).clamp(1, tiles);
        let chunk = tiles.div_ceil(wanted) * TILE as usize;
        Ok(Split { chunk: chunk as u32, chunks: vocab.div_ceil(chunk) as u32 })
    }

    /// Byte offsets of the rejection regions (stats, jobs, partials) in `scratch`.
    pub(crate) fn rejection_regions(&self) -> (u64, u64, u64) {
        let entries = target_blocks(self.sm_count) + self.max_rows;
        let jobs = entries * STATS_BYTES;
        let partials = jobs + self.max_rows * JOB_BYTES;
        (0, jobs as u64, partials as u64)
    }
}

/// Blocks that keep every SM busy at small batch. Two per SM, not more: each
/// block pays a fixed cost (its row's chain of dependent loads, a reduction,
/// an arrival), and larger chunks prune more noise. Measured on an H200
/// against four per SM: 8 to 64 rows and 16 requests 10–20 % faster, one
/// row or request and large batches unchanged.
fn target_blocks(sm_count: u32) -> usize {
    2 * sm_count.max(1) as usize
}
