//! Exact (non-statistical) properties of `gumbel_sample` (SPEC §2, §3): greedy
//! rows, the noise each id receives, stream separation and replay, masked and
//! NaN logits, and invariance under batch composition. Every input comes from
//! a fixed seed, so each test always passes or always fails.

use specdec::noise::gumbel;
use specdec::rng::{Stream, random_u32};
use specdec::status::NAN_LOGITS;
use specdec::{Backend, DType};
use specdec_suite::batch::{ColumnSpec, Sampled, Values};
use specdec_suite::inputs::{Rng, TEMPERATURES, assert_same_tokens, first_argmax, random_batch};
use specdec_suite::{Batch, DraftLogitsSpec, test_device};

/// Runs `b`, panicking with `ctx` on an error.
fn run(backend: &Backend, b: &mut Batch, ctx: &str) -> Sampled {
    b.run(backend).unwrap_or_else(|e| panic!("{ctx}: {e}"))
}

/// The first argmax of every row of `b` (what a greedy row must return).
fn argmax_rows(b: &Batch) -> Vec<i64> {
    (0..b.rows).map(|r| first_argmax(&b.row(r)) as i64).collect()
}

// --- Greedy (SPEC §3.1) -----------------------------------------------------

/// A real LM vocabulary: many tiles per row, several blocks per row on a GPU.
const GREEDY_VOCAB: usize = 200_000;
/// Rows at `GREEDY_VOCAB`: a batch (more blocks than one wave of the usual
/// kernel on a GPU: the lean one, `Workspace::lean`) and a handful (a row
/// spread over many blocks).
const GREEDY_ROWS: [usize; 2] = [256, 3];
/// 16-bit logits: smaller rows suffice, rounding makes exact ties common.
/// × scale on GPU (512 rows: the lean kernels).
const GREEDY_VOCAB_16: usize = 50_000;
const GREEDY_ROWS_16: usize = 64;

/// Ids where planted ties land: quad (4), tile (1024) and chunk edges, the ends.
fn tie_sites(vocab: usize) -> [usize; 7] {
    [0, 3, 4, 1023, 1024, 4096, vocab - 1]
}

/// Greedy rows of four kinds, by `r % 4`: random in `[-10, 10]`; the same with
/// one maximum planted at 2 to 4 ids (tie sites or random); zeros of both signs
/// (`-0.0 == 0.0`, so id 0 wins); all `-inf` but two equal maxima.
fn greedy_logits(rng: &mut Rng, rows: usize, vocab: usize) -> Vec<f32> {
    let mut all = Vec::with_capacity(rows * vocab);
    for r in 0..rows {
        let start = all.len();
        match r % 4 {
            2 => all.extend((0..vocab).map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })),
            3 => all.extend(std::iter::repeat_n(f32::NEG_INFINITY, vocab)),
            _ => all.extend((0..vocab).map(|_| rng.uniform(-10.0, 10.0))),
        }
        let planted = match r % 4 {
            1 => 2 + rng.below(3),
            3 => 2,
            _ => 0,
        };
        for _ in 0..planted {
            let id = if rng.below(2) == 0 { rng.pick(&tie_sites(vocab)) } else { rng.below(vocab) };
            all[start + id] = 11.0;
        }
    }
    all
}

/// Checks greedy rows against the first argmax with both token widths;
/// returns how many rows had a tied maximum (so callers can insist on some).
fn check_greedy(backend: &Backend, dtype: DType, rows: usize, vocab: usize, seed: u64) -> usize {
    let mut rng = Rng::new(seed);
    let logits = Values::from_f32(dtype, &greedy_logits(&mut rng, rows, vocab));
    let mut b = Batch::new(logits, rows, vocab, 0.0, seed);
    let want = argmax_rows(&b);
    for tokens_i64 in [false, true] {
        b.tokens_i64 = tokens_i64;
        let ctx = format!("greedy {dtype:?} rows {rows} V {vocab} seed {seed} i64 tokens {tokens_i64}");
        let got = run(backend, &mut b, &ctx);
        assert_same_tokens(&got.tokens, &want, &ctx);
        assert!(got.row_status.iter().all(|&s| s == 0), "{ctx}: flags {:?}", got.row_status);
    }
    (0..rows)
        .filter(|&r| {
            let row = b.row(r);
            let top = row[want[r] as usize];
            row.iter().filter(|&&x| x == top).count() > 1
        })
        .count()
}

