//! GPU time of each kernel path over the case grid of the side-by-side
//! benchmark, beside the device-to-device copy bandwidth measured in the same
//! run (`cargo bench -p specdec-suite --features gpu --bench gpu`, or
//! `cargo xtask bench-gpu`, which also runs `benches/torch_baseline.py` and
//! writes the report).
//!
//! Each call is captured once in a CUDA graph and replayed: a warm-up, then
//! `REPS` timed replays (`--reps N`; CUDA events around the replay alone), with the L2
//! flushed by a 512 MiB memset before each, unless `--warm` (`REPS_LONG`
//! replays for a case whose first replay takes over `LONG_US`). The median is reported as µs, as
//! GB/s over the fewest bytes the call must move, and as a fraction of the
//! copy bandwidth. Results go to stdout and, when `$OUT` is set, to
//! `$OUT/bench.json` (one object per case, with all its parameters) and
//! `$OUT/bench.md` (the folder is made if need be). Any failed call, device-side status flag or out-of-range
//! output ends the run with a non-zero status. `--dry-run` writes the same
//! outputs with made-up numbers and no GPU (to try the report step anywhere).
//!
//! Cases (f32 logits unless named):
//! - `gumbel_sample` greedy / random (T = 0.8) / drafting (T = 0.8, bf16 draft logits)
//!   at V ∈ {32000, 128256, 151936, 262144} × rows ∈ {1, 8, 64, 256, 1024}; and
//!   random at 1024 × 151936 on Zipf-like rows (`−1.1·ln(rank + 1)`, ranks
//!   permuted per row) beside the N(0, 1)-like rows of every other case.
//! - `rejection_sample` greedy / one-hot / bf16 draft logits at B ∈ {1, 16,
//!   64, 256} × K ∈ {1, 3, 7} × V ∈ {32000, 151936}, every request with K
//!   drafts; all three with bf16 target logits at B = 64, K = 3, V = 151936;
//!   the latency case B = 1, K = 4, V = 151936 with bf16 draft logits; and
//!   the batches serving engines run: all three with f32 and with bf16 target
//!   logits at B ∈ {2, 4, 8, 32} × K ∈ {2, 4, 5}, V = 151936.
//! - Sampling filters (SPEC §7), at T = 1 (`FILTER_T`), the filter the same
//!   on every slot: `rejection_sample` with bf16 draft logits (f32 target,
//!   V = 151936; the draft logits without filters) at (B, K) ∈ {(1, 7),
//!   (64, 7), (256, 7), (1, 4)} × {top_k 50 + top_p 0.9, top_k 20, min_p
//!   0.05, top_p 0.95}, and `gumbel_sample` random at 1024 × 151936 with
//!   top_k 50 + top_p 0.9. Each filtered case (name suffix ` T=1 +k50p0.9`,
//!   ` +k20`, ` +minp0.05`, ` +p0.95`) runs beside the same call without
//!   filter arrays (the name less the `+` suffix; kept by `--only` with it),
//!   and its time over that call's is printed, in `bench.md`'s "Filtered
//!   cases" table and as `filtered_ratio` in `bench.json`.
//! - Outputs beside the tokens (REFERENCE §8): `rejection_sample` with bf16
//!   draft logits (f32 target, T = 0.8, K = 7, V = 151936) at B ∈ {1, 256},
//!   asking also for each emitted token's processed log-probability (name
//!   suffix ` +logprobs`; with the raw one too, ` +logprobs+raw`; both also
//!   with the first of the verification filters), or for it and the top 20 (`MAX_TOP_LOGPROBS`)
//!   under the processed distribution with the emitted token's rank
//!   (` +top20`), or verifying each request's drafts as a block (REFERENCE
//!   §4.11: ` +block`). Each runs beside the plain call of the grid (the name less
//!   the suffix; kept by `--only` with it), and its time over that call's is
//!   printed, in `bench.md`'s "Outputs cases" table and as `outputs_ratio` in
//!   `bench.json`; its bytes are the plain call's.
//!
//! Draft logits are `0.8·target + 0.6·noise` (both N(0, 1)-like), which makes
//! the expected acceptance at T = 0.8 about 0.69 per draft; drafts are sampled
//! from them by `gumbel_sample(drafting)` (their argmax for greedy requests).
//! The draft row of draft `i` of request `r` is row `r·(K+1) + i` of a
//! `[2048, V]` bf16 buffer (`stride0 = (K+1)·V`, `stride1 = V`), the row beside
//! its target row.
//!
//! Sharded cases (`sharded` in their names; `--only sharded` alone): the
//! vocab-parallel `gumbel_sample` and `rejection_sample` at `P = 2` on this
//! one GPU beside the unsharded calls, no graph, and the bytes each rank
//! exchanges, printed and written to `$OUT/sharded.md` (see `gpu/sharded.rs`).
//! The NCCL case (`--only nccl`): verification sharded across every GPU of
//! the machine over NCCL against gathering the logits, then verifying, and
//! against one GPU, written to `$OUT/nccl.md` (see `gpu/nccl.rs`).
//!
//! Host time per call (`host time` cases, last; `--only host` alone): the
//! CPU time of one `Cuda::gumbel_sample` (random, one row of V = 151936) and
//! `Cuda::rejection_sample` (bf16 draft logits, B = 1, K = 4 and B = 256,
//! K = 7) call, validation and launches, no graph: `HOST_CALLS` calls back
//! to back between synchronisations, the median over `HOST_ROUNDS` batches;
//! once on this benchmark's one stream without cudarc's event tracking, once
//! with it (cudarc's default for a context with a stream of its own, as
//! `Cuda::on_device` makes, where every view a call takes waits for its last
//! writer and records an event), on copies of the inputs made with it on.
//! Beside them, the floor: the host time of one launch of an empty kernel
//! with a parameter block of the same size ([`EmptyKernel`]).
//!
//! Minimal bytes: one read of every target row and of every draft row used;
//! drafting adds the draft-logits write; verification (not greedy) adds
//! one re-read of one row per request (its target row, and its draft row with
//! draft logits). Token, slot and position arrays are negligible.

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, result};
use half::bf16;
use specdec::filter::Filter;
use specdec::{
    Column, Cuda, Device, Distribution, DraftLogits, DraftLogitsMut, DraftLogitsShape, Filters, GumbelOutput,
    GumbelSample, Logits, Logprobs, MAX_TOP_LOGPROBS, RejectionOutput, RejectionSample, SamplingParams, Verification,
    Workspace,
};
use specdec_core::layout::{BLOCK_THREADS, RejectionParams};
use std::ffi::c_void;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

#[path = "gpu/nccl.rs"]
mod nccl;
#[path = "gpu/sharded.rs"]
mod sharded;

/// Timed replays per case.
const REPS: usize = 50;
/// Timed replays of a case whose first replay took longer than `LONG_US`.
const REPS_LONG: usize = 20;
const LONG_US: f64 = 5000.0;
const FLUSH_BYTES: usize = 512 << 20;
/// Calls per batch of a host-time case. Their GPU work outlasts their host
/// work, so they are few enough that their launches and events never fill
/// the stream's queue (which would make the host wait).
const HOST_CALLS: usize = 8;
/// Batches of a host-time case (the median is reported).
const HOST_ROUNDS: usize = 25;

const SAMPLE_VOCABS: [usize; 4] = [32_000, 128_256, 151_936, 262_144];
const SAMPLE_ROWS: [usize; 5] = [1, 8, 64, 256, 1024];
const VERIFY_REQUESTS: [usize; 4] = [1, 16, 64, 256];
const VERIFY_DRAFTS: [usize; 3] = [1, 3, 7];
const VERIFY_VOCABS: [usize; 2] = [32_000, 151_936];
/// The batches serving engines run (verification at `V_MAIN`, f32 and bf16 targets).
const ENGINE_REQUESTS: [usize; 4] = [2, 4, 8, 32];
const ENGINE_DRAFTS: [usize; 3] = [2, 4, 5];
/// The vocabulary of the Zipf, bf16-target, latency and engine-batch cases.
const V_MAIN: usize = 151_936;
/// The temperature of every non-greedy case without filters.
const T: f32 = 0.8;
/// The temperature of the filtered cases and of the unfiltered calls beside them.
const FILTER_T: f32 = 1.0;
/// The filters of the filtered verification cases (the same on every slot).
const VERIFY_FILTERS: [Filter; 4] = [
    Filter { top_k: 50, top_p: 0.9, min_p: 0.0 },
    Filter { top_k: 20, top_p: 1.0, min_p: 0.0 },
    Filter { top_k: 0, top_p: 1.0, min_p: 0.05 },
    Filter { top_k: 0, top_p: 0.95, min_p: 0.0 },
];
/// The filters of the filtered sampling case (random, 1024 rows of `V_MAIN`).
const SAMPLE_FILTERS: [Filter; 1] = [Filter { top_k: 50, top_p: 0.9, min_p: 0.0 }];
/// (B, K) of the filtered verification cases (bf16 draft logits, f32 target, `V_MAIN`).
const FILTER_BATCHES: [(usize, usize); 4] = [(1, 7), (64, 7), (256, 7), (1, 4)];
/// B of the outputs cases (bf16 draft logits, f32 target, K = 7, `V_MAIN`: plain calls of the grid).
const OUTPUT_REQUESTS: [usize; 2] = [1, 256];

