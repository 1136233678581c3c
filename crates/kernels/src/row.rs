//! Per-row sampling state read from device memory, validated where it lives
//! (SPEC §5): a bad slot or temperature never causes an out-of-bounds read; it
//! raises a flag instead, and the row's output becomes `-1`.

use specdec_core::status::{self, INVALID_SLOT, INVALID_TEMPERATURE};

/// What a row samples with.
#[derive(Clone, Copy)]
pub struct RowState {
    /// `-1` for padding rows.
    pub slot: i32,
    /// `0` means greedy (also for padding rows).
    pub temperature: f32,
    pub seed: u64,
    pub pos: u64,
    /// [`status`] flags; non-zero `& status::INVALID` means "do not sample".
    pub flags: u32,
}

impl RowState {
    /// Reads row `row`'s slot, position and its slot's temperature and seed.
    ///
    /// # Safety
    /// `slots` and `pos` hold at least `row + 1` elements; `temperature` and
    /// `seed` hold `num_slots` elements.
    #[inline(always)]
    pub unsafe fn load(
        slots: *const i32,
        pos: *const u64,
        temperature: *const f32,
        seed: *const u64,
        num_slots: u32,
        row: u32,
    ) -> RowState {
        // SAFETY: row < rows (caller).
        let (slot, pos) = unsafe { (*slots.add(row as usize), *pos.add(row as usize)) };
        let mut state = RowState { slot, temperature: 0.0, seed: 0, pos, flags: 0 };
        if slot == -1 {
            return state;
        }
        if slot < 0 || slot as u32 >= num_slots {
            state.flags |= INVALID_SLOT;
            return state;
        }
        // SAFETY: 0 <= slot < num_slots, checked above.
        let (t, s) = unsafe { (*temperature.add(slot as usize), *seed.add(slot as usize)) };
        if !status::temperature_is_valid(t) {
            state.flags |= INVALID_TEMPERATURE;
        }
        state.temperature = t;
        state.seed = s;
        state
    }

    #[inline(always)]
    pub fn is_valid(&self) -> bool {
        self.flags & status::INVALID == 0
    }
}
