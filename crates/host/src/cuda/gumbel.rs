//! `gumbel_sample` on the GPU: checks, then the one launch of
//! `crates/kernels/src/gumbel.rs` (the kernel or its lean or small variant,
//! as the workspace's rules pick), or for a call with filters, the
//! threshold kernel and the filtered variant.

use super::launch::Threshold;
use super::logprobs::{Sources, logprobs_rounds};
use super::rounds::{Rounds, check_runs};
use super::{Cuda, KernelName, Launch, Messages, Spread, Variants, Workspace, filter_tables, launch, threshold_split};
use crate::error::{Error, Result};
use crate::gumbel::{GumbelOutput, GumbelSample};
use crate::memory::Device;
use crate::shard::{Exchange, Shard};
use crate::tensor::Column;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use specdec_core::dtype::DType;
use specdec_core::layout::{GumbelCombineParams, GumbelParams, LogprobsParams, POSITIONS_GUMBEL};
use specdec_core::{names, shard};

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
        self.enqueue_gumbel_sample(ws, args, out, None)
    }

    /// `gumbel_sample` as its own rank of a vocab-parallel call
    /// (`docs/VOCAB_PARALLEL.md`): this rank's logits and draft logits are
    /// ids `shard.offset ..` of rows of `shard.vocab` ids (`[rows, V_r]`,
    /// `[slots, k, V_r]`); every rank passes the same slots, positions and
    /// parameters, and every rank's outputs are the unsharded call's, bit for
    /// bit (the draft logits: the rank's columns of them). Enqueued on this
    /// backend's stream, which `exchange` must enqueue on: the sampling
    /// kernel writes each row's best candidate into the rank's message, one
    /// all-gather of `32 + 16 · rows` bytes a rank, and a combine kernel
    /// writes the outputs. With filters, a round before it: the threshold
    /// kernel writes each filtered row's top-k list over the rank's ids, one
    /// all-gather of `1040 · rows` bytes a rank, and a merge kernel finds each
    /// row's `τ` from every rank's lists (REFERENCE §9). With processed or raw
    /// log-probabilities, a round after it: the log-probability kernel sums
    /// each emitted position's row over the rank's ids, one all-gather of
    /// `32 + 144 · rows` bytes a rank (the sums and the token's value), and a
    /// combine writes them. No allocation, no synchronisation; with
    /// [`shard::Nccl`](crate::shard::Nccl), capturable in a CUDA graph.
    ///
    /// Filters must have a top-k of at most
    /// [`shard::MAX_TOP_K`](crate::shard::MAX_TOP_K) (top-p and min-p on top
    /// of it too): a sampling row whose slot's filters have none is flagged
    /// [`status::INVALID_FILTER`](crate::status::INVALID_FILTER) on every
    /// rank, token `-1`.
    ///
    /// Where the ranks disagree in device memory (a rank's checks failed,
    /// their shards do not tile the row, or they read different slots,
    /// temperatures, seeds, positions, columns or filter values for a row),
    /// the rows concerned get token `-1` and [`status::INVALID_SHARD`](crate::status::INVALID_SHARD).
    ///
    /// # Errors
    /// As [`Cuda::gumbel_sample`], and [`Error::InvalidShard`] for a shard
    /// that does not fit its row, or with log-probabilities one whose ids do
    /// not start and end on runs of `layout::RUN` (16) ids (the row's end excepted);
    /// [`Error::NotSharded`] for filters over more than
    /// [`shard::MAX_FILTERED_RANKS`](crate::shard::MAX_FILTERED_RANKS) ranks;
    /// [`Error::WorkspaceRanks`] for a workspace not made for the exchange's
    /// ranks ([`Cuda::sharded_workspace`]). A rank whose checks fail still
    /// takes part in every exchange (its messages say it failed), so that no
    /// rank waits for it; one whose workspace cannot hold the messages sends
    /// none, and ranks that differ in their number of rows send messages of
    /// different lengths: that fails the in-process exchange on every rank
    /// and, under NCCL, is a collective of mismatched sizes (abort the
    /// communicator).
    /// Ranks must ask for the same log-probabilities: what they ask is in
    /// the header's word (asks of as many exchanges that differ flag the
    /// rows), and decides the number of exchanges; asks of different numbers
    /// of exchanges make rows' messages of different lengths
    /// (`shard::last_round_bytes`): the same failed exchange as above.
    pub fn sharded_gumbel_sample(
        &self,
        ws: &mut Workspace,
        shard: Shard,
        exchange: &mut dyn Exchange<Device>,
        args: &GumbelSample<'_, Device>,
        out: &mut GumbelOutput<'_, Device>,
    ) -> Result<()> {
        // The messages' lengths from a real buffer (`pos` has an entry for
        // every row of a valid call), so that a rank whose row count is
        // wrong sends as much as the others and fails alike.
        let (rows, ranks) = (args.pos.len(), exchange.ranks());
        if ranks == 0 {
            return Err(Error::InvalidShard { detail: "the exchange has no ranks".into() });
        }
        let ([sums, tops], logprobs) = logprobs_rounds(rows, &out.logprobs);
        let lists = shard::lists_message_bytes(rows);
        let rows_message = shard::last_round_bytes(shard::message_bytes(rows), logprobs as u32);
        let lens = [lists, rows_message, sums, tops];
        let messages = Messages { units: rows, slot: lens.into_iter().max().unwrap_or(0), ranks };
        // A round of the lists before the rows' with filters, the
        // log-probabilities' after it where they are asked.
        let lens = &lens[usize::from(!filtered(args))..2 + logprobs];
        let mut rounds = Rounds::new(exchange, messages, lens, logprobs as u32);
        let enqueued = ws.on(&self.stream).and_then(|_| ws.message_addresses(messages)).and_then(|at| {
            rounds.at = at;
            rounds.header = self.check_sharded(shard, ranks, args, out)?;
            self.enqueue_gumbel_sample(ws, args, out, Some(&mut rounds))
        });
        let finished = rounds.finish(ws);
        enqueued?;
        finished
    }

    /// A sharded call's checks beyond [`Cuda::gumbel_sample`]'s, and its header.
    fn check_sharded(
        &self,
        shard: Shard,
        ranks: usize,
        args: &GumbelSample<'_, Device>,
        out: &GumbelOutput<'_, Device>,
    ) -> Result<shard::Header> {
        shard.check(args.logits.vocab)?;
        if filtered(args) && ranks > shard::MAX_FILTERED_RANKS {
            return Err(Error::NotSharded {
                what: "filters over more than MAX_FILTERED_RANKS ranks on the CUDA backend",
            });
        }
        if !out.logprobs.is_none() {
            // The order-free sums' terms (REFERENCE §2.6).
            check_runs(shard, args.logits.vocab)?;
        }
        // What every rank must pass alike and the host can see: the shapes
        // and the log-probabilities asked.
        let draft = out.draft_logits.as_ref().map(|(d, column)| {
            let per_row = matches!(column, Column::PerRow(_));
            [d.data.dtype() as u64, d.shape.k as u64, u64::from(per_row)]
        });
        let words = [
            u64::from(filtered(args)),
            args.pos.len() as u64,
            args.slots.len() as u64,
            args.params.temperature.len() as u64,
            u64::from(args.drafting),
            args.logits.data.dtype() as u64,
        ];
        let asked = out.logprobs.digest_words();
        let call = crate::shard::digest(words.into_iter().chain(draft.into_iter().flatten()).chain(asked)) as u32;
        Ok(shard::Header::new(shard.offset as u32, args.logits.vocab as u32, shard.vocab as u32, call))
    }

    /// [`Cuda::gumbel_sample`], or with `sharded` its rank's part of a
    /// sharded call, the exchanges between its launches.
    fn enqueue_gumbel_sample(
        &self,
        ws: &mut Workspace,
        args: &GumbelSample<'_, Device>,
        out: &mut GumbelOutput<'_, Device>,
        sharded: Option<&mut Rounds<'_>>,
    ) -> Result<()> {
        let shape = args.check(out)?;
        let filtered = filtered(args);
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
            let kernel = if sharded.is_some() { names::GUMBEL_THRESHOLD_SHARDED } else { names::GUMBEL_THRESHOLD };
            Some(self.kernels.function(kernel.symbol(logits_dtype, draft_dtype))?)
        } else {
            None
        };
        // A sharded call's rank finds its top-k threshold alone: no search.
        let search = if sharded.is_none() && args.params.filters.searches() {
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
        if let Some(rounds) = sharded {
            let kernel_f32 = |k: KernelName| self.kernels.function(k.symbol(DType::F32, DType::F32));
            let combine = kernel_f32(names::GUMBEL_COMBINE)?;
            let merge = if filtered { Some(kernel_f32(names::GUMBEL_MERGE_SHARDED)?) } else { None };
            (p.shard, p.shard_ranks) = (rounds.header, rounds.messages.ranks as u32);
            (p.send, p.recv) = rounds.at;
            let filters = threshold.as_ref().map(|t| t.kernel).zip(merge.as_ref());
            let combined = GumbelCombineParams {
                recv: p.recv,
                tokens: p.tokens,
                row_status: p.row_status,
                status: p.status,
                ranks: p.shard_ranks,
                rows: p.rows,
                tokens_i64: p.tokens_i64,
                logprob_rounds: rounds.logprob_rounds,
            };
            // SAFETY: as below (no search launches); the workspace's messages
            // hold the rank's and every rank's of every round for `rows` rows
            // (`message_addresses`), each round's gathered on this stream
            // before the launch that reads it; with filters, at most
            // MAX_FILTERED_RANKS ranks (`check_sharded`).
            unsafe {
                launch::sharded_gumbel_sample((filters, &kernel, &combine), stream, (p, combined), || {
                    rounds.next(ws, false)
                })?
            };
            let sources = Sources { values: logits_dtype, rounded };
            // SAFETY: as below; the rounds' last messages hold `rows`
            // positions (`logprobs_rounds`).
            return unsafe { self.logprobs(ws, positions, sources, &mut out.logprobs, false, Some(rounds)) };
        }
        unsafe { launch::gumbel_sample(&kernel, threshold, stream, p)? };
        let sources = Sources { values: logits_dtype, rounded };
        // SAFETY: the call's fields of `positions` are its checked views',
        // enqueued above; `check` matched the outputs to its rows, rows <=
        // max_rows (the split above).
        unsafe { self.logprobs(ws, positions, sources, &mut out.logprobs, false, None) }
    }
}

/// Whether `args` filters its rows (filter arrays).
fn filtered(args: &GumbelSample<'_, Device>) -> bool {
    !args.params.filters.is_none()
}