/// Rows of the logits buffers: B = 256 requests of K + 1 = 8 rows.
const MAX_ROWS: usize = 2048;
/// Elements of the f32 logits (and bf16 draft) buffer: covers 2048 × 151936 and 1024 × 262144.
const LOGITS_LEN: usize = MAX_ROWS * V_MAIN;
/// The draft logits that drafting writes: `[1024 slots, 8 columns, V]`, at column 3.
const DRAFT_SLOTS: usize = 1024;
const DRAFT_K: usize = 8;
const DRAFT_COLUMN: usize = 3;
/// Slots of the verification calls (request `r` has slot `r`).
const VERIFY_SLOTS: usize = 256;
/// Rows of the bf16 target logits (the first rows of the f32 ones, at `V_MAIN`).
const BF16_TARGET_ROWS: usize = 256;

struct Timer {
    stream: Arc<CudaStream>,
    flush: CudaSlice<u8>,
    /// Timed replays per case (`REPS`, or `--reps`).
    reps: usize,
    /// Whether the L2 is flushed before each replay (not under `--warm`).
    cold: bool,
}

/// A median GPU time in µs and the number of timed repetitions it is the median of.
#[derive(Clone, Copy)]
struct Timing {
    us: f64,
    reps: usize,
}

impl Timer {
    /// One timed run of `enqueue` after an L2 flush (unless `--warm`), in µs.
    fn once(&mut self, enqueue: &mut impl FnMut(&Arc<CudaStream>)) -> f64 {
        let s = self.stream.clone();
        if self.cold {
            s.memset_zeros(&mut self.flush).expect("L2 flush");
        }
        let start = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).expect("event");
        enqueue(&s);
        let end = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).expect("event");
        end.synchronize().expect("synchronize");
        start.elapsed_ms(&end).expect("elapsed time") as f64 * 1000.0
    }

    /// Median GPU time of `enqueue` (after one untimed run): `self.reps` runs,
    /// or at most `REPS_LONG` when the first takes longer than `LONG_US`.
    fn median(&mut self, mut enqueue: impl FnMut(&Arc<CudaStream>)) -> Timing {
        enqueue(&self.stream.clone());
        let first = self.once(&mut enqueue);
        let reps = if first > LONG_US { self.reps.min(REPS_LONG) } else { self.reps };
        let mut times: Vec<f64> = (0..reps).map(|_| self.once(&mut enqueue)).collect();
        times.sort_by(f64::total_cmp);
        Timing { us: times[reps / 2], reps }
    }

    /// Median GPU time of enqueueing directly (no graph).
    fn time_direct(&mut self, enqueue: impl FnMut(&Arc<CudaStream>)) -> Timing {
        self.median(enqueue)
    }

    /// Median host time of one call of `enqueue` (the CPU's clock, no graph),
    /// over `HOST_ROUNDS` batches of `HOST_CALLS` calls, each batch after a
    /// synchronisation; after one untimed call.
    fn host(&mut self, case: &str, mut enqueue: impl FnMut(&Arc<CudaStream>)) -> Timing {
        let s = self.stream.clone();
        enqueue(&s);
        let mut times: Vec<f64> = (0..HOST_ROUNDS)
            .map(|_| {
                s.synchronize().unwrap_or_else(|e| fail(case, e));
                let t = Instant::now();
                for _ in 0..HOST_CALLS {
                    enqueue(&s);
                }
                t.elapsed().as_secs_f64() * 1e6 / HOST_CALLS as f64
            })
            .collect();
        s.synchronize().unwrap_or_else(|e| fail(case, e));
        times.sort_by(f64::total_cmp);
        Timing { us: times[HOST_ROUNDS / 2], reps: HOST_ROUNDS }
    }

    /// `enqueue`'s time by `clock`: [`Timer::time`] or [`Timer::host`].
    fn measure(&mut self, clock: Clock, case: &str, enqueue: impl FnMut(&Arc<CudaStream>)) -> Timing {
        match clock {
            Clock::Gpu => self.time(case, enqueue),
            Clock::Host => self.host(case, enqueue),
        }
    }

    /// Median GPU time of replaying what `enqueue` enqueues, captured once in a CUDA graph.
    fn time(&mut self, case: &str, mut enqueue: impl FnMut(&Arc<CudaStream>)) -> Timing {
        let s = self.stream.clone();
        enqueue(&s); // warm-up: module load, first-launch costs
        s.synchronize().unwrap_or_else(|e| fail(case, e));
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap_or_else(|e| fail(case, e));
        enqueue(&s);
        let graph = match s.end_capture(CUgraphInstantiate_flags(0)) {
            Ok(Some(graph)) => graph,
            Ok(None) => fail(case, "the capture recorded no graph"),
            Err(e) => fail(case, e),
        };
        self.median(|_| graph.launch().unwrap_or_else(|e| fail(case, e)))
    }
}

/// Ends the run: a benchmark whose call failed measures nothing.
fn fail(case: &str, what: impl std::fmt::Display) -> ! {
    eprintln!("error: {case}: {what}");
    std::process::exit(1)
}

/// [`fail`] for the set-up steps, as an `unwrap_or_else` argument.
fn setup<T, E: std::fmt::Display>(e: E) -> T {
    fail("setup", e)
}

/// One measured case and all its parameters.
struct Case {
    name: String,
    op: &'static str,
    mode: &'static str,
    logits_dtype: &'static str,
    /// The dtype of the draft logits written (sampling) or read (verification).
    draft_dtype: Option<&'static str>,
    input: &'static str,
    vocab: usize,
    rows: usize,
    requests: Option<usize>,
    max_drafts: Option<usize>,
    temperature: f32,
    latency: bool,
    bytes: f64,
    timing: Timing,
    /// Mean accepted drafts per request (verification).
    accepted: Option<f64>,
    /// The filter on every slot of a filtered case (`Filter::OFF`: the
    /// unfiltered call beside them, at `FILTER_T`); `None` for the others.
    filter: Option<Filter>,
    /// The name of the same call unfiltered, measured beside it (filtered cases).
    unfiltered: Option<String>,
    /// What a verification case asks for beside its tokens (`Outputs::Plain` for sampling).
    outputs: Outputs,
    /// The name of the same call without outputs, measured beside it (outputs cases).
    plain: Option<String>,
}

impl Case {
    fn gbs(&self) -> f64 {
        self.bytes / self.timing.us / 1e3
    }

    /// The time of the same call unfiltered (a filtered case whose unfiltered call ran).
    fn unfiltered_us(&self, cases: &[Case]) -> Option<f64> {
        time_of(cases, self.unfiltered.as_deref()?)
    }

    /// The time of the same call without outputs (an outputs case whose plain call ran).
    fn plain_us(&self, cases: &[Case]) -> Option<f64> {
        time_of(cases, self.plain.as_deref()?)
    }

    /// One object of `bench.json`; `cases` are the run's, for the calls measured beside it.
    fn json(&self, copy_gbs: f64, cases: &[Case]) -> String {
        let opt = |v: Option<usize>| v.map_or("null".to_string(), |v| v.to_string());
        let dtype = self.draft_dtype.map_or("null".to_string(), json_str);
        let accepted = self.accepted.map_or("null".to_string(), |a| format!("{a:.3}"));
        let filter = self.filter.map_or("null".to_string(), |f| {
            format!("{{\"top_k\":{},\"top_p\":{},\"min_p\":{}}}", f.top_k, f.top_p, f.min_p)
        });
        let name = |n: &Option<String>| n.as_deref().map_or("null".to_string(), json_str);
        let ratio = |u: Option<f64>| u.map_or("null".to_string(), |u| format!("{:.4}", self.timing.us / u));
        let us = |u: Option<f64>| u.map_or("null".to_string(), |u| format!("{u:.2}"));
        let (unfiltered_us, plain_us) = (self.unfiltered_us(cases), self.plain_us(cases));
        let outputs = self.outputs.json();
        format!(
            "{{\"case\":{},\"op\":{},\"mode\":{},\"logits_dtype\":{},\"draft_dtype\":{dtype},\"input\":{},\
             \"vocab\":{},\"rows\":{},\"requests\":{},\"max_drafts\":{},\"temperature\":{},\"latency\":{},\
             \"us\":{:.2},\"reps\":{},\"bytes\":{},\"gbs\":{:.1},\"copy_fraction\":{:.4},\
             \"accepted_per_request\":{accepted},\"filter\":{filter},\"unfiltered_case\":{},\
             \"unfiltered_us\":{},\"filtered_ratio\":{},\"outputs\":{outputs},\"plain_case\":{},\"plain_us\":{},\
             \"outputs_ratio\":{}}}",
            json_str(&self.name),
            json_str(self.op),
            json_str(self.mode),
            json_str(self.logits_dtype),
            json_str(self.input),
            self.vocab,
            self.rows,
            opt(self.requests),
            opt(self.max_drafts),
            self.temperature,
            self.latency,
            self.timing.us,
            self.timing.reps,
            self.bytes,
            self.gbs(),
            self.gbs() / copy_gbs,
            name(&self.unfiltered),
            us(unfiltered_us),
            ratio(unfiltered_us),
            name(&self.plain),
            us(plain_us),
            ratio(plain_us),
        )
    }
}

