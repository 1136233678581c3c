//! GPU robustness of the zero-copy API (feature `gpu`; needs CUDA device 0 and
//! fails without one), SPEC §2.1, §3.4, §5:
//!
//! - determinism: 100 launches of the same `gumbel_sample` and
//!   `rejection_sample` calls give bitwise the same outputs (and draft logits);
//! - CUDA graphs: both calls captured on a stream and replayed after new
//!   inputs were written into the same device buffers give what eager
//!   launches (and, for `gumbel_sample`, the CPU backend) give on those inputs;
//! - the launch path allocates nothing (free device memory unchanged over 100
//!   calls, and no heap allocation on the calling thread), never synchronises
//!   (capture would fail), and enqueues kernels only (every node of a
//!   captured call is a kernel node);
//! - fault paths: no such device, a workspace too small, one from another
//!   context or another stream, one too large to exist: typed errors, no panic;
//! - NaN and ±inf logits: their rows are flagged and sampled in range, and the
//!   other rows come out bitwise as in a run without them.
//!
//! The tests share the GPU one at a time ([`gpu`]): the free-memory check must
//! not see another test's allocations.
#![cfg(feature = "gpu")]

use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUgraphNodeType, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaGraph, CudaSlice, CudaStream};
use half::bf16;
use specdec::status::NAN_LOGITS;
use specdec::{
    Backend, Column, Cuda, DType, Device, DraftLogits, DraftLogitsMut, DraftLogitsShape, Error, GumbelOutput,
    GumbelSample, Logits, RejectionOutput, RejectionSample, SamplingParams, Verification, Workspace,
};
use specdec_suite::batch::{ColumnSpec, Sampled, Values};
use specdec_suite::inputs::{
    PAST_VOCAB, Rng, TEMPERATURES, first_argmax, mixed_logits, random_batch, random_draft_logits,
};
use specdec_suite::{Batch, Verified, Verify};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard};

/// The system allocator, counting each thread's allocations
/// ([`allocations`]).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // try_with: nothing to count once the thread's locals are gone.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to `System`, which upholds the contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as given.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as given.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap allocations made by this thread so far.
fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Serialises the tests of this file.
fn gpu() -> MutexGuard<'static, ()> {
    static GPU: Mutex<()> = Mutex::new(());
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// CUDA device 0 on a stream of its own, with cudarc's cross-stream event
/// tracking off: everything here runs on that one stream, and with it on a
/// capture fails (each view waits on an event recorded before the capture:
/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, seen on an H200).
fn cuda() -> Cuda {
    let cuda = Cuda::on_device(0).unwrap_or_else(|e| panic!("the GPU suite needs a CUDA device: {e}"));
    // SAFETY: the buffers of these tests are used on this one stream only.
    unsafe { cuda.stream().context().disable_event_tracking() };
    cuda
}

/// Panics with `what` and the driver's error.
fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

// --- Device copies of a call ------------------------------------------------------

/// Fills of outputs before each launch, so a launch that writes nothing shows.
const TOKEN_FILL: i32 = i32::MIN;
const STATUS_FILL: u32 = u32::MAX;

/// A `gumbel_sample` call on device buffers: f32 logits and, optionally, a
/// bf16 draft logits (a converting store). Shapes are fixed; values can be replaced
/// in place ([`GumbelDev::upload`]) between launches or graph replays.
struct GumbelDev {
    stream: Arc<CudaStream>,
    rows: usize,
    vocab: usize,
    row_stride: usize,
    drafting: bool,
    logits: CudaSlice<f32>,
    slots: CudaSlice<i32>,
    pos: CudaSlice<u64>,
    temperature: CudaSlice<f32>,
    seed: CudaSlice<u64>,
    /// The draft logits, their shape and column (`columns` when per row).
    draft_logits: Option<(CudaSlice<bf16>, DraftLogitsShape, Option<usize>)>,
    columns: Option<CudaSlice<i32>>,
    tokens: CudaSlice<i32>,
    row_status: CudaSlice<u32>,
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn f32s(v: &Values) -> &[f32] {
    match v {
        Values::F32(v) => v,
        other => panic!("these tests use f32 logits, not {:?}", other.dtype()),
    }
}

fn bf16s(v: &Values) -> &[bf16] {
    match v {
        Values::BF16(v) => v,
        other => panic!("these tests use bf16 draft logits, not {:?}", other.dtype()),
    }
}

impl GumbelDev {
    fn new(cuda: &Cuda, b: &Batch) -> Self {
        let s = cuda.stream().clone();
        let up = "upload";
        let draft_logits = b.draft_logits.as_ref().map(|c| {
            let shape = c.shape();
            let column = match c.column {
                ColumnSpec::All(col) => Some(col),
                ColumnSpec::PerRow(_) => None,
            };
            (ok(s.clone_htod(bf16s(&c.data)), up), shape, column)
        });
        let columns = match b.draft_logits.as_ref().map(|c| &c.column) {
            Some(ColumnSpec::PerRow(cols)) => Some(ok(s.clone_htod(cols), up)),
            _ => None,
        };
        GumbelDev {
            rows: b.rows,
            vocab: b.vocab,
            row_stride: b.row_stride,
            drafting: b.drafting,
            logits: ok(s.clone_htod(f32s(&b.logits)), up),
            slots: ok(s.clone_htod(&b.slots), up),
            pos: ok(s.clone_htod(&b.pos), up),
            temperature: ok(s.clone_htod(&b.temperature), up),
            seed: ok(s.clone_htod(&b.seed), up),
            draft_logits,
            columns,
            tokens: ok(s.clone_htod(&vec![TOKEN_FILL; b.rows]), up),
            row_status: ok(s.clone_htod(&vec![STATUS_FILL; b.rows]), up),
            stream: s,
        }
    }

