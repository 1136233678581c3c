//! Checking of the sampling filters (SPEC §5, §7.1): out-of-range `top_k`,
//! `top_p`, `min_p` of a slot a call uses, greedy slots included, are typed
//! errors before anything is written, on the CPU backend and through
//! `Backend`'s host-data calls on a GPU (which check host values first);
//! unused slots are not read; tables of the wrong length are length errors.
//! The same values in device memory are flagged by the kernels
//! (`tests/filter_gpu.rs`).

use specdec::filter::Filter;
use specdec::{DraftLogitsShape, Error};
use specdec_suite::batch::Values;
use specdec_suite::{Batch, FilterTable, Verify, test_device};

const VOCAB: usize = 10;

/// A gumbel call of 3 rows on slots 0, 2 and -1 (slot 1 unused) of 3 slots.
fn gumbel() -> Batch {
    let logits: Vec<f32> = (0..3 * VOCAB).map(|e| (e % 7) as f32 - 3.0).collect();
    let mut b = Batch::new(Values::F32(logits), 3, VOCAB, 1.0, 7);
    b.slots = vec![0, 2, -1];
    b.temperature = vec![1.0, 1.0, 0.7];
    b.seed = vec![1, 2, 3];
    b
}

/// A verify call of 2 requests (slots 2 and 0 of 3) with one draft each and draft logits.
fn verify() -> Verify {
    let logits: Vec<f32> = (0..4 * VOCAB).map(|e| (e % 5) as f32 - 2.0).collect();
    let mut v = Verify::new(Values::F32(logits), VOCAB, &[1, 1], 1, 1.0);
    v.slots = vec![2, 0];
    v.temperature = vec![1.0, 1.0, 0.9];
    v.seed = vec![4, 5, 6];
    v.drafts = vec![3, -1, 4, -1];
    v.draft = Some((Values::F32(vec![0.25; 3 * VOCAB]), DraftLogitsShape::dense(3, 1, VOCAB)));
    v
}

/// Slot 2's filters set to `bad`, the others valid and on.
fn table_with(bad: Filter) -> FilterTable {
    FilterTable::per_slot(&[Filter { top_k: 3, top_p: 0.9, min_p: 0.1 }, Filter::OFF, bad])
}

/// Whether an error is the one a bad value must give.
type Expect = fn(&Error) -> bool;

/// Each bad value with the error it must give.
fn bad_values() -> Vec<(FilterTable, Expect)> {
    let mut k = table_with(Filter::OFF);
    k.top_k.as_mut().unwrap()[2] = -1;
    let mut cases: Vec<(FilterTable, Expect)> =
        vec![(k, |e| matches!(e, Error::InvalidTopK { slot: 2, value: -1, .. }))];
    for p in [0.0f32, -0.5, 1.5, f32::NAN, f32::INFINITY] {
        let mut t = table_with(Filter::OFF);
        t.top_p.as_mut().unwrap()[2] = p;
        cases.push((t, |e| matches!(e, Error::InvalidTopP { slot: 2, .. })));
    }
    for m in [-0.1f32, 1.5, f32::NAN, -f32::INFINITY] {
        let mut t = table_with(Filter::OFF);
        t.min_p.as_mut().unwrap()[2] = m;
        cases.push((t, |e| matches!(e, Error::InvalidMinP { slot: 2, .. })));
    }
    cases
}

test_device!(bad_filter_values_are_typed_errors_and_nothing_is_written, |backend, scale| {
    for (table, is) in bad_values() {
        let mut b = gumbel();
        b.filters = table.clone();
        let (result, out) = b.run_keep(&backend);
        let e = result.expect_err("a bad filter value");
        assert!(is(&e), "gumbel_sample: {e}");
        assert!(matches!(
            e,
            Error::InvalidTopK { draft: false, .. }
                | Error::InvalidTopP { draft: false, .. }
                | Error::InvalidMinP { draft: false, .. }
        ));
        assert!(out.untouched(), "gumbel_sample wrote outputs before failing: {e}");

        let mut v = verify();
        v.filters = table.clone();
        let e = v.run(&backend).expect_err("a bad filter value");
        assert!(is(&e), "rejection_sample: {e}");

        // The same value in the draft logits' table says so.
        let mut v = verify();
        v.draft_filters = table;
        let e = v.run(&backend).expect_err("a bad draft filter value");
        assert!(is(&e), "rejection_sample draft filters: {e}");
        assert!(e.to_string().contains("draft logits' filters"), "{e}");
        assert!(matches!(
            e,
            Error::InvalidTopK { draft: true, .. }
                | Error::InvalidTopP { draft: true, .. }
                | Error::InvalidMinP { draft: true, .. }
        ));
    }
});

// A greedy row ignores its slot's filters (SPEC §7.1) but its values are
// still checked, as a greedy slot's temperature is: a bad one is the same
// typed error as on a sampling slot.
test_device!(bad_filter_values_of_greedy_slots_are_typed_errors, |backend, scale| {
    for (table, is) in bad_values() {
        let mut b = gumbel();
        b.temperature[2] = 0.0; // row 1's slot
        b.filters = table.clone();
        let (result, out) = b.run_keep(&backend);
        let e = result.expect_err("a bad filter value of a greedy slot");
        assert!(is(&e), "gumbel_sample: {e}");
        assert!(out.untouched(), "gumbel_sample wrote outputs before failing: {e}");

        let mut v = verify();
        v.temperature[2] = 0.0; // request 0's slot
        v.filters = table.clone();
        let e = v.run(&backend).expect_err("a bad filter value of a greedy slot");
        assert!(is(&e), "rejection_sample: {e}");
        v.filters = FilterTable::none();
        v.draft_filters = table;
        let e = v.run(&backend).expect_err("a bad draft filter value of a greedy slot");
        assert!(is(&e) && e.to_string().contains("draft logits' filters"), "rejection_sample draft filters: {e}");
    }
});

// Slot 1 is used by no row or request: its values are never read.
test_device!(bad_values_of_unused_slots_are_not_read, |backend, scale| {
    let mut t = FilterTable::per_slot(&[Filter::OFF; 3]);
    t.top_k.as_mut().unwrap()[1] = -5;
    t.top_p.as_mut().unwrap()[1] = 7.0;
    t.min_p.as_mut().unwrap()[1] = f32::NAN;
    let mut b = gumbel();
    b.filters = t.clone();
    b.run(&backend).expect("slot 1 is not used");
    let mut v = verify();
    v.filters = t.clone();
    v.draft_filters = t;
    v.run(&backend).expect("slot 1 is not used");
});

test_device!(filter_tables_of_the_wrong_length_are_length_errors, |backend, scale| {
    for (which, table) in [
        ("top_k", FilterTable { top_k: Some(vec![0; 2]), ..FilterTable::none() }),
        ("top_p", FilterTable { top_p: Some(vec![1.0; 4]), ..FilterTable::none() }),
        ("min_p", FilterTable { min_p: Some(vec![]), ..FilterTable::none() }),
    ] {
        let mut b = gumbel();
        b.filters = table.clone();
        let e = b.run(&backend).expect_err("a short table");
        assert!(matches!(e, Error::LengthMismatch { what, expected: 3, .. } if what == which), "{e}");
        let mut v = verify();
        v.draft_filters = table;
        let e = v.run(&backend).expect_err("a short draft table");
        assert!(matches!(e, Error::LengthMismatch { what, expected: 3, .. } if what == which), "{e}");
    }
});