/// The time of the case named `name`, when it ran.
fn time_of(cases: &[Case], name: &str) -> Option<f64> {
    cases.iter().find(|c| c.name == name).map(|c| c.timing.us)
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[derive(Clone, Copy, PartialEq)]
enum SampleMode {
    Greedy,
    Random,
    Drafting,
}

impl SampleMode {
    fn name(self) -> &'static str {
        match self {
            SampleMode::Greedy => "greedy",
            SampleMode::Random => "random",
            SampleMode::Drafting => "drafting",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum VerifyMode {
    Greedy,
    OneHot,
    Bf16Draft,
}

impl VerifyMode {
    fn name(self) -> &'static str {
        match self {
            VerifyMode::Greedy => "greedy",
            VerifyMode::OneHot => "one-hot",
            VerifyMode::Bf16Draft => "bf16-draft",
        }
    }
}

/// What a verification case asks for beside its tokens (REFERENCE §8).
#[derive(Clone, Copy, PartialEq)]
enum Outputs {
    /// The tokens alone.
    Plain,
    /// Each emitted token's processed log-probability.
    Logprobs,
    /// Each emitted token's processed and raw log-probabilities.
    Raw,
    /// That, and the top `MAX_TOP_LOGPROBS` (20) of each emitted position
    /// under the processed distribution with the emitted token's rank.
    Top20,
    /// The tokens alone, by block verification (REFERENCE §4.11) rather
    /// than the draft-by-draft rule.
    Block,
}

impl Outputs {
    /// The case name's suffix (none for the plain call).
    fn suffix(self) -> String {
        match self {
            Outputs::Plain => String::new(),
            Outputs::Logprobs => " +logprobs".to_string(),
            Outputs::Raw => " +logprobs+raw".to_string(),
            Outputs::Top20 => format!(" +top{MAX_TOP_LOGPROBS}"),
            Outputs::Block => " +block".to_string(),
        }
    }

    /// `bench.json`'s `outputs`: null for the plain call.
    fn json(self) -> String {
        match self {
            Outputs::Plain => "null".to_string(),
            Outputs::Logprobs => json_str("logprobs"),
            Outputs::Raw => json_str("logprobs+raw"),
            Outputs::Top20 => json_str(&format!("top{MAX_TOP_LOGPROBS}")),
            Outputs::Block => json_str("block"),
        }
    }
}

/// What a case's time is: the GPU time of the call under graph replay, or
/// the host time of a call ([`Timer::host`]).
#[derive(Clone, Copy, PartialEq)]
enum Clock {
    Gpu,
    Host,
}

/// The host time of one call, with or without cudarc's event tracking.
struct HostCase {
    name: String,
    event_tracking: bool,
    us: f64,
}

impl HostCase {
    fn json(&self) -> String {
        format!(
            "{{\"case\":{},\"event_tracking\":{},\"us\":{:.2}}}",
            json_str(&self.name),
            self.event_tracking,
            self.us
        )
    }
}

/// The host-time cases (see the module docs).
const HOST_SPECS: [Spec; 3] = [
    Spec::Gumbel { mode: SampleMode::Random, zipf: false, vocab: V_MAIN, rows: 1, filter: None },
    Spec::Rejection {
        mode: VerifyMode::Bf16Draft,
        bf16_target: false,
        b: 1,
        k: 4,
        vocab: V_MAIN,
        filter: None,
        outputs: Outputs::Plain,
    },
    Spec::Rejection {
        mode: VerifyMode::Bf16Draft,
        bf16_target: false,
        b: 256,
        k: 7,
        vocab: V_MAIN,
        filter: None,
        outputs: Outputs::Plain,
    },
];

/// A kernel that does nothing, taking a parameter block of
/// `RejectionParams`' size: the host time of one launch of it is the
/// driver's floor under each launch of a call (`rejection_sample` makes two,
/// `gumbel_sample` one), launched as the crate launches (`cuLaunchKernel`).
struct EmptyKernel(CudaFunction);

impl EmptyKernel {
    const CASE: &str = "a launch of an empty kernel (the driver's floor)";

    fn load(s: &Arc<CudaStream>) -> EmptyKernel {
        let bytes = std::mem::size_of::<RejectionParams>();
        let ptx = format!(
            ".version 7.0\n.target sm_80\n.address_size 64\n\
             .visible .entry empty(.param .align 8 .b8 params[{bytes}])\n{{\n\tret;\n}}\n"
        );
        let module = s.context().load_module(cudarc::nvrtc::Ptx::from_src(ptx)).unwrap_or_else(setup);
        EmptyKernel(module.load_function("empty").unwrap_or_else(setup))
    }

    fn launch(&self, s: &CudaStream) {
        let params = RejectionParams::default();
        let mut args = [&params as *const RejectionParams as *mut c_void];
        s.context().bind_to_thread().unwrap_or_else(|e| fail(Self::CASE, e));
        // SAFETY: the kernel takes one parameter block of this size and reads nothing.
        unsafe {
            result::launch_kernel(self.0.cu_function(), (1, 1, 1), (BLOCK_THREADS, 1, 1), 0, s.cu_stream(), &mut args)
        }
        .unwrap_or_else(|e| fail(Self::CASE, e));
    }
}

/// One case of the grid.
#[derive(Clone, Copy)]
enum Spec {
    /// `filter`: `None` for a case at `T` without filters; `Some` for one at
    /// `FILTER_T` with that filter on every slot (`Filter::OFF`: no filter
    /// arrays, the unfiltered call the filtered ones are compared with).
    Gumbel { mode: SampleMode, zipf: bool, vocab: usize, rows: usize, filter: Option<Filter> },
    Rejection {
        mode: VerifyMode,
        bf16_target: bool,
        b: usize,
        k: usize,
        vocab: usize,
        filter: Option<Filter>,
        /// What the call asks for beside its tokens.
        outputs: Outputs,
    },
}

/// The whole grid, in the order it runs (verification grouped by vocabulary).
fn grid() -> Vec<Spec> {
    let mut grid = Vec::new();
    for mode in [SampleMode::Greedy, SampleMode::Random, SampleMode::Drafting] {
        for vocab in SAMPLE_VOCABS {
            for rows in SAMPLE_ROWS {
                grid.push(Spec::Gumbel { mode, zipf: false, vocab, rows, filter: None });
            }
        }
    }
    grid.push(Spec::Gumbel { mode: SampleMode::Random, zipf: true, vocab: V_MAIN, rows: 1024, filter: None });
    // Filtered sampling at T = FILTER_T, each beside the same call unfiltered.
    for filter in std::iter::once(Filter::OFF).chain(SAMPLE_FILTERS) {
        grid.push(Spec::Gumbel {
            mode: SampleMode::Random,
            zipf: false,
            vocab: V_MAIN,
            rows: 1024,
            filter: Some(filter),
        });
    }
    for vocab in VERIFY_VOCABS {
        for mode in [VerifyMode::Greedy, VerifyMode::OneHot, VerifyMode::Bf16Draft] {
            for k in VERIFY_DRAFTS {
                for b in VERIFY_REQUESTS {
                    let outputs = Outputs::Plain;
                    grid.push(Spec::Rejection { mode, bf16_target: false, b, k, vocab, filter: None, outputs });
                }
            }
            if vocab == V_MAIN {
                let outputs = Outputs::Plain;
                grid.push(Spec::Rejection { mode, bf16_target: true, b: 64, k: 3, vocab, filter: None, outputs });
            }
        }
        if vocab == V_MAIN {
            grid.push(Spec::Rejection {
                mode: VerifyMode::Bf16Draft,
                bf16_target: false,
                b: 1,
                k: 4,
                vocab,
                filter: None,
                outputs: Outputs::Plain,
            });
            for bf16_target in [false, true] {
                for mode in [VerifyMode::Greedy, VerifyMode::OneHot, VerifyMode::Bf16Draft] {
                    for k in ENGINE_DRAFTS {
                        for b in ENGINE_REQUESTS {
                            let outputs = Outputs::Plain;
                            grid.push(Spec::Rejection { mode, bf16_target, b, k, vocab, filter: None, outputs });
                        }
                    }
                }
            }
            // Filtered verification at T = FILTER_T, each beside the same call unfiltered.
            for (b, k) in FILTER_BATCHES {
                for filter in std::iter::once(Filter::OFF).chain(VERIFY_FILTERS) {
                    let (mode, outputs) = (VerifyMode::Bf16Draft, Outputs::Plain);
                    grid.push(Spec::Rejection { mode, bf16_target: false, b, k, vocab, filter: Some(filter), outputs });
                }
            }
            // Outputs beside the tokens, each beside the plain call of the grid above
            // (the log-probabilities of filtered requests too: their `LSE(S)`).
            for b in OUTPUT_REQUESTS {
                for outputs in [Outputs::Logprobs, Outputs::Raw, Outputs::Top20, Outputs::Block] {
                    let mode = VerifyMode::Bf16Draft;
                    grid.push(Spec::Rejection { mode, bf16_target: false, b, k: 7, vocab, filter: None, outputs });
                }
                for outputs in [Outputs::Logprobs, Outputs::Raw] {
                    let (mode, filter) = (VerifyMode::Bf16Draft, Some(VERIFY_FILTERS[0]));
                    grid.push(Spec::Rejection { mode, bf16_target: false, b, k: 7, vocab, filter, outputs });
                }
            }
        }
    }
    for spec in &grid {
        if let Spec::Rejection { bf16_target, b, k, vocab, .. } = *spec {
            assert!(fits_buffers(bf16_target, b, k, vocab), "{} does not fit the buffers", spec.name());
        }
    }
    grid
}

/// The row offsets of `b` requests of `k` drafts each (`k + 1` rows a request).
fn verify_offsets(b: usize, k: usize) -> Vec<i32> {
    (0..=b as i32).map(|r| r * (k as i32 + 1)).collect()
}

/// The draft-logits layout of verification with `k` drafts over rows of
/// `row_len` ids, `width` of them read a row: draft `i` of request `r` is
/// row `r·(K+1) + i` of the draft buffer, beside its target row.
fn verify_draft_shape(k: usize, width: usize, row_len: usize) -> DraftLogitsShape {
    DraftLogitsShape { slots: VERIFY_SLOTS, k, width, stride0: (k + 1) * row_len, stride1: row_len }
}

/// Whether verification of `b` requests of `k` drafts at `vocab` fits the
/// buffers: its rows (workspace, positions, f32 logits; the bf16 target
/// logits, of `V_MAIN` only), its slots, and the `[VERIFY_SLOTS, k, vocab]`
/// draft-logits view (stride `(k+1)·vocab`) of the draft buffer.
fn fits_buffers(bf16_target: bool, b: usize, k: usize, vocab: usize) -> bool {
    let rows = b * (k + 1);
    let draft_view = (VERIFY_SLOTS * (k + 1) - 1) * vocab;
    rows <= MAX_ROWS
        && rows * vocab <= LOGITS_LEN
        && (!bf16_target || (vocab == V_MAIN && rows <= BF16_TARGET_ROWS))
        && b <= VERIFY_SLOTS
        && draft_view <= LOGITS_LEN
}

impl Spec {
    /// The case name, shared with `benches/torch_baseline.py` (the report joins on it).
    fn name(&self) -> String {
        match *self {
            Spec::Gumbel { mode, zipf, vocab, rows, filter } => {
                let dtype = if mode == SampleMode::Drafting { "f32->bf16" } else { "f32" };
                let input = if zipf { " zipf" } else { "" };
                format!("gumbel_sample {} {dtype}{input} V={vocab} rows={rows}{}", mode.name(), filter_name(filter))
            }
            Spec::Rejection { mode, bf16_target, b, k, vocab, filter, outputs } => {
                let target = if bf16_target { "bf16" } else { "f32" };
                let suffix = format!("{}{}", filter_name(filter), outputs.suffix());
                format!("rejection_sample {} {target} B={b} K={k} V={vocab}{suffix}", mode.name())
            }
        }
    }

    /// The filter on every slot, when one acts.
    fn active_filter(&self) -> Option<Filter> {
        let (Spec::Gumbel { filter, .. } | Spec::Rejection { filter, .. }) = *self;
        filter.filter(|&f| f != Filter::OFF)
    }

    /// The same call without filters that a filtered case is compared with
    /// (a filtered outputs case: with its plain call alone, [`Spec::plain`]).
    fn unfiltered(&self) -> Option<Spec> {
        self.active_filter()?;
        if self.plain().is_some() {
            return None;
        }
        Some(match *self {
            Spec::Gumbel { mode, zipf, vocab, rows, .. } => {
                Spec::Gumbel { mode, zipf, vocab, rows, filter: Some(Filter::OFF) }
            }
            Spec::Rejection { mode, bf16_target, b, k, vocab, outputs, .. } => {
                Spec::Rejection { mode, bf16_target, b, k, vocab, filter: Some(Filter::OFF), outputs }
            }
        })
    }

    /// The same call without outputs that an outputs case is compared with.
    fn plain(&self) -> Option<Spec> {
        match *self {
            Spec::Rejection { mode, bf16_target, b, k, vocab, filter, outputs } if outputs != Outputs::Plain => {
                Some(Spec::Rejection { mode, bf16_target, b, k, vocab, filter, outputs: Outputs::Plain })
            }
            _ => None,
        }
    }

    /// The measured case: parameters, minimal bytes, timing and (verification) mean accepted drafts.
    fn case(&self, timing: Timing, accepted: Option<f64>) -> Case {
        match *self {
            Spec::Gumbel { mode, zipf, vocab, rows, filter } => {
                let drafting = mode == SampleMode::Drafting;
                // One read of every row, plus the bf16 draft-logits write when drafting.
                let per_element = if drafting { 4 + 2 } else { 4 };
                Case {
                    name: self.name(),
                    op: "gumbel_sample",
                    mode: mode.name(),
                    logits_dtype: "f32",
                    draft_dtype: drafting.then_some("bf16"),
                    input: if zipf { "zipf" } else { "normal" },
                    vocab,
                    rows,
                    requests: None,
                    max_drafts: None,
                    temperature: temperature(mode == SampleMode::Greedy, filter),
                    latency: rows == 1 && vocab == V_MAIN && mode == SampleMode::Random && !zipf && filter.is_none(),
                    bytes: (rows * vocab * per_element) as f64,
                    timing,
                    accepted,
                    filter,
                    unfiltered: self.unfiltered().map(|u| u.name()),
                    outputs: Outputs::Plain,
                    plain: None,
                }
            }
            Spec::Rejection { mode, bf16_target, b, k, vocab, filter, outputs } => {
                let rows = b * (k + 1);
                let t_size = if bf16_target { 2 } else { 4 };
                // Every target row once; every draft row used; one row per request re-read
                // (its target row, and its draft row with draft logits) unless greedy. The
                // outputs beside the tokens add none: an outputs case is the plain call's floor.
                let draft_bytes = if mode == VerifyMode::Bf16Draft { b * k * vocab * 2 } else { 0 };
                let reread = match mode {
                    VerifyMode::Greedy => 0,
                    VerifyMode::OneHot => b * vocab * t_size,
                    VerifyMode::Bf16Draft => b * vocab * (t_size + 2),
                };
                Case {
                    name: self.name(),
                    op: "rejection_sample",
                    mode: mode.name(),
                    logits_dtype: if bf16_target { "bf16" } else { "f32" },
                    draft_dtype: (mode == VerifyMode::Bf16Draft).then_some("bf16"),
                    input: "normal",
                    vocab,
                    rows,
                    requests: Some(b),
                    max_drafts: Some(k),
                    temperature: temperature(mode == VerifyMode::Greedy, filter),
                    latency: b == 1 && k == 4 && filter.is_none() && outputs == Outputs::Plain,
                    bytes: (rows * vocab * t_size + draft_bytes + reread) as f64,
                    timing,
                    accepted,
                    filter,
                    unfiltered: self.unfiltered().map(|u| u.name()),
                    outputs,
                    plain: self.plain().map(|p| p.name()),
                }
            }
        }
    }
}

/// The name suffix of a case's filter: none without one (at `T`), ` T=1` for
/// the unfiltered call at `FILTER_T`, then e.g. ` +k50p0.9` for a filter.
fn filter_name(filter: Option<Filter>) -> String {
    let Some(f) = filter else { return String::new() };
    let mut name = format!(" T={FILTER_T}");
    if f != Filter::OFF {
        name.push_str(" +");
    }
    if f.top_k > 0 {
        write!(name, "k{}", f.top_k).unwrap();
    }
    if f.top_p < 1.0 {
        write!(name, "p{}", f.top_p).unwrap();
    }
    if f.min_p > 0.0 {
        write!(name, "minp{}", f.min_p).unwrap();
    }
    name
}

/// A case's temperature: 0 greedy, `FILTER_T` with a filter (or beside one), else `T`.
fn temperature(greedy: bool, filter: Option<Filter>) -> f32 {
    match (greedy, filter) {
        (true, _) => 0.0,
        (false, Some(_)) => FILTER_T,
        (false, None) => T,
    }
}

/// Fills `out[i] = f(i)` on every core.
fn par_fill<T: Send>(out: &mut [T], f: impl Fn(usize) -> T + Sync) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = out.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            s.spawn(move || {
                for (i, x) in part.iter_mut().enumerate() {
                    *x = f(c * chunk + i);
                }
            });
        }
    });
}

