//! `rejection_sample` on the GPU: checks, then the two launches of
//! `crates/kernels/src/rejection/` (each kernel or its lean or small
//! variant, as the workspace's rules pick); for a call with filters, the
//! threshold kernel first and the filtered variants of both passes.

use super::launch::Threshold;
use super::logprobs::{Sources, logprobs_rounds};
use super::rounds::{Rounds, check_runs};
use super::{
    Cuda, KernelName, Launch, MOST_CHUNKS, Messages, Split, Spread, Variants, Workspace, filter_tables, launch,
    threshold_split,
};
use crate::error::{Error, Result};
use crate::logprobs::Distribution;
use crate::memory::Device;
use crate::rejection::{RejectionOutput, RejectionSample, Verification};
use crate::shard::{Exchange, Shard};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use specdec_core::dtype::DType;
use specdec_core::layout::{LogprobsParams, MAX_SYNTHETIC_DRAFTS, POSITIONS_REJECTION, RatesParams, RejectionParams};
use specdec_core::{names, shard};

impl Cuda {
    /// `rejection_sample` (SPEC §4) on device buffers, enqueued on this
    /// backend's stream. No allocation, no synchronisation. Offsets, slots,
    /// temperatures and draft ids are checked in the kernels: a request with
    /// a bad one gets tokens `-1` and `num_emitted = 0`, and the workspace's
    /// status word says why (bad filter values: `status::INVALID_FILTER`).
    ///
    /// # Errors
    /// Shape, stride and length errors before anything is launched;
    /// [`Error::WorkspaceTooSmall`](crate::Error::WorkspaceTooSmall) when `requests · (max_drafts + 1)`
    /// exceeds the workspace; [`Error::WorkspaceContext`](crate::Error::WorkspaceContext)
    /// or [`Error::WorkspaceStream`](crate::Error::WorkspaceStream) for a workspace made on
    /// another stream; driver errors.
    pub fn rejection_sample(
        &self,
        ws: &mut Workspace,
        args: &RejectionSample<'_, Device>,
        out: &mut RejectionOutput<'_, Device>,
    ) -> Result<()> {
        self.enqueue_rejection_sample(ws, args, out, None)
    }

