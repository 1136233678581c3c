//! Per-slot sampling filters (SPEC §7) owned by a command: the arrays a
//! `specdec::Filters` borrows, read from an input file or built from the
//! demo's flags.

use specdec::filter::Filter;
use specdec::{Filters, Host};

/// `top_k`, `top_p` and `min_p`, each absent or one entry per slot.
#[derive(Debug, Default)]
pub struct SlotFilters {
    pub top_k: Option<Vec<i32>>,
    pub top_p: Option<Vec<f32>>,
    pub min_p: Option<Vec<f32>>,
}

impl SlotFilters {
    /// `filter` for each of `slots` slots, with an array only for each
    /// filter that acts on a row of `vocab` ids: a filter that is off is
    /// absent, so a call without any filter on is a call without filters
    /// (which launches no threshold kernel on CUDA).
    pub fn uniform(filter: Filter, slots: usize, vocab: usize) -> Self {
        SlotFilters {
            top_k: filter.has_top_k(vocab).then(|| vec![filter.top_k as i32; slots]),
            top_p: filter.has_top_p().then(|| vec![filter.top_p; slots]),
            min_p: filter.has_min_p().then(|| vec![filter.min_p; slots]),
        }
    }

    /// The arrays, for a call's `SamplingParams::with_filters` or `DraftLogits::with_filters`.
    pub fn view(&self) -> Filters<'_, Host> {
        let mut filters = Filters::none();
        if let Some(k) = &self.top_k {
            filters = filters.with_top_k(&k[..]);
        }
        if let Some(p) = &self.top_p {
            filters = filters.with_top_p(&p[..]);
        }
        if let Some(m) = &self.min_p {
            filters = filters.with_min_p(&m[..]);
        }
        filters
    }
}
