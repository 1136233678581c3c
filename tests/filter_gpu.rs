//! GPU-only checks of the sampling filters (SPEC §7; feature `gpu`: they need
//! CUDA device 0 and fail without one):
//!
//! - randomized filtered batches give the CPU backend's outputs: every
//!   setting of `filters::SETTINGS` mixed with unfiltered, greedy and padding
//!   rows and with tables giving one array only; f32, bf16 and f16 logits;
//!   V ∈ {1, 999, 4097, 151936}; tie-heavy rows; `-inf` and NaN entries.
//!   `gumbel_sample` (drafting into draft logits of every dtype included)
//!   bit for bit, since the kept set is exact (SPEC §7.4); `rejection_sample`
//!   (ragged requests, one-hot and full draft logits, draft filters on and
//!   off) up to near-threshold decisions, as unfiltered (SPEC §2.5);
//! - a drafter whose draft dtype rounds its logits filters the stored values;
//! - filter values in device memory that are out of range (SPEC §7.1) give
//!   the rows (requests) of their slot token -1 and `INVALID_FILTER`, on a
//!   greedy slot too, as the CPU backend rejects them there with a typed
//!   error; the other rows come out as in a call without the bad rows, and
//!   the bad values of unused slots are never read (SPEC §5).
#![cfg(feature = "gpu")]

use specdec::filter::Filter;
use specdec::status::{INVALID_FILTER, NAN_LOGITS};
use specdec::{Backend, DType, Error};
use specdec_suite::agreement::{Agreement, MIN_DECISIONS, compare, pick};
use specdec_suite::batch::{ColumnSpec, Values};
use specdec_suite::drafting::{RandomSpec, draft_logits_like, random_verify, run_split, select_requests};
use specdec_suite::filters::SETTINGS;
use specdec_suite::inputs::{Rng, assert_gpu_matches_cpu, assert_same_draft_logits, random_batch, random_draft_logits};
use specdec_suite::{Batch, DraftLogitsSpec, FilterTable, Verify, cuda, cuda_device};

/// Whether `e` is the typed error of a bad filter value (SPEC §7.1).
fn is_filter_error(e: &Error) -> bool {
    matches!(e, Error::InvalidTopK { .. } | Error::InvalidTopP { .. } | Error::InvalidMinP { .. })
}

// --- Random filtered batches -------------------------------------------------------

/// A slot's filters: off (no filter, or `top_k = V`, which disables itself)
/// a quarter of the time, else one of the suites' settings.
fn random_filter(rng: &mut Rng, vocab: usize) -> Filter {
    match rng.below(8) {
        0 => Filter::OFF,
        1 => Filter { top_k: vocab as u32, ..Filter::OFF },
        _ => SETTINGS[rng.below(SETTINGS.len())],
    }
}

/// A random table of `slots` slots; three tables in eight give one array
/// only (the kernels must read the arrays given, and only those).
fn random_table(rng: &mut Rng, slots: usize, vocab: usize) -> FilterTable {
    let mut t = FilterTable::per_slot(&(0..slots).map(|_| random_filter(rng, vocab)).collect::<Vec<_>>());
    match rng.below(8) {
        0 => (t.top_p, t.min_p) = (None, None),
        1 => (t.top_k, t.min_p) = (None, None),
        2 => (t.top_k, t.top_p) = (None, None),
        _ => {}
    }
    t
}

/// Which of [`SETTINGS`] some sampling row (or request) was filtered with.
struct Covered([bool; SETTINGS.len()]);

impl Covered {
    fn new() -> Self {
        Covered([false; SETTINGS.len()])
    }

    /// Marks the settings of the used sampling slots of `slots`.
    fn mark(&mut self, table: &FilterTable, slots: &[i32], temperature: &[f32]) {
        for &s in slots.iter().filter(|&&s| s >= 0 && temperature[s as usize] > 0.0) {
            if let Some(i) = SETTINGS.iter().position(|f| *f == table.slot(s as usize)) {
                self.0[i] = true;
            }
        }
    }

