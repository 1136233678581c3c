//! The CPU backend across threads: calls large enough to go parallel
//! ([`PARALLEL_MIN_LOGITS`]) give bit-identical outputs (tokens, row status,
//! draft logits, counts) in rayon pools of 1, 2 and 7 threads, equal to running the
//! rows (requests) one call each, in order. Inputs come from fixed seeds.

use rayon::{ThreadPool, ThreadPoolBuilder};
use specdec::cpu::PARALLEL_MIN_LOGITS;
use specdec::{Backend, DType};
use specdec_suite::batch::{ColumnSpec, Sampled, Values};
use specdec_suite::drafting::{RandomSpec, random_verify, run_per_request};
use specdec_suite::inputs::{Rng, assert_same_tokens, first_bit_difference, random_batch, random_draft_logits};
use specdec_suite::{Batch, Verified};

/// Pool sizes: in order, two threads, and more threads than rows need.
const THREADS: [usize; 3] = [1, 2, 7];
const DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];
/// An odd vocabulary: the last quad of every row is partial.
const VOCAB: usize = 6151;

fn pools() -> Vec<(usize, ThreadPool)> {
    THREADS.iter().map(|&n| (n, ThreadPoolBuilder::new().num_threads(n).build().expect("thread pool"))).collect()
}

/// What a `gumbel_sample` call leaves: its outputs and the draft logits after it.
#[derive(Debug)]
struct GumbelRun {
    sampled: Sampled,
    draft_logits: Option<Values>,
}

fn run_gumbel(mut b: Batch, ctx: &str) -> GumbelRun {
    let sampled = b.run(&Backend::cpu()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    GumbelRun { sampled, draft_logits: b.draft_logits.map(|c| c.data) }
}

/// `b` one row a call, in order, each call writing the draft logits the previous one left.
fn run_gumbel_per_row(b: &Batch, ctx: &str) -> GumbelRun {
    let mut all = GumbelRun { sampled: Sampled { tokens: Vec::new(), row_status: Vec::new() }, draft_logits: None };
    let mut draft_logits = b.draft_logits.as_ref().map(|c| c.data.clone());
    for r in 0..b.rows {
        let mut one = b.select(&[r]);
        if let (Some(c), Some(data)) = (one.draft_logits.as_mut(), draft_logits.take()) {
            c.data = data;
        }
        let run = run_gumbel(one, &format!("{ctx}, row {r} alone"));
        all.sampled.tokens.extend(run.sampled.tokens);
        all.sampled.row_status.extend(run.sampled.row_status);
        draft_logits = run.draft_logits;
    }
    all.draft_logits = draft_logits;
    all
}

fn assert_same_gumbel(got: &GumbelRun, want: &GumbelRun, ctx: &str) {
    assert_same_tokens(&got.sampled.tokens, &want.sampled.tokens, ctx);
    assert_eq!(got.sampled.row_status, want.sampled.row_status, "{ctx}: row status");
    match (&got.draft_logits, &want.draft_logits) {
        (Some(g), Some(w)) => {
            if let Some(i) = first_bit_difference(g, w) {
                panic!("{ctx}: draft logits differ first at element {i}: {} vs {}", g.get(i), w.get(i));
            }
        }
        (None, None) => {}
        _ => panic!("{ctx}: one run has draft logits, the other not"),
    }
}

/// `b` in every pool and one row a call, all alike.
fn check_gumbel(b: &Batch, ctx: &str) {
    assert!(b.rows * b.vocab >= PARALLEL_MIN_LOGITS, "{ctx}: the batch is too small to go parallel");
    let want = run_gumbel_per_row(b, ctx);
    for (n, pool) in &pools() {
        let got = pool.install(|| run_gumbel(b.clone(), ctx));
        assert_same_gumbel(&got, &want, &format!("{ctx}, {n} threads vs one row a call"));
    }
}

/// Enough rows of [`VOCAB`] to go parallel, with a few to spare.
fn parallel_rows() -> usize {
    PARALLEL_MIN_LOGITS.div_ceil(VOCAB) + 5
}

/// Random rows of every dtype (greedy, sampling and padding rows, a NaN row),
/// without draft logits and with them in every dtype in a random layout, drafting
/// or not, `i32` or `i64` tokens.
#[test]
fn gumbel_sample_is_the_same_on_any_thread_count() {
    let mut rng = Rng::new(0x7426);
    for dtype in DTYPES {
        for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
            let mut b = random_batch(&mut rng, dtype, parallel_rows(), VOCAB);
            b.drafting = rng.below(2) == 0;
            b.tokens_i64 = rng.below(2) == 0;
            b.draft_logits = draft.map(|c| random_draft_logits(&mut rng, c, &b));
            check_gumbel(&b, &format!("{dtype:?} logits, draft logits {draft:?}, drafting {}", b.drafting));
        }
    }
}

/// Rows that write the same draft row (a race on the GPU) still give the
/// outputs of one row a call in order: the last of them lands.
#[test]
fn gumbel_sample_rows_sharing_a_draft_row_keep_their_order() {
    let mut rng = Rng::new(0x5a3e);
    for (dtype, draft) in [(DType::F32, DType::BF16), (DType::BF16, DType::BF16), (DType::F16, DType::F32)] {
        let mut b = random_batch(&mut rng, dtype, parallel_rows(), VOCAB);
        b.drafting = true;
        // Rows 0, 1 and the last on one slot (sampling), the rest as random_batch made them.
        let last = b.rows - 1;
        for r in [0, 1, last] {
            b.slots[r] = 2;
        }
        b.temperature[2] = 1.0;
        let mut spec = random_draft_logits(&mut rng, draft, &b);
        spec.column = ColumnSpec::All(0);
        b.draft_logits = Some(spec);
        check_gumbel(&b, &format!("{dtype:?} logits, {draft:?} draft logits, rows 0, 1, {last} on one draft row"));
    }
}

/// Ragged random verification batches of every target dtype, one-hot and
/// with draft logits of every dtype, `i32` or `i64` tokens: the same tokens,
/// emitted and accepted counts and row status in every pool as one request a call.
#[test]
fn rejection_sample_is_the_same_on_any_thread_count() {
    let mut rng = Rng::new(0x26);
    for target in DTYPES {
        for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
            let ctx = format!("{target:?} target, draft logits {draft:?}");
            let (k, requests) = (4, PARALLEL_MIN_LOGITS.div_ceil(VOCAB) / 2);
            let mut v = random_verify(&mut rng, RandomSpec::new(VOCAB, requests, k, target, draft));
            v.tokens_i64 = rng.below(2) == 0;
            assert!(v.rows * v.vocab >= PARALLEL_MIN_LOGITS, "{ctx}: the batch is too small to go parallel");
            let want = run_per_request(&v, &Backend::cpu());
            for (n, pool) in &pools() {
                let got: Verified = pool.install(|| v.run(&Backend::cpu())).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let ctx = format!("{ctx}, {n} threads vs one request a call");
                assert_same_tokens(&got.tokens, &want.tokens, &ctx);
                assert_eq!(got.num_emitted, want.num_emitted, "{ctx}: num_emitted");
                assert_eq!(got.accepted, want.accepted, "{ctx}: accepted");
                assert_eq!(got.row_status, want.row_status, "{ctx}: row status");
            }
        }
    }
}
