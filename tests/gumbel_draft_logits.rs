//! The draft logits (SPEC §3.3): each non-padding row's raw logits for
//! ids `0..V` land at `slot*stride0 + col*stride1 + x`, converted to the draft
//! dtype (bit for bit when the dtypes match); nothing else in the buffer
//! changes, whatever the strides; draft logits narrower than `V` are rejected
//! before anything is written.

use specdec::{Backend, DType, Error};
use specdec_suite::batch::{ColumnSpec, Values};
use specdec_suite::inputs::{PAST_VOCAB, Rng, assert_same_tokens, first_bit_difference};
use specdec_suite::{Batch, DraftLogitsSpec, test_device};

/// An odd vocabulary: the last quad of every row is partial.
const VOCAB: usize = 1031;
/// Logits rows are this much wider than `VOCAB`, holding [`PAST_VOCAB`].
const ROW_PAD: usize = 5;
const SLOTS: usize = 4;
const K: usize = 3;
/// Each step's rows: two slots, a padding row (writes nothing), another slot;
/// slot 1 is never used.
const ROW_SLOTS: [i32; 4] = [2, 0, -1, 3];
/// Per slot: greedy rows write the draft logits too.
const SLOT_TEMPERATURES: [f32; SLOTS] = [0.7, 0.0, 1.3, 0.0];

/// Draft-logits layouts for `width`: `(name, stride0, stride1)`. Padded leaves gaps
/// between columns and between slots; transposed puts slots innermost.
fn layouts(width: usize) -> [(&'static str, usize, usize); 3] {
    [
        ("dense", K * width, width),
        ("padded", K * (width + 3) + 2, width + 3),
        ("transposed", width + 1, SLOTS * (width + 1) + 4),
    ]
}

/// NaN bits with a payload (signalling where the format has the bit), which
/// only a same-dtype copy keeps exactly.
fn payload_nan(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0x7f80_0001,
        DType::BF16 => 0x7f81,
        DType::F16 => 0x7c01,
    }
}

/// One step's logits, `rows × (VOCAB + ROW_PAD)`: values in `[-8, 8]` mixed
/// with `-inf`, values that overflow f16 (`±7e4`) and ones that are subnormal
/// in f16 (`±3e-6`); when `nan` a payload NaN at row 0, id 7.
fn step_logits(dtype: DType, rows: usize, salt: u64, nan: bool) -> Values {
    let mut rng = Rng::new(salt);
    let width = VOCAB + ROW_PAD;
    let xs: Vec<f32> = (0..rows * width)
        .map(|i| match (i % width >= VOCAB, rng.below(40)) {
            (true, _) => PAST_VOCAB,
            (false, 0) => f32::NEG_INFINITY,
            (false, 1) => rng.pick(&[7e4, -7e4]),
            (false, 2) => rng.pick(&[3e-6, -3e-6]),
            _ => rng.uniform(-8.0, 8.0),
        })
        .collect();
    let mut v = Values::from_f32(dtype, &xs);
    if nan {
        v.set_bits(7, payload_nan(dtype));
    }
    v
}

/// `model` after the batch `b` wrote the draft logits `c`: each non-padding row's
/// logits `0..V` at its slot and column, as the draft logits store them.
fn apply_writes(model: &mut Values, c: &DraftLogitsSpec, b: &Batch) {
    for (r, &slot) in b.slots.iter().enumerate().filter(|&(_, &s)| s >= 0) {
        let col = match &c.column {
            ColumnSpec::All(col) => *col,
            ColumnSpec::PerRow(cols) => cols[r] as usize,
        };
        let at = slot as usize * c.stride0 + col * c.stride1;
        for x in 0..b.vocab {
            model.store_converted(at + x, &b.logits, r * b.row_stride + x);
        }
    }
}