    /// `rejection_sample` as its own rank of a vocab-parallel call
    /// (REFERENCE §9): this rank's target logits and draft logits hold ids
    /// `shard.offset ..` of rows of `shard.vocab` ids (`[rows, V_r]`,
    /// `[slots, k, >= V_r]`); every rank passes the same offsets, drafts,
    /// slots, positions and parameters, and every rank's tokens, counts and
    /// row statuses (and log-probabilities) are the unsharded call's, bit
    /// for bit. Enqueued on this
    /// backend's stream, which `exchange` must enqueue on: pass 1 over the
    /// rank's ids, one all-gather of `32 + 160 · requests · (K + 1)` bytes a
    /// rank (each row's order-free sums, argmax and draft logits; with
    /// filters, `2 · 1040` more a row: its top-k lists), the decision, pass 2
    /// over the rank's ids, one all-gather of `16 + 16 · requests` bytes a
    /// rank (each request's candidates; with block verification `16 + 24 ·
    /// requests · (K + 1)`: each row's where a block may end, and the rank's
    /// part of its residual mass), a combine, and with processed or raw
    /// log-probabilities a third round: the log-probability kernel over the
    /// rank's ids, one all-gather of `32 + 144 · requests · (K + 1)` bytes a
    /// rank (each position's sums and its token's value), and their combine
    /// (`kernels::rejection::sharded`). No allocation, no synchronisation;
    /// with [`shard::Nccl`](crate::shard::Nccl), capturable in a CUDA graph.
    ///
    /// Filters must have a top-k of at most
    /// [`shard::MAX_TOP_K`](crate::shard::MAX_TOP_K) (top-p and min-p
    /// on top of it too): a sampling request whose slot's filters have none
    /// is flagged [`status::INVALID_FILTER`](crate::status::INVALID_FILTER)
    /// on every rank (REFERENCE §9).
    ///
    /// Where the ranks disagree in device memory (a rank's checks failed,
    /// their shards do not tile the row, or they read different slots,
    /// temperatures, seeds, positions, drafts or offsets for a request),
    /// the requests concerned are invalid on every rank, flagged
    /// [`status::INVALID_SHARD`](crate::status::INVALID_SHARD).
    ///
    /// # Errors
    /// As [`Cuda::rejection_sample`], and [`Error::InvalidShard`] for a shard
    /// that does not fit its row or whose ids do not start and end on runs
    /// of `layout::RUN` (16) ids (the row's end excepted: the sums' terms,
    /// REFERENCE §2.6); [`Error::NotSharded`] for filters over more than
    /// [`shard::MAX_FILTERED_RANKS`](crate::shard::MAX_FILTERED_RANKS) ranks;
    /// [`Error::WorkspaceRanks`] for a workspace not made for the
    /// exchange's ranks ([`Cuda::sharded_workspace`]). A rank whose checks
    /// fail still takes part in both exchanges (its messages say it failed),
    /// so that no rank waits for it; ranks that differ in their number of
    /// requests or drafts send messages of different lengths: that fails the
    /// in-process exchange on every rank and, under NCCL, is a collective of
    /// mismatched sizes (abort the communicator).
    /// Ranks must ask for the same log-probabilities: what they ask is in
    /// the header's word (asks of as many exchanges that differ flag the
    /// rows), and decides the number of exchanges; asks of different numbers
    /// of exchanges make round-2 messages of different lengths
    /// (`shard::last_round_bytes`): the same failed exchange as above.
    pub fn sharded_rejection_sample(
        &self,
        ws: &mut Workspace,
        shard: Shard,
        exchange: &mut dyn Exchange<Device>,
        args: &RejectionSample<'_, Device>,
        out: &mut RejectionOutput<'_, Device>,
    ) -> Result<()> {
        let ranks = exchange.ranks();
        if ranks == 0 {
            return Err(Error::InvalidShard { detail: "the exchange has no ranks".into() });
        }
        // The messages' lengths from real buffers (`slots` has an entry for
        // every request of a valid call), so that a rank whose shapes are
        // wrong sends as much as the others and fails alike.
        let requests = args.slots.len();
        let pairs = requests.saturating_mul(args.max_drafts.saturating_add(1));
        let fits = pairs <= ws.max_rows();
        let lists = filtered(args);
        let ([sums, tops], logprobs) = logprobs_rounds(pairs, &out.logprobs);
        let candidates = if block_verified(args) {
            shard::block_candidates_message_bytes(pairs)
        } else {
            shard::candidates_message_bytes(requests)
        };
        let candidates = shard::last_round_bytes(candidates, logprobs as u32);
        let lens = if fits { [shard::pairs_message_bytes(pairs, lists), candidates, sums, tops] } else { [0; 4] };
        let messages = Messages { units: pairs, slot: lens.into_iter().max().unwrap_or(0), ranks };
        // The log-probabilities' rounds where they are asked.
        let mut rounds = Rounds::new(exchange, messages, &lens[..2 + logprobs], logprobs as u32);
        let enqueued = ws.on(&self.stream).and_then(|_| ws.message_addresses(messages)).and_then(|at| {
            rounds.at = at;
            rounds.header = self.check_sharded_rejection(shard, ranks, args, out)?;
            self.enqueue_rejection_sample(ws, args, out, Some(&mut rounds))
        });
        let finished = rounds.finish(ws);
        enqueued?;
        finished
    }

