//! Log-probabilities of a call's emitted tokens on the GPU (REFERENCE §8):
//! the launches of `crates/kernels/src/logprobs.rs`, enqueued after the
//! call's own, over its positions.

use super::{Cuda, Spread, Workspace, launch};
use crate::error::Result;
use crate::logprobs::{Distribution, Logprobs};
use crate::memory::Device;
use cudarc::driver::DevicePtrMut;
use specdec_core::dtype::DType;
use specdec_core::layout::LogprobsParams;
use specdec_core::names;

/// Where a call's positions read their values: the dtype of `values`, and
/// of the draft logits where a `gumbel_sample` call drafted into ones that
/// round it (`LogprobsParams::rounded`).
pub(super) struct Sources {
    pub values: DType,
    pub rounded: Option<DType>,
}

impl Cuda {
    /// Enqueues the log-probabilities `logprobs` asks for at the positions
    /// `p` describes (its call's fields set: op, rows, slots, tokens, …),
    /// after the call on this backend's stream; with `in_passes`, the call's
    /// passes wrote the processed ones and their log-sum-exps (a verify call
    /// that asks for the processed distribution): the raw ones and the
    /// top-n, where asked, are left.
    ///
    /// # Safety
    /// `p`'s call fields come from the call's checked views, enqueued before
    /// on this stream; `logprobs` was checked against `p.positions`
    /// (`Logprobs::check`); `p.positions <= ws.max_rows()`; with
    /// `in_passes`, the workspace's log-sum-exps of every emitted position
    /// were written before on this stream.
    pub(super) unsafe fn logprobs(
        &self,
        ws: &Workspace,
        mut p: LogprobsParams,
        sources: Sources,
        logprobs: &mut Logprobs<'_, Device>,
        in_passes: bool,
    ) -> Result<()> {
        let raw = logprobs.raw.is_some() || logprobs.top.as_ref().is_some_and(|t| t.distribution == Distribution::Raw);
        if logprobs.is_none() || p.positions == 0 || (in_passes && !raw && logprobs.top.is_none()) {
            return Ok(());
        }
        let stream = &*self.stream;
        let workspace = ws.on(stream)?;
        let kernels = |d: DType| -> Result<_> {
            Ok((
                self.kernels.function(names::LOGPROBS_LSE.symbol(d, d))?,
                self.kernels.function(names::LOGPROBS_TOP.symbol(d, d))?,
            ))
        };
        let first = kernels(sources.values)?;
        let second = sources.rounded.map(kernels).transpose()?;
        let split = ws.split(p.positions as usize, p.vocab as usize, first.0.blocks_per_sm, Spread::Statistics)?;
        (p.chunk, p.chunks) = (split.chunk, split.chunks);
        let (mut _g1, mut _g2, mut _g3) = (None, None, None);
        if let Some(o) = logprobs.processed.as_mut().filter(|_| !in_passes) {
            let (ptr, g) = o.device_ptr_mut(stream);
            (p.processed, _g1) = (ptr, Some(g));
        }
        if let Some(o) = &mut logprobs.raw {
            let (ptr, g) = o.device_ptr_mut(stream);
            (p.raw, _g2) = (ptr, Some(g));
        }
        if let Some(top) = &mut logprobs.top {
            let (a, ga) = top.logprobs.device_ptr_mut(stream);
            let (b, gb) = top.ids.device_ptr_mut(stream);
            let (c, gc) = top.ranks.device_ptr_mut(stream);
            (p.top_logprobs, p.top_ids, p.ranks) = (a, b, c);
            (p.top_n, p.top_raw) = (top.n as u32, (top.distribution == Distribution::Raw) as u32);
            _g3 = Some((ga, gb, gc));
        }
        let (partials, lse, top_partials) = ws.logprobs_regions();
        p.partials = workspace.scratch + partials;
        p.lse = workspace.scratch + lse;
        p.top_partials = workspace.scratch + top_partials;
        p.counters = workspace.counters;
        p.rounded = sources.rounded.is_some() as u32;
        p.processed_in_passes = in_passes as u32;
        // SAFETY: the caller's call fields; the outputs hold `positions`
        // (· top_n) entries (checked); the split keeps positions · chunks
        // within the workspace's partials (stats region) and top partials,
        // `positions` lse entries and counters, chunk · chunks >= vocab.
        unsafe {
            p.source = 0;
            launch::logprobs(((!in_passes || raw).then_some(&first.0), &first.1), stream, p)?;
            if let Some(second) = &second {
                p.source = 1;
                launch::logprobs((Some(&second.0), &second.1), stream, p)?;
            }
        }
        Ok(())
    }
}
