//! The log-probabilities a call can return beside its tokens (REFERENCE §8):
//! each emitted token's under the processed and the raw distribution, and
//! the top-n of each emitted position with the emitted token's rank.

use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::tensor::{ViewMut, check_len};

/// The most top log-probabilities a call may ask for per position.
pub use specdec_core::layout::MAX_TOP_LOGPROBS;

/// Which distribution a log-probability is taken under (REFERENCE §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// What the token was drawn from: `x/T − LSE(S)` over the kept set `S`
    /// of the slot's filters, `-inf` off it; a greedy row's is the raw one.
    Processed,
    /// The log-softmax of the logits as given: `x − LSE(row)`, at `T = 1`, no filters.
    Raw,
}

/// Log-probabilities of the tokens a call emits, each output optional
/// (none by default). A call's positions are `gumbel_sample`'s rows, or
/// `rejection_sample`'s `[requests, max_drafts + 1]` token slots, of which
/// those past a request's `num_emitted` get NaN log-probabilities and `-1`
/// ids and ranks.
#[non_exhaustive]
pub struct Logprobs<'a, M: Memory> {
    /// `f32 [positions]`: each emitted token's log-probability under [`Distribution::Processed`].
    pub processed: Option<M::Mut<'a, f32>>,
    /// `f32 [positions]`: each emitted token's log-probability under [`Distribution::Raw`].
    pub raw: Option<M::Mut<'a, f32>>,
    /// The top-n log-probabilities of each position and the emitted token's rank.
    pub top: Option<TopLogprobs<'a, M>>,
}

/// The `n` most likely ids of each emitted position under one distribution,
/// and the emitted token's rank under it (REFERENCE §8.2).
#[non_exhaustive]
pub struct TopLogprobs<'a, M: Memory> {
    /// Ids per position, `0 ..=` [`MAX_TOP_LOGPROBS`] (`0`: ranks alone).
    pub n: usize,
    pub distribution: Distribution,
    /// `f32 [positions, n]`: the log-probabilities, largest first.
    pub logprobs: M::Mut<'a, f32>,
    /// `i32 [positions, n]`: their ids; equal log-probabilities list the smaller id first.
    pub ids: M::Mut<'a, i32>,
    /// `i32 [positions]`: 1 + the number of ids whose log-probability is larger than the emitted token's.
    pub ranks: M::Mut<'a, i32>,
}

impl<'a, M: Memory> TopLogprobs<'a, M> {
    /// The top `n` under `distribution`, from buffers already in `M`'s form
    /// (for code generic over [`Memory`]; [`Logprobs::with_top`] takes any views).
    pub fn from_parts(
        n: usize,
        distribution: Distribution,
        logprobs: M::Mut<'a, f32>,
        ids: M::Mut<'a, i32>,
        ranks: M::Mut<'a, i32>,
    ) -> Self {
        TopLogprobs { n, distribution, logprobs, ids, ranks }
    }
}

impl<'a, M: Memory> Logprobs<'a, M> {
    /// No log-probabilities.
    pub fn none() -> Self {
        Logprobs { processed: None, raw: None, top: None }
    }

    /// Also each emitted token's processed log-probability (`f32 [positions]`).
    #[must_use]
    pub fn with_processed<B: ViewMut<'a, Memory = M, Elem = f32>>(self, processed: B) -> Self {
        Logprobs { processed: Some(processed.view_mut()), ..self }
    }

    /// Also each emitted token's raw log-probability (`f32 [positions]`).
    #[must_use]
    pub fn with_raw<B: ViewMut<'a, Memory = M, Elem = f32>>(self, raw: B) -> Self {
        Logprobs { raw: Some(raw.view_mut()), ..self }
    }

    /// Also the top `n` log-probabilities under `distribution` (`f32
    /// [positions, n]`), their ids (`i32 [positions, n]`) and the emitted
    /// token's rank (`i32 [positions]`).
    #[must_use]
    pub fn with_top<L, I, R>(self, n: usize, distribution: Distribution, logprobs: L, ids: I, ranks: R) -> Self
    where
        L: ViewMut<'a, Memory = M, Elem = f32>,
        I: ViewMut<'a, Memory = M, Elem = i32>,
        R: ViewMut<'a, Memory = M, Elem = i32>,
    {
        let top = TopLogprobs::from_parts(n, distribution, logprobs.view_mut(), ids.view_mut(), ranks.view_mut());
        Logprobs { top: Some(top), ..self }
    }

    /// Whether any output is asked for.
    pub fn is_none(&self) -> bool {
        self.processed.is_none() && self.raw.is_none() && self.top.is_none()
    }

    /// What these outputs ask for, as words of a sharded call's header
    /// digest (either backend): ranks that ask differently fail alike.
    pub(crate) fn digest_words(&self) -> [u64; 2] {
        let top =
            self.top.as_ref().map_or(u64::MAX, |t| (t.n as u64) << 1 | u64::from(t.distribution == Distribution::Raw));
        let outputs = if self.is_none() {
            u64::MAX
        } else {
            u64::from(self.processed.is_some()) | u64::from(self.raw.is_some()) << 1
        };
        [outputs, top]
    }

    /// Every output holds `positions` entries (`positions · n` for the top-n).
    pub(crate) fn check(&self, positions: usize) -> Result<()> {
        if let Some(p) = &self.processed {
            check_len("processed logprobs", positions, M::len_mut(p))?;
        }
        if let Some(r) = &self.raw {
            check_len("raw logprobs", positions, M::len_mut(r))?;
        }
        if let Some(top) = &self.top {
            if top.n > MAX_TOP_LOGPROBS {
                return Err(Error::TopLogprobs { n: top.n, max: MAX_TOP_LOGPROBS });
            }
            check_len("top logprobs", positions * top.n, M::len_mut(&top.logprobs))?;
            check_len("top ids", positions * top.n, M::len_mut(&top.ids))?;
            check_len("ranks", positions, M::len_mut(&top.ranks))?;
        }
        Ok(())
    }
}
