//! The per-slot sampling-parameter table: what a request's slot says about
//! how it samples, one entry per slot, shared by both operations.

use crate::error::{Error, Result};
use crate::memory::{Host, Memory};
use crate::tensor::{View, check_len};
use specdec_core::filter::{self, Filter};

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
    /// The slots' top-k, top-p and min-p (SPEC §7); none by default.
    pub filters: Filters<'a, M>,
}

impl<'a, M: Memory> SamplingParams<'a, M> {
    /// The table of `temperature` and `seed` per slot, both in host memory
    /// (`&[f32]`, `&[u64]`) or both on the device (`CudaView`, `&CudaSlice`).
    pub fn new<T, S>(temperature: T, seed: S) -> Self
    where
        T: View<'a, Memory = M, Elem = f32>,
        S: View<'a, Memory = M, Elem = u64>,
    {
        Self::from_parts(temperature.view(), seed.view())
    }

    /// The same from buffers already in `M`'s form (for code generic over [`Memory`]).
    pub fn from_parts(temperature: M::Ref<'a, f32>, seed: M::Ref<'a, u64>) -> Self {
        SamplingParams { temperature, seed, filters: Filters::none() }
    }

    /// The same table with the slots' sampling filters.
    #[must_use]
    pub fn with_filters(self, filters: Filters<'a, M>) -> Self {
        SamplingParams { filters, ..self }
    }

    /// The number of slots, once every array is checked to have it.
    pub(crate) fn check(&self) -> Result<usize> {
        let n = M::len(&self.temperature);
        check_len("seed table", n, M::len(&self.seed))?;
        self.filters.check(n)?;
        Ok(n)
    }
}

/// Per-slot sampling filters (SPEC §7), each optional and each `num_slots`
/// long: `top_k` (`i32`, `0` or `>= V`: off), `top_p` (`f32` in `(0, 1]`,
/// `1`: off), `min_p` (`f32` in `[0, 1]`, `0`: off). They act on the
/// scaled logits of rows with `T > 0`; greedy rows ignore them.
///
/// A slot's filters describe how its tokens are drawn: in
/// [`SamplingParams`] the target's (and a drafter's, for `gumbel_sample`),
/// on [`DraftLogits`](crate::DraftLogits) the ones the stored draft logits
/// were sampled with, so that `rejection_sample`'s draft distribution is the
/// one the drafts came from (SPEC §7.3).
pub struct Filters<'a, M: Memory> {
    pub top_k: Option<M::Ref<'a, i32>>,
    pub top_p: Option<M::Ref<'a, f32>>,
    pub min_p: Option<M::Ref<'a, f32>>,
}

impl<'a, M: Memory> Filters<'a, M> {
    /// No filter: every id of a row is kept.
    pub fn none() -> Self {
        Filters { top_k: None, top_p: None, min_p: None }
    }

    /// Also top-k per slot (`i32 [num_slots]`).
    #[must_use]
    pub fn with_top_k<K: View<'a, Memory = M, Elem = i32>>(self, top_k: K) -> Self {
        Filters { top_k: Some(top_k.view()), ..self }
    }

    /// Also top-p per slot (`f32 [num_slots]`).
    #[must_use]
    pub fn with_top_p<P: View<'a, Memory = M, Elem = f32>>(self, top_p: P) -> Self {
        Filters { top_p: Some(top_p.view()), ..self }
    }

    /// Also min-p per slot (`f32 [num_slots]`).
    #[must_use]
    pub fn with_min_p<P: View<'a, Memory = M, Elem = f32>>(self, min_p: P) -> Self {
        Filters { min_p: Some(min_p.view()), ..self }
    }

    /// Whether no filter array is given.
    pub fn is_none(&self) -> bool {
        self.top_k.is_none() && self.top_p.is_none() && self.min_p.is_none()
    }

    /// Whether a slot's filters may bound the values that decide its `τ`
    /// from part of a row (a top-k array, or both top-p and min-p): where
    /// none can, the CUDA threshold kernel keeps no candidates.
    pub(crate) fn bounds_candidates(&self) -> bool {
        self.top_k.is_some() || (self.top_p.is_some() && self.min_p.is_some())
    }

    /// Whether the CUDA threshold kernel leaves the rows its candidates
    /// cannot bound (top-p alone) to the search kernels: for a top-p array
    /// without arrays that bound candidates (a call with them searches such
    /// a row by one block, as it would an overflowing one, and pays no
    /// search launches).
    pub(crate) fn searches(&self) -> bool {
        self.top_p.is_some() && !self.bounds_candidates()
    }

    /// Every given array has `num_slots` entries.
    pub(crate) fn check(&self, num_slots: usize) -> Result<()> {
        if let Some(k) = &self.top_k {
            check_len("top_k", num_slots, M::len(k))?;
        }
        if let Some(p) = &self.top_p {
            check_len("top_p", num_slots, M::len(p))?;
        }
        if let Some(m) = &self.min_p {
            check_len("min_p", num_slots, M::len(m))?;
        }
        Ok(())
    }
}

impl Filters<'_, Host> {
    /// Slot `slot`'s filters (`slot` in range), as given; [`Filters::check_slot`]
    /// says whether they are valid.
    pub(crate) fn slot(&self, slot: usize) -> Filter {
        self.get(slot).expect("a slot in range of the filter tables")
    }

    /// Slot `slot`'s filters as given, `None` where a table is too short for
    /// it (which a call's checks refuse).
    pub(crate) fn get(&self, slot: usize) -> Option<Filter> {
        Some(Filter {
            top_k: match self.top_k {
                Some(k) => (*k.get(slot)?).max(0) as u32,
                None => 0,
            },
            top_p: match self.top_p {
                Some(p) => *p.get(slot)?,
                None => 1.0,
            },
            min_p: match self.min_p {
                Some(m) => *m.get(slot)?,
                None => 0.0,
            },
        })
    }

    /// The typed error for the first of slot `slot`'s filter values out of
    /// its range (SPEC §5); `draft` says which table it is.
    pub(crate) fn check_slot(&self, slot: usize, draft: bool) -> Result<()> {
        if let Some(k) = self.top_k
            && !filter::top_k_is_valid(k[slot])
        {
            return Err(Error::InvalidTopK { slot, value: k[slot], draft });
        }
        if let Some(p) = self.top_p
            && !filter::top_p_is_valid(p[slot])
        {
            return Err(Error::InvalidTopP { slot, value: p[slot], draft });
        }
        if let Some(m) = self.min_p
            && !filter::min_p_is_valid(m[slot])
        {
            return Err(Error::InvalidMinP { slot, value: m[slot], draft });
        }
        Ok(())
    }
}
