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
//!   argmax of each row, the draft-logits cache written in drafting mode.
//! - [`rejection`]: `rejection_sample` (SPEC §4), one file per step:
//!   `rejection/stats.rs` (pass 1, the rows' log-sum-exps and argmax),
//!   `rejection/accept.rs` (the decision: **the accept rule**,
//!   `Request::accepts`), `rejection/resample.rs` (pass 2: **the residual
//!   resample** and the bonus token, `resample_range`), `rejection/mod.rs`
//!   (the kernel table and what the steps share).
//! - [`load`]: reading rows four elements at a time, and the walks over a
//!   chunk (`for_each_quad`, `for_each_quad_shared`).
//! - [`fold`]: per-quad folds shared by both operations (greedy argmax,
//!   scaled log-sum-exp pushes, the block floor of the noise loops).
//! - [`block`], [`last_block`]: block and warp reductions; a chunked row's
//!   last block to arrive combines its chunks.
//! - [`shared`]: the launch's dynamic shared memory, typed (`Shared`).
//! - [`row`]: a row as both operations see it: its slot's sampling
//!   parameters as read and checked on the device, its chunks, its token store.
//! - [`gpu`]: the intrinsics.
//!
//! The math both backends share (Philox streams, the Gumbel transform,
//! log-space helpers, the accept test `accepts`) is in `specdec-core`, and so
//! are the kernels' symbols and launch bounds (`specdec_core::names`): each
//! entry point is exported as `kernel_symbol!` names it.
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

pub mod block;
pub mod fold;
pub mod gpu;
pub mod gumbel;
pub mod last_block;
pub mod load;
pub mod rejection;
pub mod row;
pub mod shared;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels are written not to panic (no indexing that can fail, no
    // arithmetic overflow checks in release); trap if one ever does.
    gpu::trap()
}
