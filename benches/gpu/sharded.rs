//! The sharded cases (`sharded` in their names; `--only sharded` alone),
//! `P = 2` ranks on this one GPU (a stream and a thread each,
//! `shard::InProcessCuda`), each against the unsharded call, side by side:
//! vocab-parallel `gumbel_sample` (REFERENCE §9) random at `T`, f32 logits
//! of `V_MAIN`; and `rejection_sample` of `B` requests of `SHARDED_K` drafts,
//! f32 target and bf16 draft logits of `V_MAIN` at `T` (the main grid's
//! bf16-draft verification, drafts sampled from the draft logits); each
//! without filters and with `SHARDED_FILTER` on every slot (the target's, in
//! verification; its case's unsharded call filtered alike); and unfiltered
//! calls asking for each emitted token's processed and raw log-probabilities
//! (name suffix ` +logprobs+raw`), or for the processed one, the top 20
//! (`MAX_TOP_LOGPROBS`) under the processed distribution and the token's
//! rank (` +top20`); their unsharded call asks alike; and verification by
//! blocks (` +block`, REFERENCE §4.11), its unsharded call alike.
//!
//! Neither runs in a CUDA graph (the in-process exchange meets on the host),
//! so both are timed alike: CUDA events on rank 0's stream (the unsharded
//! call's own) around `SHARDED_CALLS` calls back to back, L2 not flushed,
//! the median of `SHARDED_ROUNDS` rounds per call. Rank `r` reads its ids
//! of the shared logits buffers in place (`Logits` of `V_r` ids at row
//! stride `V`, draft logits of width `V_r`). Each rank sends `32 + 16·rows`
//! bytes a `gumbel_sample` call (filtered: `+ 1040·rows`), `32 + 160·B·(K+1)` (filtered: `+ 2080·B·(K+1)`)
//! then `16 + 16·B` a verification (by blocks `16 + 24·B·(K+1)`; with log-probabilities, `+ 32 + 144` a
//! position: a row, a request's `K + 1` token slots, and 16 on the call's last round; with a top-n,
//! `+ 32 + 144 + 32 + 256` a position and 32), and receives `P` times as much; an all-gather of the
//! target logits rows instead moves `(P − 1)/P` of `4·rows·V` bytes into
//! each rank.

use super::{
    Buffers, FilterArrays, MAX_ROWS, Options, T, V_MAIN, VERIFY_SLOTS, fail, setup, verify_draft_shape, verify_offsets,
};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use specdec::filter::Filter;
use specdec::shard::{InProcessCuda, Shard};
use specdec::{
    Cuda, Device, Distribution, DraftLogits, GumbelOutput, GumbelSample, Logits, Logprobs, MAX_TOP_LOGPROBS,
    RejectionOutput, RejectionSample, SamplingParams, Verification, Workspace,
};
use specdec_core::shard::{
    block_candidates_message_bytes, candidates_message_bytes, last_round_bytes, lists_message_bytes, message_bytes,
    pairs_message_bytes, positions_message_bytes, tops_message_bytes,
};
use std::fmt::Write as _;
use std::sync::{Arc, Barrier};

const SHARDED_ROWS: [usize; 4] = [1, 64, 256, 1024];
const SHARDED_REQUESTS: [usize; 3] = [1, 64, 256];
const SHARDED_K: usize = 7;
const SHARDED_RANKS: usize = 2;
const SHARDED_CALLS: usize = 20;
const SHARDED_ROUNDS: usize = 9;
/// The filter of the filtered cases, on every slot (verification: its target).
const SHARDED_FILTER: Filter = Filter { top_k: 50, top_p: 0.9, min_p: 0.0 };

/// A sharded case's call: `gumbel_sample` of `rows` rows, or verification
/// of `requests` requests of `SHARDED_K` drafts, asking for `logprobs`.
#[derive(Clone, Copy)]
pub enum Call {
    Sample { rows: usize, filter: Option<Filter>, logprobs: Asks },
    Verify { requests: usize, filter: Option<Filter>, logprobs: Asks, block: bool },
}

