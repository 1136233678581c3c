//! Filtered requests in batches (SPEC §7.1, §2.1): filtered, unfiltered,
//! greedy and padding requests mixed in one call give each what it gets
//! alone, in any order and any chunking; filter values that disable
//! themselves change nothing, bit for bit; greedy rows ignore filters; a
//! filtered drafter still stores its raw logits. Each test runs on the CPU
//! and, with feature `gpu`, on CUDA (batches `$scale` times larger).

use specdec::DType;
use specdec::filter::Filter;
use specdec_suite::drafting::{RandomSpec, random_verify, run_split, select_requests};
use specdec_suite::inputs::{Rng, first_argmax, random_batch, random_draft_logits};
use specdec_suite::{FilterTable, Verified, test_device};

/// A slot's filters: off a quarter of the time, else some mix of the three.
fn random_filter(rng: &mut Rng) -> Filter {
    match rng.below(8) {
        0 | 1 => Filter::OFF,
        2 => Filter { top_k: [1, 2, 5, 50][rng.below(4)], ..Filter::OFF },
        3 => Filter { top_p: [0.3, 0.9][rng.below(2)], ..Filter::OFF },
        4 => Filter { min_p: [0.1, 0.5][rng.below(2)], ..Filter::OFF },
        5 => Filter { top_k: 50, top_p: 0.9, ..Filter::OFF },
        6 => Filter { top_k: 20, top_p: 0.95, min_p: 0.05 },
        _ => Filter { top_k: 3, min_p: 0.3, ..Filter::OFF },
    }
}

fn random_table(rng: &mut Rng, slots: usize) -> FilterTable {
    FilterTable::per_slot(&(0..slots).map(|_| random_filter(rng)).collect::<Vec<_>>())
}

/// Outputs of requests `idx` of `whole`, in that order.
fn pick(whole: &Verified, idx: &[usize]) -> Verified {
    Verified {
        tokens: idx.iter().flat_map(|&r| whole.request(r).to_vec()).collect(),
        num_emitted: idx.iter().map(|&r| whole.num_emitted[r]).collect(),
        accepted: idx.iter().map(|&r| whole.accepted[r]).collect(),
        row_status: Vec::new(),
    }
}

fn without_status(mut v: Verified) -> Verified {
    v.row_status.clear();
    v
}

/// Requests of a mixed verify batch and rows of a mixed gumbel batch (× scale).
const MIXED_REQUESTS: usize = 24;
const MIXED_ROWS: usize = 40;

test_device!(mixed_verify_batches_equal_their_requests_alone_in_any_order, |backend, scale| {
    let mut rng = Rng::new(0xB47C);
    for (case, draft) in [Some(DType::BF16), Some(DType::F32), None].into_iter().enumerate() {
        let mut v = random_verify(&mut rng, RandomSpec::new(999, MIXED_REQUESTS * scale, 4, DType::F32, draft));
        let slots = v.temperature.len();
        v.filters = random_table(&mut rng, slots);
        if draft.is_some() {
            // Half the slots drafted with their target filters, the others unfiltered.
            let per_slot: Vec<Filter> =
                (0..slots).map(|s| if s % 2 == 0 { v.filters.slot(s) } else { Filter::OFF }).collect();
            v.draft_filters = FilterTable::per_slot(&per_slot);
        }
        let whole = v.run(&backend).expect("the mixed call");
        assert!(
            (0..v.requests()).any(|r| v.slots[r] >= 0 && v.filters.slot(v.slots[r] as usize) != Filter::OFF),
            "case {case}: some request is filtered"
        );
        for r in 0..v.requests() {
            let alone = without_status(select_requests(&v, &[r]).run(&backend).expect("one request"));
            assert_eq!(alone, pick(&whole, &[r]), "case {case}, request {r} (slot {})", v.slots[r]);
        }
        let mut perm: Vec<usize> = (0..v.requests()).collect();
        rng.shuffle(&mut perm);
        let permuted = without_status(select_requests(&v, &perm).run(&backend).expect("permuted"));
        assert_eq!(permuted, pick(&whole, &perm), "case {case}: permuted");
        assert_eq!(run_split(&v, &backend), whole, "case {case}: chunked");
    }
});

