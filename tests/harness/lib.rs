//! The shared harness of specdec's integration tests.
//!
//! - [`test_device!`]: one test body, run on the CPU backend and, when the
//!   `gpu` feature is on, on CUDA device 0 (failing, not skipping, without one).
//! - [`Batch`]: owned host buffers for a `gumbel_sample` call.
//! - [`Verify`]: owned host buffers for a `rejection_sample` call.
//! - [`chi_square`]: the SPEC §6 goodness-of-fit rule (crate `specdec-stats`, shared with the CLI).
//! - [`agreement`]: CPU/GPU agreement of `rejection_sample` up to near-threshold decisions (SPEC §2.5).
//! - [`filters`]: per-slot filter tables and a sort-based reference of the kept set (SPEC §7).
//! - [`inputs`]: fixed-seed inputs and reference results (first argmax).
//! - [`robust`]: hostile calls in guarded buffers, checked against a model of
//!   the validation rules (property tests and the fuzz target).
//! - [`sharding`]: vocab-parallel calls over in-process ranks (REFERENCE §9).

pub mod agreement;
pub mod batch;
pub mod drafting;
pub mod filters;
pub mod inputs;
pub mod robust;
pub mod sharding;
pub mod verify;

pub use batch::{Batch, DraftLogitsSpec};
pub use filters::FilterTable;
/// The statistical acceptance rule and reference softmax (crate `specdec-stats`).
pub use specdec_stats as stats;
pub use specdec_stats::{ChiSquare, chi_square, tail_z};
pub use verify::{Verified, Verify};

use specdec::Backend;

/// Whether this build runs the CUDA variants.
pub const GPU: bool = cfg!(feature = "gpu");

/// The CUDA backend on device 0. The GPU suite must not pass without a GPU,
/// so this panics with the reason when there is none.
pub fn cuda() -> Backend {
    Backend::Cuda(cuda_device())
}

/// [`cuda`]'s device itself, for calls on device buffers.
pub fn cuda_device() -> specdec::Cuda {
    specdec::Cuda::on_device(0).unwrap_or_else(|e| panic!("the GPU suite needs a CUDA device: {e}"))
}

/// The candle device of a suite backend: the CPU, or CUDA device 0 (the GPU
/// suite must not pass without one).
pub fn candle_device(backend: &Backend) -> candle_core::Device {
    match backend {
        Backend::Cpu(_) => candle_core::Device::Cpu,
        Backend::Cuda(_) => candle_core::Device::new_cuda(0).expect("the GPU suite needs a CUDA device"),
    }
}

/// The GPU suite's usual sample-size scale: big samples are cheap on a GPU.
pub const GPU_SCALE: usize = 8;

/// The GPU suite's sample-size scale: [`GPU_SCALE`], or `$SPECDEC_TEST_SCALE`
/// (a positive integer). `run.sh --sanitize` sets 1: compute-sanitizer slows
/// kernels by orders of magnitude, and the statistical tests then draw
/// CPU-sized samples through the same code paths.
pub fn gpu_scale() -> usize {
    match std::env::var("SPECDEC_TEST_SCALE") {
        Err(_) => GPU_SCALE,
        Ok(v) => match v.parse() {
            Ok(n) if n > 0 => n,
            _ => panic!("SPECDEC_TEST_SCALE={v:?}: expected a positive integer"),
        },
    }
}

/// `full`, the size of a GPU-only test at the usual scale ([`GPU_SCALE`]),
/// scaled as [`gpu_scale`] is (smaller under a sanitizer).
pub fn gpu_sized(full: usize) -> usize {
    full * gpu_scale() / GPU_SCALE
}

/// One body, two tests: `<name>::cpu` and (feature `gpu`) `<name>::cuda`.
/// The body sees the backend as `$backend` and a size scale `$scale`
/// (`1` on CPU, [`gpu_scale`] on the GPU).
#[macro_export]
macro_rules! test_device {
    ($name:ident, |$backend:ident, $scale:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn cpu() {
                let $backend = specdec::Backend::cpu();
                #[allow(unused_variables)]
                let $scale: usize = 1;
                $body
            }

            #[cfg(feature = "gpu")]
            #[test]
            fn cuda() {
                let $backend = $crate::cuda();
                #[allow(unused_variables)]
                let $scale: usize = $crate::gpu_scale();
                $body
            }
        }
    };
}
