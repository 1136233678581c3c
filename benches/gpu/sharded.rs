//! The sharded cases (`sharded` in their names; `--only sharded` alone):
//! vocab-parallel `gumbel_sample` (REFERENCE §9) random at `T`, f32 logits
//! of `V_MAIN`, `P = 2` ranks on this one GPU (a stream and a thread each,
//! `shard::InProcessCuda`), against the unsharded call, side by side.
//!
//! Neither runs in a CUDA graph (the in-process exchange meets on the host),
//! so both are timed alike: CUDA events on rank 0's stream (the unsharded
//! call's own) around `SHARDED_CALLS` calls back to back, L2 not flushed,
//! the median of `SHARDED_ROUNDS` rounds per call. Rank `r` reads its ids
//! of the shared logits buffer in place (`Logits` of `V_r` ids at row stride
//! `V`). Each rank sends `32 + 16·rows` bytes a call and receives `P` times
//! as much; an all-gather of the logits rows instead moves `(P − 1)/P` of
//! `4·rows·V` bytes into each rank.

use super::{Buffers, MAX_ROWS, Options, V_MAIN, fail, setup};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use specdec::shard::{InProcessCuda, Shard};
use specdec::{Cuda, GumbelOutput, GumbelSample, Logits, SamplingParams, Workspace};
use specdec_core::shard::message_bytes;
use std::fmt::Write as _;
use std::sync::{Arc, Barrier};

const SHARDED_ROWS: [usize; 4] = [1, 64, 256, 1024];
const SHARDED_RANKS: usize = 2;
const SHARDED_CALLS: usize = 20;
const SHARDED_ROUNDS: usize = 9;

/// One sharded case and the unsharded call beside it.
pub struct ShardedCase {
    pub name: String,
    pub rows: usize,
    pub unsharded_us: f64,
    pub sharded_us: f64,
}

impl ShardedCase {
    /// Bytes each rank sends a call (its message).
    pub fn send_bytes(&self) -> usize {
        message_bytes(self.rows)
    }
}

/// The name of the case of `rows` rows.
fn name(rows: usize) -> String {
    format!("sharded gumbel_sample random f32 V={V_MAIN} rows={rows} P={SHARDED_RANKS}")
}

/// Whether `--only` keeps any sharded case.
pub fn wanted(options: &Options) -> bool {
    SHARDED_ROWS.iter().any(|&rows| options.wants(&name(rows)))
}

/// Rank `rank`'s ids of a row: halves, the first a multiple of 4 ids long.
fn shard(rank: usize) -> (Shard, usize) {
    let half = V_MAIN / SHARDED_RANKS / 4 * 4;
    let offset = rank * half;
    let ids = if rank + 1 == SHARDED_RANKS { V_MAIN - offset } else { half };
    (Shard { offset, vocab: V_MAIN }, ids)
}

/// One call over `rows` rows of `ids` ids from `offset` of the shared logits,
/// on `cuda`'s stream: sharded through `exchange` where given.
fn call(
    (cuda, ws, buf): (&Cuda, &mut Workspace, &Buffers),
    rows: usize,
    (shard, ids): (Shard, usize),
    exchange: Option<&mut InProcessCuda>,
    tokens: &mut CudaSlice<i32>,
) {
    let logits = Logits { row_stride: V_MAIN, ..Logits::new(buf.logits.slice(shard.offset..), rows, ids) };
    let args = GumbelSample::new(
        logits,
        buf.slots.slice(..rows),
        buf.pos.slice(..rows),
        SamplingParams::new(&buf.random, &buf.seeds),
    );
    let mut out = GumbelOutput::new(&mut *tokens);
    let result = match exchange {
        Some(x) => cuda.sharded_gumbel_sample(ws, shard, x, &args, &mut out),
        None => cuda.gumbel_sample(ws, &args, &mut out),
    };
    result.unwrap_or_else(|e| fail(&name(rows), e));
}

/// Median µs of one of `SHARDED_CALLS` calls back to back, `enqueue`
/// enqueueing them on `stream` (rank 0's), over `SHARDED_ROUNDS` rounds
/// after an untimed one; `meet` runs before each round's first event.
fn median_us(stream: &Arc<CudaStream>, meet: impl Fn(), mut enqueue: impl FnMut()) -> f64 {
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
/// (whose buffers no other stream writes meanwhile), and its check: every
/// rank's tokens are the unsharded call's.
pub fn run(cuda: &Cuda, buf: &Buffers, options: &Options) -> Vec<ShardedCase> {
    let ctx = cuda.stream().context().clone();
    let streams: Vec<Arc<CudaStream>> = (0..SHARDED_RANKS).map(|_| ctx.new_stream().unwrap_or_else(setup)).collect();
    let ranks: Vec<Cuda> = streams.iter().map(|s| Cuda::new(s.clone()).unwrap_or_else(setup)).collect();
    let mut cases = Vec::new();
    for rows in SHARDED_ROWS.into_iter().filter(|&rows| options.wants(&name(rows))) {
        assert!(rows <= MAX_ROWS);
        let whole = (Shard { offset: 0, vocab: V_MAIN }, V_MAIN);
        let mut ws = ranks[0].workspace(rows).unwrap_or_else(setup);
        let mut want = streams[0].alloc_zeros::<i32>(rows).unwrap_or_else(setup);
        let unsharded_us =
            median_us(&streams[0], || {}, || call((&ranks[0], &mut ws, buf), rows, whole, None, &mut want));
        let want = streams[0].clone_dtoh(&want).unwrap_or_else(setup);
        let barrier = Barrier::new(SHARDED_RANKS);
        let results: Vec<(f64, Vec<i32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = InProcessCuda::group(streams.clone())
                .into_iter()
                .zip(&ranks)
                .enumerate()
                .map(|(r, (mut exchange, rank))| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let stream = exchange.stream().clone();
                        let mut ws = rank.sharded_workspace(rows, SHARDED_RANKS).unwrap_or_else(setup);
                        let mut tokens = stream.alloc_zeros::<i32>(rows).unwrap_or_else(setup);
                        let us = median_us(
                            &stream,
                            || {
                                barrier.wait();
                            },
                            || call((rank, &mut ws, buf), rows, shard(r), Some(&mut exchange), &mut tokens),
                        );
                        (us, stream.clone_dtoh(&tokens).unwrap_or_else(setup))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a rank")).collect()
        });
        for (r, (_, tokens)) in results.iter().enumerate() {
            if *tokens != want {
                fail(&name(rows), format!("rank {r}'s tokens are not the unsharded call's"));
            }
        }
        cases.push(ShardedCase { name: name(rows), rows, unsharded_us, sharded_us: results[0].0 });
    }
    cases
}

/// The cases as a markdown table, with the bytes each rank exchanges.
pub fn markdown(cases: &[ShardedCase]) -> String {
    let mut md = format!(
        "\n## Sharded cases (P = {SHARDED_RANKS} on one GPU, no graph, L2 warm, median of {SHARDED_ROUNDS} rounds of \
         {SHARDED_CALLS} calls)\n\n| case | unsharded µs | sharded µs | ratio | sent / received a rank (B) | \
         all-gather of f32 logits a rank (B) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
    );
    for c in cases {
        let gather = (SHARDED_RANKS - 1) * 4 * c.rows * V_MAIN / SHARDED_RANKS;
        let (sent, received) = (c.send_bytes(), SHARDED_RANKS * c.send_bytes());
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.1} | {:.2} | {sent} / {received} | {gather} |",
            c.name,
            c.unsharded_us,
            c.sharded_us,
            c.sharded_us / c.unsharded_us
        );
    }
    md
}