    fn assert_all(&self, what: &str) {
        let missing: Vec<Filter> = (0..SETTINGS.len()).filter(|&i| !self.0[i]).map(|i| SETTINGS[i]).collect();
        assert!(missing.is_empty(), "{what}: settings no sampling row used: {missing:?}");
    }
}

/// Rounds the finite values of `v` below 100 in magnitude to multiples of
/// 1/4, so that rows hold large tie groups straddling every `τ_k` and `τ_p`
/// (row padding, [`specdec_suite::inputs::PAST_VOCAB`], is left alone).
fn make_ties(v: &mut Values) {
    for i in 0..v.len() {
        let x = v.get(i);
        if x.is_finite() && x.abs() < 100.0 {
            v.set_f32(i, (x * 4.0).round() / 4.0);
        }
    }
}

/// Non-finite rows: a few NaNs, all but three ids `-inf` (fewer values than
/// most `top_k`), or every id `-inf`.
#[derive(Clone, Copy, Debug)]
enum Plant {
    NaNs,
    MostlyMasked,
    AllMasked,
}

/// Plants `what` into the `vocab` ids of `v` from `start`.
fn plant(rng: &mut Rng, v: &mut Values, start: usize, vocab: usize, what: Plant) {
    match what {
        Plant::NaNs => (0..3).for_each(|_| v.set_f32(start + rng.below(vocab), f32::NAN)),
        Plant::MostlyMasked => {
            let keep: Vec<usize> = (0..3).map(|_| rng.below(vocab)).collect();
            (0..vocab).filter(|x| !keep.contains(x)).for_each(|x| v.set_f32(start + x, f32::NEG_INFINITY));
        }
        Plant::AllMasked => (0..vocab).for_each(|x| v.set_f32(start + x, f32::NEG_INFINITY)),
    }
}

/// `(vocab, rows, trials)` of the random `gumbel_sample` batches: odd
/// vocabularies from one id to a real LM's (that one once per dtype pair).
const GUMBEL_SHAPES: [(usize, usize, usize); 4] = [(1, 33, 3), (999, 40, 3), (4097, 17, 3), (151_936, 5, 1)];

#[test]
fn filtered_gumbel_batches_match_the_cpu_bit_for_bit() {
    let gpu = cuda();
    let mut rng = Rng::new(0xF17_6B0);
    let mut covered = Covered::new();
    for (vocab, rows, trials) in GUMBEL_SHAPES {
        for logits in DType::ALL {
            for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
                for trial in 0..trials {
                    let mut b = random_batch(&mut rng, logits, rows, vocab);
                    b.filters = random_table(&mut rng, b.temperature.len(), vocab);
                    // Trial 0 plain, 1 tie-heavy, 2 with non-finite rows; all
                    // but 1 drafting (into rounding draft dtypes too).
                    b.drafting = trial != 1;
                    b.tokens_i64 = trial == 1;
                    match trial {
                        1 => make_ties(&mut b.logits),
                        2 => {
                            for (r, what) in [(0, Plant::AllMasked), (2, Plant::NaNs), (3, Plant::MostlyMasked)] {
                                plant(&mut rng, &mut b.logits, r * b.row_stride, vocab, what);
                            }
                        }
                        _ => {}
                    }
                    b.draft_logits = draft.map(|d| random_draft_logits(&mut rng, d, &b));
                    covered.mark(&b.filters, &b.slots, &b.temperature);
                    let ctx = format!(
                        "V {vocab} rows {rows} logits {logits:?} draft logits {draft:?} trial {trial} (filters {:?})",
                        b.filters
                    );
                    assert_gpu_matches_cpu(b, &gpu, &ctx);
                }
            }
        }
    }
    covered.assert_all("gumbel_sample");
}