/// Runs one call per entry of `columns` on the same draft logits, checking after
/// each that the whole buffer equals the model bit for bit and that tokens
/// stay below `VOCAB`.
fn check_steps(
    backend: &Backend,
    logits: DType,
    mut draft_logits: DraftLogitsSpec,
    slots: &[i32],
    columns: &[ColumnSpec],
) {
    let ctx = format!(
        "logits {logits:?}, draft logits {:?} [{SLOTS}, {K}, {}] strides ({}, {})",
        draft_logits.data.dtype(),
        draft_logits.width,
        draft_logits.stride0,
        draft_logits.stride1
    );
    let mut model = draft_logits.data.clone();
    for (step, column) in columns.iter().enumerate() {
        let rows = slots.len();
        let same_dtype = draft_logits.data.dtype() == logits;
        let mut b = Batch::new(step_logits(logits, rows, step as u64, same_dtype), rows, VOCAB, 1.0, 0);
        b.row_stride = VOCAB + ROW_PAD;
        b.slots = slots.to_vec();
        b.temperature = SLOT_TEMPERATURES.to_vec();
        b.seed = vec![11, 12, 13, 14];
        b.drafting = step % 2 == 1;
        draft_logits.column = column.clone();
        apply_writes(&mut model, &draft_logits, &b);
        b.draft_logits = Some(draft_logits);
        let ctx = format!("{ctx}, step {step} column {column:?}");
        let got = b.run(backend).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(got.tokens.iter().all(|&t| (0..VOCAB as i64).contains(&t)), "{ctx}: tokens {:?}", got.tokens);
        draft_logits = b.draft_logits.take().expect("the batch keeps its draft logits");
        if let Some(i) = first_bit_difference(&draft_logits.data, &model) {
            let (got, want) = (draft_logits.data.bits(i), model.bits(i));
            panic!("{ctx}: element {i} ({}) is {got:#x}, want {want:#x}", locate(&draft_logits, i));
        }
    }
}

/// Names buffer element `i` as `(slot, column, id)`, or as a gap.
fn locate(c: &DraftLogitsSpec, i: usize) -> String {
    for s in 0..c.slots {
        for col in 0..c.k {
            let at = s * c.stride0 + col * c.stride1;
            if (at..at + c.width).contains(&i) {
                return format!("slot {s}, column {col}, id {}", i - at);
            }
        }
    }
    "a gap between draft rows".into()
}

/// Every layout, draft-logits width `VOCAB + 0/1`, logits f32/bf16 × every
/// draft dtype.
fn each_draft_layout(mut f: impl FnMut(DType, DraftLogitsSpec)) {
    for width in [VOCAB, VOCAB + 1] {
        for (_, stride0, stride1) in layouts(width) {
            for logits in [DType::F32, DType::BF16] {
                for dtype in DType::ALL {
                    f(logits, DraftLogitsSpec::strided(dtype, SLOTS, K, width, stride0, stride1, ColumnSpec::All(0)));
                }
            }
        }
    }
}

test_device!(draft_columns_hold_each_steps_raw_logits, |backend, scale| {
    let columns: Vec<ColumnSpec> = (0..K).map(ColumnSpec::All).collect();
    each_draft_layout(|logits, draft_logits| check_steps(&backend, logits, draft_logits, &ROW_SLOTS, &columns));
});

test_device!(per_row_columns_write_only_their_column, |backend, scale| {
    // Slot 0 twice, in different columns; the padding row's column is unused.
    let slots = [0, 0, 3, -1, 2];
    let columns = [ColumnSpec::PerRow(vec![2, 0, 1, 0, 2]), ColumnSpec::PerRow(vec![1, 2, 0, 2, 0])];
    each_draft_layout(|logits, draft_logits| check_steps(&backend, logits, draft_logits, &slots, &columns));
});

test_device!(narrower_draft_logits_are_rejected_and_untouched, |backend, scale| {
    let vocab = 64;
    for dtype in DType::ALL {
        for column in [ColumnSpec::All(1), ColumnSpec::PerRow(vec![0, 2])] {
            let ctx = format!("draft logits {dtype:?} [2, 3, 63] for V {vocab}, column {column:?}");
            let mut b = Batch::new(step_logits(DType::F32, 2, 9, false), 2, vocab, 1.0, 3);
            b.row_stride = VOCAB + ROW_PAD;
            b.slots = vec![0, 1];
            b.temperature = vec![1.0, 0.0];
            b.seed = vec![1, 2];
            b.draft_logits = Some(DraftLogitsSpec::dense(dtype, 2, 3, vocab - 1, column));
            let before = b.draft_logits.clone().expect("draft logits").data;
            let (result, out) = b.run_keep(&backend);
            match result {
                Err(e @ Error::DraftLogitsTooNarrow { width: 63, vocab: 64 }) => {
                    assert!(e.to_string().contains("narrower"), "{ctx}: message {e}")
                }
                other => panic!("{ctx}: expected DraftLogitsTooNarrow, got {other:?}"),
            }
            assert!(out.untouched(), "{ctx}: outputs written: {out:?}");
            assert_eq!(
                first_bit_difference(&b.draft_logits.expect("draft logits").data, &before),
                None,
                "{ctx}: draft logits written"
            );
        }
    }
});

