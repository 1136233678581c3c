//! specdec device code, compiled to PTX by `specdec-ptx-builder`.
//!
//! Kernels are thin `extern "ptx-kernel"` entry points taking one `#[repr(C)]`
//! parameter block from `specdec-core::layout`; the work is ordinary Rust over
//! the shared `specdec-core` code, plus a small documented layer of
//! intrinsics ([`gpu`]) and block-level reductions ([`block`]).
//!
//! # Modules
//!
//! - [`gumbel`]: `gumbel_sample` (SPEC §3): Gumbel-max sampling and greedy
//!   argmax of each row, the draft logits written in drafting mode.
//! - [`rejection`]: `rejection_sample` (SPEC §4), one file per step:
//!   `rejection/stats.rs` (pass 1, the rows' log-sum-exps and argmax),
//!   `rejection/accept.rs` (the decision: **the accept rule**,
//!   `Request::accepts`), `rejection/resample.rs` (pass 2: **the residual
//!   resample** and the bonus token, `resample_range`), `rejection/mod.rs`
//!   (the kernel table and what the steps share).
//! - [`logprobs`]: log-probabilities of a call's emitted tokens (REFERENCE
//!   §8), after either operation: the log-sum-exps, then the top-n and rank.
//! - [`load`]: reading rows four elements at a time, and the walks over a
//!   chunk (`for_each_quad`, `for_each_quad_shared`).
//! - [`fold`]: per-quad folds shared by both operations (greedy argmax,
//!   scaled log-sum-exp pushes, the block floor of the noise loops).
//! - [`block`], [`last_block`]: block and warp reductions; a chunked row's
//!   last block to arrive combines its chunks.
//! - [`shard`]: the combine of a sharded `gumbel_sample`'s messages, after the exchange.
//! - [`merge`]: a sharded call's filtered row's `τ` from the ranks' top-k
//!   lists (the merge kernels of both operations).
//! - [`shared`]: the launch's dynamic shared memory, typed (`Shared`).
//! - [`row`]: a row as both operations see it: its slot's sampling
//!   parameters as read and checked on the device, its chunks, its token store.
//! - [`threshold`]: sampling filters (SPEC §7): a slot's filters as read
//!   on the device, the threshold `τ` of a filtered row by one block (the
//!   threshold kernels of both operations), and the mask the filtered
//!   kernels apply with it.
//! - [`gpu`]: the intrinsics.
//!
//! The math both backends share (Philox streams, the Gumbel transform,
//! log-space helpers, the accept test `accepts`) is in `specdec-core`, and so
//! are the kernels' symbols and launch bounds (`specdec_core::names`): each
//! entry point is exported as `kernel_symbol!` names it, for each dtype pair
//! of `for_each_dtype_pair!` (defined here, used by both kernel tables).
#![no_std]
#![feature(
    abi_ptx,
    asm_experimental_arch,
    stdarch_nvptx,
    link_llvm_intrinsics,
    gpu_launch_sized_workgroup_mem,
    core_intrinsics,
    gpu_intrinsics,
    stmt_expr_attributes
)]
#![allow(internal_features)]

/// Calls the macro `$m` once with the nine (logits, draft logits) dtype pairs
/// that a kernel of `specdec_core::names::Pairs::All` is built for, one
/// `module: logits => draft;` line per pair: `for_each_dtype_pair!(gumbel_kernels)`
/// is `gumbel_kernels! { f32_f32: f32 => f32; f32_bf16: f32 => Bf16; … }`.
/// The element types are named as `kernel_symbol!` takes them (`f32`, `Bf16`,
/// `F16`), so the caller's module has `Bf16` and `F16` in scope. Defined
/// before the modules so that every module can call it.
macro_rules! for_each_dtype_pair {
    ($m:ident) => {
        $m! {
            f32_f32: f32 => f32;
            f32_bf16: f32 => Bf16;
            f32_f16: f32 => F16;
            bf16_f32: Bf16 => f32;
            bf16_bf16: Bf16 => Bf16;
            bf16_f16: Bf16 => F16;
            f16_f32: F16 => f32;
            f16_bf16: F16 => Bf16;
            f16_f16: F16 => F16;
        }
    };
}

pub mod block;
pub mod fold;
pub mod gpu;
pub mod gumbel;
pub mod last_block;
pub mod load;
pub mod logprobs;
pub mod merge;
pub mod rejection;
pub mod row;
pub mod shard;
pub mod shared;
pub mod threshold;
pub mod walk_sum;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels are written not to panic (no indexing that can fail, no
    // arithmetic overflow checks in release); trap if one ever does.
    gpu::trap()
}
