//! Argument checking of `rejection_sample` (SPEC §5): everything the host can
//! see is checked before anything runs and fails with a typed error, on the
//! CPU backend and through `Backend::rejection_sample` on host data (which
//! checks host values before copying them to a GPU).

use specdec::{Backend, DraftLogitsShape, Error, MAX_DRAFTS, RejectionOutput, RejectionSample};
use specdec_suite::batch::Values;
use specdec_suite::{Verify, test_device};

/// The vocabulary of the base call.
const VOCAB: usize = 10;
/// The base call's drafts per request, and its `max_drafts`.
const DRAFTS: [usize; 3] = [2, 0, 1];
const K: usize = 2;

/// A valid call: three ragged requests, each on its own slot, with dense
/// draft logits `[3, K, VOCAB]`.
fn base() -> Verify {
    let rows = DRAFTS.iter().sum::<usize>() + DRAFTS.len();
    let logits: Vec<f32> = (0..rows * VOCAB).map(|e| (e % 7) as f32 - 3.0).collect();
    let mut v = Verify::new(Values::F32(logits), VOCAB, &DRAFTS, K, 1.0);
    v.drafts = vec![3, -1, 0, 0, 9, 0];
    let shape = DraftLogitsShape::dense(3, K, VOCAB);
    v.draft = Some((Values::F32(vec![0.5; 3 * K * VOCAB + VOCAB]), shape));
    v
}

/// Runs `v` expecting an error; returns it.
fn fails(backend: &Backend, v: &Verify, what: &str) -> Error {
    match v.run(backend) {
        Ok(out) => panic!("{what}: accepted, returned {out:?}"),
        Err(e) => e,
    }
}

test_device!(the_base_call_is_valid, |backend, scale| {
    let out = base().run(&backend).expect("the base call");
    assert_eq!(out.num_emitted.len(), DRAFTS.len());
    // Bonus rows' draft entries are never read, any value is fine there.
    let mut v = base();
    v.drafts[2] = 12345;
    v.drafts[5] = -7;
    v.run(&backend).expect("garbage in bonus rows' draft entries");
    let _ = scale;
});

test_device!(draft_ids_outside_the_vocabulary, |backend, scale| {
    for (row, token) in [(0, VOCAB as i32), (1, -2), (4, -5), (0, i32::MAX), (1, i32::MIN)] {
        let mut v = base();
        v.drafts[row] = token;
        match fails(&backend, &v, &format!("draft {token} at row {row}")) {
            Error::InvalidDraft { row: r, token: t, vocab } => assert_eq!((r, t, vocab), (row, token, VOCAB)),
            e => panic!("draft {token} at row {row}: {e}"),
        }
    }
    let _ = scale;
});

// The base call's offsets are `[0, 3, 4, 6]` over 6 rows, `max_drafts` 2.
// Each case names the first entry that breaks a rule, entries checked in
// order: entry 0 must be 0; then for each request `r`, entry `r + 1` must
// exceed entry `r`, be at most the rows and leave at most `max_drafts`
// drafts; then the last entry must equal the rows.
test_device!(bad_offsets, |backend, scale| {
    let cases: [(&str, [i32; 4], usize); 6] = [
        // Request 0 has rows 0..4: 3 drafts > 2, reported at entry 1.
        ("more drafts than max_drafts", [0, 4, 5, 6], 1),
        ("not starting at 0", [1, 3, 4, 6], 0),
        // Every pair is fine; the last entry is 5, not 6.
        ("not ending at rows", [0, 3, 4, 5], 3),
        // Entry 3 is 7 > 6 (request 2 has 2 drafts, within max_drafts).
        ("past the rows", [0, 3, 4, 7], 3),
        ("a request without a bonus row", [0, 3, 3, 6], 2),
        ("decreasing", [0, 3, 2, 6], 2),
    ];
    for (what, offsets, entry) in cases {
        let mut v = base();
        v.offsets = offsets.to_vec();
        match fails(&backend, &v, what) {
            Error::InvalidOffsets { entry: e, .. } => assert_eq!(e, entry, "{what}"),
            e => panic!("{what}: {e}"),
        }
    }
    let _ = scale;
});

/// Regression: `RejectionSample::check_values` once checked each request's
/// offsets against its predecessor only, then read its draft ids up to
/// `offsets[r+1] - 1`: a request ending past the last row, followed by a
/// smaller (hence invalid) offset, indexed past `drafts` and panicked instead
/// of returning `Error::InvalidOffsets` (on the CUDA host path too).
#[test]
fn offsets_past_the_rows_are_an_error_not_a_panic() {
    let mut v = base();
    (v.max_drafts, v.draft) = (9, None);
    v.offsets = vec![0, 10, 4, 6];
    let result = v.run(&Backend::cpu());
    // Entry 1 (10) is past the 6 rows: the first entry that breaks a rule.
    assert!(matches!(result, Err(Error::InvalidOffsets { entry: 1, .. })), "{result:?}");
}