// --- Rounding draft logits are sampled as stored (SPEC §3.3) ----------------

/// The sampling temperatures SPEC §6 names, one slot each.
const SAMPLING_T: [f32; 3] = [0.6, 1.0, 1.5];

/// Adjacent values of `dtype` around `x` (round `x` into it, then step one
/// ulp away from zero): their midpoint is where rounding into `dtype` ties.
fn neighbours(dtype: DType, x: f32) -> (f32, f32) {
    let v = Values::from_f32(dtype, &[x]);
    let mut next = v.clone();
    next.set_bits(0, v.bits(0) + 1);
    (v.get(0), next.get(0))
}

/// `rows × vocab` logits for drafting into `draft` draft logits: in `[-8, 8]`,
/// half of them exactly halfway between two adjacent values of the draft
/// dtype (where rounding ties to even), 1 in 50 each `-inf`, `-7e4` (past
/// f16's range) and `±3e-6` (below f16's normal range).
fn tie_heavy_logits(rng: &mut Rng, draft: DType, rows: usize, vocab: usize) -> Vec<f32> {
    (0..rows * vocab)
        .map(|_| match rng.below(50) {
            0 => f32::NEG_INFINITY,
            1 => -7e4,
            2 => rng.pick(&[3e-6, -3e-6]),
            3..25 => rng.uniform(-8.0, 8.0),
            _ => {
                let (a, b) = neighbours(draft, rng.uniform(-8.0, 8.0));
                a + (b - a) / 2.0 // exact in f32: one bit more than the 16-bit formats
            }
        })
        .collect()
}

/// `rows` drafting rows of `logits` (dtype `dtype`) on slots `r % 3` (one
/// temperature of [`SAMPLING_T`] each) at random positions, row `r` writing
/// column `r / 3` of `draft`-dtype draft logits when `draft` is given.
fn drafting_rows(rng: &mut Rng, logits: Values, rows: usize, vocab: usize, draft: Option<DType>) -> Batch {
    let mut b = Batch::new(logits, rows, vocab, 1.0, 0);
    b.drafting = true;
    b.slots = (0..rows as i32).map(|r| r % 3).collect();
    b.pos = (0..rows).map(|_| rng.next_u64()).collect();
    b.temperature = SAMPLING_T.to_vec();
    b.seed = (0..3).map(|_| rng.next_u64()).collect();
    let columns = rows.div_ceil(3);
    b.draft_logits = draft.map(|c| {
        DraftLogitsSpec::dense(c, 3, columns, vocab, ColumnSpec::PerRow((0..rows as i32).map(|r| r / 3).collect()))
    });
    b
}

/// Each row of `b` as its draft logits store it, in their dtype, as logits
/// of a batch that is otherwise `b` without draft logits.
fn as_stored(b: &Batch) -> Batch {
    let c = b.draft_logits.as_ref().expect("a drafting batch with draft logits");
    let ColumnSpec::PerRow(cols) = &c.column else { unreachable!("drafting_rows writes per-row columns") };
    let elems = (0..b.rows).flat_map(|r| {
        let at = b.slots[r] as usize * c.stride0 + cols[r] as usize * c.stride1;
        at..at + b.vocab
    });
    let mut stored = b.clone();
    stored.logits = c.data.gather(elems);
    stored.draft_logits = None;
    stored
}