    /// Writes `b`'s values (same shapes as at creation) into the buffers and
    /// refills the outputs.
    fn upload(&mut self, b: &Batch) {
        let (s, up) = (&self.stream, "memcpy_htod");
        assert_eq!((b.rows, b.vocab, b.row_stride), (self.rows, self.vocab, self.row_stride), "same shape");
        ok(s.memcpy_htod(f32s(&b.logits), &mut self.logits), up);
        ok(s.memcpy_htod(&b.slots, &mut self.slots), up);
        ok(s.memcpy_htod(&b.pos, &mut self.pos), up);
        ok(s.memcpy_htod(&b.temperature, &mut self.temperature), up);
        ok(s.memcpy_htod(&b.seed, &mut self.seed), up);
        if let (Some((d, _, _)), Some(c)) = (&mut self.draft_logits, &b.draft_logits) {
            ok(s.memcpy_htod(bf16s(&c.data), d), up);
        }
        if let (Some(d), Some(ColumnSpec::PerRow(cols))) =
            (&mut self.columns, b.draft_logits.as_ref().map(|c| &c.column))
        {
            ok(s.memcpy_htod(cols, d), up);
        }
        ok(s.memcpy_htod(&vec![TOKEN_FILL; self.rows], &mut self.tokens), up);
        ok(s.memcpy_htod(&vec![STATUS_FILL; self.rows], &mut self.row_status), up);
    }

    /// Enqueues the call (no copy, no synchronisation).
    fn launch(&mut self, cuda: &Cuda, ws: &mut Workspace) -> specdec::Result<()> {
        let call = GumbelSample::<Device> {
            logits: Logits::new(&self.logits, self.rows, self.vocab).with_row_stride(self.row_stride),
            slots: self.slots.as_view(),
            pos: self.pos.as_view(),
            params: SamplingParams::new(&self.temperature, &self.seed),
            drafting: self.drafting,
        };
        let mut out = GumbelOutput::new(&mut self.tokens).with_row_status(&mut self.row_status);
        if let Some((d, shape, column)) = &mut self.draft_logits {
            let column = match (column, &self.columns) {
                (Some(c), _) => Column::All(*c),
                (None, Some(cols)) => Column::per_row(cols),
                (None, None) => unreachable!("per-row columns are uploaded with the draft logits"),
            };
            out = out.with_draft_logits(DraftLogitsMut::new(d, *shape), column);
        }
        cuda.gumbel_sample(ws, &call, &mut out)
    }

    /// Waits for the stream and reads tokens, statuses and the draft logits,
    /// the draft logits as bits (they may hold NaNs, which `==` on bf16 never equates).
    fn read(&self) -> (Sampled, Option<Vec<u16>>) {
        let (s, down) = (&self.stream, "clone_dtoh");
        ok(s.synchronize(), "synchronize");
        let tokens = ok(s.clone_dtoh(&self.tokens), down).into_iter().map(i64::from).collect();
        let row_status = ok(s.clone_dtoh(&self.row_status), down);
        let draft_logits = self.draft_logits.as_ref().map(|(d, _, _)| bits(&ok(s.clone_dtoh(d), down)));
        (Sampled { tokens, row_status }, draft_logits)
    }
}

/// A `rejection_sample` call on device buffers: f32 target, bf16 draft logits
/// or one-hot drafts. Shapes fixed, values replaceable as for [`GumbelDev`].
struct VerifyDev {
    stream: Arc<CudaStream>,
    rows: usize,
    vocab: usize,
    row_stride: usize,
    max_drafts: usize,
    target: CudaSlice<f32>,
    offsets: CudaSlice<i32>,
    drafts: CudaSlice<i32>,
    slots: CudaSlice<i32>,
    pos: CudaSlice<u64>,
    temperature: CudaSlice<f32>,
    seed: CudaSlice<u64>,
    draft: Option<(CudaSlice<bf16>, DraftLogitsShape)>,
    tokens: CudaSlice<i32>,
    num_emitted: CudaSlice<i32>,
    accepted: CudaSlice<i32>,
    row_status: CudaSlice<u32>,
}

impl VerifyDev {
    fn new(cuda: &Cuda, v: &Verify) -> Self {
        let s = cuda.stream().clone();
        let up = "upload";
        let requests = v.requests();
        VerifyDev {
            rows: v.rows,
            vocab: v.vocab,
            row_stride: v.row_stride,
            max_drafts: v.max_drafts,
            target: ok(s.clone_htod(f32s(&v.target)), up),
            offsets: ok(s.clone_htod(&v.offsets), up),
            drafts: ok(s.clone_htod(&v.drafts), up),
            slots: ok(s.clone_htod(&v.slots), up),
            pos: ok(s.clone_htod(&v.pos), up),
            temperature: ok(s.clone_htod(&v.temperature), up),
            seed: ok(s.clone_htod(&v.seed), up),
            draft: v.draft.as_ref().map(|(d, shape)| (ok(s.clone_htod(bf16s(d)), up), *shape)),
            tokens: ok(s.clone_htod(&vec![TOKEN_FILL; requests * (v.max_drafts + 1)]), up),
            num_emitted: ok(s.clone_htod(&vec![TOKEN_FILL; requests]), up),
            accepted: ok(s.clone_htod(&vec![TOKEN_FILL; requests]), up),
            row_status: ok(s.clone_htod(&vec![STATUS_FILL; v.rows]), up),
            stream: s,
        }
    }

