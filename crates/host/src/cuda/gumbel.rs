//! `gumbel_sample` on the GPU: checks, then the one launch of
//! `crates/kernels/src/gumbel.rs` (the kernel or its lean or small variant,
//! as the workspace's rules pick), or for a call with filters, the
//! threshold kernel and the filtered variant.

use super::launch::Threshold;
use super::logprobs::Sources;
use super::{Cuda, Launch, Spread, Variants, Workspace, filter_tables, launch, threshold_split};
use crate::error::Result;
use crate::gumbel::{GumbelOutput, GumbelSample};
use crate::memory::Device;
use crate::tensor::Column;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use specdec_core::layout::{GumbelParams, LogprobsParams, POSITIONS_GUMBEL};
use specdec_core::names;

impl Cuda {
    /// `gumbel_sample` (SPEC §3) on device buffers, enqueued on this backend's
    /// stream. No allocation, no synchronisation. Slots, temperatures and
    /// per-row columns are checked in the kernel: a bad one makes its row's
    /// token `-1`, sets its row status and the workspace's status word; so do
    /// bad filter values (`status::INVALID_FILTER`).
    ///
    /// # Errors
    /// Shape, stride and length errors before anything is launched;
    /// [`Error::WorkspaceTooSmall`](crate::Error::WorkspaceTooSmall);
    /// [`Error::WorkspaceContext`](crate::Error::WorkspaceContext) or
    /// [`Error::WorkspaceStream`](crate::Error::WorkspaceStream) for a workspace made on
    /// another stream; driver errors.
    pub fn gumbel_sample(
        &self,
        ws: &mut Workspace,
        args: &GumbelSample<'_, Device>,
        out: &mut GumbelOutput<'_, Device>,
    ) -> Result<()> {
        let shape = args.check(out)?;
        let filtered = !args.params.filters.is_none();
        let logits_dtype = args.logits.data.dtype();
        let draft_dtype = out.draft_logits.as_ref().map_or(logits_dtype, |(draft, _)| draft.data.dtype());
        // The lean kernels write no draft logits: a draft model's call keeps
        // the registers for its stores (benches/results/2026-12-02-design-measurements.md).
        let lean = out.draft_logits.is_none().then_some(names::GUMBEL_SAMPLE_LEAN);
        let variants = if filtered {
            Variants { op: names::GUMBEL_SAMPLE_FILTERED, spread: Spread::Streaming, lean: None, small: None }
        } else {
            Variants {
                op: names::GUMBEL_SAMPLE,
                spread: Spread::Streaming,
                lean,
                small: Some(names::GUMBEL_SAMPLE_SMALL),
            }
        };
        let threshold = if filtered {
            Some(self.kernels.function(names::GUMBEL_THRESHOLD.symbol(logits_dtype, draft_dtype))?)
        } else {
            None
        };
        let search = if args.params.filters.searches() {
            Some(self.kernels.function(names::GUMBEL_THRESHOLD_SEARCH.symbol(logits_dtype, draft_dtype))?)
        } else {
            None
        };
        let Launch { kernel, split } =
            self.launch_for(ws, variants, (logits_dtype, draft_dtype), (shape.rows, args.logits.vocab))?;
        let stream = &*self.stream;
        let workspace = ws.on(stream)?;

        // The caller's views; their guards record cudarc's read/write events
        // (where it tracks them) when dropped after the launch.
        let (logits, _g1) = args.logits.data.device_ptr(stream);
        let (slots, _g2) = args.slots.device_ptr(stream);
        let (pos, _g3) = args.pos.device_ptr(stream);
        let (temperature, _g4) = args.params.temperature.device_ptr(stream);
        let (seed, _g5) = args.params.seed.device_ptr(stream);
        let mut p = GumbelParams {
            logits,
            row_stride: args.logits.row_stride as u64,
            slots,
            temperature,
            seed,
            pos,
            rows: shape.rows as u32,
            vocab: args.logits.vocab as u32,
            num_slots: shape.num_slots as u32,
            chunk: split.chunk,
            chunks: split.chunks,
            drafting: args.drafting as u32,
            ..GumbelParams::default()
        };
        let (tokens, tokens_i64, _g6) = out.tokens.device_ptr_mut(stream);
        (p.tokens, p.tokens_i64) = (tokens, tokens_i64 as u32);
        let (mut _g7, mut _g8, mut _g9) = (None, None, None);
        if let Some(s) = &mut out.row_status {
            let (ptr, g) = s.device_ptr_mut(stream);
            _g7 = Some(g);
            p.row_status = ptr;
        }
        if let Some((draft, column)) = &mut out.draft_logits {
            let (ptr, g) = draft.data.device_ptr_mut(stream);
            _g8 = Some(g);
            p.draft_logits = ptr;
            p.draft_stride0 = draft.shape.stride0 as u64;
            p.draft_stride1 = draft.shape.stride1 as u64;
            p.draft_k = draft.shape.k as u32;
            match column {
                Column::All(c) => p.draft_column = *c as u32,
                Column::PerRow(cols) => {
                    let (ptr, g) = cols.device_ptr(stream);
                    _g9 = Some(g);
                    p.draft_columns = ptr;
                }
            }
        }
        let (tables, _g10) = filter_tables(&args.params.filters, stream);
        p.filters = tables;
        p.partials = workspace.scratch;
        p.thresholds = workspace.scratch + ws.thresholds_region();
        p.filter_scratch = workspace.scratch + ws.filter_scratch_region();
        let keeps = args.params.filters.bounds_candidates();
        let filter_split = threshold_split(args.logits.vocab, keeps, split, (shape.rows, ws.filter_entries()));
        (p.threshold_chunk, p.threshold_chunks) = (filter_split.chunk, filter_split.chunks);
        // Rows of one block are searched by it: no search launches.
        let search = search.filter(|_| filter_split.chunks > 1);
        p.threshold_search = search.is_some() as u32;
        p.status = workspace.status;
        p.counters = workspace.counters;
        let threshold = threshold.as_ref().map(|kernel| Threshold { kernel, search: search.as_ref() });
        // Rows drafted into draft logits that round the logits were sampled
        // from the stored values (SPEC §3.3), and report theirs.
        let rounded = Some(draft_dtype).filter(|&d| p.draft_logits != 0 && logits_dtype.rounds_into(d));
        let positions = LogprobsParams {
            op: POSITIONS_GUMBEL,
            values: p.logits,
            row_stride: p.row_stride,
            draft_logits: p.draft_logits,
            draft_stride0: p.draft_stride0,
            draft_stride1: p.draft_stride1,
            draft_columns: p.draft_columns,
            draft_column: p.draft_column,
            slots: p.slots,
            temperature: p.temperature,
            tokens: p.tokens,
            tokens_i64: p.tokens_i64,
            thresholds: if filtered { p.thresholds } else { 0 },
            positions: p.rows,
            vocab: p.vocab,
            num_slots: p.num_slots,
            ..LogprobsParams::default()
        };
        // SAFETY: every pointer above comes from a view whose length `check`
        // matched against the shape (each filter table `num_slots`); `split`
        // sized chunks within the workspace (capacity ≥ rows · chunks,
        // counters ≥ rows, thresholds ≥ rows, filter scratch ≥ rows unless the
        // threshold split is one block a row) and chunk · chunks ≥ vocab (both
        // splits; the threshold's within its summaries).
        unsafe { launch::gumbel_sample(&kernel, threshold, stream, p)? };
        let sources = Sources { values: logits_dtype, rounded };
        // SAFETY: the call's fields of `positions` are its checked views',
        // enqueued above; `check` matched the outputs to its rows, rows <=
        // max_rows (the split above).
        unsafe { self.logprobs(ws, positions, sources, &mut out.logprobs, false) }
    }
}
