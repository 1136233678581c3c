//! Host-side validation of `gumbel_sample` (SPEC §3, §5): every value the host
//! holds is checked before anything runs, failing with a typed error and
//! leaving tokens, statuses and the draft logits untouched. With host buffers both
//! backends check everything on the host, so both variants see the same
//! errors (device-resident values are checked by the kernels:
//! `tests/gumbel_gpu.rs`).

use specdec::{Backend, DType, Error, GumbelOutput, MAX_VOCAB};
use specdec_suite::batch::{ColumnSpec, Values};
use specdec_suite::inputs::first_bit_difference;
use specdec_suite::{Batch, DraftLogitsSpec, test_device};

const ROWS: usize = 4;
const VOCAB: usize = 37;
const NUM_SLOTS: usize = 3;
const DRAFT_K: usize = 2;
const DRAFT_WIDTH: usize = 40;

/// A valid call (see `the_base_call_is_valid`): three slots (greedy and two
/// temperatures), one padding row, a bf16 draft-logits column for all rows. Each test
/// breaks one thing.
fn base() -> Batch {
    let logits: Vec<f32> = (0..ROWS * VOCAB).map(|i| ((i * 7) % 23) as f32 / 4.0 - 2.0).collect();
    let mut b = Batch::new(Values::from_f32(DType::F32, &logits), ROWS, VOCAB, 0.0, 0);
    b.slots = vec![2, 0, -1, 1];
    b.temperature = vec![0.0, 0.8, 1.5];
    b.seed = vec![1, 2, 3];
    b.draft_logits = Some(draft_logits(NUM_SLOTS, DRAFT_K, ColumnSpec::All(1)));
    b
}

fn draft_logits(slots: usize, k: usize, column: ColumnSpec) -> DraftLogitsSpec {
    DraftLogitsSpec::dense(DType::BF16, slots, k, DRAFT_WIDTH, column)
}

fn draft_logits_mut(b: &mut Batch) -> &mut DraftLogitsSpec {
    b.draft_logits.as_mut().expect("the base call has draft logits")
}

/// Breaks the base call with `mutate` and asserts that it fails with an error
/// for which `is` holds, having written no token, status or draft-logits element.
fn reject(backend: &Backend, what: &str, mutate: impl FnOnce(&mut Batch), is: impl Fn(&Error) -> bool) {
    let mut b = base();
    mutate(&mut b);
    let before = b.draft_logits.as_ref().map(|c| c.data.clone());
    let (result, out) = b.run_keep(backend);
    match result {
        Err(e) if is(&e) => {}
        other => panic!("{what}: wrong result {other:?}"),
    }
    assert!(out.untouched(), "{what}: outputs were written: {out:?}");
    if let (Some(before), Some(c)) = (before, &b.draft_logits) {
        assert_eq!(first_bit_difference(&c.data, &before), None, "{what}: the draft logits were written");
    }
}

test_device!(the_base_call_is_valid, |backend, scale| {
    let out = base().run(&backend).expect("the base call");
    assert!(out.tokens.iter().all(|&t| (0..VOCAB as i64).contains(&t)), "{out:?}");
});

test_device!(invalid_slots_are_rejected, |backend, scale| {
    for (row, slot) in [(1, NUM_SLOTS as i32), (3, -2), (0, i32::MIN), (2, i32::MAX)] {
        reject(
            &backend,
            &format!("slot {slot} at row {row}"),
            |b| b.slots[row] = slot,
            |e| matches!(e, Error::InvalidSlot { row: r, slot: s, num_slots: NUM_SLOTS } if *r == row && *s == slot),
        );
    }
    // Draft logits with fewer slots than the tables.
    reject(
        &backend,
        "draft logits of 2 slots",
        |b| b.draft_logits = Some(draft_logits(2, DRAFT_K, ColumnSpec::All(0))),
        |e| matches!(e, Error::DraftLogitsSlots { draft_slots: 2, num_slots: NUM_SLOTS }),
    );
});

test_device!(invalid_temperatures_are_rejected, |backend, scale| {
    // A subnormal T is rejected too: its scale 1/T would be infinite.
    let bad =
        [(1, -0.5), (1, f32::NAN), (2, f32::INFINITY), (0, f32::NEG_INFINITY), (2, -f32::MIN_POSITIVE), (1, 1e-39)];
    for (slot, t) in bad {
        reject(
            &backend,
            &format!("temperature {t} on slot {slot}"),
            |b| b.temperature[slot] = t,
            |e| {
                matches!(e, Error::InvalidTemperature { slot: s, value }
                    if *s == slot && value.to_bits() == t.to_bits())
            },
        );
    }
});

/// Whether `e` is a length mismatch of `what` (`expected` elements, `got` given).
fn is_length(e: &Error, what: &str, expected: usize, got: usize) -> bool {
    matches!(e, Error::LengthMismatch { what: w, expected: x, got: g } if *w == what && *x == expected && *g == got)
}