    /// Writes `v`'s values (same shapes as at creation) into the buffers and
    /// refills the outputs.
    fn upload(&mut self, v: &Verify) {
        let (s, up) = (&self.stream, "memcpy_htod");
        let same = (v.rows, v.vocab, v.row_stride, v.max_drafts);
        assert_eq!(same, (self.rows, self.vocab, self.row_stride, self.max_drafts), "same shape");
        ok(s.memcpy_htod(f32s(&v.target), &mut self.target), up);
        ok(s.memcpy_htod(&v.offsets, &mut self.offsets), up);
        ok(s.memcpy_htod(&v.drafts, &mut self.drafts), up);
        ok(s.memcpy_htod(&v.slots, &mut self.slots), up);
        ok(s.memcpy_htod(&v.pos, &mut self.pos), up);
        ok(s.memcpy_htod(&v.temperature, &mut self.temperature), up);
        ok(s.memcpy_htod(&v.seed, &mut self.seed), up);
        if let (Some((d, _)), Some((values, _))) = (&mut self.draft, &v.draft) {
            ok(s.memcpy_htod(bf16s(values), d), up);
        }
        let requests = v.requests();
        ok(s.memcpy_htod(&vec![TOKEN_FILL; requests * (v.max_drafts + 1)], &mut self.tokens), up);
        ok(s.memcpy_htod(&vec![TOKEN_FILL; requests], &mut self.num_emitted), up);
        ok(s.memcpy_htod(&vec![TOKEN_FILL; requests], &mut self.accepted), up);
        ok(s.memcpy_htod(&vec![STATUS_FILL; v.rows], &mut self.row_status), up);
    }

    /// Enqueues the call (no copy, no synchronisation).
    fn launch(&mut self, cuda: &Cuda, ws: &mut Workspace) -> specdec::Result<()> {
        let call = RejectionSample::<Device> {
            target: Logits::new(&self.target, self.rows, self.vocab).with_row_stride(self.row_stride),
            offsets: self.offsets.as_view(),
            drafts: self.drafts.as_view(),
            slots: self.slots.as_view(),
            pos: self.pos.as_view(),
            params: SamplingParams::new(&self.temperature, &self.seed),
            max_drafts: self.max_drafts,
            verification: Verification::Token,
            draft_logits: self.draft.as_ref().map(|(d, shape)| DraftLogits::new(d, *shape)),
        };
        let mut out = RejectionOutput::new(&mut self.tokens, &mut self.num_emitted)
            .with_accepted(&mut self.accepted)
            .with_row_status(&mut self.row_status);
        cuda.rejection_sample(ws, &call, &mut out)
    }

