//! One speculative step on the GPU, as an engine runs it: the engine's own
//! `cudarc` stream, a workspace made once, device buffers, drafting with
//! `gumbel_sample` into bf16 draft logits and verification with
//! `rejection_sample`, both captured in one CUDA graph and replayed.
//!
//! ```sh
//! cargo run --release -p specdec --example cuda_graph   # needs an NVIDIA GPU
//! ```
//!
//! The GPU suite runs it (`tests/examples_gpu.rs`).

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::bf16;
use specdec::{
    Column, Cuda, DraftLogits, DraftLogitsMut, DraftLogitsShape, GumbelOutput, GumbelSample, Logits, RejectionOutput,
    RejectionSample, SamplingParams, Verification, Workspace,
};
use std::sync::Arc;

const REQUESTS: usize = 4;
const K: usize = 3;
const VOCAB: usize = 32_000;
/// Each request owns `K` draft rows and its bonus row.
const ROWS: usize = REQUESTS * (K + 1);

/// Deterministic logits in about `[-4, 4]`, different per `salt`.
fn logits(rows: usize, salt: u64) -> Vec<f32> {
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * VOCAB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
        })
        .collect()
}

/// The device buffers of one step.
struct Step {
    target: CudaSlice<f32>,
    draft_model: CudaSlice<f32>,
    /// Per row of the drafting call: the request's slot, `-1` for bonus rows.
    draft_slots: CudaSlice<i32>,
    /// Per row of the drafting call: its draft-logits column (draft `i` → column `i`).
    columns: CudaSlice<i32>,
    pos: CudaSlice<u64>,
    offsets: CudaSlice<i32>,
    slots: CudaSlice<i32>,
    temperature: CudaSlice<f32>,
    seed: CudaSlice<u64>,
    draft_logits: CudaSlice<bf16>,
    drafts: CudaSlice<i32>,
    tokens: CudaSlice<i32>,
    num_emitted: CudaSlice<i32>,
}

impl Step {
    /// The inputs on the device. The draft model's logits are given for every
    /// row; bonus rows are padding in the drafting call (slot -1: greedy, no
    /// draft-logits write) and the verifier ignores their draft entries.
    fn new(stream: &Arc<CudaStream>) -> Result<Step, cudarc::driver::DriverError> {
        let draft_slots: Vec<i32> =
            (0..ROWS).map(|j| if j % (K + 1) == K { -1 } else { (j / (K + 1)) as i32 }).collect();
        let columns: Vec<i32> = (0..ROWS).map(|j| (j % (K + 1) % K) as i32).collect();
        let pos: Vec<u64> = (0..ROWS).map(|j| 100 + j as u64).collect();
        let offsets: Vec<i32> = (0..=REQUESTS).map(|r| (r * (K + 1)) as i32).collect();
        Ok(Step {
            target: stream.clone_htod(&logits(ROWS, 1))?,
            draft_model: stream.clone_htod(&logits(ROWS, 2))?,
            draft_slots: stream.clone_htod(&draft_slots)?,
            columns: stream.clone_htod(&columns)?,
            pos: stream.clone_htod(&pos)?,
            offsets: stream.clone_htod(&offsets)?,
            slots: stream.clone_htod(&[0i32, 1, 2, 3])?,
            temperature: stream.clone_htod(&[0.8f32, 1.0, 0.0, 0.6])?, // slot 2 is greedy
            seed: stream.clone_htod(&[11u64, 12, 13, 14])?,
            draft_logits: stream.alloc_zeros::<bf16>(REQUESTS * K * VOCAB)?,
            drafts: stream.alloc_zeros::<i32>(ROWS)?,
            tokens: stream.alloc_zeros::<i32>(REQUESTS * (K + 1))?,
            num_emitted: stream.alloc_zeros::<i32>(REQUESTS)?,
        })
    }

    /// Enqueues the step: draft every draft row into the draft logits, then verify.
    fn run(&mut self, cuda: &Cuda, ws: &mut Workspace) -> specdec::Result<()> {
        let shape = DraftLogitsShape::dense(REQUESTS, K, VOCAB);
        let draft = GumbelSample::new(
            Logits::new(&self.draft_model, ROWS, VOCAB),
            &self.draft_slots,
            &self.pos,
            SamplingParams::new(&self.temperature, &self.seed),
        )
        .drafting();
        let mut out = GumbelOutput::new(&mut self.drafts)
            .with_draft_logits(DraftLogitsMut::new(&mut self.draft_logits, shape), Column::per_row(&self.columns));
        cuda.gumbel_sample(ws, &draft, &mut out)?;
        let verify = RejectionSample {
            target: Logits::new(&self.target, ROWS, VOCAB),
            offsets: self.offsets.as_view(),
            drafts: self.drafts.as_view(),
            slots: self.slots.as_view(),
            pos: self.pos.as_view(),
            params: SamplingParams::new(&self.temperature, &self.seed),
            max_drafts: K,
            verification: Verification::Token,
            draft_logits: Some(DraftLogits::new(&self.draft_logits, shape)),
        };
        cuda.rejection_sample(ws, &verify, &mut RejectionOutput::new(&mut self.tokens, &mut self.num_emitted))
    }
}

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The engine's context and stream. Event tracking off: with it, every view
    // waits on and records events, which a stream capture refuses.
    let ctx = CudaContext::new(0)?;
    // SAFETY: this program uses its buffers on this one stream only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    let cuda = Cuda::new(stream.clone())?;
    let mut ws = cuda.workspace(ROWS)?; // once: reused by every call on this stream
    let mut step = Step::new(&stream)?;

    step.run(&cuda, &mut ws)?; // once outside the capture: loads the module, checks the shapes
    stream.synchronize()?;
    let direct = (stream.clone_dtoh(&step.tokens)?, stream.clone_dtoh(&step.num_emitted)?);

    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    step.run(&cuda, &mut ws)?;
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?.ok_or("the capture recorded no graph")?;
    graph.launch()?;
    stream.synchronize()?;
    let status = ws.take_status()?;
    let (tokens, num_emitted) = (stream.clone_dtoh(&step.tokens)?, stream.clone_dtoh(&step.num_emitted)?);

    for (r, (row, &n)) in tokens.chunks(K + 1).zip(&num_emitted).enumerate() {
        println!("request {r}: emitted {n} of {}: {row:?}", K + 1);
        let n = n as usize;
        assert!((1..=K + 1).contains(&n), "request {r}: num_emitted {n}");
        assert!(row[..n].iter().all(|&t| (0..VOCAB as i32).contains(&t)), "request {r}: {row:?}");
        assert!(row[n..].iter().all(|&t| t == -1), "request {r}: {row:?}");
    }
    assert_eq!(status, 0, "device-side status flags");
    // Same inputs, same keys: the replay emits what the direct call did.
    assert_eq!((tokens, num_emitted), direct, "graph replay vs direct call");
    println!("graph replay matches the direct call; status 0");
    Ok(())
}
