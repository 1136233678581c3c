//! The NCCL case (`nccl` in its name; `--only nccl` alone): vocab-parallel
//! verification across every GPU of the machine (issue 31's speed targets,
//! `docs/VOCAB_PARALLEL.md` §6 step 6), `P` ranks, a GPU and a thread each,
//! meeting through `shard::Nccl`. `B = NCCL_REQUESTS` requests of `K =
//! NCCL_K` drafts, f32 target and bf16 draft logits of `V_MAIN` at `T` (the
//! main grid's bf16-draft verification, drafts sampled from the draft
//! logits). Rank `r` holds its shard of the target logits as a tensor-parallel
//! LM head writes it, `[rows, V_r]` contiguous, and the whole draft logits
//! (a draft model replicated on every rank), of which the sharded call reads
//! its ids. Three timings, side by side:
//!
//! - **single GPU**: rank 0's unsharded call over the whole rows (no peers);
//! - **gather, then verify**: what engines do today: NCCL's all-gather of
//!   every rank's `[rows, V_r]` f32 shard, then the unsharded call over the
//!   whole rows on every rank (read from a buffer of their own: the
//!   re-layout of `[P, rows, V_r]` into rows that an engine also runs is
//!   not counted, which favours this baseline);
//! - **sharded**: `Cuda::sharded_rejection_sample` over NCCL, its two
//!   all-gathers included.
//!
//! Each is timed as the other sharded cases (`sharded::median_us`: events
//! on rank 0's stream around back-to-back calls, no graph, L2 warm), every
//! rank starting each round together. Every rank's outputs, both ways, must
//! be the single-GPU call's. With one GPU, `P = 1` checks the path (an
//! all-gather of one rank is a copy).

use super::sharded::{Outputs, median_us};
use super::{Buffers, Options, T, V_MAIN, VERIFY_SLOTS, fail, setup, verify_draft_shape, verify_offsets};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::bf16;
use specdec::shard::{Exchange, Nccl, Shard};
use specdec::{Cuda, DraftLogits, Logits, RejectionOutput, RejectionSample, SamplingParams, Verification, Workspace};
use specdec_core::shard::{candidates_message_bytes, pairs_message_bytes};
use std::fmt::Write as _;
use std::sync::{Arc, Barrier};

const NCCL_REQUESTS: usize = 256;
const NCCL_K: usize = 7;
const ROWS: usize = NCCL_REQUESTS * (NCCL_K + 1);
/// The run of ids a verification shard starts on (`layout::RUN`).
const RUN: usize = specdec_core::layout::RUN as usize;

/// The case's name (its `P`, the machine's GPUs, is a column of its table).
fn name() -> String {
    format!("nccl rejection_sample bf16-draft f32 B={NCCL_REQUESTS} K={NCCL_K} V={V_MAIN} T={T}")
}

/// The ranks: every GPU of the machine.
fn ranks() -> usize {
    CudaContext::device_count().unwrap_or_else(setup).max(1) as usize
}

/// Whether `--only` keeps the NCCL case.
pub fn wanted(options: &Options) -> bool {
    options.wants(&name())
}

/// Rank `rank`'s ids of a row among `ranks`: equal runs of 16, the last rank the rest.
fn rank_ids(rank: usize, ranks: usize) -> (Shard, usize) {
    let each = V_MAIN / ranks / RUN * RUN;
    let offset = rank * each;
    let ids = if rank + 1 == ranks { V_MAIN - offset } else { each };
    (Shard { offset, vocab: V_MAIN }, ids)
}

/// The measured case.
pub struct NcclCase {
    ranks: usize,
    single_us: f64,
    gather_us: f64,
    sharded_us: f64,
}

/// One rank's inputs on its GPU.
struct RankInputs {
    /// The whole target rows, `[ROWS, V]` (the gathered rows' stand-in).
    full: CudaSlice<f32>,
    /// The rank's shard of them, `[ROWS, V_r]` contiguous.
    shard: CudaSlice<f32>,
    /// The whole draft logits, laid out as the main grid's.
    draft: CudaSlice<bf16>,
    offsets: CudaSlice<i32>,
    drafts: CudaSlice<i32>,
    slots: CudaSlice<i32>,
    pos: CudaSlice<u64>,
    temperature: CudaSlice<f32>,
    seed: CudaSlice<u64>,
}

/// A call's outputs on a rank's GPU.
struct RankOutputs {
    tokens: CudaSlice<i32>,
    num_emitted: CudaSlice<i32>,
}

