//! A row as both operations' kernels see it: its slot's sampling parameters,
//! read from device memory and validated where they live (SPEC §5: a bad slot
//! or temperature never causes an out-of-bounds read; it raises a flag, and
//! the output becomes `-1`), the chunk of its ids a block reads, and the
//! store of its token.

use specdec_core::status::{self, INVALID_SLOT, INVALID_TEMPERATURE};

/// A slot's sampling parameters.
#[derive(Clone, Copy)]
pub struct SlotState {
    /// `-1` for padding.
    pub slot: i32,
    /// `0` means greedy (also for padding).
    pub temperature: f32,
    pub seed: u64,
    /// [`status`] flags; any of `status::INVALID` means "do not sample".
    pub flags: u32,
}

impl SlotState {
    /// Looks `slot` up in the per-slot tables.
    ///
    /// # Safety
    /// `temperature` and `seed` hold `num_slots` elements.
    #[inline(always)]
    pub unsafe fn load(slot: i32, temperature: *const f32, seed: *const u64, num_slots: u32) -> SlotState {
        let mut state = SlotState { slot, temperature: 0.0, seed: 0, flags: 0 };
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

    #[inline(always)]
    pub fn greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// Chunk `c` of a row of `vocab` ids cut into chunks of `chunk` ids: ids
/// `start .. end`, the last chunk cut at `vocab`.
#[inline(always)]
pub fn chunk_range(vocab: u32, chunk: u32, c: u32) -> (u32, u32) {
    let start = c * chunk;
    (start, if vocab - start < chunk { vocab } else { start + chunk })
}

/// Writes `token` as element `at` of a call's token output: `i64`s if
/// `tokens_i64` (the parameter block's flag) is non-zero, else `i32`s.
///
/// # Safety
/// `tokens` holds more than `at` elements of that width.
#[inline(always)]
pub unsafe fn write_token(tokens: u64, tokens_i64: u32, at: usize, token: i64) {
    // SAFETY: at < the output's length (caller).
    unsafe {
        if tokens_i64 != 0 {
            (tokens as *mut i64).add(at).write(token);
        } else {
            (tokens as *mut i32).add(at).write(token as i32);
        }
    }
}
