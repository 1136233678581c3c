//! The CPU backend: the same semantics as the kernels, computed with the same
//! `specdec-core` code, so its noise and `gumbel_sample`'s tokens equal the
//! GPU's bit for bit; `rejection_sample`'s too, but for a decision within about
//! 1e-5 of its threshold (its log-sum-exps are summed by another rule: the
//! order-free sum of REFERENCE §2.6, which also makes its vocab-parallel calls
//! exact).
//! It is the test oracle and the fallback when no GPU is present.
//!
//! Values the kernels check on the device (slots, temperatures, columns) are
//! host values here, so they come back as typed errors.

mod dist;
mod filter;
mod gumbel;
mod logprobs;
mod rejection;
mod sharded_logprobs;
mod sharded_rejection;
mod simd;

pub use filter::{KeptSet, kept_set};

use half::{bf16, f16};
use simd::{Level, Logit};
use specdec_core::dtype::{Bf16, F16};

/// The CPU backend.
///
/// # Threads
///
/// A call spreads its independent units (`gumbel_sample`'s rows,
/// `rejection_sample`'s requests) over rayon's current thread pool when it
/// has at least two of them and reads at least [`PARALLEL_MIN_LOGITS`] logits
/// (`rows × V`, counting every target row); smaller calls run on the calling
/// thread, where waking the pool would cost more than it saves. The outputs
/// (tokens, row status, draft logits, counts) are bit-identical for any thread
/// count: each unit's noise is keyed by its own seed, position and id, and
/// each writes only its own outputs.
///
/// The pool is rayon's usual one: the global pool (as many threads as cores,
/// or `RAYON_NUM_THREADS`, or what `rayon::ThreadPoolBuilder::build_global`
/// set), or the pool a call runs in through `ThreadPool::install`; a pool of
/// one thread runs every call in order on it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

/// The fewest logits (`rows × V`) a call reads for it to go parallel. Below
/// it, the time several threads save is small beside what handing rows to
/// the pool costs (more again when its threads sleep and must be woken);
/// from it on, calls of every mode run faster spread out (`cpu_threads` in
/// `benches/cpu.rs` shows the scaling).
pub const PARALLEL_MIN_LOGITS: usize = 1 << 18;

/// Whether a call of `units` independent rows or requests reading `logits`
/// logits in all runs them on rayon's current pool. The pool is asked last:
/// a small call never starts the global pool.
fn parallel(units: usize, logits: usize) -> bool {
    units > 1 && logits >= PARALLEL_MIN_LOGITS && rayon::current_num_threads() > 1
}

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
/// `-inf`), and whether the row holds a NaN. `level` must be supported.
///
/// One pass over memory: blocks of [`ARGMAX_BLOCK`] ids (in L1) get a
/// lane-wise maximum that vectorises ([`simd::block_max`], at the level's
/// width); only a block whose maximum beats the running one is scanned again,
/// for its first position of that maximum. A later block's equal maximum
/// loses (its ids are larger), so it is skipped.
fn first_argmax<L: Logit>(level: Level, values: &[L]) -> (u32, bool) {
    let (mut top, mut index, mut nan) = (f32::NEG_INFINITY, 0usize, false);
    for (b, block) in values.chunks(ARGMAX_BLOCK).enumerate() {
        let (block_top, block_nan) = simd::block_max(level, block);
        nan |= block_nan;
        if block_top > top {
            top = block_top;
            // `x == top` is never true for NaN, and treats -0 and +0 alike, as ArgMax does.
            index = b * ARGMAX_BLOCK + block.iter().position(|v| v.to_f32() == top).unwrap_or(0);
        }
    }
    (index as u32, nan)
}

/// Ids per block of [`first_argmax`]: 16 KiB of f32, well inside L1.
const ARGMAX_BLOCK: usize = 4096;

#[cfg(test)]
mod tests {
    use super::first_argmax;
    use super::simd::Level;
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
            check(row);
        }
    }

    fn check(row: &[f32]) {
        let want = row.iter().enumerate().fold(ArgMax::IDENTITY, |b, (i, &x)| b.combine(ArgMax::new(x, i as u32)));
        for &level in Level::ALL.iter().filter(|l| l.supported()) {
            let (index, has_nan) = first_argmax(level, row);
            assert_eq!(index, want.index, "{level:?}: row of {} ({:?}...)", row.len(), &row[..row.len().min(8)]);
            assert_eq!(has_nan, row.iter().any(|x| x.is_nan()), "{level:?}: row of {}", row.len());
        }
    }

    /// Rows of several blocks: the maximum first met in an early, a middle or
    /// the last (partial) block, equal maxima in later blocks, running
    /// maxima that grow block after block, NaN and -inf blocks.
    #[test]
    fn first_argmax_across_blocks() {
        let n = 3 * super::ARGMAX_BLOCK + 123;
        let base: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 * 1e-3).collect();
        for at in [0, 17, super::ARGMAX_BLOCK - 1, super::ARGMAX_BLOCK, 2 * super::ARGMAX_BLOCK + 5, n - 1] {
            let mut row = base.clone();
            row[at] = 5.0;
            check(&row);
            // An equal maximum after it must lose; one before it must win.
            if at + super::ARGMAX_BLOCK < n {
                row[at + super::ARGMAX_BLOCK] = 5.0;
                check(&row);
            }
            if at >= 3 {
                row[at - 3] = 5.0;
                check(&row);
            }
            row[at / 2] = f32::NAN;
            check(&row);
        }
        let rising: Vec<f32> = (0..n).map(|i| i as f32).collect();
        check(&rising);
        let mut blocks_of_ninf = vec![f32::NEG_INFINITY; n];
        blocks_of_ninf[n - 2] = -1e30;
        check(&blocks_of_ninf);
        blocks_of_ninf[n - 2] = f32::NAN;
        check(&blocks_of_ninf);
    }
}
