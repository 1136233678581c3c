//! Log-probabilities of a call's emitted tokens on the GPU (REFERENCE §8):
//! the launches of `crates/kernels/src/logprobs.rs`, enqueued after the
//! call's own, over its positions.

use super::rounds::Rounds;
use super::{Cuda, Spread, Workspace, launch};
use crate::error::Result;
use crate::logprobs::{Distribution, Logprobs};
use crate::memory::Device;
use cudarc::driver::DevicePtrMut;
use specdec_core::dtype::DType;
use specdec_core::layout::LogprobsParams;
use specdec_core::{names, shard};

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
    /// kernels wrote the processed log-sum-exps (a verify call that asks for
    /// the processed distribution) and, unsharded, the processed
    /// log-probabilities: the raw ones and the top-n, where asked, are left.
    /// With `sharded`, the call's rank of a sharded call: its kernels over
    /// the rank's ids, one more round of `rounds` (the positions' sums and
    /// token values) and the combine, and with a top-n (or rank) another
    /// (the ranks' lists and counts) and their merge.
    ///
    /// # Safety
    /// `p`'s call fields come from the call's checked views, enqueued before
    /// on this stream; `logprobs` was checked against `p.positions`
    /// (`Logprobs::check`); `p.positions <= ws.max_rows()`; with
    /// `in_passes`, the workspace's log-sum-exps of every emitted position
    /// were written before on this stream; with `sharded`, the rounds' next
    /// message holds `p.positions` positions' sums ([`shard::positions_message_bytes`])
    /// and, with a top-n, the one after their lists ([`shard::tops_message_bytes`]).
    pub(super) unsafe fn logprobs(
        &self,
        ws: &mut Workspace,
        mut p: LogprobsParams,
        sources: Sources,
        logprobs: &mut Logprobs<'_, Device>,
        in_passes: bool,
        sharded: Option<&mut Rounds<'_>>,
    ) -> Result<()> {
        let raw = logprobs.raw.is_some() || logprobs.top.as_ref().is_some_and(|t| t.distribution == Distribution::Raw);
        // A sharded call's kernels send every emitted token's value: they run whatever it asks.
        let nothing_left = in_passes && !raw && logprobs.top.is_none() && sharded.is_none();
        if logprobs.is_none() || nothing_left || (p.positions == 0 && sharded.is_none()) {
            return Ok(());
        }
        let stream = &*self.stream;
        let workspace = ws.on(stream)?;
        let (lse_kernel, top_kernel) = if sharded.is_some() {
            (names::LOGPROBS_LSE_SHARDED, names::LOGPROBS_TOP_SHARDED)
        } else {
            (names::LOGPROBS_LSE, names::LOGPROBS_TOP)
        };
        let kernels = |d: DType| -> Result<_> {
            Ok((self.kernels.function(lse_kernel.symbol(d, d))?, self.kernels.function(top_kernel.symbol(d, d))?))
        };
        let first = kernels(sources.values)?;
        let second = sources.rounded.map(kernels).transpose()?;
        let split = ws.split(p.positions as usize, p.vocab as usize, first.0.blocks_per_sm, Spread::Statistics)?;
        (p.chunk, p.chunks) = (split.chunk, split.chunks);
        let (mut _g1, mut _g2, mut _g3) = (None, None, None);
        // Unsharded, the passes wrote the processed ones; sharded, the combine writes them.
        if let Some(o) = logprobs.processed.as_mut().filter(|_| !in_passes || sharded.is_some()) {
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
            if let Some(rounds) = sharded {
                let combines = [names::LOGPROBS_COMBINE_SHARDED, names::LOGPROBS_TOP_COMBINE_SHARDED]
                    .map(|k| self.kernels.function(k.symbol(DType::F32, DType::F32)));
                let [combine, top_combine] = combines;
                (p.shard, p.shard_ranks) = (rounds.header, rounds.messages.ranks as u32);
                (p.send, p.recv) = rounds.at;
                // SAFETY: as above; the rounds' messages hold `positions`
                // positions, a round for the sums and, with a top-n, one for it (caller).
                return launch::sharded_logprobs(
                    ([Some(&first), second.as_ref()], &combine?, &top_combine?),
                    stream,
                    p,
                    || rounds.next(ws, false),
                );
            }
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

/// The rounds a sharded call's `logprobs` of `positions` positions adds
/// after the call's own: the lengths of the sums' round and of the
/// top-n's, and how many of them run (the sums' where any log-probability
/// is asked, the top-n's too where a top-n or rank is).
pub(super) fn logprobs_rounds(positions: usize, logprobs: &Logprobs<'_, Device>) -> ([usize; 2], usize) {
    let lens = [shard::positions_message_bytes(positions), shard::tops_message_bytes(positions)];
    (lens, usize::from(!logprobs.is_none()) + usize::from(logprobs.top.is_some()))
}