/// Roughly N(0, 1): a sum of four uniforms, centred and scaled.
fn normal(salt: u64, i: usize) -> f32 {
    let w = specdec::rng::random_quad(salt, i as u64, specdec::rng::Stream::Accept, 0);
    let u: f32 = w.iter().map(|&x| x as f32 / 4_294_967_296.0).sum();
    (u - 2.0) * 1.732
}

/// `rows` Zipf-like rows: `−1.1·ln(rank + 1)`, the ranks a different permutation of `0..vocab` per row.
fn zipf_rows(rows: usize, vocab: usize) -> Vec<f32> {
    let table: Vec<f32> = (0..vocab).map(|r| -1.1 * ((r + 1) as f32).ln()).collect();
    let mut out = vec![0f32; rows * vocab];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows_per = rows.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(rows_per * vocab).enumerate() {
            let table = &table;
            s.spawn(move || {
                let mut perm: Vec<u32> = Vec::with_capacity(vocab);
                for (i, row) in part.chunks_mut(vocab).enumerate() {
                    let mut state =
                        0x9E37_79B9_7F4A_7C15u64 ^ ((c * rows_per + i) as u64).wrapping_mul(0xA24B_AED4_963E_E407);
                    perm.clear();
                    perm.extend(0..vocab as u32);
                    for j in (1..vocab).rev() {
                        let r = ((splitmix(&mut state) >> 32) * (j as u64 + 1)) >> 32;
                        perm.swap(j, r as usize);
                    }
                    for (x, &rank) in row.iter_mut().zip(&perm) {
                        *x = table[rank as usize];
                    }
                }
            });
        }
    });
    out
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The device buffers every case reads from.
struct Buffers {
    /// `[LOGITS_LEN]` f32, N(0, 1)-like: the target logits (row stride V).
    logits: CudaSlice<f32>,
    /// `[1024 × 151936]` f32 Zipf-like rows.
    zipf: CudaSlice<f32>,
    /// `[LOGITS_LEN]` bf16: `0.8·logits + 0.6·noise`, element for element.
    draft: CudaSlice<bf16>,
    /// `[BF16_TARGET_ROWS × 151936]` bf16: the first rows of `logits`.
    target_bf16: CudaSlice<bf16>,
    /// The draft logits drafting writes, `[DRAFT_SLOTS, DRAFT_K, 262144]` bf16.
    written: CudaSlice<bf16>,
    slots: CudaSlice<i32>,
    pos: CudaSlice<u64>,
    seeds: CudaSlice<u64>,
    /// Per-slot temperatures: all 0 (greedy), all `T` and all `FILTER_T`.
    greedy: CudaSlice<f32>,
    random: CudaSlice<f32>,
    filter_t: CudaSlice<f32>,
    tokens: CudaSlice<i32>,
}