    /// Waits for the stream and reads the outputs.
    fn read(&self) -> Verified {
        let (s, down) = (&self.stream, "clone_dtoh");
        ok(s.synchronize(), "synchronize");
        Verified {
            tokens: ok(s.clone_dtoh(&self.tokens), down).into_iter().map(i64::from).collect(),
            num_emitted: ok(s.clone_dtoh(&self.num_emitted), down),
            accepted: ok(s.clone_dtoh(&self.accepted), down),
            row_status: ok(s.clone_dtoh(&self.row_status), down),
        }
    }
}

// --- Inputs -----------------------------------------------------------------------

/// A `gumbel_sample` batch: f32 logits (`random_batch`: -inf entries, a NaN in
/// row 1, padded rows, padding slots, mixed temperatures), bf16 draft logits in a
/// random layout.
fn gumbel_batch(rng: &mut Rng, rows: usize, vocab: usize) -> Batch {
    let mut b = random_batch(rng, DType::F32, rows, vocab);
    b.drafting = rng.below(2) == 0;
    b.draft_logits = Some(random_draft_logits(rng, DType::BF16, &b));
    b
}

/// New values for `b`, same shapes: logits, slots (a new permutation),
/// positions, temperatures, seeds, per-row columns; the draft logits back to their
/// sentinel.
fn refill_gumbel(rng: &mut Rng, b: &Batch) -> Batch {
    let fresh = random_batch(rng, DType::F32, b.rows, b.vocab);
    let mut n = b.clone();
    for r in 0..b.rows {
        for x in 0..b.vocab {
            n.logits.set_f32(r * b.row_stride + x, fresh.logits.get(r * fresh.row_stride + x));
        }
    }
    let mut slots: Vec<i32> = (0..b.temperature.len() as i32).collect();
    rng.shuffle(&mut slots);
    n.slots = (0..b.rows).map(|r| if rng.below(6) == 0 { -1 } else { slots[r] }).collect();
    n.pos = (0..b.rows).map(|_| rng.next_u64()).collect();
    n.temperature = (0..b.temperature.len()).map(|_| rng.pick(&TEMPERATURES)).collect();
    n.seed = (0..b.seed.len()).map(|_| rng.next_u64()).collect();
    if let Some(c) = &mut n.draft_logits {
        c.data = Values::from_f32(DType::BF16, &vec![specdec_suite::DraftLogitsSpec::SENTINEL; c.data.len()]);
        if let ColumnSpec::PerRow(cols) = &mut c.column {
            cols.iter_mut().for_each(|col| *col = rng.below(c.k) as i32);
        }
    }
    n
}

/// `requests` requests of `0..=max_drafts` drafts (ragged) over a vocabulary
/// of `vocab`: targets from `mixed_logits` with PAST_VOCAB padding, request
/// `r` on slot `r` or padding (1 in 6), temperatures mixed (greedy
/// included), random seeds and positions, drafts mostly the row's argmax
/// (accepted when greedy, often when not), else random ids or placeholders;
/// with `draft_logits`, bf16 draft logits `[slots, K, vocab]` near the
/// target (so standard acceptance happens).
fn verify_batch(rng: &mut Rng, requests: usize, max_drafts: usize, vocab: usize, draft_logits: bool) -> Verify {
    let n: Vec<usize> = (0..requests).map(|_| rng.below(max_drafts + 1)).collect();
    let rows: usize = n.iter().map(|k| k + 1).sum();
    let row_stride = vocab + 3;
    let mut target = vec![PAST_VOCAB; rows * row_stride];
    for r in 0..rows {
        target[r * row_stride..r * row_stride + vocab].copy_from_slice(&mixed_logits(vocab, rng.next_u64()));
    }
    let mut v = Verify::new(Values::F32(target), vocab, &n, max_drafts, 1.0);
    v.row_stride = row_stride;
    v.slots = (0..requests as i32).map(|r| if rng.below(6) == 0 { -1 } else { r }).collect();
    refill_verify(rng, &mut v, draft_logits);
    v
}

/// New values for `v`, same shapes: target logits, drafts, temperatures,
/// seeds, positions, draft logits.
fn refill_verify(rng: &mut Rng, v: &mut Verify, draft_logits: bool) {
    let (vocab, stride) = (v.vocab, v.row_stride);
    let mut target = f32s(&v.target).to_vec();
    for r in 0..v.rows {
        target[r * stride..r * stride + vocab].copy_from_slice(&mixed_logits(vocab, rng.next_u64()));
    }
    v.drafts = (0..v.rows)
        .map(|r| match rng.below(8) {
            0 => -1,
            1 | 2 => rng.below(vocab) as i32,
            _ => first_argmax(&target[r * stride..r * stride + vocab]) as i32,
        })
        .collect();
    v.temperature = (0..v.temperature.len()).map(|_| rng.pick(&TEMPERATURES)).collect();
    v.seed = (0..v.seed.len()).map(|_| rng.next_u64()).collect();
    v.pos = (0..v.rows).map(|_| rng.next_u64()).collect();
    if draft_logits {
        let (slots, k) = (v.temperature.len(), v.max_drafts.max(1));
        let mut q = vec![0f32; slots * k * vocab];
        for r in 0..v.requests() {
            for i in 0..(v.offsets[r + 1] - v.offsets[r] - 1) as usize {
                let row = (v.offsets[r] as usize + i) * stride;
                for x in 0..vocab {
                    q[(r * k + i) * vocab + x] = target[row + x] + rng.uniform(-0.5, 0.5);
                }
            }
        }
        let shape = DraftLogitsShape::dense(slots, k, vocab);
        v.draft = Some((Values::from_f32(DType::BF16, &q), shape));
    }
    v.target = Values::F32(target);
}

/// The requests of `v` whose slot is greedy (or padding).
fn greedy_requests(v: &Verify) -> Vec<usize> {
    (0..v.requests()).filter(|&r| v.slots[r] == -1 || v.temperature[v.slots[r] as usize] == 0.0).collect()
}

/// Asserts that the greedy requests of `v` got the CPU's tokens (argmax
/// chains are exact on both backends; random decisions may differ near their
/// thresholds, tests/rejection_gpu.rs).
fn assert_greedy_match_cpu(v: &Verify, got: &Verified, ctx: &str) {
    let want = ok(v.run(&Backend::cpu()), "cpu rejection_sample");
    for r in greedy_requests(v) {
        assert_eq!(got.request(r), want.request(r), "{ctx}: greedy request {r}: tokens differ from the CPU's");
        assert_eq!(got.num_emitted[r], want.num_emitted[r], "{ctx}: greedy request {r}: num_emitted");
    }
    assert_eq!(got.row_status, want.row_status, "{ctx}: row status");
}

// --- Determinism --------------------------------------------------------------------

const REPEATS: usize = 100;

#[test]
fn repeated_launches_are_bitwise_identical() {
    let _gpu = gpu();
    let cuda = cuda();
    let mut rng = Rng::new(0xDE7E);
    let b = gumbel_batch(&mut rng, 48, 32_000);
    let mut g = GumbelDev::new(&cuda, &b);
    let mut ws = ok(cuda.workspace(64), "workspace");
    let mut first = None;
    for run in 0..REPEATS {
        g.upload(&b); // outputs refilled, draft logits back to their sentinel
        ok(g.launch(&cuda, &mut ws), "gumbel_sample");
        let got = g.read();
        match &first {
            None => first = Some(got),
            Some(want) => {
                assert_eq!(got.0, want.0, "gumbel_sample run {run}: tokens or statuses differ from run 0");
                assert!(got.1 == want.1, "gumbel_sample run {run}: the draft logits differ from run 0");
            }
        }
    }
    let (want, want_draft_logits) = first.expect("ran");
    let mut on_cpu = b.clone();
    let cpu = ok(on_cpu.run(&Backend::cpu()), "cpu gumbel_sample");
    assert_eq!(want, cpu, "gumbel_sample: GPU vs CPU");
    assert!(
        want_draft_logits == on_cpu.draft_logits.as_ref().map(|c| bits(bf16s(&c.data))),
        "gumbel_sample: draft logits vs CPU"
    );

    for draft_logits in [false, true] {
        let v = verify_batch(&mut rng, 40, 5, 4097, draft_logits);
        let mut d = VerifyDev::new(&cuda, &v);
        let mut ws = ok(cuda.workspace(40 * 6), "workspace");
        let mut first: Option<Verified> = None;
        for run in 0..REPEATS {
            d.upload(&v);
            ok(d.launch(&cuda, &mut ws), "rejection_sample");
            let got = d.read();
            match &first {
                None => first = Some(got),
                Some(want) => assert_eq!(&got, want, "rejection_sample (draft logits {draft_logits}) run {run}"),
            }
        }
        let first = first.expect("ran");
        assert!(first.num_emitted.iter().all(|&n| n >= 1), "every request emits: {:?}", first.num_emitted);
        assert_greedy_match_cpu(&v, &first, &format!("draft logits {draft_logits}"));
    }
    let word = ok(ws.take_status(), "status");
    assert_eq!(word & !NAN_LOGITS, 0, "valid calls raise no flag but NAN_LOGITS (row 1's NaN): {word:#x}");
}

// --- CUDA graphs --------------------------------------------------------------------

/// Captures what `enqueue` enqueues on the stream into a graph (after one
/// eager warm-up launch: module and function loads happen there). Capture
/// fails if anything in it synchronises.
fn capture(cuda: &Cuda, mut enqueue: impl FnMut() -> specdec::Result<()>) -> CudaGraph {
    let s = cuda.stream();
    ok(enqueue(), "warm-up launch");
    ok(s.synchronize(), "synchronize");
    ok(s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin_capture");
    let launched = enqueue();
    let graph = s.end_capture(CUgraphInstantiate_flags(0));
    ok(launched, "the launch during capture");
    ok(graph, "end_capture (a synchronising call inside the capture invalidates it)").expect("a graph was captured")
}

/// The type of every node of a captured graph.
fn node_types(graph: &CudaGraph) -> Vec<CUgraphNodeType> {
    let g = graph.cu_graph();
    let mut n = 0usize;
    // SAFETY: `g` is a live graph owned by `graph`; a null array asks for the count.
    ok(unsafe { sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut n) }.result(), "cuGraphGetNodes");
    let mut nodes = vec![std::ptr::null_mut(); n];
    // SAFETY: `nodes` holds `n` entries.
    ok(unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut n) }.result(), "cuGraphGetNodes");
    nodes
        .iter()
        .map(|&node| {
            let mut t = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: `node` belongs to `g`; `t` is written by the driver.
            ok(unsafe { sys::cuGraphNodeGetType(node, &mut t) }.result(), "cuGraphNodeGetType");
            t
        })
        .collect()
}

