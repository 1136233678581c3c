//! The CPU backend: the same semantics as the kernels, computed with the same
//! `specdec-core` code, so its tokens and noise equal the GPU's bit for bit.
//! It is the test oracle and the fallback when no GPU is present.
//!
//! Values the kernels check on the device (slots, temperatures, columns) are
//! host values here, so they come back as typed errors.

mod gumbel;
mod rejection;

use half::{bf16, f16};
use specdec_core::dtype::{Bf16, F16};

/// The CPU backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

/// Views `half` slices as the bit containers `specdec-core` computes on.
trait AsCore {
    type Core;
    fn as_core(&self) -> &[Self::Core];
    fn as_core_mut(&mut self) -> &mut [Self::Core];
}

macro_rules! as_core {
    ($half:ty => $core:ty) => {
        impl AsCore for [$half] {
            type Core = $core;
            fn as_core(&self) -> &[$core] {
                // SAFETY: both types are #[repr(transparent)] over u16.
                unsafe { std::slice::from_raw_parts(self.as_ptr().cast(), self.len()) }
            }
            fn as_core_mut(&mut self) -> &mut [$core] {
                // SAFETY: as above; the borrow is carried over.
                unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr().cast(), self.len()) }
            }
        }
    };
}
as_core!(bf16 => Bf16);
as_core!(f16 => F16);

/// A row as the kernels walk it: `(first id, four values widened, valid lanes)`.
fn quads<L: specdec_core::dtype::Element>(values: &[L]) -> impl Iterator<Item = (u32, [f32; 4], u32)> + '_ {
    values.chunks(4).enumerate().map(|(q, quad)| {
        let mut vals = [0f32; 4];
        for (v, x) in vals.iter_mut().zip(quad) {
            *v = x.to_f32();
        }
        (4 * q as u32, vals, quad.len() as u32)
    })
}