impl Buffers {
    /// The first `rows` rows of the `[_, vocab]` target logits: f32, or their bf16 copy.
    fn target(&self, bf16_target: bool, rows: usize, vocab: usize) -> Logits<'_, Device> {
        match bf16_target {
            false => Logits::new(self.logits.slice(..rows * vocab), rows, vocab),
            true => Logits::new(self.target_bf16.slice(..rows * vocab), rows, vocab),
        }
    }

    /// The per-slot temperatures of a case: greedy, or `T` without a filter, or `FILTER_T`.
    fn temps(&self, greedy: bool, filter: Option<Filter>) -> &CudaSlice<f32> {
        match (greedy, filter) {
            (true, _) => &self.greedy,
            (false, Some(_)) => &self.filter_t,
            (false, None) => &self.random,
        }
    }

    /// A copy of every buffer, allocated now: with cudarc's event tracking
    /// on, each then carries its events (buffers made with it off never do).
    fn copied(&self, s: &Arc<CudaStream>) -> Buffers {
        Buffers {
            logits: s.clone_dtod(&self.logits).unwrap_or_else(setup),
            zipf: s.clone_dtod(&self.zipf).unwrap_or_else(setup),
            draft: s.clone_dtod(&self.draft).unwrap_or_else(setup),
            target_bf16: s.clone_dtod(&self.target_bf16).unwrap_or_else(setup),
            written: s.clone_dtod(&self.written).unwrap_or_else(setup),
            slots: s.clone_dtod(&self.slots).unwrap_or_else(setup),
            pos: s.clone_dtod(&self.pos).unwrap_or_else(setup),
            seeds: s.clone_dtod(&self.seeds).unwrap_or_else(setup),
            greedy: s.clone_dtod(&self.greedy).unwrap_or_else(setup),
            random: s.clone_dtod(&self.random).unwrap_or_else(setup),
            filter_t: s.clone_dtod(&self.filter_t).unwrap_or_else(setup),
            tokens: s.clone_dtod(&self.tokens).unwrap_or_else(setup),
        }
    }
}

/// Device arrays of one filter on each of `MAX_ROWS` slots: only those of
/// the filters that act (none for `Filter::OFF`, a call without filters).
pub(crate) struct FilterArrays {
    top_k: Option<CudaSlice<i32>>,
    top_p: Option<CudaSlice<f32>>,
    min_p: Option<CudaSlice<f32>>,
}

impl FilterArrays {
    pub(crate) fn upload(s: &Arc<CudaStream>, filter: Option<Filter>, case: &str) -> FilterArrays {
        let f = filter.unwrap_or(Filter::OFF);
        let top_k = (f.top_k > 0).then(|| s.clone_htod(&vec![f.top_k as i32; MAX_ROWS]));
        let top_p = (f.top_p < 1.0).then(|| s.clone_htod(&vec![f.top_p; MAX_ROWS]));
        let min_p = (f.min_p > 0.0).then(|| s.clone_htod(&vec![f.min_p; MAX_ROWS]));
        FilterArrays {
            top_k: top_k.transpose().unwrap_or_else(|e| fail(case, e)),
            top_p: top_p.transpose().unwrap_or_else(|e| fail(case, e)),
            min_p: min_p.transpose().unwrap_or_else(|e| fail(case, e)),
        }
    }

    /// The filters of the first `slots` slots.
    pub(crate) fn view(&self, slots: usize) -> Filters<'_, Device> {
        let top_k = self.top_k.as_ref().map(|k| k.slice(..slots));
        let (top_p, min_p) =
            (self.top_p.as_ref().map(|p| p.slice(..slots)), self.min_p.as_ref().map(|m| m.slice(..slots)));
        Filters { top_k, top_p, min_p }
    }
}

/// Device arrays of a verification case's outputs beside its tokens, over
/// its `positions` token slots (none for `Outputs::Plain`).
struct OutputArrays {
    /// `f32 [positions]`: each emitted token's processed log-probability.
    processed: Option<CudaSlice<f32>>,
    /// `f32 [positions]`: each emitted token's raw log-probability.
    raw: Option<CudaSlice<f32>>,
    /// The top `MAX_TOP_LOGPROBS` under the processed distribution: their
    /// log-probabilities and ids (`[positions, MAX_TOP_LOGPROBS]`) and the
    /// emitted token's rank (`[positions]`).
    top: Option<(CudaSlice<f32>, CudaSlice<i32>, CudaSlice<i32>)>,
}

impl OutputArrays {
    fn alloc(s: &Arc<CudaStream>, outputs: Outputs, positions: usize, case: &str) -> OutputArrays {
        let top_len = positions * MAX_TOP_LOGPROBS;
        let processed = matches!(outputs, Outputs::Logprobs | Outputs::Raw | Outputs::Top20)
            .then(|| s.alloc_zeros::<f32>(positions));
        let raw = (outputs == Outputs::Raw).then(|| s.alloc_zeros::<f32>(positions));
        let top = (outputs == Outputs::Top20).then(|| {
            Ok::<_, cudarc::driver::DriverError>((
                s.alloc_zeros::<f32>(top_len)?,
                s.alloc_zeros::<i32>(top_len)?,
                s.alloc_zeros::<i32>(positions)?,
            ))
        });
        OutputArrays {
            processed: processed.transpose().unwrap_or_else(|e| fail(case, e)),
            raw: raw.transpose().unwrap_or_else(|e| fail(case, e)),
            top: top.transpose().unwrap_or_else(|e| fail(case, e)),
        }
    }

    /// The outputs a call writes.
    fn view(&mut self) -> Logprobs<'_, Device> {
        let mut out = Logprobs::none();
        if let Some(p) = &mut self.processed {
            out = out.with_processed(p);
        }
        if let Some(r) = &mut self.raw {
            out = out.with_raw(r);
        }
        if let Some((lp, ids, ranks)) = &mut self.top {
            out = out.with_top(MAX_TOP_LOGPROBS, Distribution::Processed, lp, ids, ranks);
        }
        out
    }

    /// Ends the run unless every emitted position (`i < emitted[r]` of each
    /// request's `k + 1`) has processed and raw log-probabilities that are
    /// finite and at most 0 (1e-4 of rounding allowed), a rank of at least 1 and top ids
    /// in `0..vocab` with non-increasing log-probabilities, and every
    /// position past them NaN log-probabilities and `-1` ids and ranks.
    fn check(&self, s: &Arc<CudaStream>, emitted: &[i32], k: usize, vocab: usize, case: &str) {
        let processed = self.processed.as_ref().map(|p| s.clone_dtoh(p).unwrap_or_else(|e| fail(case, e)));
        let raw = self.raw.as_ref().map(|p| s.clone_dtoh(p).unwrap_or_else(|e| fail(case, e)));
        let top = self.top.as_ref().map(|(lp, ids, ranks)| {
            let download = |d: &CudaSlice<i32>| s.clone_dtoh(d).unwrap_or_else(|e| fail(case, e));
            (s.clone_dtoh(lp).unwrap_or_else(|e| fail(case, e)), download(ids), download(ranks))
        });
        let n = MAX_TOP_LOGPROBS;
        for (r, &emitted) in emitted.iter().enumerate() {
            for i in 0..=k {
                let (at, kept) = (r * (k + 1) + i, i < emitted as usize);
                let position = || format!("request {r}, position {i} of {emitted} emitted");
                for (what, values) in [("processed", &processed), ("raw", &raw)] {
                    if let Some(p) = values.as_ref().map(|p| p[at]) {
                        let good = if kept { p.is_finite() && p <= 1e-4 } else { p.is_nan() };
                        if !good {
                            fail(case, format!("{}: {what} logprob {p}", position()));
                        }
                    }
                }
                let Some((lp, ids, ranks)) = &top else { continue };
                let (lp, ids, rank) = (&lp[at * n..(at + 1) * n], &ids[at * n..(at + 1) * n], ranks[at]);
                let good = if kept {
                    rank >= 1
                        && ids.iter().all(|&t| (0..vocab as i32).contains(&t))
                        && lp.windows(2).all(|w| w[0] >= w[1])
                } else {
                    rank == -1 && ids.iter().all(|&t| t == -1) && lp.iter().all(|x| x.is_nan())
                };
                if !good {
                    fail(case, format!("{}: rank {rank}, top ids {ids:?}, top logprobs {lp:?}", position()));
                }
            }
        }
    }
}