/// Graph replays with new inputs in the same buffers.
const REPLAYS: usize = 4;

#[test]
fn captured_gumbel_sample_replays_on_new_inputs() {
    let _gpu = gpu();
    let cuda = cuda();
    let mut rng = Rng::new(0x6A1);
    let b = gumbel_batch(&mut rng, 24, 4097);
    let mut g = GumbelDev::new(&cuda, &b);
    let mut ws = ok(cuda.workspace(24), "workspace");
    let graph = {
        let (g, ws) = (&mut g, &mut ws);
        capture(&cuda, || g.launch(&cuda, ws))
    };
    let kinds = node_types(&graph);
    assert!(
        kinds.len() == 1 && kinds.iter().all(|&k| k == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL),
        "gumbel_sample should enqueue its one kernel and nothing else (no copy, memset or allocation): {kinds:?}"
    );
    for replay in 0..REPLAYS {
        let n = refill_gumbel(&mut rng, &b);
        g.upload(&n);
        ok(graph.launch(), "graph launch");
        let replayed = g.read();
        g.upload(&n);
        ok(g.launch(&cuda, &mut ws), "eager gumbel_sample");
        let eager = g.read();
        assert_eq!(replayed.0, eager.0, "replay {replay}: graph vs eager launch");
        assert!(replayed.1 == eager.1, "replay {replay}: draft logits, graph vs eager launch");
        let mut on_cpu = n.clone();
        let cpu = ok(on_cpu.run(&Backend::cpu()), "cpu gumbel_sample");
        assert_eq!(replayed.0, cpu, "replay {replay}: graph vs CPU");
        let cpu_draft_logits = on_cpu.draft_logits.as_ref().map(|c| bits(bf16s(&c.data)));
        assert!(replayed.1 == cpu_draft_logits, "replay {replay}: draft logits, graph vs CPU");
    }
}