/// The log-probabilities a case asks for: none; the processed and the raw
/// ones of its tokens; or the processed one, the top `MAX_TOP_LOGPROBS`
/// under the processed distribution and the token's rank.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Asks {
    None,
    Raw,
    Top,
}

/// The log-probability cases: `gumbel_sample` rows and verification requests.
const LOGPROB_ROWS: [usize; 2] = [1, 1024];
const LOGPROB_REQUESTS: [usize; 2] = [1, 256];

impl Call {
    fn name(self) -> String {
        match self {
            Call::Sample { rows, filter, logprobs } => format!(
                "sharded gumbel_sample random f32 V={V_MAIN} rows={rows}{}{} P={SHARDED_RANKS}",
                filter_name(filter),
                logprobs_name(logprobs)
            ),
            Call::Verify { requests, filter, logprobs, block } => format!(
                "sharded rejection_sample bf16-draft f32 B={requests} K={SHARDED_K} V={V_MAIN} T={T}{}{}{} P={SHARDED_RANKS}",
                filter_name(filter),
                logprobs_name(logprobs),
                if block { " +block" } else { "" }
            ),
        }
    }

    /// Rows of target logits the call reads.
    fn rows(self) -> usize {
        match self {
            Call::Sample { rows, .. } => rows,
            Call::Verify { requests, .. } => requests * (SHARDED_K + 1),
        }
    }

    /// Bytes each rank sends a call, all its exchanges together.
    pub fn send_bytes(self) -> usize {
        let (logprobs, rounds) = match self.logprobs() {
            Asks::None => (0, 0),
            Asks::Raw => (positions_message_bytes(self.rows()), 1),
            Asks::Top => (positions_message_bytes(self.rows()) + tops_message_bytes(self.rows()), 2),
        };
        logprobs
            + match self {
                Call::Sample { rows, filter, .. } => {
                    let lists = if filter.is_some() { lists_message_bytes(rows) } else { 0 };
                    lists + last_round_bytes(message_bytes(rows), rounds)
                }
                Call::Verify { requests, filter, block, .. } => {
                    let candidates = if block {
                        block_candidates_message_bytes(self.rows())
                    } else {
                        candidates_message_bytes(requests)
                    };
                    pairs_message_bytes(self.rows(), filter.is_some()) + last_round_bytes(candidates, rounds)
                }
            }
    }

    fn all() -> impl Iterator<Item = Call> {
        let filters = [None, Some(SHARDED_FILTER)];
        let sample = filters.into_iter().flat_map(|filter| {
            SHARDED_ROWS.into_iter().map(move |rows| Call::Sample { rows, filter, logprobs: Asks::None })
        });
        let verify = filters.into_iter().flat_map(|filter| {
            SHARDED_REQUESTS.into_iter().map(move |requests| Call::Verify {
                requests,
                filter,
                logprobs: Asks::None,
                block: false,
            })
        });
        let asks = [Asks::Raw, Asks::Top];
        let sample_logprobs = asks.into_iter().flat_map(|logprobs| {
            LOGPROB_ROWS.into_iter().map(move |rows| Call::Sample { rows, filter: None, logprobs })
        });
        let verify_logprobs = asks.into_iter().flat_map(|logprobs| {
            LOGPROB_REQUESTS.into_iter().map(move |requests| Call::Verify {
                requests,
                filter: None,
                logprobs,
                block: false,
            })
        });
        let block = LOGPROB_REQUESTS.into_iter().map(|requests| Call::Verify {
            requests,
            filter: None,
            logprobs: Asks::None,
            block: true,
        });
        sample.chain(verify).chain(sample_logprobs).chain(verify_logprobs).chain(block)
    }

    fn filter(self) -> Option<Filter> {
        match self {
            Call::Sample { filter, .. } | Call::Verify { filter, .. } => filter,
        }
    }

    fn logprobs(self) -> Asks {
        match self {
            Call::Sample { logprobs, .. } | Call::Verify { logprobs, .. } => logprobs,
        }
    }
}

