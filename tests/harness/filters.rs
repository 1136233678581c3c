//! Sampling filters in the suites (SPEC §7): owned per-slot filter tables
//! ([`FilterTable`], and device copies for the zero-copy API,
//! [`DeviceFilters`]) and a sort-based reference of the kept set, written
//! here from SPEC §7.2 alone, independent of the backends' selection code:
//! sort the scaled values, walk their tie groups from the top.

use crate::drafting::{log_probs, scale};
use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use specdec::filter::{Filter, mass, min_p_threshold, top_p_reached};
use specdec::{Device, Filters, Host};
use std::sync::Arc;

/// The filter settings of issue 28's suites: `top_k` ∈ {1, 2, 20, 50, 1000},
/// `top_p` ∈ {0.1, 0.9, 0.95}, `min_p` ∈ {0.05, 0.3}, and two combined.
pub const SETTINGS: [Filter; 12] = {
    const fn f(top_k: u32, top_p: f32, min_p: f32) -> Filter {
        Filter { top_k, top_p, min_p }
    }
    [
        f(1, 1.0, 0.0),
        f(2, 1.0, 0.0),
        f(20, 1.0, 0.0),
        f(50, 1.0, 0.0),
        f(1000, 1.0, 0.0),
        f(0, 0.1, 0.0),
        f(0, 0.9, 0.0),
        f(0, 0.95, 0.0),
        f(0, 1.0, 0.05),
        f(0, 1.0, 0.3),
        f(50, 0.9, 0.0),
        f(20, 0.95, 0.05),
    ]
};

/// Per-slot `top_k`, `top_p`, `min_p` arrays, each optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FilterTable {
    pub top_k: Option<Vec<i32>>,
    pub top_p: Option<Vec<f32>>,
    pub min_p: Option<Vec<f32>>,
}

impl FilterTable {
    /// No filter arrays at all.
    pub fn none() -> Self {
        FilterTable::default()
    }

    /// `filter` on each of `slots` slots, every array given (off values included).
    pub fn uniform(filter: Filter, slots: usize) -> Self {
        FilterTable {
            top_k: Some(vec![filter.top_k as i32; slots]),
            top_p: Some(vec![filter.top_p; slots]),
            min_p: Some(vec![filter.min_p; slots]),
        }
    }

    /// `filter` on each of `slots` slots, or no arrays at all for
    /// `Filter::OFF` (so that calls without filters stay calls without them).
    pub fn of_slots(filter: Filter, slots: usize) -> Self {
        if filter == Filter::OFF { FilterTable::none() } else { FilterTable::uniform(filter, slots) }
    }

    /// One filter per slot.
    pub fn per_slot(filters: &[Filter]) -> Self {
        FilterTable {
            top_k: Some(filters.iter().map(|f| f.top_k as i32).collect()),
            top_p: Some(filters.iter().map(|f| f.top_p).collect()),
            min_p: Some(filters.iter().map(|f| f.min_p).collect()),
        }
    }

    /// Slot `slot`'s filter (off where an array is absent).
    pub fn slot(&self, slot: usize) -> Filter {
        Filter {
            top_k: self.top_k.as_ref().map_or(0, |k| k[slot] as u32),
            top_p: self.top_p.as_ref().map_or(1.0, |p| p[slot]),
            min_p: self.min_p.as_ref().map_or(0.0, |m| m[slot]),
        }
    }

    /// The table as a call reads it.
    pub fn view(&self) -> Filters<'_, Host> {
        Filters { top_k: self.top_k.as_deref(), top_p: self.top_p.as_deref(), min_p: self.min_p.as_deref() }
    }
}

/// Device copies of a [`FilterTable`]'s arrays (absent ones stay absent),
/// for calls on device buffers: the values reach the kernels unchecked.
pub struct DeviceFilters {
    pub top_k: Option<CudaSlice<i32>>,
    pub top_p: Option<CudaSlice<f32>>,
    pub min_p: Option<CudaSlice<f32>>,
}

impl DeviceFilters {
    pub fn upload(stream: &Arc<CudaStream>, table: &FilterTable) -> Result<Self, DriverError> {
        Ok(DeviceFilters {
            top_k: table.top_k.as_ref().map(|k| stream.clone_htod(k)).transpose()?,
            top_p: table.top_p.as_ref().map(|p| stream.clone_htod(p)).transpose()?,
            min_p: table.min_p.as_ref().map(|m| stream.clone_htod(m)).transpose()?,
        })
    }