test_device!(greedy_is_the_first_argmax, |backend, scale| {
    for rows in GREEDY_ROWS {
        let ties = check_greedy(&backend, DType::F32, rows, GREEDY_VOCAB, 0x6EED + rows as u64);
        assert!(ties >= rows / 2, "f32 rows {rows}: only {ties} rows have ties; the input generator broke");
    }
    let rows = GREEDY_ROWS_16 * scale;
    for dtype in [DType::BF16, DType::F16] {
        let ties = check_greedy(&backend, dtype, rows, GREEDY_VOCAB_16, 0x16);
        assert!(ties > rows / 2, "{dtype:?}: only {ties} rows have ties; the input generator broke");
    }
});

// --- Noise and streams (SPEC §2) ---------------------------------------------

/// Rows (each its own slot, seed and position) per noise check; × scale on GPU.
const NOISE_ROWS: usize = 128;

test_device!(noise_is_the_keyed_core_gumbel, |backend, scale| {
    // With all logits 0 and T = 1 a row's score is exactly its noise, so the
    // token is the first argmax of gumbel(random_u32(seed, pos, stream, id)),
    // computed here from the core functions, independently of any backend.
    let mut rng = Rng::new(0x9015E);
    let rows = NOISE_ROWS * scale;
    for vocab in [999, 4097] {
        for (drafting, stream) in [(false, Stream::Target), (true, Stream::Draft)] {
            let seed: Vec<u64> = (0..rows).map(|_| rng.next_u64()).collect();
            let pos: Vec<u64> = (0..rows).map(|_| rng.next_u64()).collect();
            let want: Vec<i64> = (0..rows)
                .map(|r| {
                    let noise: Vec<f32> =
                        (0..vocab as u32).map(|x| gumbel(random_u32(seed[r], pos[r], stream, x))).collect();
                    first_argmax(&noise) as i64
                })
                .collect();
            // Zero is exact in every dtype: each reads the same noise.
            for dtype in DType::ALL {
                let mut b = Batch::broadcast(&vec![0.0; vocab], dtype, rows, 1.0, 0, 0);
                b.slots = (0..rows as i32).collect();
                b.temperature = vec![1.0; rows];
                (b.seed, b.pos) = (seed.clone(), pos.clone());
                b.drafting = drafting;
                let ctx = format!("noise V {vocab} {stream:?} {dtype:?}");
                assert_same_tokens(&run(&backend, &mut b, &ctx).tokens, &want, &ctx);
            }
        }
    }
});

/// A flat target: two independent streams agree on a row with probability 1/V.
const FLAT_VOCAB: usize = 1000;
/// Rows per stream comparison; × scale on GPU.
const STREAM_ROWS: usize = 512;
/// Rows that must differ between the streams. Expected `1 - 1/FLAT_VOCAB`;
/// shared noise would make them all equal.
const MIN_DIFFERING_FRACTION: f64 = 0.9;

test_device!(draft_and_target_streams_differ_and_replay, |backend, scale| {
    let rows = STREAM_ROWS * scale;
    for t in [0.6, 1.0, 1.5] {
        let mut b = Batch::broadcast(&[0.0; FLAT_VOCAB], DType::F32, rows, t, 0xD8AF7, 1 << 33);
        let mut by_stream = Vec::new();
        for drafting in [false, true] {
            b.drafting = drafting;
            let ctx = format!("flat V {FLAT_VOCAB} T {t} drafting {drafting}");
            let first = run(&backend, &mut b, &ctx);
            assert_eq!(first, run(&backend, &mut b, &ctx), "{ctx}: a replay gave other tokens");
            by_stream.push(first.tokens);
        }
        let differing = by_stream[0].iter().zip(&by_stream[1]).filter(|(a, b)| a != b).count();
        assert!(
            differing as f64 >= MIN_DIFFERING_FRACTION * rows as f64,
            "T {t}: draft and target agree on {} of {rows} rows (same seed and positions)",
            rows - differing
        );
    }
});

// --- Masked and NaN logits (SPEC §3.4) ---------------------------------------

/// Draws per masked-row check; × scale on GPU.
const MASKED_DRAWS: usize = 4000;
/// Draws per single-survivor check; × scale on GPU.
const SURVIVOR_DRAWS: usize = 200;