/// The filters of [`every_threshold_path_matches_the_cpu`], one per path of
/// the threshold kernel (`specdec-kernels`' `threshold`): candidates pooled
/// (top-k, with top-p; min-p with top-p), too many candidates for a block's
/// or the row's pool (top-k 250, and tie-heavy rows; top-k 3,000 then top-p
/// searched), none needed (min-p alone) or none bounded (top-p alone, the
/// row searched: by one block, or by all the row's blocks in rounds).
const PATHS: [Filter; 8] = [
    Filter { top_k: 3000, top_p: 0.9, min_p: 0.0 },
    Filter { top_k: 2, top_p: 1.0, min_p: 0.0 },
    Filter { top_k: 128, top_p: 1.0, min_p: 0.0 },
    Filter { top_k: 150, top_p: 0.5, min_p: 0.0 },
    Filter { top_k: 250, top_p: 1.0, min_p: 0.0 },
    Filter { top_k: 0, top_p: 0.3, min_p: 0.2 },
    Filter { top_k: 0, top_p: 1.0, min_p: 0.9 },
    Filter { top_k: 0, top_p: 0.2, min_p: 0.0 },
];

/// Every path of the threshold kernel gives the CPU's tokens, on many rows
/// of small kept sets (a `τ` off by one value changes some row's token),
/// plain and tie-heavy, in rows of several blocks (few rows: top-p searched
/// by all their blocks), in rows longer than the blocks keep (V = 300,000),
/// and in a call of more rows than the workspace keeps threshold scratch for
/// (5,000: one block a row).
#[test]
fn every_threshold_path_matches_the_cpu() {
    let gpu = cuda();
    let mut rng = Rng::new(0x7A0_9A75);
    for (vocab, rows) in [(40_000, 256), (151_936, 3), (300_000, 8), (999, 5000)] {
        // Ascending rows where blocks of a row run one after another: each
        // chunk's values above the cut of the chunks before it (a borrowed
        // cut overflows the block's candidates).
        let shapes: &[Shape] = if rows == 256 { &Shape::ALL } else { &Shape::ALL[..2] };
        for &shape in shapes {
            for filter in PATHS {
                let mut b = random_batch(&mut rng, DType::F32, rows, vocab);
                b.filters = FilterTable::uniform(filter, b.temperature.len());
                match shape {
                    Shape::Plain => {}
                    Shape::Ties => make_ties(&mut b.logits),
                    Shape::Ascending => make_ascending(&mut b.logits, b.rows, (b.vocab, b.row_stride)),
                }
                assert_gpu_matches_cpu(b, &gpu, &format!("V {vocab} rows {rows} {shape:?} {filter:?}"));
            }
        }
    }
}

/// Rows of [`every_threshold_path_matches_the_cpu`].
#[derive(Clone, Copy, Debug)]
enum Shape {
    Plain,
    Ties,
    Ascending,
}

impl Shape {
    const ALL: [Shape; 3] = [Shape::Plain, Shape::Ties, Shape::Ascending];
}

/// Each of `rows` rows (`vocab` values, `stride` apart) sorted ascending (`f32::total_cmp`).
fn make_ascending(v: &mut Values, rows: usize, (vocab, stride): (usize, usize)) {
    for start in (0..rows).map(|r| r * stride) {
        let mut row: Vec<f32> = (start..start + vocab).map(|i| v.get(i)).collect();
        row.sort_by(f32::total_cmp);
        for (i, x) in row.into_iter().enumerate() {
            v.set_f32(start + i, x);
        }
    }
}

/// `(vocab, requests, most drafts per request)` of the random verify
/// batches: SPEC §6's vocabularies, and drafts beyond one warp's 32 lanes.
const VERIFY_SIZES: [(usize, usize, usize); 5] =
    [(1, 256, 4), (999, 8192, 4), (4097, 512, 4), (151_936, 4, 4), (999, 64, 40)];