test_device!(mixed_gumbel_batches_equal_their_rows_alone_in_any_order, |backend, scale| {
    let mut rng = Rng::new(0x6B47);
    for dtype in [DType::F32, DType::BF16] {
        let mut b = random_batch(&mut rng, dtype, MIXED_ROWS * scale, 777);
        b.filters = random_table(&mut rng, b.temperature.len());
        let whole = b.run(&backend).expect("the mixed call");
        for r in 0..b.rows {
            let alone = b.select(&[r]).run(&backend).expect("one row");
            assert_eq!(alone.tokens[0], whole.tokens[r], "{dtype:?} row {r}");
            assert_eq!(alone.row_status[0], whole.row_status[r], "{dtype:?} row {r}");
        }
        let mut perm: Vec<usize> = (0..b.rows).collect();
        rng.shuffle(&mut perm);
        let permuted = b.select(&perm).run(&backend).expect("permuted");
        assert_eq!(permuted.tokens, perm.iter().map(|&r| whole.tokens[r]).collect::<Vec<_>>(), "{dtype:?}");
        assert_eq!(b.run_parallel(&backend).tokens, whole.tokens, "{dtype:?}: chunked");
    }
});

// `top_k` 0, `V` or more, `top_p` 1 and `min_p` 0 are no filter: the same
// tokens, statuses and draft logits as a call without filter arrays.
test_device!(filter_values_that_disable_themselves_change_nothing, |backend, scale| {
    let mut rng = Rng::new(0x0FF);
    let vocab = 600;
    for off in [Filter::OFF, Filter { top_k: vocab as u32, ..Filter::OFF }, Filter { top_k: 1 << 20, ..Filter::OFF }] {
        let mut b = random_batch(&mut rng, DType::F32, 20 * scale, vocab);
        b.drafting = true;
        b.draft_logits = Some(random_draft_logits(&mut rng, DType::BF16, &b));
        let mut filtered = b.clone();
        filtered.filters = FilterTable::uniform(off, b.temperature.len());
        assert_eq!(filtered.run(&backend).unwrap(), b.run(&backend).unwrap(), "{off:?}");
        let (d, e) = (&filtered.draft_logits.as_ref().unwrap().data, &b.draft_logits.as_ref().unwrap().data);
        assert!((0..d.len()).all(|i| d.bits(i) == e.bits(i)), "{off:?}: draft logits");

        let mut v = random_verify(&mut rng, RandomSpec::new(vocab, 16 * scale, 3, DType::F32, Some(DType::BF16)));
        let mut filtered = v.clone();
        filtered.filters = FilterTable::uniform(off, v.temperature.len());
        filtered.draft_filters = FilterTable::uniform(off, v.temperature.len());
        assert_eq!(filtered.run(&backend).unwrap(), v.run(&backend).unwrap(), "{off:?}: verify");
        v.draft = None;
        filtered.draft = None;
        assert_eq!(filtered.run(&backend).unwrap(), v.run(&backend).unwrap(), "{off:?}: one-hot verify");
    }
});

// At T = 0 the argmax is always kept: greedy rows and requests emit the
// argmax chain whatever their slot's filters say.
test_device!(greedy_rows_ignore_filters, |backend, scale| {
    let mut rng = Rng::new(0x6EED);
    let mut b = random_batch(&mut rng, DType::F32, 30 * scale, 500);
    b.temperature.fill(0.0);
    let plain = b.run(&backend).unwrap();
    b.filters = FilterTable::uniform(Filter { top_k: 1, top_p: 0.01, min_p: 0.9 }, b.temperature.len());
    assert_eq!(b.run(&backend).unwrap(), plain);
    for (r, &t) in plain.tokens.iter().enumerate() {
        assert_eq!(t as usize, first_argmax(&b.row(r)), "row {r}");
    }
    let mut v = random_verify(&mut rng, RandomSpec::new(500, 12 * scale, 3, DType::F32, Some(DType::F32)));
    v.temperature.fill(0.0);
    let plain = v.run(&backend).unwrap();
    v.filters = FilterTable::uniform(Filter { top_k: 2, top_p: 0.5, min_p: 0.5 }, v.temperature.len());
    v.draft_filters = v.filters.clone();
    assert_eq!(v.run(&backend).unwrap(), plain);
});

// A filtered drafter stores its raw logits (SPEC §3.3): the verifier
// reapplies the filters to the stored rows (SPEC §7.3).
test_device!(a_filtered_drafter_stores_its_raw_logits, |backend, scale| {
    let mut rng = Rng::new(0xD4AF);
    for dtype in [DType::F32, DType::BF16] {
        let mut b = random_batch(&mut rng, DType::F32, 20 * scale, 700);
        b.drafting = true;
        b.draft_logits = Some(random_draft_logits(&mut rng, dtype, &b));
        let mut filtered = b.clone();
        filtered.filters = FilterTable::uniform(Filter { top_k: 5, top_p: 0.9, min_p: 0.1 }, b.temperature.len());
        filtered.run(&backend).unwrap();
        b.run(&backend).unwrap();
        let (d, e) = (&filtered.draft_logits.as_ref().unwrap().data, &b.draft_logits.as_ref().unwrap().data);
        assert!((0..d.len()).all(|i| d.bits(i) == e.bits(i)), "{dtype:?}: the stored rows differ");
    }
});