/// A case name's words for its log-probabilities.
fn logprobs_name(logprobs: Asks) -> &'static str {
    match logprobs {
        Asks::None => "",
        Asks::Raw => " +logprobs+raw",
        Asks::Top => " +top20",
    }
}

/// A case name's words for its filter.
fn filter_name(filter: Option<Filter>) -> String {
    filter.map_or_else(String::new, |f| format!(" top_k={} top_p={}", f.top_k, f.top_p))
}

/// One sharded case and the unsharded call beside it.
pub struct ShardedCase {
    pub call: Call,
    pub unsharded_us: f64,
    pub sharded_us: f64,
}

/// Whether `--only` keeps any sharded case.
pub fn wanted(options: &Options) -> bool {
    Call::all().any(|call| options.wants(&call.name()))
}

/// Rank `rank`'s ids of a row: halves, the first a multiple of 16 ids long
/// (verification's shards start on its runs of 16 ids, `layout::RUN`).
fn shard(rank: usize) -> (Shard, usize) {
    let half = V_MAIN / SHARDED_RANKS / 16 * 16;
    let offset = rank * half;
    let ids = if rank + 1 == SHARDED_RANKS { V_MAIN - offset } else { half };
    (Shard { offset, vocab: V_MAIN }, ids)
}

/// A call's outputs copied back: tokens, then (verification) `num_emitted`.
pub(super) type Outputs = (Vec<i32>, Vec<i32>);

/// A call's device inputs beyond `Buffers` and its outputs.
struct Io {
    /// Verification: request offsets and draft ids (empty for sampling).
    offsets: CudaSlice<i32>,
    drafts: CudaSlice<i32>,
    tokens: CudaSlice<i32>,
    num_emitted: CudaSlice<i32>,
    logprobs: LogprobArrays,
}

/// The log-probability outputs of a call of `rows` positions: processed and
/// raw ones, a position each; the top-n's log-probabilities and ids,
/// `MAX_TOP_LOGPROBS` a position; the ranks.
struct LogprobArrays {
    processed: CudaSlice<f32>,
    raw: CudaSlice<f32>,
    top: CudaSlice<f32>,
    ids: CudaSlice<i32>,
    ranks: CudaSlice<i32>,
}

impl LogprobArrays {
    fn new(stream: &Arc<CudaStream>, rows: usize) -> LogprobArrays {
        LogprobArrays {
            processed: stream.alloc_zeros::<f32>(rows).unwrap_or_else(setup),
            raw: stream.alloc_zeros::<f32>(rows).unwrap_or_else(setup),
            top: stream.alloc_zeros::<f32>(rows * MAX_TOP_LOGPROBS).unwrap_or_else(setup),
            ids: stream.alloc_zeros::<i32>(rows * MAX_TOP_LOGPROBS).unwrap_or_else(setup),
            ranks: stream.alloc_zeros::<i32>(rows).unwrap_or_else(setup),
        }
    }

    /// The outputs `call` asks for.
    fn view(&mut self, call: Call) -> Logprobs<'_, Device> {
        match call.logprobs() {
            Asks::None => Logprobs::none(),
            Asks::Raw => Logprobs::none().with_processed(&mut self.processed).with_raw(&mut self.raw),
            Asks::Top => Logprobs::none().with_processed(&mut self.processed).with_top(
                MAX_TOP_LOGPROBS,
                Distribution::Processed,
                &mut self.top,
                &mut self.ids,
                &mut self.ranks,
            ),
        }
    }

    /// Every output's bits (ids and ranks as words), asked or not.
    fn bits(&self, stream: &Arc<CudaStream>) -> Vec<u32> {
        let floats = |v: &CudaSlice<f32>| stream.clone_dtoh(v).unwrap_or_else(setup).into_iter().map(f32::to_bits);
        let ints = |v: &CudaSlice<i32>| stream.clone_dtoh(v).unwrap_or_else(setup).into_iter().map(|i| i as u32);
        floats(&self.processed)
            .chain(floats(&self.raw))
            .chain(floats(&self.top))
            .chain(ints(&self.ids))
            .chain(ints(&self.ranks))
            .collect()
    }
}