#[test]
fn filtered_rejection_batches_match_the_cpu_but_near_thresholds() {
    let (gpu, mut rng, mut tally) = (cuda(), Rng::new(0xF17_6B1), Agreement::default());
    let mut covered = Covered::new();
    for (vocab, requests, k) in VERIFY_SIZES {
        for target in DType::ALL {
            for (d, draft) in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)].into_iter().enumerate() {
                let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, target, draft));
                let (slots, case) = (v.temperature.len(), d + target as usize);
                v.filters = random_table(&mut rng, slots, vocab);
                // The drafts' filters: none, the target's (a drafter that
                // filtered as the target does), or others.
                v.draft_filters = match case % 3 {
                    0 => FilterTable::none(),
                    1 => v.filters.clone(),
                    _ => random_table(&mut rng, slots, vocab),
                };
                if case % 2 == 1 {
                    make_ties(&mut v.target);
                    if let Some((values, _)) = &mut v.draft {
                        make_ties(values);
                    }
                }
                // Non-finite first rows in some requests (a draft row, or the bonus row).
                for r in 0..v.requests() {
                    let what = [Plant::NaNs, Plant::MostlyMasked, Plant::AllMasked][r % 3];
                    if r % 7 == 3 {
                        plant(&mut rng, &mut v.target, v.offsets[r] as usize * v.row_stride, vocab, what);
                    }
                }
                covered.mark(&v.filters, &v.slots, &v.temperature);
                let ctx = format!("V {vocab} K {k} target {target:?} draft {draft:?} case {case}");
                let want = run_split(&v, &Backend::cpu());
                let got = v.run(&gpu).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                compare(&v, &want, &got, &(0..requests).collect::<Vec<_>>(), &mut tally, &ctx);
            }
        }
    }
    eprintln!("CPU vs GPU, filtered: {tally:?}");
    tally.assert_rare_near(MIN_DECISIONS);
    covered.assert_all("rejection_sample");
}

// --- Drafting into a rounding dtype ------------------------------------------------

/// Rows (each its own slot, seed and position) of the rounding check.
const ROUNDING_ROWS: usize = 4096;
const ROUNDING_VOCAB: usize = 999;
/// Two ids whose f32 logits differ but round to the same bf16 (`1 + 2^-10`
/// to `1`): the second is the f32 maximum.
const TWINS: [usize; 2] = [17, 600];

#[test]
fn a_drafter_that_rounds_its_logits_filters_the_stored_values() {
    let gpu = cuda();
    let mut rng = Rng::new(0x4B0D);
    let mut row: Vec<f32> = (0..ROUNDING_VOCAB).map(|_| rng.uniform(-6.0, -2.0)).collect();
    (row[TWINS[0]], row[TWINS[1]]) = (1.0, 1.0 + 1.0 / 1024.0);
    let mut b = Batch::broadcast(&row, DType::F32, ROUNDING_ROWS, 1.0, 0, 0);
    b.slots = (0..ROUNDING_ROWS as i32).collect();
    b.temperature = vec![1.0; ROUNDING_ROWS];
    b.seed = (0..ROUNDING_ROWS).map(|_| rng.next_u64()).collect();
    b.pos = (0..ROUNDING_ROWS).map(|_| rng.next_u64()).collect();
    b.drafting = true;
    b.filters = FilterTable::uniform(Filter { top_k: 1, ..Filter::OFF }, ROUNDING_ROWS);
    for (draft, twins_kept) in [(DType::BF16, true), (DType::F32, false)] {
        let ctx = format!("draft logits {draft:?}");
        let mut case = b.clone();
        case.draft_logits = Some(DraftLogitsSpec::dense(draft, ROUNDING_ROWS, 1, ROUNDING_VOCAB, ColumnSpec::All(0)));
        let got = assert_gpu_matches_cpu(case, &gpu, &ctx);
        let counts = TWINS.map(|x| got.tokens.iter().filter(|&&t| t == x as i64).count());
        assert_eq!(counts[0] + counts[1], ROUNDING_ROWS, "{ctx}: top-1 keeps only the maximum's group: {counts:?}");
        if twins_kept {
            // Stored as bf16 the two tie: both kept, each sampled about half the time.
            assert!(counts.iter().all(|&n| n > ROUNDING_ROWS / 4), "{ctx}: the stored tie is not kept: {counts:?}");
        } else {
            assert_eq!(counts[1], ROUNDING_ROWS, "{ctx}: the f32 maximum alone is kept");
        }
    }
}

// --- Bad filter values in device memory ----------------------------------------------