struct Bench {
    cuda: Cuda,
    stream: Arc<CudaStream>,
    timer: Timer,
    ws: Workspace,
    buf: Buffers,
    cases: Vec<Case>,
    host: Vec<HostCase>,
    /// Whether the buffers (and cudarc) track their uses by events.
    event_tracking: bool,
    copy_gbs: f64,
}

impl Bench {
    /// Reads and clears the workspace's device-side status; a raised flag ends the run.
    fn check_status(&mut self, case: &str) {
        match self.ws.take_status() {
            Ok(0) => {}
            Ok(word) => fail(case, format!("the kernels raised status flags {word:#x}")),
            Err(e) => fail(case, e),
        }
    }

    /// Records the host time of one call of `case`.
    fn push_host(&mut self, case: String, timing: Timing) {
        let tracking = if self.event_tracking { "with" } else { "without" };
        println!("host time {case:<48} {:>9.1} µs per call, {tracking} event tracking", timing.us);
        self.host.push(HostCase { name: case, event_tracking: self.event_tracking, us: timing.us });
    }

    /// The host time of one launch of `empty` ([`EmptyKernel`]).
    fn launch_floor(&mut self, empty: &EmptyKernel) {
        let timing = self.timer.host(EmptyKernel::CASE, |s| empty.launch(s));
        self.push_host(EmptyKernel::CASE.to_string(), timing);
    }

    /// Records `case`, timed by `clock`.
    fn push(&mut self, clock: Clock, case: Case) {
        if clock == Clock::Host {
            self.push_host(case.name, case.timing);
            return;
        }
        println!(
            "{:<58} {:>9.1} µs {:>6.0} GB/s {:>5.1} % of copy  ({} reps{})",
            case.name,
            case.timing.us,
            case.gbs(),
            100.0 * case.gbs() / self.copy_gbs,
            case.timing.reps,
            case.accepted.map_or(String::new(), |a| format!(", {a:.2} accepted per request")),
        );
        if let Some(u) = case.unfiltered_us(&self.cases) {
            println!("{:<58} {:>9.2} × the unfiltered call ({u:.1} µs)", "  filtered / unfiltered", case.timing.us / u);
        }
        if let Some(u) = case.plain_us(&self.cases) {
            println!("{:<58} {:>9.2} × the plain call ({u:.1} µs)", "  outputs / plain", case.timing.us / u);
        }
        self.cases.push(case);
    }

    fn gumbel(
        &mut self,
        clock: Clock,
        mode: SampleMode,
        zipf: bool,
        vocab: usize,
        rows: usize,
        filter: Option<Filter>,
    ) {
        let spec = Spec::Gumbel { mode, zipf, vocab, rows, filter };
        let name = spec.name();
        let filters = FilterArrays::upload(&self.stream, filter, &name);
        let Bench { cuda, timer, ws, buf, .. } = self;
        let Buffers { logits, zipf: zipf_logits, written, slots, pos, seeds, greedy, random, filter_t, tokens, .. } =
            buf;
        let logits = if zipf { &*zipf_logits } else { &*logits };
        let temps = match (mode == SampleMode::Greedy, filter) {
            (true, _) => &*greedy,
            (false, Some(_)) => &*filter_t,
            (false, None) => &*random,
        };
        let drafting = mode == SampleMode::Drafting;
        let call = |_: &Arc<CudaStream>| {
            let args = GumbelSample {
                drafting,
                ..GumbelSample::new(
                    Logits::new(logits.slice(..rows * vocab), rows, vocab),
                    slots.slice(..rows),
                    pos.slice(..rows),
                    SamplingParams::new(temps.slice(..DRAFT_SLOTS), seeds.slice(..DRAFT_SLOTS))
                        .with_filters(filters.view(DRAFT_SLOTS)),
                )
            };
            let mut out = GumbelOutput::new(tokens.slice_mut(..rows));
            if drafting {
                let shape = DraftLogitsShape::dense(DRAFT_SLOTS, DRAFT_K, vocab);
                out = out.with_draft_logits(DraftLogitsMut::new(&mut *written, shape), Column::All(DRAFT_COLUMN));
            }
            cuda.gumbel_sample(ws, &args, &mut out).unwrap_or_else(|e| fail(&name, e));
        };
        let timing = timer.measure(clock, &name, call);
        self.check_status(&name);
        let out = self.stream.clone_dtoh(&self.buf.tokens.slice(..rows)).unwrap_or_else(|e| fail(&name, e));
        if let Some(t) = out.iter().find(|&&t| t < 0 || t as usize >= vocab) {
            fail(&name, format!("token {t} is out of range 0..{vocab}"));
        }
        self.push(clock, spec.case(timing, None));
    }

    /// Measures `spec` by `clock`, verification with draft ids `drafts`.
    fn run(&mut self, clock: Clock, spec: Spec, drafts: &[i32]) {
        match spec {
            Spec::Gumbel { mode, zipf, vocab, rows, filter } => self.gumbel(clock, mode, zipf, vocab, rows, filter),
            Spec::Rejection { mode, bf16_target, b, k, vocab, filter, outputs } => {
                self.rejection(clock, mode, bf16_target, b, k, vocab, filter, outputs, drafts)
            }
        }
    }

    /// Draft tokens for every row of the `[2048, vocab]` view of the draft
    /// logits: sampled at `T` in drafting mode, and their argmax.
    fn draft_tokens(&mut self, vocab: usize) -> (Vec<i32>, Vec<i32>) {
        let case = format!("draft tokens V={vocab}");
        let Bench { cuda, stream, ws, buf, .. } = self;
        let mut draw = |temps: &CudaSlice<f32>, tokens: &mut CudaSlice<i32>| {
            let args = GumbelSample::new(
                Logits::new(buf.draft.slice(..MAX_ROWS * vocab), MAX_ROWS, vocab),
                buf.slots.slice(..MAX_ROWS),
                buf.pos.slice(..MAX_ROWS),
                SamplingParams::new(temps, &buf.seeds),
            )
            .drafting();
            cuda.gumbel_sample(ws, &args, &mut GumbelOutput::new(&mut *tokens)).unwrap_or_else(|e| fail(&case, e));
            stream.clone_dtoh(tokens).unwrap_or_else(|e| fail(&case, e))
        };
        let mut tokens = buf.tokens.clone();
        let sampled = draw(&buf.random, &mut tokens);
        let greedy = draw(&buf.greedy, &mut tokens);
        self.check_status(&case);
        (sampled, greedy)
    }

    /// Verification of `b` requests of `k` drafts each (rows = b·(k + 1)).
    #[allow(clippy::too_many_arguments)]
    fn rejection(
        &mut self,
        clock: Clock,
        mode: VerifyMode,
        bf16_target: bool,
        b: usize,
        k: usize,
        vocab: usize,
        filter: Option<Filter>,
        outputs: Outputs,
        drafts: &[i32],
    ) {
        let spec = Spec::Rejection { mode, bf16_target, b, k, vocab, filter, outputs };
        let name = spec.name();
        let rows = b * (k + 1);
        let s = self.stream.clone();
        let doffsets = s.clone_htod(&verify_offsets(b, k)).unwrap_or_else(|e| fail(&name, e));
        let ddrafts = s.clone_htod(&drafts[..rows]).unwrap_or_else(|e| fail(&name, e));
        let mut num_emitted = s.alloc_zeros::<i32>(b).unwrap_or_else(|e| fail(&name, e));
        let mut accepted = s.alloc_zeros::<i32>(b).unwrap_or_else(|e| fail(&name, e));
        let mut vtokens = s.alloc_zeros::<i32>(b * (k + 1)).unwrap_or_else(|e| fail(&name, e));
        let filters = FilterArrays::upload(&s, filter, &name);
        let mut logprobs = OutputArrays::alloc(&s, outputs, rows, &name);
        let Bench { cuda, timer, ws, buf, .. } = self;
        let temps = buf.temps(mode == VerifyMode::Greedy, filter);
        let draft_shape = verify_draft_shape(k, vocab, vocab);
        let call = |_: &Arc<CudaStream>| {
            let args = RejectionSample {
                target: buf.target(bf16_target, rows, vocab),
                offsets: doffsets.as_view(),
                drafts: ddrafts.as_view(),
                slots: buf.slots.slice(..b),
                pos: buf.pos.slice(..rows),
                params: SamplingParams::new(temps.slice(..VERIFY_SLOTS), buf.seeds.slice(..VERIFY_SLOTS))
                    .with_filters(filters.view(VERIFY_SLOTS)),
                max_drafts: k,
                verification: if outputs == Outputs::Block { Verification::Block } else { Verification::Token },
                draft_logits: (mode == VerifyMode::Bf16Draft).then(|| DraftLogits::new(&buf.draft, draft_shape)),
            };
            let mut out = RejectionOutput::new(&mut vtokens, &mut num_emitted)
                .with_accepted(&mut accepted)
                .with_logprobs(logprobs.view());
            cuda.rejection_sample(ws, &args, &mut out).unwrap_or_else(|e| fail(&name, e));
        };
        let timing = timer.measure(clock, &name, call);
        self.check_status(&name);
        let emitted = s.clone_dtoh(&num_emitted).unwrap_or_else(|e| fail(&name, e));
        let acc = s.clone_dtoh(&accepted).unwrap_or_else(|e| fail(&name, e));
        let toks = s.clone_dtoh(&vtokens).unwrap_or_else(|e| fail(&name, e));
        for r in 0..b {
            let n = emitted[r];
            if !(1..=k as i32 + 1).contains(&n) || acc[r] != n - 1 {
                fail(&name, format!("request {r}: num_emitted {n}, accepted {}, K = {k}", acc[r]));
            }
            let row = &toks[r * (k + 1)..(r + 1) * (k + 1)];
            let (emitted_ids, padding) = row.split_at(n as usize);
            if emitted_ids.iter().any(|&t| t < 0 || t as usize >= vocab) || padding.iter().any(|&t| t != -1) {
                fail(&name, format!("request {r}: tokens {row:?} with num_emitted {n}"));
            }
        }
        logprobs.check(&s, &emitted, k, vocab, &name);
        let mean_accepted = acc.iter().map(|&a| a as f64).sum::<f64>() / b as f64;

        self.push(clock, spec.case(timing, Some(mean_accepted)));
    }
}