#[test]
fn captured_rejection_sample_replays_on_new_inputs() {
    let _gpu = gpu();
    let cuda = cuda();
    let mut rng = Rng::new(0x6A2);
    for draft_logits in [false, true] {
        let mut v = verify_batch(&mut rng, 24, 4, 4097, draft_logits);
        let mut d = VerifyDev::new(&cuda, &v);
        let mut ws = ok(cuda.workspace(24 * 5), "workspace");
        let graph = {
            let (d, ws) = (&mut d, &mut ws);
            capture(&cuda, || d.launch(&cuda, ws))
        };
        let kinds = node_types(&graph);
        assert!(
            kinds.len() == 2 && kinds.iter().all(|&k| k == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL),
            "rejection_sample should enqueue its two kernels and nothing else: {kinds:?}"
        );
        for replay in 0..REPLAYS {
            refill_verify(&mut rng, &mut v, draft_logits);
            d.upload(&v);
            ok(graph.launch(), "graph launch");
            let replayed = d.read();
            d.upload(&v);
            ok(d.launch(&cuda, &mut ws), "eager rejection_sample");
            let eager = d.read();
            let ctx = format!("draft logits {draft_logits}, replay {replay}");
            assert_eq!(replayed, eager, "{ctx}: graph vs eager launch");
            assert_greedy_match_cpu(&v, &replayed, &ctx);
        }
    }
}

// --- No allocation, no synchronisation ----------------------------------------------

const CALLS: usize = 100;

/// Free device memory once it stops changing: after a context-wide
/// synchronisation, memory that earlier tests freed asynchronously may still
/// be on its way back to the device.
fn settled_free_memory(ctx: &CudaContext) -> usize {
    let mut last = None;
    for _ in 0..20 {
        ok(ctx.synchronize(), "synchronize");
        let (free, _) = ok(ctx.mem_get_info(), "mem_get_info");
        if last == Some(free) {
            return free;
        }
        last = Some(free);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("free device memory did not settle (other processes on the GPU?)")
}

#[test]
fn launches_allocate_nothing() {
    let _gpu = gpu();
    let cuda = cuda();
    let ctx = cuda.stream().context().clone();
    let mut rng = Rng::new(0xA110C);
    let b = gumbel_batch(&mut rng, 32, 4097);
    let v = verify_batch(&mut rng, 32, 3, 4097, true);
    let mut g = GumbelDev::new(&cuda, &b);
    let mut d = VerifyDev::new(&cuda, &v);
    let mut ws = ok(cuda.workspace(32 * 4), "workspace");
    // Warm-up: module load, function loads, any lazy driver reservations.
    ok(g.launch(&cuda, &mut ws), "gumbel_sample");
    ok(d.launch(&cuda, &mut ws), "rejection_sample");
    let before = settled_free_memory(&ctx);
    let allocated = allocations();
    for _ in 0..CALLS {
        ok(g.launch(&cuda, &mut ws), "gumbel_sample");
        ok(d.launch(&cuda, &mut ws), "rejection_sample");
    }
    let host_allocations = allocations() - allocated;
    let (in_flight, _) = ok(ctx.mem_get_info(), "mem_get_info");
    ok(cuda.stream().synchronize(), "synchronize");
    let (after, _) = ok(ctx.mem_get_info(), "mem_get_info");
    assert_eq!(in_flight, before, "free device memory changed while {CALLS} calls of each were queued");
    assert_eq!(after, before, "free device memory changed over {CALLS} calls of each");
    assert_eq!(host_allocations, 0, "heap allocations on the host by {CALLS} calls of each");
    // And they still compute the right thing.
    let mut on_cpu = b.clone();
    assert_eq!(g.read().0, ok(on_cpu.run(&Backend::cpu()), "cpu"), "gumbel_sample after {CALLS} calls");
}

// --- Fault paths --------------------------------------------------------------------

#[test]
fn a_missing_device_is_a_typed_error() {
    let _gpu = gpu();
    match Cuda::on_device(999) {
        Err(Error::NoDevice(msg)) => assert!(msg.contains("999"), "{msg}"),
        other => panic!("device 999: {other:?}"),
    }
}

#[test]
fn a_small_workspace_is_a_typed_error() {
    let _gpu = gpu();
    let cuda = cuda();
    let mut rng = Rng::new(0x5AA11);
    let mut g = GumbelDev::new(&cuda, &gumbel_batch(&mut rng, 9, 100));
    let mut ws = ok(cuda.workspace(8), "workspace");
    let r = g.launch(&cuda, &mut ws);
    assert!(matches!(r, Err(Error::WorkspaceTooSmall { needed: 9, capacity: 8 })), "gumbel_sample: {r:?}");
    let (got, _) = g.read();
    assert!(got.tokens.iter().all(|&t| t == TOKEN_FILL as i64), "nothing was launched: {got:?}");
    // rejection_sample needs requests · (K + 1) = 3 · 4 rows.
    let mut d = VerifyDev::new(&cuda, &verify_batch(&mut rng, 3, 3, 100, true));
    let mut ws = ok(cuda.workspace(11), "workspace");
    let r = d.launch(&cuda, &mut ws);
    assert!(matches!(r, Err(Error::WorkspaceTooSmall { needed: 12, capacity: 11 })), "rejection_sample: {r:?}");
    assert!(d.read().num_emitted.iter().all(|&n| n == TOKEN_FILL), "nothing was launched");
}

#[test]
fn a_workspace_of_another_context_is_a_typed_error() {
    let _gpu = gpu();
    let cuda = cuda();
    let other = match CudaContext::new_non_primary(0, 0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("note: skipped: a second (non-primary) context on device 0 could not be made: {e}");
            return;
        }
    };
    let other = ok(other.new_stream().map_err(Error::from).and_then(Cuda::new), "Cuda on the second context");
    let mut foreign = ok(other.workspace(64), "workspace on the second context");
    let mut rng = Rng::new(0xC7C7);
    let mut g = GumbelDev::new(&cuda, &gumbel_batch(&mut rng, 8, 100));
    let r = g.launch(&cuda, &mut foreign);
    assert!(matches!(r, Err(Error::WorkspaceContext)), "gumbel_sample: {r:?}");
    let mut d = VerifyDev::new(&cuda, &verify_batch(&mut rng, 4, 2, 100, false));
    let r = d.launch(&cuda, &mut foreign);
    assert!(matches!(r, Err(Error::WorkspaceContext)), "rejection_sample: {r:?}");
    // The primary context still works.
    let mut ws = ok(cuda.workspace(64), "workspace");
    ok(g.launch(&cuda, &mut ws), "gumbel_sample on its own workspace");
    ok(d.launch(&cuda, &mut ws), "rejection_sample on its own workspace");
    ok(cuda.stream().synchronize(), "synchronize");
}