test_device!(length_mismatches_are_rejected, |backend, scale| {
    let short = ROWS - 1;
    reject(&backend, "3 slots", |b| b.slots.truncate(short), |e| is_length(e, "slots", ROWS, short));
    reject(&backend, "5 positions", |b| b.pos.push(9), |e| is_length(e, "positions", ROWS, ROWS + 1));
    reject(
        &backend,
        "2 seeds",
        |b| {
            b.seed.pop();
        },
        |e| is_length(e, "seed table", NUM_SLOTS, NUM_SLOTS - 1),
    );
    reject(
        &backend,
        "3 per-row columns",
        |b| draft_logits_mut(b).column = ColumnSpec::PerRow(vec![0; short]),
        |e| is_length(e, "draft columns", ROWS, short),
    );
    let is_logits = |e: &Error| matches!(e, Error::BufferTooSmall { what: "logits", .. });
    reject(&backend, "logits one short", |b| b.logits = b.logits.gather(0..ROWS * VOCAB - 1), is_logits);
    reject(&backend, "row stride past the logits", |b| b.row_stride = VOCAB + 1, is_logits);
    reject(
        &backend,
        "draft-logits buffer one short",
        |b| {
            let c = draft_logits_mut(b);
            c.data = c.data.gather(0..c.data.len() - 1);
        },
        |e| matches!(e, Error::BufferTooSmall { what: "draft logits", .. }),
    );
});

test_device!(out_of_range_columns_are_rejected, |backend, scale| {
    reject(
        &backend,
        "column for all rows = k",
        |b| draft_logits_mut(b).column = ColumnSpec::All(DRAFT_K),
        |e| matches!(e, Error::ColumnOutOfRange { row: None, column: 2, k: DRAFT_K }),
    );
    for (row, col) in [(1, DRAFT_K as i32), (0, -1), (3, i32::MAX)] {
        let mut cols = vec![0; ROWS];
        cols[row] = col;
        reject(
            &backend,
            &format!("per-row column {col} at row {row}"),
            |b| draft_logits_mut(b).column = ColumnSpec::PerRow(cols),
            |e| matches!(e, Error::ColumnOutOfRange { row: Some(r), column: c, k: DRAFT_K } if *r == row && *c == col as i64),
        );
    }
    reject(
        &backend,
        "draft logits without columns",
        |b| b.draft_logits = Some(draft_logits(NUM_SLOTS, 0, ColumnSpec::All(0))),
        |e| matches!(e, Error::ColumnOutOfRange { k: 0, .. }),
    );
});

test_device!(bad_vocab_and_draft_logits_layouts_are_rejected, |backend, scale| {
    for vocab in [0, MAX_VOCAB + 1] {
        reject(
            &backend,
            &format!("vocab {vocab}"),
            |b| b.vocab = vocab,
            |e| matches!(e, Error::InvalidVocab { vocab: v, max: MAX_VOCAB } if *v == vocab),
        );
    }
    reject(
        &backend,
        "columns overlapping (stride1 < width)",
        |b| draft_logits_mut(b).stride1 = DRAFT_WIDTH - 1,
        |e| matches!(e, Error::DraftLogitsOverlap { .. }),
    );
    reject(
        &backend,
        "slots overlapping (stride0 < k·width)",
        |b| draft_logits_mut(b).stride0 = DRAFT_WIDTH,
        |e| matches!(e, Error::DraftLogitsOverlap { .. }),
    );
});

test_device!(output_lengths_are_checked, |backend, scale| {
    // The base call's inputs, without its draft logits (an output).
    let b = base();
    assert!(matches!(b.logits, Values::F32(_)) && b.row_stride == VOCAB && !b.drafting, "f32 dense logits");
    let call = b.call();
    for (tokens_len, status_len, i64_tokens, what) in
        [(ROWS - 1, ROWS, false, "tokens"), (ROWS + 1, ROWS, true, "tokens"), (ROWS, ROWS - 1, false, "row status")]
    {
        let (mut t32, mut t64, mut status) = (vec![-5i32; tokens_len], vec![-5i64; tokens_len], vec![9u32; status_len]);
        let out = if i64_tokens { GumbelOutput::new(&mut t64) } else { GumbelOutput::new(&mut t32) };
        let result = backend.gumbel_sample(&call, &mut out.with_row_status(&mut status));
        let ctx = format!("{tokens_len} tokens (i64 {i64_tokens}), {status_len} statuses");
        let got = if what == "tokens" { tokens_len } else { status_len };
        assert!(matches!(&result, Err(e) if is_length(e, what, ROWS, got)), "{ctx}: {result:?}");
        assert!(t32.iter().all(|&t| t == -5) && t64.iter().all(|&t| t == -5), "{ctx}: tokens written");
        assert!(status.iter().all(|&s| s == 9), "{ctx}: statuses written");
    }
});