/// Runs one row broadcast to `draws` rows at every temperature (greedy
/// included) and returns each temperature's tokens, with the context string.
fn draw_each_t(backend: &Backend, row: &[f32], dtype: DType, draws: usize) -> Vec<(String, Sampled)> {
    TEMPERATURES
        .iter()
        .map(|&t| {
            let mut b = Batch::broadcast(row, dtype, draws, t, 0x1A5C, 77);
            let ctx = format!("V {} {dtype:?} T {t}", row.len());
            let got = run(backend, &mut b, &ctx);
            (ctx, got)
        })
        .collect()
}

test_device!(masked_logits_are_never_sampled, |backend, scale| {
    // Mostly -inf; the finite survivors include hugely negative ones, which
    // must still beat every -inf.
    let vocab = 257;
    let survivors = [(3, -1e30), (64, -50.0), (130, 0.0), (256, 2.0)];
    let mut row = vec![f32::NEG_INFINITY; vocab];
    for (id, x) in survivors {
        row[id] = x;
    }
    for dtype in [DType::F32, DType::BF16] {
        for (ctx, got) in draw_each_t(&backend, &row, dtype, MASKED_DRAWS * scale) {
            for (r, &t) in got.tokens.iter().enumerate() {
                assert!(survivors.iter().any(|&(id, _)| id as i64 == t), "{ctx}: row {r} sampled masked id {t}");
            }
        }
    }
});

test_device!(a_single_finite_logit_is_always_sampled, |backend, scale| {
    for vocab in [257, 5000] {
        for id in [0, 1, 3, 4, vocab / 2, vocab - 1] {
            let mut row = vec![f32::NEG_INFINITY; vocab];
            row[id] = -30.0;
            for (ctx, got) in draw_each_t(&backend, &row, DType::F32, SURVIVOR_DRAWS * scale) {
                assert!(got.tokens.iter().all(|&t| t == id as i64), "{ctx}: survivor {id}, got {:?}", got.tokens);
            }
        }
    }
});

test_device!(all_masked_rows_give_token_zero, |backend, scale| {
    for vocab in [1, 999, 5000] {
        for dtype in DType::ALL {
            for (ctx, got) in draw_each_t(&backend, &vec![f32::NEG_INFINITY; vocab], dtype, 4 * scale) {
                assert!(got.tokens.iter().all(|&t| t == 0), "{ctx}: {:?}", got.tokens);
                assert!(got.row_status.iter().all(|&s| s == 0), "{ctx}: flags {:?}", got.row_status);
            }
        }
    }
});

test_device!(nan_rows_stay_in_range_and_are_flagged, |backend, scale| {
    let vocab = 999;
    // NaN counts as -inf (specdec::status::NAN_LOGITS), so a row mixing NaN
    // and finite logits never picks a NaN id.
    let mixed: Vec<f32> = (0..vocab).map(|i| if i % 3 == 0 { -(i as f32) / 100.0 } else { f32::NAN }).collect();
    for row in [vec![f32::NAN; vocab], mixed] {
        for dtype in DType::ALL {
            for (ctx, got) in draw_each_t(&backend, &row, dtype, 64 * scale) {
                for (r, &t) in got.tokens.iter().enumerate() {
                    assert!((0..vocab as i64).contains(&t), "{ctx}: row {r} token {t} out of range");
                    let finite_exists = row.iter().any(|x| !x.is_nan());
                    assert!(!finite_exists || !row[t as usize].is_nan(), "{ctx}: row {r} sampled NaN id {t}");
                }
                assert!(got.row_status.iter().all(|&s| s == NAN_LOGITS), "{ctx}: flags {:?}", got.row_status);
            }
        }
    }
});