impl RankInputs {
    fn upload(s: &Arc<CudaStream>, host: &HostInputs, (shard, ids): (Shard, usize)) -> RankInputs {
        let mut mine = Vec::with_capacity(ROWS * ids);
        for row in host.target.chunks_exact(V_MAIN) {
            mine.extend_from_slice(&row[shard.offset..shard.offset + ids]);
        }
        RankInputs {
            full: s.clone_htod(&host.target).unwrap_or_else(setup),
            shard: s.clone_htod(&mine).unwrap_or_else(setup),
            draft: s.clone_htod(&host.draft).unwrap_or_else(setup),
            offsets: s.clone_htod(&verify_offsets(NCCL_REQUESTS, NCCL_K)).unwrap_or_else(setup),
            drafts: s.clone_htod(&host.drafts).unwrap_or_else(setup),
            slots: s.clone_htod(&(0..NCCL_REQUESTS as i32).collect::<Vec<_>>()).unwrap_or_else(setup),
            pos: s.clone_htod(&(0..ROWS as u64).collect::<Vec<_>>()).unwrap_or_else(setup),
            temperature: s.clone_htod(&[T; VERIFY_SLOTS]).unwrap_or_else(setup),
            seed: s.clone_htod(&[7u64; VERIFY_SLOTS]).unwrap_or_else(setup),
        }
    }

    /// The call over `target` (of `ids` ids a row), reading ids `offset ..
    /// offset + ids` of the draft logits.
    fn call<'a>(
        &'a self,
        target: Logits<'a, specdec::Device>,
        (offset, ids): (usize, usize),
    ) -> RejectionSample<'a, specdec::Device> {
        let k = NCCL_K;
        let shape = verify_draft_shape(k, ids, V_MAIN);
        RejectionSample {
            target,
            offsets: self.offsets.as_view(),
            drafts: self.drafts.as_view(),
            slots: self.slots.as_view(),
            pos: self.pos.as_view(),
            params: SamplingParams::new(&self.temperature, &self.seed),
            max_drafts: k,
            verification: Verification::Token,
            draft_logits: Some(DraftLogits::new(self.draft.slice(offset..), shape)),
        }
    }

    /// The unsharded call over the whole rows, on `cuda`'s stream.
    fn verify_full(&self, cuda: &Cuda, ws: &mut Workspace, out: &mut RankOutputs) {
        let args = self.call(Logits::new(&self.full, ROWS, V_MAIN), (0, V_MAIN));
        let mut out = RejectionOutput::new(&mut out.tokens, &mut out.num_emitted);
        cuda.rejection_sample(ws, &args, &mut out).unwrap_or_else(|e| fail("nccl: unsharded call", e));
    }

    /// The sharded call over the rank's shard, through `nccl`.
    fn verify_sharded(
        &self,
        cuda: &Cuda,
        ws: &mut Workspace,
        nccl: &mut Nccl,
        (shard, ids): (Shard, usize),
        out: &mut RankOutputs,
    ) {
        let args = self.call(Logits::new(&self.shard, ROWS, ids), (shard.offset, ids));
        let mut out = RejectionOutput::new(&mut out.tokens, &mut out.num_emitted);
        cuda.sharded_rejection_sample(ws, shard, nccl, &args, &mut out)
            .unwrap_or_else(|e| fail("nccl: sharded call", e));
    }
}

impl RankOutputs {
    fn alloc(s: &Arc<CudaStream>) -> RankOutputs {
        RankOutputs {
            tokens: s.alloc_zeros(ROWS).unwrap_or_else(setup),
            num_emitted: s.alloc_zeros(NCCL_REQUESTS).unwrap_or_else(setup),
        }
    }

    fn read(&self, s: &Arc<CudaStream>) -> Outputs {
        (s.clone_dtoh(&self.tokens).unwrap_or_else(setup), s.clone_dtoh(&self.num_emitted).unwrap_or_else(setup))
    }
}

/// The inputs on the host, copied from the main bench's buffers on GPU 0.
struct HostInputs {
    target: Vec<f32>,
    draft: Vec<bf16>,
    drafts: Vec<i32>,
}

