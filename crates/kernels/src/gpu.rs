//! The thin layer of NVPTX intrinsics the kernels use. Each wrapper is named for
//! what it returns; the unsafe ones say what the caller must uphold.

use core::arch::nvptx;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

unsafe extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_sync_bfly_f32(mask: u32, value: f32, lane_mask: i32, clamp: i32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_sync_bfly_i32(mask: u32, value: i32, lane_mask: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.up.i32"]
    fn shfl_sync_up_i32(mask: u32, value: i32, delta: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_sync_idx_i32(mask: u32, value: i32, lane: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.ex2.approx.ftz.f"]
    fn ex2_approx_ftz(x: f32) -> f32;
    #[link_name = "llvm.nvvm.lg2.approx.ftz.f"]
    fn lg2_approx_ftz(x: f32) -> f32;
    #[link_name = "llvm.nvvm.rsqrt.approx.ftz.f"]
    fn rsqrt_approx_ftz(x: f32) -> f32;
    #[link_name = "llvm.nvvm.redux.sync.max"]
    fn redux_sync_max(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.or"]
    fn redux_sync_or(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.umin"]
    fn redux_sync_umin(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.barrier0.or"]
    fn barrier0_or(predicate: i32) -> i32;
    #[link_name = "llvm.nvvm.barrier0.popc"]
    fn barrier0_popc(predicate: i32) -> i32;
    #[link_name = "llvm.trap"]
    fn llvm_trap() -> !;
}

/// Lanes in a warp.
pub const WARP: u32 = 32;
const FULL_MASK: u32 = u32::MAX;

#[inline(always)]
pub fn thread_idx_x() -> u32 {
    // SAFETY: reads a special register; always defined inside a kernel.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

#[inline(always)]
pub fn block_idx_x() -> u32 {
    // SAFETY: as above.
    unsafe { nvptx::_block_idx_x() as u32 }
}

#[inline(always)]
pub fn block_idx_y() -> u32 {
    // SAFETY: as above.
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// `__syncthreads()`.
///
/// # Safety
/// Every thread of the block must reach this same barrier (no thread may have
/// returned or be in a branch the others skip).
#[inline(always)]
pub unsafe fn sync_threads() {
    // SAFETY: the caller guarantees the barrier is reached block-uniformly.
    unsafe { nvptx::_syncthreads() }
}

/// `__syncthreads_or(predicate)`: a barrier that also tells every thread
/// whether `predicate` was true in any thread of the block.
///
/// # Safety
/// As for [`sync_threads`].
#[inline(always)]
pub unsafe fn sync_threads_or(predicate: bool) -> bool {
    // SAFETY: the caller guarantees the barrier is reached block-uniformly.
    unsafe { barrier0_or(predicate as i32) != 0 }
}

/// `__syncthreads_count(predicate)`: a barrier that also tells every thread
/// in how many threads of the block `predicate` was true.
///
/// # Safety
/// As for [`sync_threads`].
#[inline(always)]
pub unsafe fn sync_threads_count(predicate: bool) -> u32 {
    // SAFETY: the caller guarantees the barrier is reached block-uniformly.
    unsafe { barrier0_popc(predicate as i32) as u32 }
}

/// Butterfly shuffle across the full warp: the value of lane `lane ^ lane_mask`.
///
/// # Safety
/// All 32 lanes of the warp must be active and execute this call together.
#[inline(always)]
pub unsafe fn shfl_bfly_f32(value: f32, lane_mask: u32) -> f32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { shfl_sync_bfly_f32(FULL_MASK, value, lane_mask as i32, 0x1f) }
}

/// [`shfl_bfly_f32`] for 32-bit integers.
///
/// # Safety
/// As for [`shfl_bfly_f32`].
#[inline(always)]
pub unsafe fn shfl_bfly_u32(value: u32, lane_mask: u32) -> u32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { shfl_sync_bfly_i32(FULL_MASK, value as i32, lane_mask as i32, 0x1f) as u32 }
}

/// The block's dynamic shared memory, viewed as `T`s.
///
/// # Safety
/// The launch must have requested at least as many bytes as the caller uses,
/// and accesses must be synchronised with [`sync_threads`].
#[inline(always)]
pub unsafe fn dynamic_shared<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}

/// The value of lane `lane` of the warp, in every lane.
///
/// # Safety
/// All 32 lanes of the warp must be active and execute this call together.
#[inline(always)]
pub unsafe fn shfl_idx_u32(value: u32, lane: u32) -> u32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { shfl_sync_idx_i32(FULL_MASK, value as i32, lane as i32, 0x1f) as u32 }
}

/// The largest `value` of the warp's 32 lanes, in every lane: one
/// `redux.sync` (sm_80 and later), where a butterfly takes five shuffles
/// and five compares (the noise loops' floors take it once a batch:
/// benches/results/2026-12-02-design-measurements.md).
///
/// # Safety
/// All 32 lanes of the warp must be active and execute this call together.
#[inline(always)]
pub unsafe fn warp_max_i32(value: i32) -> i32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { redux_sync_max(value, FULL_MASK as i32) }
}

/// The smallest `value` of the warp's 32 lanes, in every lane: one
/// `redux.sync` (sm_80 and later).
///
/// # Safety
/// All 32 lanes of the warp must be active and execute this call together.
#[inline(always)]
pub unsafe fn warp_min_u32(value: u32) -> u32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { redux_sync_umin(value as i32, FULL_MASK as i32) as u32 }
}

/// The OR of `value` over the warp's 32 lanes, in every lane: one
/// `redux.sync` (sm_80 and later).
///
/// # Safety
/// All 32 lanes of the warp must be active and execute this call together.
#[inline(always)]
pub unsafe fn warp_or_u32(value: u32) -> u32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { redux_sync_or(value as i32, FULL_MASK as i32) as u32 }
}

/// The value of lane `lane − delta` of the warp (its own below `delta`).
///
/// # Safety
/// All 32 lanes of the warp must be active and execute this call together.
#[inline(always)]
pub unsafe fn shfl_up_u32(value: u32, delta: u32) -> u32 {
    // SAFETY: the caller guarantees a converged, full warp.
    unsafe { shfl_sync_up_i32(FULL_MASK, value as i32, delta as i32, 0) as u32 }
}

/// Atomically adds `value` to the `u32` at `ptr` (no ordering), returning the old value.
///
/// # Safety
/// As for [`atomic_max_i32`].
#[inline(always)]
pub unsafe fn atomic_add_u32(ptr: *mut u32, value: u32) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).fetch_add(value, Ordering::Relaxed) }
}

