//! The `gumbel_sample` call (SPEC §3): its arguments and the checks every
//! backend runs before sampling.

use crate::error::{Error, Result};
use crate::memory::{Host, Memory};
use crate::tensor::{Column, DraftCache, Logits, SlotTable, Tokens, check_len};
use specdec_core::status;

/// One token per row: argmax of `logit/T + gumbel` (argmax of the logits when
/// `T = 0`), noise keyed by `(seed[slot], pos[row], id)` on the target stream,
/// or the draft stream when `drafting`.
pub struct GumbelSample<'a, M: Memory> {
    pub logits: Logits<'a, M>,
    /// `i32 [rows]`: each row's slot, `-1` for a padding row (greedy, no cache write).
    pub slots: M::Ref<'a, i32>,
    /// `u64 [rows]`: the absolute position of each row's input token.
    pub pos: M::Ref<'a, u64>,
    pub table: SlotTable<'a, M>,
    /// Draw noise from the draft stream (a draft model proposing tokens).
    pub drafting: bool,
    /// Where to store each row's raw logits, and which column each row uses.
    /// Each `(slot, column)` should be written by at most one row of a call:
    /// two rows writing the same cache row race on the GPU (either may land).
    pub cache: Option<(DraftCache<'a, M>, Column<'a, M>)>,
}

/// What `gumbel_sample` writes.
pub struct GumbelOutput<'a, M: Memory> {
    /// `[rows]`: the sampled ids, `-1` for a row whose device-side values were invalid.
    pub tokens: Tokens<'a, M>,
    /// `u32 [rows]`: the row's `specdec_core::status` flags (invalid values, NaN logits).
    pub row_status: Option<M::Mut<'a, u32>>,
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
        let num_slots = self.table.check()?;
        check_len("slots", rows, M::len(&self.slots))?;
        check_len("positions", rows, M::len(&self.pos))?;
        check_len("tokens", rows, out.tokens.len())?;
        if let Some(s) = &out.row_status {
            check_len("row status", rows, M::len_mut(s))?;
        }
        if let Some((cache, column)) = &self.cache {
            cache.check(self.logits.vocab, num_slots)?;
            match column {
                Column::All(c) if *c >= cache.shape.k => {
                    return Err(Error::ColumnOutOfRange { row: None, column: *c as i64, k: cache.shape.k });
                }
                Column::All(_) => {}
                Column::PerRow(cols) => check_len("cache columns", rows, M::len(cols))?,
            }
        }
        Ok(GumbelShape { rows, num_slots })
    }
}

impl GumbelSample<'_, Host> {
    /// The checks the kernel makes on device-resident values, made on the host
    /// where the values live there: slots, the temperatures of used slots, columns.
    pub(crate) fn check_values(&self, shape: GumbelShape) -> Result<()> {
        for (row, &slot) in self.slots.iter().enumerate() {
            if slot == -1 {
                continue;
            }
            if slot < 0 || slot as usize >= shape.num_slots {
                return Err(Error::InvalidSlot { row, slot, num_slots: shape.num_slots });
            }
            let t = self.table.temperature[slot as usize];
            if !status::temperature_is_valid(t) {
                return Err(Error::InvalidTemperature { slot: slot as usize, value: t });
            }
            if let Some((cache, Column::PerRow(cols))) = &self.cache {
                let c = cols[row];
                if c < 0 || c as usize >= cache.shape.k {
                    return Err(Error::ColumnOutOfRange { row: Some(row), column: c as i64, k: cache.shape.k });
                }
            }
        }
        Ok(())
    }
}
