//! specdec device code, compiled to PTX by `specdec-ptx-builder`.
//!
//! Kernels are thin `extern "ptx-kernel"` entry points taking one `#[repr(C)]`
//! parameter block from `specdec-core::layout`; the work is ordinary Rust over
//! the shared `specdec-core` code, plus a small documented layer of
//! intrinsics ([`gpu`]) and block-level reductions ([`block`]).
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

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels are written not to panic (no indexing that can fail, no
    // arithmetic overflow checks in release); trap if one ever does.
    gpu::trap()
}