/// Finite logits whose scaled value `logit · (1/T)` leaves the f32 range.
/// SPEC §3.4 forbids `-inf` ids while a finite logit exists. Scaling is in
/// f32, so `logit/T` can leave the f32 range: it saturates at `±f32::MAX`
/// (crates/core/src/sample.rs), keeping finite logits finite. Two logits both
/// beyond the range compare equal, so the tie goes to the smallest id.
/// (This failed before saturation: the first two cases returned the `-inf` id.)
#[test]
fn scaled_logits_that_overflow_stay_finite() {
    let bf16_min = half::bf16::MIN.to_f32(); // `torch.finfo(torch.bfloat16).min`, a common mask value
    let cases: [(&[f32], f32, i64); 4] = [
        (&[f32::NEG_INFINITY, -3.0e38], 0.5, 1),
        (&[f32::NEG_INFINITY, bf16_min], 0.6, 1),
        (&[3.0e38, 3.4e38], 0.5, 0),
        (&[-1.0, 3.0e38, 3.4e38], 2e-38, 1),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|&(row, t, want)| {
            let got = run(&Backend::cpu(), &mut Batch::broadcast(row, DType::F32, 16, t, 5, 0), "overflow").tokens;
            got.iter().any(|&x| x != want).then(|| format!("logits {row:?} T {t}: got {got:?}, want {want}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// --- Invariance under batch composition (SPEC §2.1) --------------------------

/// Rows of the reference batch (× scale on GPU) and padding rows mixed in.
const INVARIANCE_ROWS: usize = 40;
const PADDING_ROWS: usize = 12;
/// Cut points that split the batch into several calls.
const CHUNK_CUTS: [usize; 3] = [1, 8, 24];

test_device!(tokens_do_not_depend_on_batch_composition, |backend, scale| {
    let (rows, vocab) = (INVARIANCE_ROWS * scale, 999);
    for dtype in [DType::F32, DType::BF16] {
        let mut rng = Rng::new(0x1A7A + dtype as u64);
        // One pool of rows: the reference rows, then padding rows (slot -1).
        let mut pool = random_batch(&mut rng, dtype, rows + PADDING_ROWS, vocab);
        pool.slots[rows..].fill(-1);
        let base: Vec<usize> = (0..rows).collect();
        let ctx = format!("{dtype:?} V {vocab}");
        let want = run(&backend, &mut pool.select(&base), &ctx).tokens;

        let mut order = base.clone();
        rng.shuffle(&mut order);
        let got = run(&backend, &mut pool.select(&order), &ctx).tokens;
        let permuted: Vec<i64> = order.iter().map(|&r| want[r]).collect();
        assert_same_tokens(&got, &permuted, &format!("{ctx}: permuted rows"));

        let mut chunked = Vec::new();
        let cuts: Vec<usize> = [0].into_iter().chain(CHUNK_CUTS.map(|c| c * scale)).chain([rows]).collect();
        for w in cuts.windows(2) {
            chunked.extend(run(&backend, &mut pool.select(&base[w[0]..w[1]]), &ctx).tokens);
        }
        assert_same_tokens(&chunked, &want, &format!("{ctx}: split at {cuts:?}"));

        // Padding rows interleaved every third row: the others keep their
        // tokens, and padding rows are greedy.
        let pads = rows..rows + PADDING_ROWS;
        let mut padded: Vec<usize> =
            base.chunks(3).zip(pads.clone()).flat_map(|(c, p)| c.iter().copied().chain([p])).collect();
        padded.extend(base.iter().skip(3 * PADDING_ROWS));
        let got = run(&backend, &mut pool.select(&padded), &ctx).tokens;
        let expected: Vec<i64> = padded
            .iter()
            .map(|&r| if pads.contains(&r) { first_argmax(&pool.row(r)) as i64 } else { want[r] })
            .collect();
        assert_same_tokens(&got, &expected, &format!("{ctx}: with padding rows"));

        // Renumbering slots (moving their table entries along) changes nothing.
        let mut to: Vec<usize> = (0..pool.temperature.len()).collect();
        rng.shuffle(&mut to);
        let mut renumbered = pool.select(&base);
        for (s, &new) in to.iter().enumerate() {
            renumbered.temperature[new] = pool.temperature[s];
            renumbered.seed[new] = pool.seed[s];
        }
        for s in renumbered.slots.iter_mut().filter(|s| **s >= 0) {
            *s = to[*s as usize] as i32;
        }
        assert_same_tokens(&run(&backend, &mut renumbered, &ctx).tokens, &want, &format!("{ctx}: slots renumbered"));
    }
});

// --- Shapes -------------------------------------------------------------------

test_device!(an_empty_batch_is_a_no_op, |backend, scale| {
    for draft_logits in [None, Some(DraftLogitsSpec::dense(DType::BF16, 1, 1, 5, ColumnSpec::All(0)))] {
        let ctx = format!("0 rows, draft logits {}", draft_logits.is_some());
        let mut b = Batch::new(Values::F32(Vec::new()), 0, 5, 1.0, 3);
        b.draft_logits = draft_logits;
        let before = b.draft_logits.clone();
        let got = run(&backend, &mut b, &ctx);
        assert!(got.tokens.is_empty() && got.row_status.is_empty(), "{ctx}: {got:?}");
        assert_eq!(
            b.draft_logits.map(|c| c.data.f32s(0..5)),
            before.map(|c| c.data.f32s(0..5)),
            "{ctx}: the draft logits were written"
        );
    }
});
