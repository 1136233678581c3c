//! Where a call's buffers live. Argument structs are generic over [`Memory`],
//! so one description (and one validation) serves host slices and `cudarc`
//! device views alike.

use cudarc::driver::{CudaView, CudaViewMut};

/// A kind of memory: how read-only and writable buffers are passed.
pub trait Memory {
    type Ref<'a, T: 'a>;
    type Mut<'a, T: 'a>;
    fn len<T>(buf: &Self::Ref<'_, T>) -> usize;
    fn len_mut<T>(buf: &Self::Mut<'_, T>) -> usize;
}

/// Host memory: plain slices (the CPU backend, and `Backend`'s host-data calls).
#[derive(Debug, Clone, Copy)]
pub struct Host;

impl Memory for Host {
    type Ref<'a, T: 'a> = &'a [T];
    type Mut<'a, T: 'a> = &'a mut [T];
    fn len<T>(buf: &&[T]) -> usize {
        buf.len()
    }
    fn len_mut<T>(buf: &&mut [T]) -> usize {
        buf.len()
    }
}

/// Device memory: `cudarc` views (`slice.as_view()`, `slice.as_view_mut()`,
/// `slice.slice(a..b)`), so engines pass their own buffers without copies.
#[derive(Debug, Clone, Copy)]
pub struct Device;

impl Memory for Device {
    type Ref<'a, T: 'a> = CudaView<'a, T>;
    type Mut<'a, T: 'a> = CudaViewMut<'a, T>;
    fn len<T>(buf: &CudaView<'_, T>) -> usize {
        buf.len()
    }
    fn len_mut<T>(buf: &CudaViewMut<'_, T>) -> usize {
        buf.len()
    }
}