/// Atomically adds `value` to the `u64` at `ptr` (no ordering).
///
/// # Safety
/// As for [`atomic_max_i32`], 8-byte aligned.
#[inline(always)]
pub unsafe fn atomic_add_u64(ptr: *mut u64, value: u64) {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU64::from_ptr(ptr).fetch_add(value, Ordering::Relaxed) };
}

/// Atomically replaces the `u32` at `ptr` with `value` (no ordering),
/// returning the old value.
///
/// # Safety
/// As for [`atomic_max_i32`].
#[inline(always)]
pub unsafe fn atomic_swap_u32(ptr: *mut u32, value: u32) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).swap(value, Ordering::Relaxed) }
}

/// Atomically replaces the `u64` at `ptr` with `value` (no ordering),
/// returning the old value.
///
/// # Safety
/// As for [`atomic_max_i32`], 8-byte aligned.
#[inline(always)]
pub unsafe fn atomic_swap_u64(ptr: *mut u64, value: u64) -> u64 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU64::from_ptr(ptr).swap(value, Ordering::Relaxed) }
}

/// Atomically adds 1 to the `u32` at `ptr` (device scope, no ordering: see
/// [`fence_device`]), returning the old value.
///
/// # Safety
/// As for [`atomic_or`].
#[inline(always)]
pub unsafe fn atomic_inc(ptr: *mut u32) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).fetch_add(1, Ordering::Relaxed) }
}

/// Atomically raises the `i32` at `ptr` to at least `value` (no ordering),
/// returning the old value.
///
/// # Safety
/// `ptr` must be valid, 4-byte aligned (global or shared) memory accessed
/// only atomically by concurrent threads.
#[inline(always)]
pub unsafe fn atomic_max_i32(ptr: *mut i32, value: i32) -> i32 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicI32::from_ptr(ptr).fetch_max(value, Ordering::Relaxed) }
}

/// Atomically raises the `u32` at `ptr` to at least `value` (no ordering).
///
/// # Safety
/// As for [`atomic_max_i32`].
#[inline(always)]
pub unsafe fn atomic_max_u32(ptr: *mut u32, value: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).fetch_max(value, Ordering::Relaxed) };
}

/// Atomically loads the `u32` at `ptr` (no ordering): another block's
/// atomic writes, never a stale L1 line.
///
/// # Safety
/// As for [`atomic_or`].
#[inline(always)]
pub unsafe fn atomic_load(ptr: *mut u32) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).load(Ordering::Relaxed) }
}

/// Atomically stores `value` into the `u32` at `ptr` (no ordering).
///
/// # Safety
/// As for [`atomic_or`].
#[inline(always)]
pub unsafe fn atomic_store(ptr: *mut u32, value: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).store(value, Ordering::Relaxed) }
}

/// `fence.acq_rel.gpu`: this thread's memory accesses before it are seen by
/// the whole device before those after it, which is what publishing a
/// partial before counting in (and reading the others' after being counted
/// last) needs. Not `__threadfence()`'s `membar.gl` (`fence.sc.gpu`), which
/// also orders every fence against every other, at a cost the last block of a
/// small call pays in its latency. Inline assembly (no `nomem`): the compiler
/// moves no memory access across it. Written out because LLVM's NVPTX
/// backend emits Rust's orderings on atomics as relaxed `atom`.
#[inline(always)]
pub fn fence_device() {
    // SAFETY: a fence has no preconditions.
    unsafe { core::arch::asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags)) }
}