    /// As [`FilterTable::view`].
    pub fn view(&self) -> Filters<'_, Device> {
        let top_k = self.top_k.as_ref().map(|k| k.as_view());
        let (top_p, min_p) = (self.top_p.as_ref().map(|p| p.as_view()), self.min_p.as_ref().map(|m| m.as_view()));
        Filters { top_k, top_p, min_p }
    }
}

/// The scaled values of `row` as the backends round them (`x · (1/T)` in f32).
fn scaled(row: &[f32], t: f32) -> Vec<f32> {
    let s = scale(t);
    row.iter().map(|&x| x * s).collect()
}

/// Which ids of `row` (raw logits, `T > 0`) SPEC §7.2 keeps: sort the
/// values that are not NaN nor `-inf`, largest first; `τ_m` from the
/// maximum; `τ_k` the `k`-th value of the sorted list; top-p by walking tie
/// groups of the survivors with the documented fixed-point masses until
/// `W(v) >= top_p · W(τ_1)`.
pub fn reference_kept(row: &[f32], t: f32, f: Filter) -> Vec<bool> {
    let xs = scaled(row, t);
    let mut sorted: Vec<f32> = xs.iter().copied().filter(|&x| x > f32::NEG_INFINITY).collect();
    sorted.sort_by(|a, b| b.partial_cmp(a).expect("no NaN"));
    let tau = if sorted.is_empty() || f.is_off(row.len()) {
        f32::NEG_INFINITY
    } else if sorted[0] == f32::INFINITY {
        f32::INFINITY
    } else {
        let max = sorted[0];
        let tau_m = if f.min_p > 0.0 { min_p_threshold(max, f.min_p) } else { f32::NEG_INFINITY };
        let tau_k =
            if f.has_top_k(row.len()) { sorted[(f.top_k as usize).min(sorted.len()) - 1] } else { f32::NEG_INFINITY };
        let tau_1 = tau_m.max(tau_k);
        let mut tau = tau_1;
        if f.top_p < 1.0 {
            let survivors: Vec<f32> = sorted.iter().copied().filter(|&x| x >= tau_1).collect();
            let total: u64 = survivors.iter().map(|&x| mass(x, max)).sum();
            let mut acc = 0u64;
            let mut i = 0;
            while i < survivors.len() {
                // A tie group as one unit.
                let v = survivors[i];
                while i < survivors.len() && survivors[i] == v {
                    acc += mass(survivors[i], max);
                    i += 1;
                }
                if top_p_reached(acc, total, f.top_p) {
                    tau = v;
                    break;
                }
            }
        }
        tau
    };
    xs.iter().map(|&x| x >= tau).collect()
}

/// `p'` of SPEC §7.2 in f64: `softmax(row / T)` over [`reference_kept`], 0 elsewhere.
pub fn filtered_probs(row: &[f32], t: f32, f: Filter) -> Vec<f64> {
    let keep = reference_kept(row, t, f);
    let xs = scaled(row, t);
    let max = xs.iter().zip(&keep).filter(|(_, k)| **k).map(|(&x, _)| x as f64).fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = xs
        .iter()
        .zip(&keep)
        .map(|(&x, &k)| if k && x > f32::NEG_INFINITY { (x as f64 - max).exp() } else { 0.0 })
        .collect();
    let s: f64 = w.iter().sum();
    w.into_iter().map(|x| x / s).collect()
}

/// `log p'(x)` of every id in f64 (SPEC §7.2): the scaled values as the
/// backends round them, normalised over [`reference_kept`] by a log-sum-exp
/// taken in f64, `-inf` outside the set (NaN never kept). A filter that is
/// off gives `drafting::log_probs`, the unfiltered rule.
pub fn filtered_log_probs(row: &[f32], t: f32, f: Filter) -> Vec<f64> {
    if f.is_off(row.len()) {
        return log_probs(row, t);
    }
    let keep = reference_kept(row, t, f);
    let kept = |x: f32, k: bool| if k && !x.is_nan() { f64::from(x) } else { f64::NEG_INFINITY };
    let xs: Vec<f64> = scaled(row, t).into_iter().zip(keep).map(|(x, k)| kept(x, k)).collect();
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return xs;
    }
    let lse = max + xs.iter().map(|&x| (x - max).exp()).sum::<f64>().ln();
    xs.into_iter().map(|x| x - lse).collect()
}
