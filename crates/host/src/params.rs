//! The per-slot sampling-parameter table: what a request's slot says about
//! how it samples, one entry per slot, shared by both operations.

use crate::error::Result;
use crate::memory::Memory;
use crate::tensor::{View, check_len};

/// Per-slot sampling parameters, indexed by a row's (or request's) slot:
/// one array per parameter, each `num_slots` long, in the call's memory.
/// Built by [`SamplingParams::new`]; a parameter added later comes as a
/// field with a setter, so calls written today keep compiling.
#[non_exhaustive]
pub struct SamplingParams<'a, M: Memory> {
    /// `f32 [num_slots]`: `T`, `0` greedy, `> 0` sampling; negative, NaN,
    /// infinite or subnormal values are invalid (SPEC §5).
    pub temperature: M::Ref<'a, f32>,
    /// `u64 [num_slots]`: the seed of each slot's random streams (SPEC §2).
    pub seed: M::Ref<'a, u64>,
}

impl<'a, M: Memory> SamplingParams<'a, M> {
    /// The table of `temperature` and `seed` per slot, both in host memory
    /// (`&[f32]`, `&[u64]`) or both on the device (`CudaView`, `&CudaSlice`).
    pub fn new<T, S>(temperature: T, seed: S) -> Self
    where
        T: View<'a, Memory = M, Elem = f32>,
        S: View<'a, Memory = M, Elem = u64>,
    {
        SamplingParams { temperature: temperature.view(), seed: seed.view() }
    }

    /// The number of slots, once every array is checked to have it.
    pub(crate) fn check(&self) -> Result<usize> {
        let n = M::len(&self.temperature);
        check_len("seed table", n, M::len(&self.seed))?;
        Ok(n)
    }
}
