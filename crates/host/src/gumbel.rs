//! The `gumbel_sample` call (SPEC §3): its arguments and the checks every
//! backend runs before sampling.

use crate::error::{Error, Result};
use crate::logprobs::Logprobs;
use crate::memory::{Host, Memory};
use crate::params::SamplingParams;
use crate::tensor::{Column, DraftLogitsMut, Logits, TokenId, Tokens, View, ViewMut, check_len};
use specdec_core::status;

/// One token per row: argmax of `logit/T + gumbel` (argmax of the logits when
/// `T = 0`), noise keyed by `(seed[slot], pos[row], id)` on the target stream,
/// or the draft stream when `drafting`. Everything here is read.
pub struct GumbelSample<'a, M: Memory> {
    pub logits: Logits<'a, M>,
    /// `i32 [rows]`: each row's slot, `-1` for a padding row (greedy, no draft-logits write).
    pub slots: M::Ref<'a, i32>,
    /// `u64 [rows]`: the absolute position of each row's input token.
    pub pos: M::Ref<'a, u64>,
    pub params: SamplingParams<'a, M>,
    /// Draw noise from the draft stream (a draft model proposing tokens).
    pub drafting: bool,
}

impl<'a, M: Memory> GumbelSample<'a, M> {
    /// Sampling `logits` with each row's slot and position, on the target stream.
    pub fn new<S, P>(logits: Logits<'a, M>, slots: S, pos: P, params: SamplingParams<'a, M>) -> Self
    where
        S: View<'a, Memory = M, Elem = i32>,
        P: View<'a, Memory = M, Elem = u64>,
    {
        GumbelSample { logits, slots: slots.view(), pos: pos.view(), params, drafting: false }
    }

    /// The same call on the draft stream: a draft model proposing tokens.
    #[must_use]
    pub fn drafting(self) -> Self {
        GumbelSample { drafting: true, ..self }
    }
}

/// What `gumbel_sample` writes.
#[non_exhaustive]
pub struct GumbelOutput<'a, M: Memory> {
    /// `[rows]`: the sampled ids, `-1` for a row whose device-side values were invalid.
    pub tokens: Tokens<'a, M>,
    /// `u32 [rows]`: the row's `specdec_core::status` flags (invalid values, NaN logits).
    pub row_status: Option<M::Mut<'a, u32>>,
    /// Where to store each row's raw logits, and which column each row uses.
    /// Each `(slot, column)` should be written by at most one row of a call:
    /// two rows writing the same draft-logits row race on the GPU (either may land).
    pub draft_logits: Option<(DraftLogitsMut<'a, M>, Column<'a, M>)>,
    /// Log-probabilities of each row's token (REFERENCE §8; positions: the rows).
    pub logprobs: Logprobs<'a, M>,
}

impl<'a, M: Memory> GumbelOutput<'a, M> {
    /// The tokens alone (`i32` or `i64 [rows]`).
    pub fn new<B>(tokens: B) -> Self
    where
        B: ViewMut<'a, Memory = M>,
        B::Elem: TokenId,
    {
        Self::from_tokens(Tokens::new(tokens))
    }

    /// The tokens alone, as a dtype-tagged buffer (for code generic over [`Memory`]).
    pub fn from_tokens(tokens: Tokens<'a, M>) -> Self {
        GumbelOutput { tokens, row_status: None, draft_logits: None, logprobs: Logprobs::none() }
    }

    /// Also each row's status flags (`u32 [rows]`).
    #[must_use]
    pub fn with_row_status<B: ViewMut<'a, Memory = M, Elem = u32>>(self, row_status: B) -> Self {
        GumbelOutput { row_status: Some(row_status.view_mut()), ..self }
    }

    /// Also each row's raw logits, into `column` of its slot's draft logits.
    #[must_use]
    pub fn with_draft_logits(self, draft_logits: DraftLogitsMut<'a, M>, column: Column<'a, M>) -> Self {
        GumbelOutput { draft_logits: Some((draft_logits, column)), ..self }
    }

    /// Also log-probabilities of each row's token.
    #[must_use]
    pub fn with_logprobs(self, logprobs: Logprobs<'a, M>) -> Self {
        GumbelOutput { logprobs, ..self }
    }
}

/// The validated shape of a call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GumbelShape {
    pub rows: usize,
    pub num_slots: usize,
}

impl<M: Memory> GumbelSample<'_, M> {
    /// Shape, length and stride checks: everything the host knows without
    /// reading buffer contents.
    pub(crate) fn check(&self, out: &GumbelOutput<'_, M>) -> Result<GumbelShape> {
        self.logits.check()?;
        let rows = self.logits.rows;
        let num_slots = self.params.check()?;
        check_len("slots", rows, M::len(&self.slots))?;
        check_len("positions", rows, M::len(&self.pos))?;
        check_len("tokens", rows, out.tokens.len())?;
        if let Some(s) = &out.row_status {
            check_len("row status", rows, M::len_mut(s))?;
        }
        out.logprobs.check(rows)?;
        if let Some((draft, column)) = &out.draft_logits {
            draft.shape.check(draft.data.len(), self.logits.vocab, num_slots)?;
            match column {
                Column::All(c) if *c >= draft.shape.k => {
                    return Err(Error::ColumnOutOfRange { row: None, column: *c as i64, k: draft.shape.k });
                }
                Column::All(_) => {}
                Column::PerRow(cols) => check_len("draft columns", rows, M::len(cols))?,
            }
        }
        Ok(GumbelShape { rows, num_slots })
    }
}

impl GumbelSample<'_, Host> {
    /// The checks the kernel makes on device-resident values, made on the host
    /// where the values live there: slots, the temperatures and filters of used
    /// slots, columns.
    pub(crate) fn check_values(&self, out: &GumbelOutput<'_, Host>, shape: GumbelShape) -> Result<()> {
        for (row, &slot) in self.slots.iter().enumerate() {
            if slot == -1 {
                continue;
            }
            if slot < 0 || slot as usize >= shape.num_slots {
                return Err(Error::InvalidSlot { row, slot, num_slots: shape.num_slots });
            }
            let t = self.params.temperature[slot as usize];
            if !status::temperature_is_valid(t) {
                return Err(Error::InvalidTemperature { slot: slot as usize, value: t });
            }
            self.params.filters.check_slot(slot as usize, false)?;
            if let Some((draft, Column::PerRow(cols))) = &out.draft_logits {
                let c = cols[row];
                if c < 0 || c as usize >= draft.shape.k {
                    return Err(Error::ColumnOutOfRange { row: Some(row), column: c as i64, k: draft.shape.k });
                }
            }
        }
        Ok(())
    }
}