test_device!(rounding_draft_logits_are_sampled_as_stored, |backend, scale| {
    // Rows per vocabulary: many short rows, where a rounded logit moves a
    // token most often, and a few of a real LM's width.
    let shapes = [(2, 100_000), (999, 60 * scale), (151_936, 6)];
    let mut rng = Rng::new(0x5704ED);
    for logits in DType::ALL {
        for draft in DType::ALL {
            for (vocab, rows) in shapes {
                let ctx = format!("logits {logits:?} into {draft:?} draft logits, V {vocab}, {rows} rows");
                let xs = Values::from_f32(logits, &tie_heavy_logits(&mut rng, draft, rows, vocab));
                let mut drafted = drafting_rows(&mut rng, xs, rows, vocab, Some(draft));
                let got = drafted.run(&backend).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let want = as_stored(&drafted).run(&backend).unwrap_or_else(|e| panic!("{ctx}: stored: {e}"));
                assert_same_tokens(&got.tokens, &want.tokens, &ctx);
                let mut unrounded = drafted.clone();
                unrounded.draft_logits = None;
                let raw = unrounded.run(&backend).unwrap_or_else(|e| panic!("{ctx}: no draft logits: {e}"));
                let moved = (0..rows).filter(|&r| raw.tokens[r] != want.tokens[r]).count();
                // Non-vacuous where rounding moves mantissas: the stored values'
                // tokens differ from the logits' in some rows (bf16 -> f16 rounds
                // only out of f16's range, which these logits do not reach).
                if logits.rounds_into(draft) && !(logits == DType::BF16 && draft == DType::F16) && vocab == 2 {
                    assert!(moved > 0, "{ctx}: no row samples differently from its rounded values");
                }
                if !logits.rounds_into(draft) {
                    assert_eq!(moved, 0, "{ctx}: draft logits that store exactly changed a token");
                }
            }
        }
    }
});

/// `P(emit = x)`, `x ∈ {0, 1}`, of one verified position with drafts drawn
/// from `drafter`, verified (SPEC §4) against the target `p` with the draft
/// law `verifier`: accept `d` with probability `min(1, p_d / v_d)`, else emit
/// from the residual `max(p − v, 0)`, normalised.
fn emitted_law(p: [f64; 2], drafter: [f64; 2], verifier: [f64; 2]) -> [f64; 2] {
    let residual = [(p[0] - verifier[0]).max(0.0), (p[1] - verifier[1]).max(0.0)];
    let mass = residual[0] + residual[1];
    let mut law = [0.0; 2];
    for d in 0..2 {
        let accept = (p[d] / verifier[d]).min(1.0);
        law[d] += drafter[d] * accept;
        if mass > 0.0 {
            for (x, r) in residual.iter().enumerate() {
                law[x] += drafter[d] * (1.0 - accept) * r / mass;
            }
        }
    }
    law
}

fn softmax2(a: f32, b: f32) -> [f64; 2] {
    let p1 = 1.0 / (1.0 + (f64::from(a) - f64::from(b)).exp());
    [1.0 - p1, p1]
}

test_device!(bf16_draft_logits_keep_verification_exact, |backend, scale| {
    // Issue 24's case: f32 draft logits [0, 2 + 2^-7] into bf16 draft logits,
    // which stores [0, 2] (2 + 2^-7 ties between 2 and 2 + 2^-6, to even);
    // T = 1 and a uniform target.
    let (hi, stored_hi) = (2.0 + 2f32.powi(-7), 2.0);
    assert_eq!(half::bf16::from_f32(hi).to_f32(), stored_hi);
    let rows = 30_000 * scale;
    let mut rng = Rng::new(0x24);
    let row = |x: f32| Values::from_f32(DType::F32, &[0.0, x].repeat(rows));
    let mut drafted = drafting_rows(&mut rng, row(hi), rows, 2, Some(DType::BF16));
    drafted.temperature = vec![1.0; 3];
    let got = drafted.run(&backend).expect("drafting into the draft logits");
    let from = |x: f32| {
        let mut b = drafted.clone();
        b.logits = row(x);
        b.draft_logits = None;
        b.run(&backend).expect("drafting without draft logits").tokens
    };
    let (stored, unrounded) = (from(stored_hi), from(hi));
    // The drafter's law is the stored row's: its every draw is the Gumbel-max
    // over the stored values, including draws where the f32 row's differs.
    assert_same_tokens(&got.tokens, &stored, "drafting into bf16 draft logits vs drafting the stored row");
    let telling = (0..rows).filter(|&r| stored[r] != unrounded[r]).count();
    assert!(telling > 0, "no draw tells the stored row from the f32 row; draw more");

    let (p, q_stored, q_f32) = ([0.5, 0.5], softmax2(0.0, stored_hi), softmax2(0.0, hi));
    let law = emitted_law(p, q_stored, q_stored);
    assert!((law[1] - 0.5).abs() < 1e-12 && (law[0] - 0.5).abs() < 1e-12, "emitted {law:?}, target {p:?}");
    // What sampling the f32 row while storing the bf16 one would emit: a bias
    // of about the two draft laws' total variation.
    let biased = emitted_law(p, q_f32, q_stored);
    assert!((biased[1] - 0.5).abs() > 4e-4, "the f32 drafter's bias {biased:?}");
});