impl Io {
    fn new(stream: &Arc<CudaStream>, call: Call, drafts: &[i32]) -> Io {
        let (requests, rows) = match call {
            Call::Sample { rows, .. } => (0, rows),
            Call::Verify { requests, .. } => (requests, call.rows()),
        };
        let verify = matches!(call, Call::Verify { .. });
        Io {
            offsets: stream.clone_htod(&verify_offsets(requests, SHARDED_K)).unwrap_or_else(setup),
            drafts: stream.clone_htod(if verify { &drafts[..rows] } else { &[0] }).unwrap_or_else(setup),
            tokens: stream.alloc_zeros::<i32>(rows).unwrap_or_else(setup),
            num_emitted: stream.alloc_zeros::<i32>(requests.max(1)).unwrap_or_else(setup),
            logprobs: LogprobArrays::new(stream, rows),
        }
    }

    /// The outputs, and the log-probabilities' bits.
    fn outputs(&self, stream: &Arc<CudaStream>) -> (Outputs, Vec<u32>) {
        (
            (
                stream.clone_dtoh(&self.tokens).unwrap_or_else(setup),
                stream.clone_dtoh(&self.num_emitted).unwrap_or_else(setup),
            ),
            self.logprobs.bits(stream),
        )
    }
}

/// One `call` over ids `ids` from `shard.offset` of the shared buffers,
/// on `cuda`'s stream: sharded through `exchange` where given.
fn call(
    (cuda, ws, buf): (&Cuda, &mut Workspace, &Buffers),
    call: Call,
    (shard, ids): (Shard, usize),
    exchange: Option<&mut InProcessCuda>,
    (io, filters): (&mut Io, &FilterArrays),
) {
    let rows = call.rows();
    let logits = Logits { row_stride: V_MAIN, ..Logits::new(buf.logits.slice(shard.offset..), rows, ids) };
    let result = match call {
        Call::Sample { .. } => {
            let args = GumbelSample::new(
                logits,
                buf.slots.slice(..rows),
                buf.pos.slice(..rows),
                SamplingParams::new(&buf.random, &buf.seeds).with_filters(filters.view(MAX_ROWS)),
            );
            let mut out = GumbelOutput::new(&mut io.tokens).with_logprobs(io.logprobs.view(call));
            match exchange {
                Some(x) => cuda.sharded_gumbel_sample(ws, shard, x, &args, &mut out),
                None => cuda.gumbel_sample(ws, &args, &mut out),
            }
        }
        Call::Verify { requests, block, .. } => {
            let k = SHARDED_K;
            let shape = verify_draft_shape(k, ids, V_MAIN);
            let args = RejectionSample {
                target: logits,
                offsets: io.offsets.as_view(),
                drafts: io.drafts.as_view(),
                slots: buf.slots.slice(..requests),
                pos: buf.pos.slice(..rows),
                params: SamplingParams::new(buf.random.slice(..VERIFY_SLOTS), buf.seeds.slice(..VERIFY_SLOTS))
                    .with_filters(filters.view(VERIFY_SLOTS)),
                max_drafts: k,
                verification: if block { Verification::Block } else { Verification::Token },
                draft_logits: Some(DraftLogits::new(buf.draft.slice(shard.offset..), shape)),
            };
            let logprobs = io.logprobs.view(call);
            let mut out = RejectionOutput::new(&mut io.tokens, &mut io.num_emitted).with_logprobs(logprobs);
            match exchange {
                Some(x) => cuda.sharded_rejection_sample(ws, shard, x, &args, &mut out),
                None => cuda.rejection_sample(ws, &args, &mut out),
            }
        }
    };
    result.unwrap_or_else(|e| fail(&call.name(), e));
}

