//! The one error type of the host crate.

use cudarc::driver::DriverError;

/// Everything that can go wrong in a call, reported before anything is
/// launched whenever the host can see the problem (SPEC §5).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("no CUDA driver: libcuda could not be loaded (use the CPU backend, or install the NVIDIA driver)")]
    NoDriver,
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    #[error("the CUDA driver could not load the specdec PTX (built for {arch}): {source}")]
    PtxLoad { arch: &'static str, source: DriverError },
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("vocabulary size {vocab} is out of range (1 ..= {max})")]
    InvalidVocab { vocab: usize, max: usize },
    #[error("{what} has {got} elements, expected {expected}")]
    LengthMismatch { what: &'static str, expected: usize, got: usize },
    #[error("{what} holds {len} elements but its shape and strides reach element {needed}")]
    BufferTooSmall { what: &'static str, needed: usize, len: usize },
    #[error("the draft logits are narrower than the vocabulary: width {width} < vocab {vocab}")]
    DraftLogitsTooNarrow { width: usize, vocab: usize },
    #[error("the draft logits have {draft_slots} slots, fewer than the {num_slots} slots of the sampling parameters")]
    DraftLogitsSlots { draft_slots: usize, num_slots: usize },
    #[error("the draft logits' strides ({stride0}, {stride1}) make their rows overlap (shape [{slots}, {k}, {width}])")]
    DraftLogitsOverlap { slots: usize, k: usize, width: usize, stride0: usize, stride1: usize },
    #[error("draft-logits column {column} is out of range 0..{k}{}", row_suffix(*.row))]
    ColumnOutOfRange { row: Option<usize>, column: i64, k: usize },
    #[error("entry {row} of the slot list has slot {slot}, expected -1 (padding) or 0..{num_slots}")]
    InvalidSlot { row: usize, slot: i32, num_slots: usize },
    #[error("slot {slot} has temperature {value:?}, expected 0 (greedy) or a positive, finite, normal value")]
    InvalidTemperature { slot: usize, value: f32 },
    #[error("slot {slot} has top_k {value}{}, expected 0 (off) or a positive count", draft_suffix(*.draft))]
    InvalidTopK { slot: usize, value: i32, draft: bool },
    #[error("slot {slot} has top_p {value:?}{}, expected a value in (0, 1] (1: off)", draft_suffix(*.draft))]
    InvalidTopP { slot: usize, value: f32, draft: bool },
    #[error("slot {slot} has min_p {value:?}{}, expected a value in [0, 1] (0: off)", draft_suffix(*.draft))]
    InvalidMinP { slot: usize, value: f32, draft: bool },
    /// `entry` is the first entry of `offsets` that breaks a rule.
    #[error("invalid request offsets: {detail}")]
    InvalidOffsets { entry: usize, detail: String },
    #[error("row {row} proposes draft token {token}, expected -1 (placeholder) or 0..{vocab}")]
    InvalidDraft { row: usize, token: i32, vocab: usize },
    #[error("the draft logits have {k} columns per slot, fewer than max_drafts = {max_drafts}")]
    DraftColumns { k: usize, max_drafts: usize },
    #[error("max_drafts = {max_drafts} is out of range (0 ..= {max})")]
    MaxDrafts { max_drafts: usize, max: usize },
    #[error("the workspace was made for {capacity} rows, this call needs {needed}; create it with a larger limit")]
    WorkspaceTooSmall { needed: usize, capacity: usize },
    #[error(
        "a workspace for {max_rows} rows needs {bytes} bytes of device memory, more than the GPU can give \
         (usize::MAX means the size itself overflows); use a smaller row limit"
    )]
    OutOfMemory { bytes: usize, max_rows: usize },
    #[error(
        "the workspace holds the messages of {capacity} ranks, this exchange has {needed}; \
         make it with Cuda::sharded_workspace for as many"
    )]
    WorkspaceRanks { needed: usize, capacity: usize },
    #[error("the workspace belongs to another CUDA context")]
    WorkspaceContext,
    #[error("the workspace belongs to another stream: make one per stream (Cuda::workspace)")]
    WorkspaceStream,
    #[error("{n} top log-probabilities per position asked for, at most {max}")]
    TopLogprobs { n: usize, max: usize },
    #[error("synthetic acceptance rate {position} is {value:?}, expected a value in [0, 1]")]
    InvalidRate { position: usize, value: f32 },
    #[error(
        "the stream is being captured into a CUDA graph and the call would allocate its workspace: \
         make one call on the stream before capturing, as large as the captured one"
    )]
    CaptureAllocation,
    #[error("invalid shard: {detail}")]
    InvalidShard { detail: String },
    #[error("{what}: not in a sharded call yet")]
    NotSharded { what: &'static str },
    #[error("the exchange between ranks failed: {0}")]
    Exchange(String),
    #[error("rank {rank} of the sharded call failed its checks (its own call returned why)")]
    PeerFailed { rank: usize },
    #[error("{what}: not on the CUDA backend yet (use the CPU backend)")]
    NotOnCuda { what: &'static str },
    /// A candle operation the call ran (feature `candle`).
    #[cfg(feature = "candle")]
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    // A tensor argument of an integration (`specdec::candle`, the Python package) that the call
    // cannot take as it is.
    #[error("{what}: expected {expected}, got a tensor of shape {got:?}")]
    TensorShape { what: &'static str, expected: &'static str, got: Vec<usize> },
    #[error("{what}: expected dtype {expected}, got {got}")]
    TensorDType { what: &'static str, expected: String, got: &'static str },
    #[error("{what}: {reason}, got strides {strides:?} (make it contiguous first)")]
    TensorLayout { what: &'static str, reason: &'static str, strides: Vec<i64> },
    #[error("{what} is on {got}, expected {expected}")]
    TensorDevice { what: &'static str, expected: String, got: String },
    #[error("{what} is read-only, and the call writes it")]
    TensorReadOnly { what: &'static str },
    #[error("{what} share memory with {other}, which the call reads while it writes them")]
    TensorAliased { what: &'static str, other: &'static str },
}

fn draft_suffix(draft: bool) -> &'static str {
    if draft { " in the draft logits' filters" } else { "" }
}

fn row_suffix(row: Option<usize>) -> String {
    row.map(|r| format!(" (row {r})")).unwrap_or_default()
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
