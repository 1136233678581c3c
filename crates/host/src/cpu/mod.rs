//! The CPU backend: the same semantics as the kernels, computed with the same
//! `specdec-core` code, so its tokens and noise equal the GPU's bit for bit.
//! It is the test oracle and the fallback when no GPU is present.
//!
//! Values the kernels check on the device (slots, temperatures, columns) are
//! host values here, so they come back as typed errors.

mod gumbel;
mod rejection;
mod simd;

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

/// The greedy token of a row, by the rule of `specdec_core::argmax::ArgMax`
/// (the first maximum, NaN counting as `-inf`, id 0 when nothing is above
/// `-inf`), and whether the row holds a NaN. Two passes written so that they
/// vectorise: a lane-wise maximum, then the first element equal to it.
fn first_argmax<L: specdec_core::dtype::Element>(values: &[L]) -> (u32, bool) {
    const LANES: usize = 16;
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for i in 0..LANES {
            let x = chunk[i].to_f32();
            nan[i] |= x.is_nan();
            max[i] = if x > max[i] { x } else { max[i] };
        }
    }
    let mut top = max.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    let mut any_nan = nan.iter().any(|&n| n);
    for v in tail {
        let x = v.to_f32();
        any_nan |= x.is_nan();
        top = if x > top { x } else { top };
    }
    if top == f32::NEG_INFINITY {
        return (0, any_nan);
    }
    // `x == top` is never true for NaN, and treats -0 and +0 alike, as ArgMax does.
    let index = values.iter().position(|v| v.to_f32() == top).unwrap_or(0);
    (index as u32, any_nan)
}

#[cfg(test)]
mod tests {
    use super::first_argmax;
    use specdec_core::argmax::ArgMax;

    /// The fast greedy scan agrees with folding `ArgMax` over the row.
    #[test]
    fn first_argmax_is_the_argmax_rule() {
        let (ninf, inf, nan) = (f32::NEG_INFINITY, f32::INFINITY, f32::NAN);
        let rows: [&[f32]; 9] = [
            &[1.0],
            &[ninf, ninf],
            &[nan, nan, nan],
            &[nan, ninf, 2.0, 2.0],
            &[-0.0, 0.0],
            &[0.0, -0.0, -1.0],
            &[1.0, inf, 3.0, inf],
            &[-5.0; 40],
            &[0.5, 0.25, 0.75, 0.75, 0.1, 0.9, 0.9, 0.3, 0.2, 0.1, 0.0, 0.9, 0.9, 0.8, 0.7, 0.6, 0.5, 0.95, 0.1, 0.95],
        ];
        for row in rows {
            let want = row.iter().enumerate().fold(ArgMax::IDENTITY, |b, (i, &x)| b.combine(ArgMax::new(x, i as u32)));
            let (index, has_nan) = first_argmax(row);
            assert_eq!(index, want.index, "{row:?}");
            assert_eq!(has_nan, row.iter().any(|x| x.is_nan()), "{row:?}");
        }
    }
}