/// Median µs of one of `SHARDED_CALLS` calls back to back, `enqueue`
/// enqueueing them on `stream` (rank 0's), over `SHARDED_ROUNDS` rounds
/// after an untimed one; `meet` runs before each round's first event.
pub(super) fn median_us(stream: &Arc<CudaStream>, meet: impl Fn(), mut enqueue: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..=SHARDED_ROUNDS)
        .map(|_| {
            meet();
            let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).expect("event");
            for _ in 0..SHARDED_CALLS {
                enqueue();
            }
            let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).expect("event");
            end.synchronize().expect("synchronize");
            start.elapsed_ms(&end).expect("elapsed time") as f64 * 1000.0 / SHARDED_CALLS as f64
        })
        .skip(1)
        .collect();
    times.sort_by(f64::total_cmp);
    times[SHARDED_ROUNDS / 2]
}

/// Every sharded case `options` keeps, on `cuda`'s device, reading `buf`
/// (whose buffers no other stream writes meanwhile) and, for verification,
/// draft ids `drafts` (a row's each), and its check: every rank's outputs
/// are the unsharded call's.
pub fn run(cuda: &Cuda, buf: &Buffers, drafts: &[i32], options: &Options) -> Vec<ShardedCase> {
    let ctx = cuda.stream().context().clone();
    let streams: Vec<Arc<CudaStream>> = (0..SHARDED_RANKS).map(|_| ctx.new_stream().unwrap_or_else(setup)).collect();
    let ranks: Vec<Cuda> = streams.iter().map(|s| Cuda::new(s.clone()).unwrap_or_else(setup)).collect();
    let mut cases = Vec::new();
    for c in Call::all().filter(|c| options.wants(&c.name())) {
        let rows = c.rows();
        assert!(rows <= MAX_ROWS);
        let whole = (Shard { offset: 0, vocab: V_MAIN }, V_MAIN);
        let mut ws = ranks[0].workspace(rows).unwrap_or_else(setup);
        let mut io = Io::new(&streams[0], c, drafts);
        let filters = FilterArrays::upload(&streams[0], c.filter(), &c.name());
        let filters = &filters;
        let unsharded_us =
            median_us(&streams[0], || {}, || call((&ranks[0], &mut ws, buf), c, whole, None, (&mut io, filters)));
        let want = io.outputs(&streams[0]);
        let barrier = Barrier::new(SHARDED_RANKS);
        let results: Vec<(f64, (Outputs, Vec<u32>))> = std::thread::scope(|s| {
            let handles: Vec<_> = InProcessCuda::group(streams.clone())
                .into_iter()
                .zip(&ranks)
                .enumerate()
                .map(|(r, (mut exchange, rank))| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let stream = exchange.stream().clone();
                        let mut ws = rank.sharded_workspace(rows, SHARDED_RANKS).unwrap_or_else(setup);
                        let mut io = Io::new(&stream, c, drafts);
                        let us = median_us(
                            &stream,
                            || {
                                barrier.wait();
                            },
                            || call((rank, &mut ws, buf), c, shard(r), Some(&mut exchange), (&mut io, filters)),
                        );
                        (us, io.outputs(&stream))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a rank")).collect()
        });
        for (r, (_, outputs)) in results.iter().enumerate() {
            if *outputs != want {
                fail(&c.name(), format!("rank {r}'s outputs or log-probabilities are not the unsharded call's"));
            }
        }
        cases.push(ShardedCase { call: c, unsharded_us, sharded_us: results[0].0 });
    }
    cases
}

/// The cases as a markdown table, with the bytes each rank exchanges.
pub fn markdown(cases: &[ShardedCase]) -> String {
    let mut md = format!(
        "\n## Sharded cases (P = {SHARDED_RANKS} on one GPU, no graph, L2 warm, median of {SHARDED_ROUNDS} rounds of \
         {SHARDED_CALLS} calls)\n\n| case | unsharded µs | sharded µs | ratio | sent / received a rank (B) | \
         all-gather of f32 target logits a rank (B) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
    );
    for c in cases {
        let gather = (SHARDED_RANKS - 1) * 4 * c.call.rows() * V_MAIN / SHARDED_RANKS;
        let (sent, received) = (c.call.send_bytes(), SHARDED_RANKS * c.call.send_bytes());
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.1} | {:.2} | {sent} / {received} | {gather} |",
            c.call.name(),
            c.unsharded_us,
            c.sharded_us,
            c.sharded_us / c.unsharded_us
        );
    }
    md
}