    /// A sharded call's checks beyond [`Cuda::rejection_sample`]'s, and its header.
    fn check_sharded_rejection(
        &self,
        shard: Shard,
        ranks: usize,
        args: &RejectionSample<'_, Device>,
        out: &RejectionOutput<'_, Device>,
    ) -> Result<shard::Header> {
        let ids = args.target.vocab;
        shard.check(ids)?;
        check_runs(shard, ids)?;
        if filtered(args) && ranks > shard::MAX_FILTERED_RANKS {
            return Err(Error::NotSharded {
                what: "filters over more than MAX_FILTERED_RANKS ranks on the CUDA backend",
            });
        }
        let (rule, rates) = match args.verification {
            Verification::Token => (0, &[][..]),
            Verification::Synthetic(rates) => (1, rates),
            Verification::Block => (2, &[][..]),
        };
        // What every rank must pass alike and the host can see: the shapes
        // and the rates (the kernels compare what lives in device memory).
        let draft = args.draft_logits.as_ref().map(|d| [d.data.dtype() as u64, d.shape.k as u64]);
        let words = [
            filtered(args) as u64,
            args.target.rows as u64,
            args.slots.len() as u64,
            args.max_drafts as u64,
            args.params.temperature.len() as u64,
            args.target.data.dtype() as u64,
            rule,
            rates.len() as u64,
        ];
        let rates = rates.iter().map(|r| u64::from(r.to_bits()));
        let asked = out.logprobs.digest_words();
        let words = words.into_iter().chain(draft.into_iter().flatten()).chain(rates).chain(asked);
        let call = crate::shard::digest(words) as u32;
        Ok(shard::Header::new(shard.offset as u32, ids as u32, shard.vocab as u32, call))
    }

