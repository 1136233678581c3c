//! The caller-owned, reusable device scratch of the CUDA backend.

use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream};
use specdec_core::layout::TILE;
use std::sync::Arc;

/// Bytes of one partial result (`kernels::block::Partial`).
pub(crate) const PARTIAL_BYTES: usize = 16;

/// Device scratch for calls of up to `max_rows` rows: partial block results
/// (O(rows + SMs), never rows × V) and the status word the kernels OR their
/// flags into. Create it once; calls then allocate nothing.
pub struct Workspace {
    pub(crate) partials: CudaSlice<u8>,
    pub(crate) status: CudaSlice<u32>,
    pub(crate) sm_count: u32,
    max_rows: usize,
}

impl Workspace {
    pub(crate) fn new(stream: &Arc<CudaStream>, sm_count: u32, max_rows: usize) -> Result<Self> {
        let capacity = target_blocks(sm_count) + max_rows;
        let partials = stream.alloc_zeros::<u8>(capacity * PARTIAL_BYTES)?;
        let status = stream.alloc_zeros::<u32>(1)?;
        Ok(Workspace { partials, status, sm_count, max_rows })
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

    /// How a row of `vocab` ids is split over blocks for a call of `rows` rows:
    /// `(chunk, chunks)` with `chunk` a multiple of `TILE`. Enough blocks to
    /// fill the GPU at small batch, one block per row at large batch.
    pub(crate) fn split(&self, rows: usize, vocab: usize) -> Result<(u32, u32)> {
        if rows > self.max_rows {
            return Err(Error::WorkspaceTooSmall { needed: rows, capacity: self.max_rows });
        }
        let tiles = vocab.div_ceil(TILE as usize);
        let wanted = target_blocks(self.sm_count).div_ceil(rows.max(1)).clamp(1, tiles);
        let chunk = tiles.div_ceil(wanted) * TILE as usize;
        let chunks = vocab.div_ceil(chunk);
        debug_assert!(rows * chunks <= target_blocks(self.sm_count) + self.max_rows);
        Ok((chunk as u32, chunks as u32))
    }
}

/// Blocks that keep every SM busy at small batch.
fn target_blocks(sm_count: u32) -> usize {
    4 * sm_count.max(1) as usize
}