/// A workspace is used on the stream it was made on: the calls take its
/// buffers' addresses without cudarc's events, which only that stream's order
/// makes safe.
#[test]
fn a_workspace_of_another_stream_is_a_typed_error() {
    let _gpu = gpu();
    let cuda = cuda();
    let other = ok(cuda.stream().context().new_stream().map_err(Error::from).and_then(Cuda::new), "second stream");
    let mut foreign = ok(other.workspace(64), "workspace on the second stream");
    let mut rng = Rng::new(0x57E4);
    let mut g = GumbelDev::new(&cuda, &gumbel_batch(&mut rng, 8, 100));
    let r = g.launch(&cuda, &mut foreign);
    assert!(matches!(r, Err(Error::WorkspaceStream)), "gumbel_sample: {r:?}");
    let mut d = VerifyDev::new(&cuda, &verify_batch(&mut rng, 4, 2, 100, false));
    let r = d.launch(&cuda, &mut foreign);
    assert!(matches!(r, Err(Error::WorkspaceStream)), "rejection_sample: {r:?}");
    assert!(d.read().num_emitted.iter().all(|&n| n == TOKEN_FILL), "nothing was launched");
    // A clone of the backend is on the same stream: its workspace serves both.
    let mut ws = ok(cuda.workspace(64), "workspace");
    ok(g.launch(&cuda.clone(), &mut ws), "gumbel_sample by a clone of the backend");
    ok(d.launch(&cuda, &mut ws), "rejection_sample");
    ok(cuda.stream().synchronize(), "synchronize");
}

/// A workspace for more rows than any GPU holds must be an error, not a
/// panic, and never a workspace smaller than it claims to be: `1 << 60`
/// rows need 80 · 2^60 + … bytes, which wraps around `usize` to a few KiB if
/// the sizes are not computed with overflow checks.
#[test]
fn an_impossible_workspace_is_a_typed_error() {
    let _gpu = gpu();
    let cuda = cuda();
    for max_rows in [usize::MAX / 64, 1 << 60, usize::MAX] {
        let made = std::panic::catch_unwind(|| cuda.workspace(max_rows));
        match made {
            Ok(Err(e)) => eprintln!("workspace({max_rows}): {e}"),
            Ok(Ok(ws)) => panic!("workspace({max_rows}) succeeded, claiming {} rows", ws.max_rows()),
            Err(_) => panic!("workspace({max_rows}) panicked instead of returning an error"),
        }
    }
    // The device is still usable.
    let mut rng = Rng::new(0xB16);
    let mut g = GumbelDev::new(&cuda, &gumbel_batch(&mut rng, 4, 100));
    let mut ws = ok(cuda.workspace(4), "workspace");
    ok(g.launch(&cuda, &mut ws), "gumbel_sample");
    g.read();
}

// --- NaN and ±inf logits ------------------------------------------------------------

/// Rows planted with non-finite logits: `(row, what)`.
const BAD_ROWS: [(usize, &str); 6] =
    [(2, "one NaN"), (5, "one +inf"), (7, "all -inf"), (9, "all NaN"), (12, "+inf and NaN"), (14, "-inf and +inf")];

/// Plants the [`BAD_ROWS`] into row `r`'s ids `0..vocab` (f32 logits).
fn plant(values: &mut Values, row: std::ops::Range<usize>, what: &str, rng: &mut Rng) {
    let (start, vocab) = (row.start, row.len());
    let mut set = |x: usize, v: f32| values.set_f32(start + x, v);
    match what {
        "one NaN" => set(rng.below(vocab), f32::NAN),
        "one +inf" => set(rng.below(vocab), f32::INFINITY),
        "all -inf" => (0..vocab).for_each(|x| set(x, f32::NEG_INFINITY)),
        "all NaN" => (0..vocab).for_each(|x| set(x, f32::NAN)),
        "+inf and NaN" => {
            set(rng.below(vocab), f32::NAN);
            set(rng.below(vocab), f32::INFINITY);
        }
        "-inf and +inf" => {
            (0..vocab).step_by(3).for_each(|x| set(x, f32::NEG_INFINITY));
            set(1 + 3 * rng.below(vocab / 3), f32::INFINITY);
        }
        _ => unreachable!("{what}"),
    }
}