    /// [`Cuda::rejection_sample`], or with `sharded` its rank's part of a
    /// sharded call, the exchanges between its launches.
    fn enqueue_rejection_sample(
        &self,
        ws: &mut Workspace,
        args: &RejectionSample<'_, Device>,
        out: &mut RejectionOutput<'_, Device>,
        sharded: Option<&mut Rounds<'_>>,
    ) -> Result<()> {
        let shape = args.check(out)?;
        let rates = match args.verification {
            Verification::Token => None,
            Verification::Synthetic(rates) if rates.len() <= MAX_SYNTHETIC_DRAFTS => Some(rates),
            Verification::Synthetic(_) => {
                return Err(Error::NotOnCuda { what: "synthetic acceptance past MAX_SYNTHETIC_DRAFTS drafts" });
            }
            Verification::Block => None,
        };
        let block = block_verified(args);
        let filtered = filtered(args);
        let target_dtype = args.target.data.dtype();
        // Without draft logits their dtype is moot: take the narrowest,
        // whose kernels hold the fewest registers (more blocks per SM).
        let draft_dtype = args.draft_logits.as_ref().map_or(DType::BF16, |d| d.data.dtype());
        let dtypes = (target_dtype, draft_dtype);
        let threshold = if filtered {
            let kernel =
                if sharded.is_some() { names::REJECTION_THRESHOLD_SHARDED } else { names::REJECTION_THRESHOLD };
            Some(self.kernels.function(kernel.symbol(target_dtype, draft_dtype))?)
        } else {
            None
        };
        // A sharded call's rank finds its top-k thresholds alone: no search.
        let searches =
            args.params.filters.searches() || args.draft_logits.as_ref().is_some_and(|d| d.filters.searches());
        let search = if sharded.is_none() && searches {
            Some(self.kernels.function(names::REJECTION_THRESHOLD_SEARCH.symbol(target_dtype, draft_dtype))?)
        } else {
            None
        };
        // Log-probabilities of the processed distribution (the outputs or a
        // top-n of it): the passes write them and their log-sum-exps from
        // pass 1's `LSE(S)`, in its kernels that do (no row read again), so
        // that a request's bits do not depend on what else the call asks
        // for; a top-n then takes one kernel after the call, anything raw
        // the raw sums of `cuda::logprobs` too.
        let asks_processed = out.logprobs.processed.is_some()
            || out.logprobs.top.as_ref().is_some_and(|t| t.distribution == Distribution::Processed);
        // A sharded call's passes write none (their decision is the sharded
        // one): its combine writes the processed log-sum-exps for the
        // log-probability kernels after the call.
        let processed = asks_processed && sharded.is_none();
        let (stats_variants, resample_variants) = if filtered {
            let op =
                if processed { names::REJECTION_STATS_FILTERED_PROCESSED } else { names::REJECTION_STATS_FILTERED };
            (
                Variants { op, spread: Spread::Statistics, lean: None, small: None },
                Variants { op: names::REJECTION_RESAMPLE_FILTERED, spread: Spread::Resample, lean: None, small: None },
            )
        } else {
            let (op, small) = if processed {
                (names::REJECTION_STATS_PROCESSED, Some(names::REJECTION_STATS_SMALL_PROCESSED))
            } else {
                (names::REJECTION_STATS, Some(names::REJECTION_STATS_SMALL))
            };
            (
                Variants { op, spread: Spread::Statistics, lean: None, small },
                Variants {
                    op: names::REJECTION_RESAMPLE,
                    spread: Spread::Resample,
                    lean: Some(names::REJECTION_RESAMPLE_LEAN),
                    small: Some(names::REJECTION_RESAMPLE_SMALL),
                },
            )
        };
        let Launch { kernel: stats, split } =
            self.launch_for(ws, stats_variants, dtypes, (shape.requests * (args.max_drafts + 1), args.target.vocab))?;
        // A filtered pass 1 of the plain outputs is two launches over its grid
        // (names::REJECTION_STATS_KEPT): each request in the one of its rule.
        let kept = if filtered && !processed {
            Some(self.kernels.function(names::REJECTION_STATS_KEPT.symbol(target_dtype, draft_dtype))?)
        } else {
            None
        };
        let stats = [Some(&stats), kept.as_ref()];
        // A sharded unfiltered call with block verification runs pass 2 over
        // every row's jobs at once (`launch::sharded_rejection_sample`).
        let jobs = if sharded.is_some() && block { shape.requests * (args.max_drafts + 1) } else { shape.requests };
        let Launch { kernel: resample, split: resample_split } =
            self.launch_for(ws, resample_variants, dtypes, (jobs, args.target.vocab))?;
        // One-hot drafts read no row in it: one block a row. With draft
        // logits most of its blocks find their row need not be summed, so
        // the rows that must be are split at least in `MOST_CHUNKS`: whole
        // rows left a tail of a few blocks each summing one
        // (benches/results/2026-12-04-nvidia-h200-block-verification.md).
        let block = if block {
            let op = if sharded.is_some() { names::REJECTION_BLOCK_SHARDED } else { names::REJECTION_BLOCK };
            let v = Variants { op, spread: Spread::Statistics, lean: None, small: None };
            let Launch { kernel, split } =
                self.launch_for(ws, v, dtypes, (shape.requests * (args.max_drafts - 1), args.target.vocab))?;
            let split = if args.draft_logits.is_some() {
                split.at_least(MOST_CHUNKS, args.target.vocab)
            } else {
                Split { chunk: split.chunk, chunks: 1 }
            };
            Some((kernel, split))
        } else {
            None
        };
        let stream = &*self.stream;
        let workspace = ws.on(stream)?;

        // The caller's views; their guards record cudarc's read/write events
        // (where it tracks them) when dropped after the launch.
        let (target, _g1) = args.target.data.device_ptr(stream);
        let (offsets, _g2) = args.offsets.device_ptr(stream);
        let (drafts, _g3) = args.drafts.device_ptr(stream);
        let (slots, _g4) = args.slots.device_ptr(stream);
        let (pos, _g5) = args.pos.device_ptr(stream);
        let (temperature, _g6) = args.params.temperature.device_ptr(stream);
        let (seed, _g7) = args.params.seed.device_ptr(stream);
        let mut p = RejectionParams {
            target,
            row_stride: args.target.row_stride as u64,
            offsets,
            drafts,
            slots,
            pos,
            temperature,
            seed,
            rows: shape.rows as u32,
            vocab: args.target.vocab as u32,
            requests: shape.requests as u32,
            max_drafts: args.max_drafts as u32,
            num_slots: shape.num_slots as u32,
            chunk: split.chunk,
            chunks: split.chunks,
            resample_chunk: resample_split.chunk,
            resample_chunks: resample_split.chunks,
            floor_margin: self.floor_margin,
            ..RejectionParams::default()
        };
        let rates_kernel =
            rates.map(|_| self.kernels.function(names::REJECTION_RATES.symbol(DType::F32, DType::F32))).transpose()?;
        let (mut _g8, mut _g13) = (None, None);
        if let Some(d) = &args.draft_logits {
            let (ptr, g) = d.data.device_ptr(stream);
            _g8 = Some(g);
            p.draft_logits = ptr;
            p.draft_stride0 = d.shape.stride0 as u64;
            p.draft_stride1 = d.shape.stride1 as u64;
            let (tables, g) = filter_tables(&d.filters, stream);
            _g13 = Some(g);
            p.draft_filters = tables;
        }
        let (tables, _g14) = filter_tables(&args.params.filters, stream);
        p.filters = tables;
        let (tokens, tokens_i64, _g9) = out.tokens.device_ptr_mut(stream);
        (p.tokens, p.tokens_i64) = (tokens, tokens_i64 as u32);
        let (num_emitted, _g10) = out.num_emitted.device_ptr_mut(stream);
        p.num_emitted = num_emitted;
        let mut _g15 = None;
        if let Some(out) = out.logprobs.processed.as_mut().filter(|_| processed) {
            let (ptr, g) = out.device_ptr_mut(stream);
            (p.processed, _g15) = (ptr, Some(g));
        }
        if asks_processed && (out.logprobs.top.is_some() || sharded.is_some()) {
            p.lse = workspace.scratch + ws.logprobs_regions().1;
        }
        let mut _g11 = None;
        if let Some(a) = &mut out.accepted {
            let (ptr, g) = a.device_ptr_mut(stream);
            _g11 = Some(g);
            p.accepted = ptr;
        }
        let mut _g12 = None;
        if let Some(s) = &mut out.row_status {
            let (ptr, g) = s.device_ptr_mut(stream);
            _g12 = Some(g);
            p.row_status = ptr;
        }
        let (stats_at, jobs_at, partials_at) = ws.rejection_regions();
        p.stats = workspace.scratch + stats_at;
        p.jobs = workspace.scratch + jobs_at;
        p.partials = workspace.scratch + partials_at;
        p.thresholds = workspace.scratch + ws.thresholds_region();
        p.filter_scratch = workspace.scratch + ws.filter_scratch_region();
        let keeps = args.params.filters.bounds_candidates()
            || args.draft_logits.as_ref().is_some_and(|d| d.filters.bounds_candidates());
        let entries = 2 * shape.requests * (args.max_drafts + 1);
        let filter_split = threshold_split(args.target.vocab, keeps, split, (entries, ws.filter_entries()));
        (p.threshold_chunk, p.threshold_chunks) = (filter_split.chunk, filter_split.chunks);
        // Rows of one block are searched by it: no search launches.
        let search = search.filter(|_| filter_split.chunks > 1);
        p.threshold_search = search.is_some() as u32;
        p.filtered = filtered as u32;
        if let Some((_, split)) = &block {
            let (rows, states, pair_jobs) = ws.block_regions();
            (p.block_rows, p.block_states) = (workspace.scratch + rows, workspace.scratch + states);
            (p.block_chunk, p.block_chunks) = (split.chunk, split.chunks);
            if sharded.is_some() {
                p.pair_jobs = workspace.scratch + pair_jobs;
            }
        }
        p.status = workspace.status;
        p.counters = workspace.counters;
        p.row_counters = workspace.row_counters;
        let threshold = threshold.as_ref().map(|kernel| Threshold { kernel, search: search.as_ref() });
        let rates = rates_kernel.as_ref().zip(rates).map(|(kernel, rates)| {
            let dst = workspace.scratch + ws.rates_region();
            let mut params = RatesParams { rates: [0.0; MAX_SYNTHETIC_DRAFTS], dst, count: rates.len() as u32 };
            params.rates[..rates.len()].copy_from_slice(rates);
            p.rates = dst;
            (kernel, params)
        });
        let positions = LogprobsParams {
            op: POSITIONS_REJECTION,
            values: p.target,
            row_stride: p.row_stride,
            offsets: p.offsets,
            slots: p.slots,
            temperature: p.temperature,
            tokens: p.tokens,
            tokens_i64: p.tokens_i64,
            num_emitted: p.num_emitted,
            // The target rows' `τ`, the first half of the thresholds.
            thresholds: if filtered { p.thresholds } else { 0 },
            positions: p.requests * (p.max_drafts + 1),
            vocab: p.vocab,
            num_slots: p.num_slots,
            max_drafts: p.max_drafts,
            ..LogprobsParams::default()
        };
        // SAFETY: every pointer comes from a view whose length `check` matched
        // against the shape; the splits bounded requests·(K+1)·chunks and
        // requests·resample_chunks by the workspace's regions (and requests <=
        // rows <= its counters; 2·requests·(K+1) <= 2·max_rows thresholds, and
        // filter scratch entries unless the threshold split is one block a
        // row), and chunk · chunks >= vocab (all three splits, the
        // threshold's within its summaries); each filter table has
        // `num_slots` entries; a synthetic call's rates fit the workspace's
        // MAX_SYNTHETIC_DRAFTS entries (K <= MAX_SYNTHETIC_DRAFTS, above); the
        // block kernel's split bounded requests·(K−1)·block_chunks by the
        // partials and requests·(K−1) <= max_rows counters, its notes and
        // states hold max_rows entries each.
        let block = block.as_ref().map(|(kernel, _)| kernel);
        if let Some(rounds) = sharded {
            let kernel = |k: KernelName| self.kernels.function(k.symbol(DType::F32, DType::F32));
            let (decide, combine) =
                (kernel(names::REJECTION_DECIDE_SHARDED)?, kernel(names::REJECTION_COMBINE_SHARDED)?);
            let merge = if filtered { Some(kernel(names::REJECTION_MERGE_SHARDED)?) } else { None };
            (p.shard, p.shard_ranks, p.logprob_rounds) =
                (rounds.header, rounds.messages.ranks as u32, rounds.logprob_rounds);
            (p.send, p.recv) = rounds.at;
            let filters = threshold.as_ref().map(|t| t.kernel).zip(merge.as_ref());
            // One-hot blocks have no row to sum: the combine weighs them.
            let block = block.filter(|_| args.draft_logits.is_some());
            // SAFETY: as below (no search launches); the workspace's
            // messages hold the rank's and every rank's of every round for
            // `requests·(K+1)` pairs with their lists (`message_addresses`),
            // each round's gathered on this stream before the launch that
            // reads it; with filters, at most MAX_FILTERED_RANKS ranks; with
            // block verification, `pair_jobs` holds requests·(K+1) jobs.
            unsafe {
                launch::sharded_rejection_sample(
                    (rates, filters, stats, &decide, block, &resample, &combine),
                    stream,
                    p,
                    || rounds.next(ws, false),
                )?
            };
            drop(_g15);
            let sources = Sources { values: target_dtype, rounded: None };
            // SAFETY: as below; with `asks_processed`, the combine wrote the
            // log-sum-exps of the emitted positions (p.lse); the rounds' last
            // messages hold requests · (K + 1) positions (`logprobs_rounds`).
            return unsafe { self.logprobs(ws, positions, sources, &mut out.logprobs, asks_processed, Some(rounds)) };
        }
        unsafe { launch::rejection_sample((rates, threshold, stats, block, &resample), stream, p)? };
        drop(_g15);
        let sources = Sources { values: target_dtype, rounded: None };
        // SAFETY: the call's fields of `positions` are its checked views',
        // enqueued above; `check` matched the outputs to its positions,
        // requests · (K + 1) <= max_rows (the split above); with `processed`,
        // the passes wrote the log-sum-exps of the emitted positions (p.lse).
        unsafe { self.logprobs(ws, positions, sources, &mut out.logprobs, processed, None) }
    }
}

/// Whether `args` asks for block verification of blocks that can hold two
/// or more drafts: a block of one is the token rule's (REFERENCE §4.11),
/// which the decision runs.
fn block_verified(args: &RejectionSample<'_, Device>) -> bool {
    matches!(args.verification, Verification::Block) && args.max_drafts >= 2
}

/// Whether `args` filters the target or the draft logits (filter arrays).
fn filtered(args: &RejectionSample<'_, Device>) -> bool {
    !args.params.filters.is_none() || args.draft_logits.as_ref().is_some_and(|d| !d.filters.is_none())
}