/// Atomically ORs `bits` into the `u32` at `ptr` (device scope).
///
/// # Safety
/// `ptr` must be valid, 4-byte aligned, device memory accessed only atomically
/// by concurrent threads.
#[inline(always)]
pub unsafe fn atomic_or(ptr: *mut u32, bits: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU32::from_ptr(ptr).fetch_or(bits, Ordering::Relaxed) };
}

/// `e^x` by the hardware's `ex2.approx` (relative error below 2^-22; subnormal
/// results flush to 0). For sums whose terms need not match the CPU's bits.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    fast_exp2(x * core::f32::consts::LOG2_E)
}

/// `2^x` by the hardware's `ex2.approx`, as [`fast_exp`].
#[inline(always)]
pub fn fast_exp2(x: f32) -> f32 {
    // SAFETY: a pure arithmetic instruction.
    unsafe { ex2_approx_ftz(x) }
}

/// `ln x` by the hardware's `lg2.approx` (`-inf` at 0, NaN below; subnormal
/// inputs flush to 0). For estimates that need not match the CPU's bits.
#[inline(always)]
pub fn fast_ln(x: f32) -> f32 {
    // SAFETY: a pure arithmetic instruction.
    unsafe { lg2_approx_ftz(x) * core::f32::consts::LN_2 }
}

/// `1/√x` by the hardware's `rsqrt.approx` (`inf` at 0, NaN below). For
/// estimates that need not match the CPU's bits.
#[inline(always)]
pub fn fast_rsqrt(x: f32) -> f32 {
    // SAFETY: a pure arithmetic instruction.
    unsafe { rsqrt_approx_ftz(x) }
}

/// `x`, hidden from the optimisers (LLVM's and `ptxas`'s): a loop bounded
/// by it is not unrolled.
#[inline(always)]
pub fn opaque(x: u32) -> u32 {
    let y: u32;
    // SAFETY: a register move.
    unsafe {
        core::arch::asm!("mov.u32 {0}, {1};", out(reg32) y, in(reg32) x, options(pure, nomem, nostack, preserves_flags))
    };
    y
}

/// The `T` at `ptr`, read from L2 by `ld.relaxed.gpu.v4.u32`, 16 bytes a
/// load: a device-scope strong load, which after [`fence_device`] sees what
/// other blocks published before theirs. Not `read_volatile`, which sm_90
/// compiles to system-scope loads of at most 8 bytes (`LD.E.STRONG.SYS`).
///
/// # Safety
/// `ptr` is valid and 16-byte aligned; `T` is plain data (any bits valid).
#[inline(always)]
pub unsafe fn load_relaxed<T: Copy>(ptr: *const T) -> T {
    const { assert!(core::mem::size_of::<T>() % 16 == 0) };
    let mut out = core::mem::MaybeUninit::<T>::uninit();
    let words = out.as_mut_ptr() as *mut [u32; 4];
    for i in 0..core::mem::size_of::<T>() / 16 {
        let (a, b, c, d): (u32, u32, u32, u32);
        // SAFETY: guaranteed by the caller; word i lies inside *ptr.
        unsafe {
            core::arch::asm!(
                "ld.relaxed.gpu.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];",
                out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d,
                in(reg64) (ptr as *const [u32; 4]).add(i),
                options(nostack, readonly, preserves_flags)
            );
            words.add(i).write([a, b, c, d]);
        }
    }
    // SAFETY: every word was written; T is plain data (caller).
    unsafe { out.assume_init() }
}

/// Starts moving the line holding `ptr` into L2 (`prefetch.L2`; inline
/// assembly, as LLVM's intrinsic wants an address-space pointer Rust cannot name),
/// without waiting: a load issued later, after a chain of dependent loads,
/// then finds it there.
///
/// # Safety
/// `ptr` points into memory the kernel may read.
#[inline(always)]
pub unsafe fn prefetch_l2<T>(ptr: *const T) {
    // SAFETY: guaranteed by the caller; a prefetch has no other effect.
    unsafe { core::arch::asm!("prefetch.L2 [{0}];", in(reg64) ptr, options(nostack, readonly, preserves_flags)) }
}

/// Starts moving the line holding `ptr` into this SM's L1 (`prefetch.L1`),
/// without waiting or holding a register for the data.
///
/// # Safety
/// `ptr` points into memory the kernel may read.
#[inline(always)]
pub unsafe fn prefetch_l1<T>(ptr: *const T) {
    // SAFETY: guaranteed by the caller; a prefetch has no other effect.
    unsafe { core::arch::asm!("prefetch.L1 [{0}];", in(reg64) ptr, options(nostack, readonly, preserves_flags)) }
}

/// Aborts the kernel (the launch reports an error to the host).
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `llvm.trap` has no preconditions.
    unsafe { llvm_trap() }
}