/// The copy ceiling of a run: the faster of a graph memcpy node and a stream copy.
struct CopyCeiling {
    graph: Timing,
    direct: Timing,
    bytes: f64,
}

impl CopyCeiling {
    fn best(&self) -> Timing {
        if self.graph.us <= self.direct.us { self.graph } else { self.direct }
    }

    fn gbs(&self) -> f64 {
        self.bytes / self.best().us / 1e3
    }
}

/// Command-line options: `--dry-run`, `--only TEXT` (repeatable: run only the
/// cases whose name contains one of them), `--reps N` (timed replays per case,
/// e.g. 1 under a profiler), `--warm` (no L2 flush before a replay: the
/// replays after the first find the call's code and data in the L2, so the
/// difference from a flushed run is what a small call spends fetching them
/// cold). `cargo bench` adds `--bench`, which is ignored.
struct Options {
    dry_run: bool,
    only: Vec<String>,
    reps: usize,
    warm: bool,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options { dry_run: false, only: Vec::new(), reps: REPS, warm: false };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value =
                |name: &str| args.next().unwrap_or_else(|| fail("arguments", format!("{name} needs a value")));
            match arg.as_str() {
                "--dry-run" => options.dry_run = true,
                "--warm" => options.warm = true,
                "--only" => options.only.push(value("--only")),
                "--reps" => {
                    options.reps = match value("--reps").parse() {
                        Ok(n) if n > 0 => n,
                        _ => fail("arguments", "--reps needs a positive integer"),
                    }
                }
                _ => {}
            }
        }
        options
    }

    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| name.contains(o.as_str()))
    }

    /// The host-time cases `--only` keeps (named `host time <case>`).
    fn host_specs(&self) -> Vec<Spec> {
        HOST_SPECS.into_iter().filter(|spec| self.wants(&format!("host time {}", spec.name()))).collect()
    }

    /// The grid, less the cases `--only` leaves out.
    fn grid(&self) -> Vec<Spec> {
        // A filtered (outputs) case kept keeps the unfiltered (plain) call it is compared with.
        let all = grid();
        let partners: Vec<String> = all
            .iter()
            .filter(|spec| self.wants(&spec.name()))
            .flat_map(|spec| spec.unfiltered().into_iter().chain(spec.plain()).map(|p| p.name()))
            .collect();
        let grid: Vec<Spec> =
            all.into_iter().filter(|spec| self.wants(&spec.name()) || partners.contains(&spec.name())).collect();
        if grid.is_empty() && self.host_specs().is_empty() && !sharded::wanted(self) && !nccl::wanted(self) {
            fail("arguments", format!("no case name contains any of {:?}", self.only));
        }
        grid
    }
}

fn main() {
    let options = Options::parse();
    if options.dry_run {
        return dry_run(&options);
    }
    let started = Instant::now();
    let cuda = Cuda::on_device(0).unwrap_or_else(|e| setup(format!("the GPU benchmark needs a CUDA device: {e}")));
    let device = cuda.device_name().unwrap_or_else(setup);
    println!("device: {device}");
    let s = cuda.stream().clone();
    // Off for the graph cases: with it on, capture fails (each view waits on an
    // event recorded before the capture: CUDA_ERROR_STREAM_CAPTURE_ISOLATION).
    // SAFETY: everything below runs on this one stream.
    unsafe { s.context().disable_event_tracking() };
    let mut timer = Timer {
        stream: s.clone(),
        flush: s.alloc_zeros(FLUSH_BYTES).unwrap_or_else(setup),
        reps: options.reps,
        cold: !options.warm,
    };

    // Copy bandwidth: 2 GiB device to device, reads + writes.
    let copy_n = 512 << 20;
    let src = s.alloc_zeros::<f32>(copy_n).unwrap_or_else(setup);
    let mut dst = s.alloc_zeros::<f32>(copy_n).unwrap_or_else(setup);
    let copy = CopyCeiling {
        graph: timer.time("copy", |s| s.memcpy_dtod(&src, &mut dst).unwrap_or_else(|e| fail("copy", e))),
        direct: timer.time_direct(|s| s.memcpy_dtod(&src, &mut dst).unwrap_or_else(|e| fail("copy", e))),
        bytes: (2 * copy_n * 4) as f64,
    };
    drop((src, dst));
    println!("copy: graph node {:.1} µs, stream copy {:.1} µs", copy.graph.us, copy.direct.us);
    println!("device-to-device copy: {:.1} µs, {:.0} GB/s", copy.best().us, copy.gbs());

    // Inputs, made on every core of the host.
    let t0 = Instant::now();
    let mut host = vec![0f32; LOGITS_LEN];
    par_fill(&mut host, |i| normal(1, i));
    let mut host_draft = vec![bf16::ZERO; LOGITS_LEN];
    par_fill(&mut host_draft, |i| bf16::from_f32(0.8 * host[i] + 0.6 * normal(2, i)));
    let host_zipf = zipf_rows(1024, V_MAIN);
    let host_target_bf16: Vec<bf16> = host[..BF16_TARGET_ROWS * V_MAIN].iter().map(|&x| bf16::from_f32(x)).collect();
    let slots: Vec<i32> = (0..MAX_ROWS as i32).collect();
    let buf = Buffers {
        logits: s.clone_htod(&host).unwrap_or_else(setup),
        zipf: s.clone_htod(&host_zipf).unwrap_or_else(setup),
        draft: s.clone_htod(&host_draft).unwrap_or_else(setup),
        target_bf16: s.clone_htod(&host_target_bf16).unwrap_or_else(setup),
        written: s.alloc_zeros::<bf16>(DRAFT_SLOTS * DRAFT_K * SAMPLE_VOCABS[3]).unwrap_or_else(setup),
        slots: s.clone_htod(&slots).unwrap_or_else(setup),
        pos: s.clone_htod(&(0..MAX_ROWS as u64).collect::<Vec<_>>()).unwrap_or_else(setup),
        seeds: s.clone_htod(&vec![7u64; MAX_ROWS]).unwrap_or_else(setup),
        greedy: s.clone_htod(&vec![0f32; MAX_ROWS]).unwrap_or_else(setup),
        random: s.clone_htod(&vec![T; MAX_ROWS]).unwrap_or_else(setup),
        filter_t: s.clone_htod(&vec![FILTER_T; MAX_ROWS]).unwrap_or_else(setup),
        tokens: s.alloc_zeros::<i32>(MAX_ROWS).unwrap_or_else(setup),
    };
    drop((host, host_draft, host_zipf, host_target_bf16));
    s.synchronize().unwrap_or_else(setup);
    println!("inputs made and uploaded in {:.1} s", t0.elapsed().as_secs_f64());

    let ws = cuda.workspace(MAX_ROWS).unwrap_or_else(setup);
    let copy_gbs = copy.gbs();
    let mut bench = Bench {
        cuda,
        stream: s.clone(),
        timer,
        ws,
        buf,
        cases: Vec::new(),
        host: Vec::new(),
        event_tracking: false,
        copy_gbs,
    };
    // Draft tokens of the current verification vocabulary: (vocab, sampled, argmax).
    let mut drafts: Option<(usize, Vec<i32>, Vec<i32>)> = None;
    for spec in options.grid() {
        let ids: &[i32] = match spec {
            Spec::Gumbel { .. } => &[],
            Spec::Rejection { mode, vocab, .. } => {
                if drafts.as_ref().is_none_or(|(v, ..)| *v != vocab) {
                    let (sampled, greedy) = bench.draft_tokens(vocab);
                    drafts = Some((vocab, sampled, greedy));
                }
                let (_, sampled, greedy) = drafts.as_ref().unwrap();
                if mode == VerifyMode::Greedy { greedy } else { sampled }
            }
        };
        bench.run(Clock::Gpu, spec, ids);
    }
    if sharded::wanted(&options) {
        // Its ranks read the buffers on streams of their own.
        s.synchronize().unwrap_or_else(setup);
        let (drafts, _) = bench.draft_tokens(V_MAIN);
        let md = sharded::markdown(&sharded::run(&bench.cuda, &bench.buf, &drafts, &options));
        println!("{md}");
        if let Ok(dir) = std::env::var("OUT") {
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(format!("{dir}/sharded.md"), &md))
                .unwrap_or_else(setup);
        }
    }
    if nccl::wanted(&options) {
        s.synchronize().unwrap_or_else(setup);
        let (drafts, _) = bench.draft_tokens(V_MAIN);
        let md = nccl::markdown(&nccl::run(&bench.cuda, &bench.buf, &drafts));
        println!("{md}");
        if let Ok(dir) = std::env::var("OUT") {
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(format!("{dir}/nccl.md"), &md))
                .unwrap_or_else(setup);
        }
    }
    let host_specs = options.host_specs();
    if !host_specs.is_empty() {
        let (sampled, _) = bench.draft_tokens(V_MAIN);
        let empty = EmptyKernel::load(&s);
        for event_tracking in [false, true] {
            if event_tracking {
                // SAFETY: the buffers made without tracking are used on this one stream only.
                unsafe { s.context().enable_event_tracking() };
                bench.buf = bench.buf.copied(&s);
                bench.ws = bench.cuda.workspace(MAX_ROWS).unwrap_or_else(setup);
                s.synchronize().unwrap_or_else(setup);
            }
            bench.event_tracking = event_tracking;
            bench.launch_floor(&empty);
            for &spec in &host_specs {
                bench.run(Clock::Host, spec, &sampled);
            }
        }
    }
    write_outputs(&device, &copy, &bench.cases, &bench.host, &options, started.elapsed().as_secs_f64());
}