/// The NCCL case over every GPU of the machine: `buf` (on GPU 0, which no
/// other stream writes meanwhile) gives the logits, `drafts` a draft id for
/// each row.
pub fn run(cuda: &Cuda, buf: &Buffers, drafts: &[i32]) -> NcclCase {
    let ranks = ranks();
    let s = cuda.stream();
    let host = HostInputs {
        target: s.clone_dtoh(&buf.logits.slice(..ROWS * V_MAIN)).unwrap_or_else(setup),
        draft: s.clone_dtoh(&buf.draft).unwrap_or_else(setup),
        drafts: drafts[..ROWS].to_vec(),
    };
    let id = Nccl::unique_id().unwrap_or_else(|e| fail(&name(), e));
    let barrier = Barrier::new(ranks);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                let (host, barrier) = (&host, &barrier);
                scope.spawn(move || rank(r, ranks, id, host, barrier))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank")).collect()
    });
    let (single_us, want) = results[0].single.clone().expect("rank 0 times the single-GPU call");
    for (r, result) in results.iter().enumerate() {
        for (way, got) in [("gathered", &result.gathered), ("sharded", &result.sharded)] {
            if *got != want {
                fail(&name(), format!("rank {r}'s outputs ({way}) are not the single-GPU call's"));
            }
        }
    }
    NcclCase { ranks, single_us, gather_us: results[0].gather_us, sharded_us: results[0].sharded_us }
}

/// What a rank measured, and its outputs: the single-GPU call (rank 0's
/// only), gather then verify, sharded.
struct RankResult {
    single: Option<(f64, Outputs)>,
    gather_us: f64,
    gathered: Outputs,
    sharded_us: f64,
    sharded: Outputs,
}

/// Rank `r` of `ranks`: its GPU, its inputs, the three timings.
fn rank(r: usize, ranks: usize, id: cudarc::nccl::Id, host: &HostInputs, barrier: &Barrier) -> RankResult {
    let cuda = Cuda::on_device(r).unwrap_or_else(|e| fail(&name(), format!("GPU {r}: {e}")));
    let s = cuda.stream().clone();
    let (shard, ids) = rank_ids(r, ranks);
    let inputs = RankInputs::upload(&s, host, (shard, ids));
    let mut out = RankOutputs::alloc(&s);
    let mut nccl = Nccl::join(s.clone(), r, ranks, id).unwrap_or_else(|e| fail(&name(), e));
    let mut ws = cuda.sharded_workspace(ROWS, ranks).unwrap_or_else(setup);
    // The all-gather of the target logits: each rank's `[ROWS, V_r]` f32 (the last rank's share, the largest).
    let (_, last) = rank_ids(ranks - 1, ranks);
    let send = s.alloc_zeros::<u8>(ROWS * last * 4).unwrap_or_else(setup);
    let mut recv = s.alloc_zeros::<u8>(ranks * ROWS * last * 4).unwrap_or_else(setup);
    s.synchronize().unwrap_or_else(setup);
    let meet = || {
        barrier.wait();
    };
    meet();
    let single = (r == 0).then(|| {
        let us = median_us(&s, || {}, || inputs.verify_full(&cuda, &mut ws, &mut out));
        (us, out.read(&s))
    });
    let gather_us = median_us(&s, meet, || {
        nccl.all_gather(send.as_view(), recv.as_view_mut()).unwrap_or_else(|e| fail(&name(), e));
        inputs.verify_full(&cuda, &mut ws, &mut out);
    });
    let gathered = out.read(&s);
    let sharded_us = median_us(&s, meet, || inputs.verify_sharded(&cuda, &mut ws, &mut nccl, (shard, ids), &mut out));
    RankResult { single, gather_us, gathered, sharded_us, sharded: out.read(&s) }
}

/// The case as a markdown table, with the bytes each rank exchanges.
pub fn markdown(c: &NcclCase) -> String {
    let (_, last) = rank_ids(c.ranks - 1, c.ranks);
    let sharded_bytes = pairs_message_bytes(ROWS, false) + candidates_message_bytes(NCCL_REQUESTS);
    let gather_bytes = ROWS * last * 4;
    let mut md = String::from(
        "\n## NCCL case (a GPU and a thread a rank, no graph, L2 warm)\n\n| case | P | single GPU µs | gather, then \
         verify µs | sharded µs | gather / sharded | sharded / single | sent a rank: sharded / gather (B) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let _ = writeln!(
        md,
        "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {sharded_bytes} / {gather_bytes} |",
        name(),
        c.ranks,
        c.single_us,
        c.gather_us,
        c.sharded_us,
        c.gather_us / c.sharded_us,
        c.sharded_us / c.single_us
    );
    md
}