#[test]
fn non_finite_gumbel_rows_are_flagged_and_contained() {
    let _gpu = gpu();
    let cuda = cuda();
    let mut rng = Rng::new(0x1AF);
    let (rows, vocab) = (16, 3001);
    let mut clean = gumbel_batch(&mut rng, rows, vocab);
    // Only the planted rows hold non-finite values.
    for r in 0..rows {
        for x in 0..vocab {
            let i = r * clean.row_stride + x;
            if !clean.logits.get(i).is_finite() {
                clean.logits.set_f32(i, rng.uniform(-6.0, 6.0));
            }
        }
    }
    let mut bad = clean.clone();
    for (r, what) in BAD_ROWS {
        plant(&mut bad.logits, r * bad.row_stride..r * bad.row_stride + vocab, what, &mut rng);
    }
    let mut ws = ok(cuda.workspace(rows), "workspace");
    let run = |b: &Batch, ws: &mut Workspace| {
        let mut g = GumbelDev::new(&cuda, b);
        ok(g.launch(&cuda, ws), "gumbel_sample");
        g.read().0
    };
    let (with, without) = (run(&bad, &mut ws), run(&clean, &mut ws));
    for r in 0..rows {
        let row = bad.row(r);
        let planted = BAD_ROWS.iter().find(|(b, _)| *b == r).map(|(_, what)| *what);
        let ctx = format!("row {r} ({})", planted.unwrap_or("finite"));
        let token = with.tokens[r];
        assert!((0..vocab as i64).contains(&token), "{ctx}: token {token}");
        let nan = row.iter().any(|x| x.is_nan());
        assert_eq!(with.row_status[r], if nan { NAN_LOGITS } else { 0 }, "{ctx}: status");
        match planted {
            None => assert_eq!(token, without.tokens[r], "{ctx}: differs from the run without the bad rows"),
            Some(_) if row.contains(&f32::INFINITY) => {
                let first = row.iter().position(|&x| x == f32::INFINITY).unwrap() as i64;
                assert_eq!(token, first, "{ctx}: the first +inf wins")
            }
            Some(_) if row.iter().all(|&x| x.is_nan() || x == f32::NEG_INFINITY) => {
                assert_eq!(token, 0, "{ctx}: nothing above -inf gives token 0")
            }
            Some(_) => assert!(row[token as usize].is_finite(), "{ctx}: token {token} is {}", row[token as usize]),
        }
    }
    let mut on_cpu = bad.clone();
    assert_eq!(with, ok(on_cpu.run(&Backend::cpu()), "cpu"), "GPU vs CPU with the bad rows");
}

#[test]
fn non_finite_rejection_rows_are_flagged_and_contained() {
    let _gpu = gpu();
    let cuda = cuda();
    let mut rng = Rng::new(0x2AF);
    let vocab = 3001;
    let mut clean = verify_batch(&mut rng, 12, 3, vocab, true);
    for r in 0..clean.rows {
        for x in 0..vocab {
            let i = r * clean.row_stride + x;
            if !clean.target.get(i).is_finite() {
                clean.target.set_f32(i, rng.uniform(-6.0, 6.0));
            }
        }
    }
    // Bad rows in every third request, at its first row (a draft row, or the bonus row when n_r = 0).
    let mut bad = clean.clone();
    let bad_requests: Vec<usize> = (0..clean.requests()).step_by(3).collect();
    for (k, &r) in bad_requests.iter().enumerate() {
        let row = bad.offsets[r] as usize * bad.row_stride;
        plant(&mut bad.target, row..row + vocab, BAD_ROWS[k % BAD_ROWS.len()].1, &mut rng);
    }
    let mut ws = ok(cuda.workspace(clean.requests() * (clean.max_drafts + 1)), "workspace");
    let run = |v: &Verify, ws: &mut Workspace| {
        let mut d = VerifyDev::new(&cuda, v);
        ok(d.launch(&cuda, ws), "rejection_sample");
        d.read()
    };
    let (with, without) = (run(&bad, &mut ws), run(&clean, &mut ws));
    for r in 0..bad.requests() {
        let ctx = format!("request {r} ({})", if bad_requests.contains(&r) { "bad first row" } else { "finite" });
        let (o0, o1) = (bad.offsets[r] as usize, bad.offsets[r + 1] as usize);
        let emitted = with.num_emitted[r];
        assert!((1..=(o1 - o0) as i32).contains(&emitted), "{ctx}: num_emitted {emitted}");
        let tokens = with.request(r);
        assert!(tokens[..emitted as usize].iter().all(|&t| (0..vocab as i64).contains(&t)), "{ctx}: {tokens:?}");
        assert!(tokens[emitted as usize..].iter().all(|&t| t == -1), "{ctx}: {tokens:?}");
        for row in o0..o1 {
            let nan = (0..vocab).any(|x| bad.target.get(row * bad.row_stride + x).is_nan());
            assert_eq!(with.row_status[row], if nan { NAN_LOGITS } else { 0 }, "{ctx}: row {row} status");
        }
        if !bad_requests.contains(&r) {
            assert_eq!(tokens, without.request(r), "{ctx}: differs from the run without the bad rows");
            assert_eq!(emitted, without.num_emitted[r], "{ctx}: num_emitted differs without the bad rows");
        }
    }
}