/// A broken argument and the length check it must fail.
type Breakage = (&'static str, fn(&mut Verify));

test_device!(length_mismatches, |backend, scale| {
    let cases: [Breakage; 5] = [
        ("positions", |v| v.pos.push(0)),
        ("drafts", |v| v.drafts.truncate(v.drafts.len() - 1)),
        // The slot list defines the requests: the offsets no longer fit it.
        ("offsets", |v| v.slots.push(0)),
        ("offsets", |v| v.slots.truncate(1)),
        ("seed table", |v| v.seed.push(1)),
    ];
    for (what, break_it) in cases {
        let mut v = base();
        break_it(&mut v);
        match fails(&backend, &v, what) {
            Error::LengthMismatch { what: w, .. } => assert_eq!(w, what),
            e => panic!("{what}: {e}"),
        }
    }
    let _ = scale;
});

test_device!(bad_temperatures_and_slots, |backend, scale| {
    for t in [f32::NAN, -1.0, f32::INFINITY, f32::NEG_INFINITY, -f32::MIN_POSITIVE] {
        let mut v = base();
        v.temperature[1] = t;
        match fails(&backend, &v, &format!("T {t}")) {
            Error::InvalidTemperature { slot, value } => assert!(slot == 1 && value.to_bits() == t.to_bits()),
            e => panic!("T {t}: {e}"),
        }
        // Only the temperatures of slots in use are checked.
        v.slots[1] = -1;
        v.run(&backend).unwrap_or_else(|e| panic!("T {t} on an unused slot: {e}"));
    }
    let mut v = base();
    v.temperature = vec![-0.0; 3]; // greedy
    v.run(&backend).expect("T = -0.0");
    for slot in [3, -2, i32::MIN] {
        let mut v = base();
        v.slots[2] = slot;
        match fails(&backend, &v, &format!("slot {slot}")) {
            Error::InvalidSlot { row, slot: s, num_slots } => assert_eq!((row, s, num_slots), (2, slot, 3)),
            e => panic!("slot {slot}: {e}"),
        }
    }
    let _ = scale;
});

/// The base call's draft logits shape.
fn shape(v: &mut Verify) -> &mut DraftLogitsShape {
    &mut v.draft.as_mut().expect("draft logits").1
}

test_device!(bad_draft_logits, |backend, scale| {
    let mut v = base();
    shape(&mut v).width = VOCAB - 1;
    let e = fails(&backend, &v, "narrow draft logits");
    assert!(e.to_string().contains("narrower"), "{e}");
    let mut v = base();
    *shape(&mut v) = DraftLogitsShape::dense(3, 1, VOCAB);
    assert!(matches!(fails(&backend, &v, "k < K"), Error::DraftColumns { k: 1, max_drafts: K }));
    let mut v = base();
    shape(&mut v).slots = 2;
    assert!(matches!(fails(&backend, &v, "2 slots"), Error::DraftLogitsSlots { .. }));
    let mut v = base();
    shape(&mut v).stride0 = 4 * K * VOCAB;
    assert!(matches!(fails(&backend, &v, "overrun"), Error::BufferTooSmall { .. }));
    let mut v = base();
    shape(&mut v).stride1 = VOCAB - 1;
    assert!(matches!(fails(&backend, &v, "overlap"), Error::DraftLogitsOverlap { .. }));
    let _ = scale;
});

test_device!(bad_shapes, |backend, scale| {
    let mut v = base();
    v.max_drafts = MAX_DRAFTS + 1;
    assert!(matches!(fails(&backend, &v, "max_drafts"), Error::MaxDrafts { .. }));
    let mut v = base();
    v.vocab = 0;
    assert!(matches!(fails(&backend, &v, "V = 0"), Error::InvalidVocab { .. }));
    let mut v = base();
    v.row_stride = VOCAB + 1;
    assert!(matches!(fails(&backend, &v, "row stride"), Error::BufferTooSmall { what: "logits", .. }));
    let _ = scale;
});

test_device!(an_empty_batch_is_valid, |backend, scale| {
    let mut v = Verify::new(Values::F32(vec![0.0; VOCAB]), VOCAB, &[], K, 1.0);
    v.temperature = vec![1.0];
    v.seed = vec![1];
    let out = v.run(&backend).expect("no requests");
    assert!(out.tokens.is_empty() && out.num_emitted.is_empty());
    let _ = scale;
});

/// The output buffers' lengths: tokens, num_emitted, accepted, row status.
type OutputLengths = [usize; 4];

/// Runs `v` into outputs of the given lengths.
fn run_into(backend: &Backend, v: &Verify, lens: OutputLengths) -> Result<(), Error> {
    assert!(matches!(v.target, Values::F32(_)), "the base call is f32");
    let (mut tokens, mut num_emitted) = (vec![0i32; lens[0]], vec![0i32; lens[1]]);
    let (mut accepted, mut row_status) = (vec![0i32; lens[2]], vec![0u32; lens[3]]);
    // One-hot drafts: the base call's inputs without its draft logits.
    let call = RejectionSample { draft_logits: None, ..v.call() };
    let out = RejectionOutput::new(&mut tokens, &mut num_emitted).with_accepted(&mut accepted);
    backend.rejection_sample(&call, &mut out.with_row_status(&mut row_status))
}

test_device!(outputs_of_the_wrong_length, |backend, scale| {
    let v = base();
    let (requests, rows) = (DRAFTS.len(), v.rows);
    let good: OutputLengths = [requests * (K + 1), requests, requests, rows];
    run_into(&backend, &v, good).expect("right lengths");
    for (i, what) in ["tokens", "num_emitted", "accepted", "row status"].into_iter().enumerate() {
        for delta in [-1i64, 1] {
            let mut lens = good;
            lens[i] = (lens[i] as i64 + delta) as usize;
            match run_into(&backend, &v, lens) {
                Err(Error::LengthMismatch { what: w, expected, got }) => {
                    assert_eq!((w, expected, got), (what, good[i], lens[i]))
                }
                r => panic!("{what} of length {}: {r:?}", lens[i]),
            }
        }
    }
    let _ = scale;
});
