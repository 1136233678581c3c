//! # specdec
//!
//! Exact sampling kernels for speculative decoding, written in Rust and run
//! on NVIDIA GPUs through `cudarc`, with a CPU backend that computes the same
//! tokens bit for bit.
//!
//! - [`GumbelSample`]: one token per row by Gumbel-max with per-slot
//!   temperature and seed, noise keyed by position; greedy at `T = 0`;
//!   optionally storing each row's raw logits as draft logits.
//! - [`RejectionSample`]: verify drafts against the target exactly, without a
//!   softmax: log-sum-exp statistics, acceptance in log space, the residual
//!   `max(p − q, 0)` sampled by Gumbel-max; greedy and random requests mixed,
//!   ragged drafts, placeholders, one-hot drafts.
//!
//! The normative definition of every operation is `docs/REFERENCE.md` in the
//! repository (semantics, randomness, validation, statistical acceptance).
//!
//! ```
//! use specdec::{Backend, GumbelOutput, GumbelSample, Logits, SamplingParams};
//! let logits = [0.5f32, 2.0, -1.0, 0.0, 3.0, 1.0]; // two rows of V = 3
//! let (slots, pos) = ([0, -1], [17u64, 4]);          // row 1 is padding (greedy)
//! let params = SamplingParams::new(&[0.8], &[1234]); // temperature, seed per slot
//! let mut tokens = [0i32; 2];
//! let call = GumbelSample::new(Logits::new(&logits, 2, 3), &slots, &pos, params);
//! Backend::cpu().gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens))?;
//! assert!((0..3).contains(&tokens[0]));
//! assert_eq!(tokens[1], 1);
//! # Ok::<(), specdec::Error>(())
//! ```

/// The README's examples, compiled and run as doctests (they use the `candle` feature too).
#[cfg(all(doctest, feature = "candle"))]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

mod backend;
#[cfg(feature = "candle")]
pub mod candle;
pub mod cpu;
pub mod cuda;
mod error;
mod gumbel;
mod logprobs;
mod memory;
mod params;
mod rejection;
pub mod shard;
mod strided;
mod tensor;

pub use backend::Backend;
pub use cpu::Cpu;
pub use cuda::{Cuda, Workspace};
pub use error::{Error, Result};
pub use gumbel::{GumbelOutput, GumbelSample};
pub use logprobs::{Distribution, Logprobs, MAX_TOP_LOGPROBS, TopLogprobs};
pub use memory::{Device, Host, Memory};
pub use params::{Filters, SamplingParams};
pub use rejection::{MAX_DRAFTS, RejectionOutput, RejectionSample, Verification, synthetic_rates};
pub use strided::Strided;
pub use tensor::{
    Column, DType, DraftLogits, DraftLogitsMut, DraftLogitsShape, Element, Logits, MAX_VOCAB, TokenId, Tokens, Values,
    ValuesMut, View, ViewMut,
};

/// The sampling filters' rule (SPEC §7): a slot's [`filter::Filter`], its threshold and masses.
pub use specdec_core::filter;
/// Status flags the kernels raise for device-resident values (SPEC §5).
pub use specdec_core::status;
/// The shared random streams and noise, for callers that want to reproduce them.
pub use specdec_core::{gumbel as noise, rng};