/// The slots of the device-validation calls: `(temperature, top_k, top_p, min_p)`.
const SLOTS: [(f32, i32, f32, f32); 15] = [
    (1.0, 20, 0.9, 0.05), // 0: valid, filtering
    (1.0, -1, 1.0, 0.0),  // 1: top_k < 0
    (0.8, i32::MIN, 0.5, 0.1),
    (1.0, 0, 0.0, 0.0), // 3: top_p = 0
    (1.3, 5, 1.5, 0.0),
    (1.0, 0, f32::NAN, 0.0),
    (0.6, 0, 1.0, -0.1), // 6: min_p < 0
    (1.0, 50, 0.9, 1.5),
    (1.0, 0, 1.0, f32::NAN),
    (0.0, 0, f32::NAN, 0.0),  // 9: greedy, bad top_p
    (0.0, -3, 1.0, 0.0),      // 10: greedy, bad top_k
    (1.0, -1, f32::NAN, 7.0), // 11: every value bad, no row uses it
    (0.6, 0, 1.0, 0.0),       // 12: valid, every filter off
    (0.0, 3, 0.5, 0.5),       // 13: valid, greedy, filtering
    (0.0, 1, 1.0, 2.0),       // 14: greedy, bad min_p
];
/// The rows' (or requests') slots: slot 1 twice, slot 11 never, padding once.
const ROW_SLOTS: [i32; 17] = [0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, -1, 0];
const UNUSED_SLOT: usize = 11;
const DEVICE_VOCAB: usize = 3001;
/// Which of `(top_k, top_p, min_p)` a call gives: all three, then each alone.
const ARRAYS: [[bool; 3]; 4] = [[true; 3], [true, false, false], [false, true, false], [false, false, true]];

/// [`SLOTS`]' filter values, the arrays `given` only.
fn slot_table(given: [bool; 3]) -> FilterTable {
    FilterTable {
        top_k: given[0].then(|| SLOTS.iter().map(|s| s.1).collect()),
        top_p: given[1].then(|| SLOTS.iter().map(|s| s.2).collect()),
        min_p: given[2].then(|| SLOTS.iter().map(|s| s.3).collect()),
    }
}

/// Whether slot `s` of `table` holds a value out of its range (SPEC §7.1,
/// written out here): `top_k < 0`, `top_p` outside `(0, 1]`, `min_p`
/// outside `[0, 1]`, NaN outside both.
fn bad(table: &FilterTable, s: usize) -> bool {
    table.top_k.as_ref().is_some_and(|k| k[s] < 0)
        || table.top_p.as_ref().is_some_and(|p| !(p[s] > 0.0 && p[s] <= 1.0))
        || table.min_p.as_ref().is_some_and(|m| !(m[s] >= 0.0 && m[s] <= 1.0))
}

/// Panics unless some greedy and some sampling slot of `ROW_SLOTS` is
/// flagged (so that each call checks both kinds).
fn assert_both_kinds_flagged(flagged: &[bool], ctx: &str) {
    let greedy = |r: usize| SLOTS[ROW_SLOTS[r] as usize].0 == 0.0;
    let of = |g: bool| (0..ROW_SLOTS.len()).any(|r| flagged[r] && greedy(r) == g);
    assert!(of(true) && of(false), "{ctx}: the call flags no greedy or no sampling row: {flagged:?}");
}

/// Replaces every NaN of `v` by 0 and plants one at `at`: the only NaN
/// of the call, in a valid row, so the flagged rows' statuses are their flag
/// alone and the status word is known.
fn one_nan(v: &mut Values, at: usize) {
    for i in 0..v.len() {
        if v.get(i).is_nan() {
            v.set_f32(i, 0.0);
        }
    }
    v.set_f32(at, f32::NAN);
}