/// `--dry-run`: no GPU; every case gets a made-up time, so the outputs (and
/// `cargo xtask bench-report` on them) can be tried anywhere. Measures nothing.
fn dry_run(options: &Options) {
    println!("dry run: no GPU is used and every number below is made up");
    let copy_bytes = (2 * (512usize << 20) * 4) as f64;
    let reps = options.reps;
    let copy_timing = Timing { us: copy_bytes / 4.0e6, reps };
    let copy =
        CopyCeiling { graph: copy_timing, direct: Timing { us: copy_timing.us * 1.02, reps }, bytes: copy_bytes };
    let cases: Vec<Case> = options
        .grid()
        .into_iter()
        .map(|spec| {
            let bytes = spec.case(copy_timing, None).bytes;
            // A made-up curve: a fixed cost, then a fraction of the copy bandwidth.
            let us = 6.0 + bytes / (copy.gbs() * 1e3 * 0.7);
            let us = if spec.active_filter().is_some() { 1.3 * us } else { us };
            let us = if spec.plain().is_some() { 1.2 * us } else { us };
            let accepted = matches!(spec, Spec::Rejection { .. }).then_some(1.0);
            spec.case(Timing { us, reps: if us > LONG_US { reps.min(REPS_LONG) } else { reps } }, accepted)
        })
        .collect();
    let host_specs = options.host_specs();
    let host_cases: Vec<String> = if host_specs.is_empty() {
        Vec::new()
    } else {
        std::iter::once(EmptyKernel::CASE.to_string()).chain(host_specs.iter().map(Spec::name)).collect()
    };
    let host: Vec<HostCase> = [false, true]
        .into_iter()
        .flat_map(|event_tracking| {
            host_cases.iter().map(move |name| HostCase {
                name: name.clone(),
                event_tracking,
                us: if event_tracking { 20.0 } else { 5.0 },
            })
        })
        .collect();
    write_outputs("dry run (made-up numbers)", &copy, &cases, &host, options, 0.0);
}

/// Prints the table and, when `$OUT` is set, writes `$OUT/bench.md` and `$OUT/bench.json`.
fn write_outputs(device: &str, copy: &CopyCeiling, cases: &[Case], host: &[HostCase], options: &Options, wall_s: f64) {
    let (copy_gbs, reps) = (copy.gbs(), options.reps);
    let flushed = if options.warm { "L2 not flushed (--warm)" } else { "L2 flushed before each" };
    let long: Vec<&str> = cases.iter().filter(|c| c.timing.reps != reps).map(|c| c.name.as_str()).collect();
    let reps_note = if long.is_empty() {
        format!("median of {reps} CUDA-graph replays per case, {flushed}")
    } else {
        format!(
            "median of {reps} CUDA-graph replays per case ({REPS_LONG} for the {} cases over {LONG_US:.0} µs: {}), \
             {flushed}",
            long.len(),
            long.join("; ")
        )
    };

    let mut md = format!(
        "GPU: {device}. {reps_note}. Draft logits 0.8·target + 0.6·noise, T = {T}. Total run time {wall_s:.0} s.\n\n\
         | case | µs | GB/s | % of copy | accepted / request |\n| --- | ---: | ---: | ---: | ---: |\n\
         | device-to-device copy (2 GiB) | {:.1} | {copy_gbs:.0} | 100 | |\n",
        copy.best().us
    );
    for c in cases {
        let accepted = c.accepted.map_or(String::new(), |a| format!("{a:.2}"));
        let (us, gbs) = (c.timing.us, c.gbs());
        writeln!(md, "| {} | {us:.1} | {gbs:.0} | {:.0} | {accepted} |", c.name, 100.0 * gbs / copy_gbs).unwrap();
    }
    let filtered: Vec<(&Case, f64)> = cases.iter().filter_map(|c| Some((c, c.unfiltered_us(cases)?))).collect();
    if !filtered.is_empty() {
        md.push_str(&format!(
            "\nFiltered cases (T = {FILTER_T}, the filter on every slot; verification with unfiltered bf16 draft \
             logits), each beside the same call without filters (its name less the `+` suffix):\n\n\
             | filtered case | µs | unfiltered µs | filtered / unfiltered |\n| --- | ---: | ---: | ---: |\n"
        ));
        for (c, u) in filtered {
            writeln!(md, "| {} | {:.1} | {u:.1} | {:.2} |", c.name, c.timing.us, c.timing.us / u).unwrap();
        }
    }
    let with_outputs: Vec<(&Case, f64)> = cases.iter().filter_map(|c| Some((c, c.plain_us(cases)?))).collect();
    if !with_outputs.is_empty() {
        md.push_str(&format!(
            "\nOutputs cases (REFERENCE §8: ` +logprobs` each emitted token's processed log-probability, \
             ` +top{MAX_TOP_LOGPROBS}` also the top {MAX_TOP_LOGPROBS} under it with the emitted token's rank, \
             ` +block` block verification, REFERENCE §4.11), each \
             beside the plain call (its name less the suffix):\n\n\
             | outputs case | µs | plain µs | outputs / plain |\n| --- | ---: | ---: | ---: |\n"
        ));
        for (c, u) in with_outputs {
            writeln!(md, "| {} | {:.1} | {u:.1} | {:.2} |", c.name, c.timing.us, c.timing.us / u).unwrap();
        }
    }
    if !host.is_empty() {
        md.push_str("\n| host time per call | µs | cudarc event tracking |\n| --- | ---: | --- |\n");
        for h in host {
            writeln!(md, "| {} | {:.1} | {} |", h.name, h.us, if h.event_tracking { "on" } else { "off" }).unwrap();
        }
    }
    println!("\n{md}");

    let unix_time = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let cases: Vec<String> = cases.iter().map(|c| format!("  {}", c.json(copy_gbs, cases))).collect();
    let host: Vec<String> = host.iter().map(|h| format!("  {}", h.json())).collect();
    let json = format!(
        "{{\"device\":{},\"unix_time\":{unix_time},\"wall_s\":{wall_s:.1},\"reps\":{reps},\"reps_long\":{},\
         \"long_us\":{LONG_US},\"flush_bytes\":{},\"temperature\":{T},\
         \"copy\":{{\"us\":{:.2},\"bytes\":{},\"gbs\":{copy_gbs:.1},\"graph_us\":{:.2},\"stream_us\":{:.2}}},\
         \n\"cases\":[\n{}\n],\n\"host\":[\n{}\n]}}\n",
        json_str(device),
        reps.min(REPS_LONG),
        if options.warm { 0 } else { FLUSH_BYTES },
        copy.best().us,
        copy.bytes,
        copy.graph.us,
        copy.direct.us,
        cases.join(",\n"),
        host.join(",\n")
    );
    if let Ok(out) = std::env::var("OUT") {
        // A folder not made yet is made, rather than the run's results lost at its end.
        std::fs::create_dir_all(&out).unwrap_or_else(|e| fail("output", format!("mkdir {out}: {e}")));
        let write = |name: &str, text: &str| {
            let path = std::path::Path::new(&out).join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| fail("output", format!("write {}: {e}", path.display())));
            println!("wrote {}", path.display());
        };
        write("bench.md", &md);
        write("bench.json", &json);
    }
}