#[test]
fn bad_device_filter_values_flag_the_rows_of_their_slot() {
    let cuda = cuda_device();
    let rows = ROW_SLOTS.len();
    let mut ws = cuda.workspace(rows).expect("workspace");
    let mut rng = Rng::new(0xBAD_F117);
    let pairs =
        [(DType::F32, DType::F32), (DType::F32, DType::BF16), (DType::BF16, DType::F16), (DType::F16, DType::BF16)];
    for (logits, draft) in pairs {
        for tokens_i64 in [false, true] {
            for given in ARRAYS {
                let ctx = format!("logits {logits:?} draft logits {draft:?} i64 {tokens_i64} arrays {given:?}");
                let mut b = random_batch(&mut rng, logits, rows, DEVICE_VOCAB);
                b.slots = ROW_SLOTS.to_vec();
                b.temperature = SLOTS.iter().map(|s| s.0).collect();
                b.seed = (0..SLOTS.len()).map(|_| rng.next_u64()).collect();
                b.tokens_i64 = tokens_i64;
                b.drafting = true;
                b.filters = slot_table(given);
                one_nan(&mut b.logits, 17);
                let columns = ColumnSpec::PerRow((0..rows as i32).collect());
                b.draft_logits = Some(DraftLogitsSpec::dense(draft, SLOTS.len(), rows, DEVICE_VOCAB, columns));
                let flagged: Vec<bool> = ROW_SLOTS.iter().map(|&s| s >= 0 && bad(&b.filters, s as usize)).collect();
                assert_both_kinds_flagged(&flagged, &ctx);
                assert!(bad(&b.filters, UNUSED_SLOT), "{ctx}: the unused slot holds a bad value");
                let valid: Vec<usize> = (0..rows).filter(|&r| !flagged[r]).collect();

                // On the host the same values are a typed error (greedy slots included).
                let e = b.clone().run(&Backend::cpu()).expect_err("bad filter values on the CPU");
                assert!(is_filter_error(&e), "{ctx}: cpu: {e}");

                // The reference: the valid rows alone (the bad slots, and the
                // unused one, then unused): on the device nothing is flagged
                // but the NaN, and the CPU agrees bit for bit.
                let mut alone = b.select(&valid);
                let want = alone.run_device(&cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: alone: {e}"));
                let word = ws.take_status().expect("status");
                assert_eq!(word, NAN_LOGITS, "{ctx}: status word of the call without the bad rows");
                let mut on_cpu = b.select(&valid);
                let cpu = on_cpu.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: cpu: {e}"));
                assert_eq!(want, cpu, "{ctx}: the valid rows, GPU vs CPU");
                assert_same_draft_logits(&alone, &on_cpu, &format!("{ctx}: the valid rows, GPU vs CPU"));

                let got = b.run_device(&cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let word = ws.take_status().expect("status");
                for (r, &slot) in ROW_SLOTS.iter().enumerate() {
                    let row = format!("{ctx}: row {r} (slot {slot})");
                    match valid.iter().position(|&v| v == r) {
                        Some(i) => {
                            assert_eq!(got.tokens[r], want.tokens[i], "{row}: differs from the call without bad rows");
                            assert_eq!(got.row_status[r], want.row_status[i], "{row}: status");
                        }
                        None => {
                            assert_eq!(got.tokens[r], -1, "{row}: a flagged row's token");
                            assert_eq!(got.row_status[r], INVALID_FILTER, "{row}: status");
                        }
                    }
                }
                assert_same_draft_logits(&b, &alone, &format!("{ctx}: flagged rows must not write draft logits"));
                assert_eq!(word, INVALID_FILTER | NAN_LOGITS, "{ctx}: the call's status word");
                assert_eq!(ws.take_status().expect("status"), 0, "{ctx}: status word after clearing");
            }
        }
    }
}

/// Drafts per request of the device-validation verify calls.
const DEVICE_K: usize = 3;
/// Bad values in the draft logits' filters (valid target filters elsewhere):
/// `(slot, top_k, top_p, min_p)`, a sampling slot and a greedy one.
const BAD_DRAFT_FILTERS: [(usize, i32, f32, f32); 2] = [(12, -1, 1.0, 0.0), (13, 0, 0.9, f32::NAN)];

/// The draft logits' filters of the verify calls: valid on every slot but
/// the [`BAD_DRAFT_FILTERS`].
fn draft_table() -> FilterTable {
    let mut t = FilterTable::uniform(Filter { top_k: 20, top_p: 0.9, min_p: 0.05 }, SLOTS.len());
    for (s, k, p, m) in BAD_DRAFT_FILTERS {
        t.top_k.as_mut().unwrap()[s] = k;
        t.top_p.as_mut().unwrap()[s] = p;
        t.min_p.as_mut().unwrap()[s] = m;
    }
    t
}

#[test]
fn bad_device_filter_values_flag_the_requests_of_their_slot() {
    let cuda = cuda_device();
    let requests = ROW_SLOTS.len();
    let mut ws = cuda.workspace(requests * (DEVICE_K + 1)).expect("workspace");
    let mut rng = Rng::new(0xBAD_F118);
    for draft in [Some(DType::BF16), Some(DType::F32), None] {
        for tokens_i64 in [false, true] {
            for given in ARRAYS {
                let ctx = format!("draft logits {draft:?} i64 {tokens_i64} target arrays {given:?}");
                let mut spec = RandomSpec::new(999, requests, DEVICE_K, DType::F32, None);
                spec.drafts_of = Some(|_| DEVICE_K);
                let mut v = random_verify(&mut rng, spec);
                v.slots = ROW_SLOTS.to_vec();
                v.temperature = SLOTS.iter().map(|s| s.0).collect();
                v.seed = (0..SLOTS.len()).map(|_| rng.next_u64()).collect();
                v.tokens_i64 = tokens_i64;
                v.filters = slot_table(given);
                v.draft_filters = draft_table();
                v.draft = draft.map(|d| draft_logits_like(&mut rng, &v, d, 1.5));
                one_nan(&mut v.target, 5); // request 0's first row
                // The draft logits' filters are read only with draft logits.
                let bad_slot = |s: usize| bad(&v.filters, s) || v.draft.is_some() && bad(&v.draft_filters, s);
                let flagged: Vec<bool> = ROW_SLOTS.iter().map(|&s| s >= 0 && bad_slot(s as usize)).collect();
                assert_both_kinds_flagged(&flagged, &ctx);
                let valid: Vec<usize> = (0..requests).filter(|&r| !flagged[r]).collect();

                let e = v.run(&Backend::cpu()).expect_err("bad filter values on the CPU");
                assert!(is_filter_error(&e), "{ctx}: cpu: {e}");

                // The reference: the valid requests alone, on the device (bit
                // for bit, nothing flagged but the NaN) and on the CPU (up to
                // near-threshold decisions, SPEC §2.5).
                let alone: Verify = select_requests(&v, &valid);
                let want = alone.run_device(&cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: alone: {e}"));
                let word = ws.take_status().expect("status");
                assert_eq!(word, NAN_LOGITS, "{ctx}: status word of the call without the bad requests");
                let cpu = alone.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: cpu: {e}"));
                let mut tally = Agreement::default();
                compare(&alone, &cpu, &want, &(0..valid.len()).collect::<Vec<_>>(), &mut tally, &ctx);
                assert_eq!(tally.near_mismatches, 0, "{ctx}: {tally:?}");

                let got = v.run_device(&cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let word = ws.take_status().expect("status");
                assert_eq!(
                    pick(&v, &got, &valid),
                    want,
                    "{ctx}: the valid requests differ from the call without the bad ones"
                );
                for r in (0..requests).filter(|&r| flagged[r]) {
                    let what = format!("{ctx}: flagged request {r} (slot {})", ROW_SLOTS[r]);
                    assert!(got.request(r).iter().all(|&t| t == -1), "{what}: tokens {:?}", got.request(r));
                    assert_eq!((got.num_emitted[r], got.accepted[r]), (0, 0), "{what}: counts");
                    // SPEC §5.4: an invalid request's rows keep their status.
                    let rows = v.offsets[r] as usize..v.offsets[r + 1] as usize;
                    assert!(got.row_status[rows].iter().all(|&s| s == u32::MAX), "{what}: row status written");
                }
                assert_eq!(word, INVALID_FILTER | NAN_LOGITS, "{ctx}: the call's status word");
            }
        }
    }
}
