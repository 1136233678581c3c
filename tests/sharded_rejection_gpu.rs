//! Vocab-parallel `rejection_sample` on the GPU (`docs/VOCAB_PARALLEL.md` §6
//! step 5), with the `gpu` feature: `P` ranks on device 0, a stream and a
//! thread each, meeting through `shard::InProcessCuda`, each holding a shard
//! of every target row's ids and of every draft row's (cut at multiples of
//! 16 ids, the kernels' runs), return exactly the unsharded GPU call's
//! tokens, counts and row statuses under the token rule, synthetic
//! acceptance and block verification, and its log-probabilities (a top-n
//! too) bit for bit; a call
//! the sharded CUDA call refuses fails on its rank and flags every request on
//! the others; and a sharded call's emitted tokens follow the target, by
//! chi-square at every position.
#![cfg(feature = "gpu")]

use specdec::filter::Filter;
use specdec::shard::{MAX_TOP_K, Shard};
use specdec::status::{INVALID_FILTER, INVALID_SHARD};
use specdec::{Cuda, DType, Distribution, Error, MAX_TOP_LOGPROBS, Verification};
use specdec_suite::drafting::{
    Drafted, FixedPositions, RandomSpec, check_positions, emitted_at, perturbed, probs, random_verify, zipf_logits,
};
use specdec_suite::inputs::{Rng, histogram};
use specdec_suite::sharding::{
    ASKS, Coverage, RUN, VERIFY_DTYPES, add_empty_rows, add_specials, ids, in_device_ranks, random_filter, rank_verify,
    run_sharded_logprobs_device, run_sharded_verify_device, run_shards, tied_verify,
};
use specdec_suite::verify::{Asked, LogprobBits};
use specdec_suite::{FilterTable, Verified, Verify, chi_square, gpu_sized};

/// The unsharded GPU call's outputs.
fn unsharded(cuda: &Cuda, v: &Verify, ctx: &str) -> Verified {
    let mut ws = cuda.workspace(v.requests() * (v.max_drafts + 1)).expect("a workspace");
    v.run_device(cuda, &mut ws).unwrap_or_else(|e| panic!("{ctx}: unsharded: {e}"))
}

/// Every rank's outputs equal the unsharded GPU call's; returns those.
fn check_equal(cuda: &Cuda, v: &Verify, shards: &[Shard], ctx: &str) -> Verified {
    let want = unsharded(cuda, v, ctx);
    for (r, got) in run_sharded_verify_device(cuda, v, shards, |_, mine| mine).into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}"));
        assert_eq!(got, want, "{ctx} rank {r}");
    }
    want
}

/// Random ragged batches (greedy, sampling and padding requests, placeholders,
/// `-inf`, `+inf` and NaN logits, rows with nothing above `-inf`, drafts that
/// are accepted and rejected) over 1, 2, 3 and 8 uneven shards (as many as
/// the row has runs), for every target dtype, one-hot and draft-logits
/// verification of every dtype, `i32` and `i64` tokens, `V` up to 151,936.
#[test]
fn sharded_verification_is_the_unsharded_one() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_5A);
    let mut coverage = Coverage::default();
    for (c, (target, draft)) in VERIFY_DTYPES.into_iter().enumerate() {
        for (vocab, requests) in [(37usize, 24), (1000, 16), (4097, 8), (151_936, 3)] {
            for ranks in [1, 2, 3, 8].into_iter().filter(|&p| vocab.div_ceil(RUN) >= p) {
                let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, 4, target, draft));
                v.tokens_i64 = (c + ranks) % 2 == 1;
                add_specials(&mut v, &mut rng);
                add_empty_rows(&mut v, &mut rng);
                let shards = run_shards(vocab, ranks, &mut rng);
                let ctx = format!("{target:?} target, {draft:?} draft, V {vocab}, P {ranks}, i64 {}", v.tokens_i64);
                coverage.add(&v, &check_equal(&cuda, &v, &shards, &ctx));
            }
        }
    }
    assert!(coverage.stopped >= 50 && coverage.bonus >= 50, "stopped {}, bonus {}", coverage.stopped, coverage.bonus);
}

/// Batches large enough that pass 1 runs one chunk a row and pass 2 its lean
/// kernel (`B = 256, K = 7`, ragged or not, at `V = 32,000`), and rows of
/// many chunks at `V = 151,936`, with requests of every kind, at `P = 2`.
#[test]
fn sharded_large_batches_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_5B);
    for (vocab, requests, ragged, draft) in
        [(32_000, 256, false, Some(DType::BF16)), (32_000, 256, true, None), (151_936, 64, true, Some(DType::BF16))]
    {
        let mut spec = RandomSpec::new(vocab, requests, 7, DType::BF16, draft);
        if !ragged {
            spec.drafts_of = Some(|_| 7);
        }
        let mut v = random_verify(&mut rng, spec);
        add_specials(&mut v, &mut rng);
        let shards = run_shards(vocab, 2, &mut rng);
        check_equal(&cuda, &v, &shards, &format!("V {vocab}, {requests} requests, ragged {ragged}, {draft:?} draft"));
    }
}

/// Block verification (REFERENCE §4.11): the ranks' residual masses of
/// each row that may stop decide where a block ends, and pass 2 draws at
/// every row where it may; random ragged batches as
/// `sharded_verification_is_the_unsharded_one` builds them (one-hot and
/// draft logits of every dtype, `-inf`, `+inf` and NaN, rows with nothing
/// above `-inf`) over 1, 2, 3 and 8 uneven shards, and large batches at
/// `P = 2`, give the unsharded GPU call's outputs, with blocks that end at
/// their first row, at a later row short of their end, and at their end.
#[test]
fn sharded_block_verification_is_the_unsharded_one() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_63);
    let (mut first, mut later, mut end) = (0usize, 0usize, 0usize);
    let mut count = |v: &Verify, out: &Verified| {
        for r in (0..v.requests()).filter(|&r| !v.is_greedy(r)) {
            let (n, tau) = (v.offsets[r + 1] - v.offsets[r] - 1, out.accepted[r]);
            match tau {
                0 => first += 1,
                t if t == n => end += 1,
                t if t > 0 => later += 1,
                _ => {}
            }
        }
    };
    for (c, (target, draft)) in VERIFY_DTYPES.into_iter().enumerate() {
        for (vocab, requests) in [(37usize, 24), (1000, 16), (4097, 8), (151_936, 3)] {
            for ranks in [1, 2, 3, 8].into_iter().filter(|&p| vocab.div_ceil(RUN) >= p) {
                let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, 4, target, draft));
                v.verification = Verification::Block;
                v.tokens_i64 = (c + ranks) % 2 == 1;
                add_specials(&mut v, &mut rng);
                add_empty_rows(&mut v, &mut rng);
                let shards = run_shards(vocab, ranks, &mut rng);
                let ctx = format!("block, {target:?} target, {draft:?} draft, V {vocab}, P {ranks}");
                count(&v, &check_equal(&cuda, &v, &shards, &ctx));
            }
        }
    }
    for (vocab, requests, draft) in
        [(32_000, 256, Some(DType::BF16)), (32_000, 256, None), (151_936, 64, Some(DType::F32))]
    {
        let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, 7, DType::BF16, draft));
        v.verification = Verification::Block;
        let shards = run_shards(vocab, 2, &mut rng);
        let ctx = format!("block, V {vocab}, {requests} requests, {draft:?} draft");
        count(&v, &check_equal(&cuda, &v, &shards, &ctx));
    }
    assert!(
        first >= 50 && later >= 50 && end >= 50,
        "blocks ending at row 0: {first}, later: {later}, at the end: {end}"
    );
}

/// Synthetic acceptance decides from the acceptance words alone; the token
/// after it still needs the rows (the residual at a rejection).
#[test]
fn sharded_synthetic_acceptance_is_the_unsharded_one() {
    static RATES: [f32; 4] = [0.9, 0.6, 0.3, 1.0];
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_5C);
    for draft in [None, Some(DType::BF16)] {
        for ranks in [2, 3] {
            let mut v = random_verify(&mut rng, RandomSpec::new(999, 20, 4, DType::F32, draft));
            v.verification = Verification::Synthetic(&RATES);
            let shards = run_shards(999, ranks, &mut rng);
            check_equal(&cuda, &v, &shards, &format!("synthetic, {draft:?} draft, P {ranks}"));
        }
    }
}

/// Filters with a top-k of at most `shard::MAX_TOP_K` (top-p and min-p on
/// top of it too), on the target and on the draft logits, each slot its
/// own: random ragged batches with ties at the `k`-th value, `-inf`, `+inf`
/// and NaN, rows with nothing above `-inf`, over 1, 2, 3 and 8 uneven shards,
/// give the unsharded GPU call's outputs (the ranks' lists decide each
/// row's `τ` and `LSE(S)`: `kernels::rejection::sharded`).
#[test]
fn sharded_filtered_verification_is_the_unsharded_one() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_5F);
    let mut coverage = Coverage::default();
    let kinds =
        [(DType::F32, None), (DType::F32, Some(DType::F32)), (DType::BF16, Some(DType::BF16)), (DType::F16, None)];
    for (target, draft) in kinds {
        for (vocab, requests) in [(37usize, 24), (1000, 16), (4097, 8), (20_000, 6), (151_936, 3)] {
            for ranks in [1, 2, 3, 8].into_iter().filter(|&p| vocab.div_ceil(RUN) >= p) {
                let spec = RandomSpec::new(vocab, requests, 4, target, draft);
                // Block verification at an even number of ranks.
                let verification = if ranks % 2 == 0 { Verification::Block } else { Verification::Token };
                let mut v = tied_verify(&mut rng, spec, verification);
                add_empty_rows(&mut v, &mut rng);
                let mut filter = |_| random_filter(&mut rng, vocab, MAX_TOP_K);
                let filters: Vec<Filter> = (0..v.temperature.len()).map(&mut filter).collect();
                v.filters = FilterTable::per_slot(&filters);
                if draft.is_some() {
                    let drafted: Vec<Filter> = (0..v.temperature.len()).map(&mut filter).collect();
                    v.draft_filters = FilterTable::per_slot(&drafted);
                }
                let shards = run_shards(vocab, ranks, &mut rng);
                let ctx =
                    format!("filtered, {verification:?}, {target:?} target, {draft:?} draft, V {vocab}, P {ranks}");
                coverage.add(&v, &check_equal(&cuda, &v, &shards, &ctx));
            }
        }
    }
    assert!(coverage.stopped >= 30 && coverage.bonus >= 30, "stopped {}, bonus {}", coverage.stopped, coverage.bonus);
}

/// Every rank's outputs and `asked` log-probabilities equal the unsharded
/// GPU call's, bit for bit; returns those.
fn check_logprobs_equal(cuda: &Cuda, v: &Verify, shards: &[Shard], asked: Asked, ctx: &str) -> (Verified, LogprobBits) {
    let mut ws = cuda.workspace(v.requests() * (v.max_drafts + 1)).expect("a workspace");
    let want = v
        .run_device_logprobs_with(cuda, Some(asked), |call, out| cuda.rejection_sample(&mut ws, call, out))
        .unwrap_or_else(|e| panic!("{ctx}: unsharded: {e}"));
    for (r, got) in run_sharded_logprobs_device(cuda, v, shards, Some(asked)).into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("{ctx} rank {r}: {e}"));
        assert_eq!(got, want, "{ctx} rank {r}");
    }
    want
}

/// A sharded call's log-probabilities (processed, raw, top-n and ranks:
/// [`ASKS`]) are the unsharded GPU call's, bit for bit, beside its tokens, counts and
/// statuses: random ragged batches as `sharded_verification_is_the_unsharded_one`
/// and `sharded_filtered_verification_is_the_unsharded_one` build them
/// (one-hot and draft logits, rows with nothing above `-inf`, NaN and
/// `±inf`, per-slot filters with ties at the `k`-th value), at the positions
/// of accepted drafts, of a rejection's token and of a bonus token, over 1,
/// 2, 3 and 8 uneven shards on runs of [`RUN`] ids.
#[test]
fn sharded_logprobs_are_the_unsharded_ones() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_61);
    let mut coverage = Coverage::default();
    let (mut accepted, mut finite, mut listed, mut ranked) = (0usize, 0usize, 0usize, 0usize);
    let kinds = [(DType::F32, None), (DType::BF16, Some(DType::BF16)), (DType::F16, Some(DType::F32))];
    for (target, draft) in kinds {
        for (vocab, requests) in [(37usize, 16), (1000, 10), (151_936, 3)] {
            for filtered in [false, true] {
                for ranks in [1, 2, 3, 8].into_iter().filter(|&p| vocab.div_ceil(RUN) >= p) {
                    // Block verification at an even number of ranks.
                    let mut v = logprobs_batch(&mut rng, RandomSpec::new(vocab, requests, 4, target, draft), filtered);
                    if ranks % 2 == 0 {
                        v.verification = Verification::Block;
                    }
                    let shards = run_shards(vocab, ranks, &mut rng);
                    for (i, asked) in ASKS.into_iter().enumerate() {
                        let ctx = format!(
                            "{asked:?}, {:?}, {target:?} target, {draft:?} draft, filtered {filtered}, V {vocab}, P {ranks}",
                            v.verification
                        );
                        let (out, bits) = check_logprobs_equal(&cuda, &v, &shards, asked, &ctx);
                        finite +=
                            bits.processed.iter().chain(&bits.raw).filter(|&&b| f32::from_bits(b).is_finite()).count();
                        listed += bits.top.iter().filter(|&&b| f32::from_bits(b).is_finite()).count();
                        ranked += bits.ranks.iter().filter(|&&rank| rank > 1).count();
                        if i == 0 {
                            coverage.add(&v, &out);
                            accepted += out.accepted.iter().map(|&a| a.max(0) as usize).sum::<usize>();
                        }
                    }
                }
            }
        }
    }
    // Not a comparison of NaNs, and every kind of position: drafts accepted,
    // rejections and bonus tokens (on the CPU backend: 2,624 finite values,
    // 245 accepted drafts, 400 requests stopped and 200 at their bonus row).
    assert!(
        finite >= 2000 && listed >= 1000 && ranked >= 100,
        "finite log-probabilities {finite}, in top-ns {listed}, ranks above 1 {ranked}"
    );
    assert!(
        accepted >= 100 && coverage.stopped >= 100 && coverage.bonus >= 100,
        "accepted drafts {accepted}, stopped {}, bonus {}",
        coverage.stopped,
        coverage.bonus
    );
}

/// A random ragged batch verified draft by draft with `-inf`, `+inf` and
/// NaN, rows with nothing above `-inf`: random logits, or (`filtered`) tied
/// ones under a random filter with a top-k of at most `shard::MAX_TOP_K`
/// per slot, on the target and on the draft logits.
fn logprobs_batch(rng: &mut Rng, spec: RandomSpec, filtered: bool) -> Verify {
    let vocab = spec.vocab;
    let mut v = if filtered {
        tied_verify(rng, spec, Verification::Token)
    } else {
        let mut v = random_verify(rng, spec);
        add_specials(&mut v, rng);
        v
    };
    add_empty_rows(&mut v, rng);
    if filtered {
        let mut filter = |_| random_filter(rng, vocab, MAX_TOP_K);
        let filters: Vec<Filter> = (0..v.temperature.len()).map(&mut filter).collect();
        v.filters = FilterTable::per_slot(&filters);
        if v.draft.is_some() {
            let drafted: Vec<Filter> = (0..v.temperature.len()).map(&mut filter).collect();
            v.draft_filters = FilterTable::per_slot(&drafted);
        }
    }
    v
}

/// Ranks that ask for different log-probabilities (a top-n of another size
/// and distribution: as many rounds, messages as long) flag every request
/// on every rank and write NaN, `-1` ids and ranks: what they ask is in
/// the header's word.
#[test]
fn ranks_that_ask_differently_flag_every_request() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_62);
    let v = random_verify(&mut rng, RandomSpec::new(64, 6, 3, DType::F32, Some(DType::F32)));
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    let asks = [
        Asked { processed: true, raw: false, top: Some((5, Distribution::Processed)) },
        Asked { processed: true, raw: false, top: Some((MAX_TOP_LOGPROBS, Distribution::Raw)) },
    ];
    let rows = v.requests() * (v.max_drafts + 1);
    let got = in_device_ranks(&cuda, 2, |r, rank, exchange| {
        let mut ws = rank.sharded_workspace(rows, 2).expect("a workspace");
        rank_verify(&v, ids(&halves, r)).run_device_logprobs_with(rank, Some(asks[r]), |call, out| {
            rank.sharded_rejection_sample(&mut ws, halves[r], exchange, call, out)
        })
    });
    for (r, got) in got.into_iter().enumerate() {
        let (out, bits) = got.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!((0..v.requests()).all(|q| flagged(&v, &out, q)), "rank {r}: {out:?}");
        let nan = bits.processed.iter().chain(&bits.top).all(|&b| f32::from_bits(b).is_nan());
        let none = bits.ids.iter().chain(&bits.ranks).all(|&i| i == -1);
        assert!(nan && none && bits.ranks.len() == rows, "rank {r}: {bits:?}");
    }
}

/// Ranks whose log-probability asks take different numbers of exchanges
/// (none, the sums' round alone, the sums' and a top-n's) fail with
/// `Error::Exchange` on every rank, rather than some waiting forever for a
/// round the others never run: their round-2 messages differ in length
/// (`shard::last_round_bytes`).
#[test]
fn ranks_whose_asks_take_different_rounds_fail_alike() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_63);
    let processed = Asked { processed: true, raw: false, top: None };
    let top = Asked { processed: false, raw: false, top: Some((5, Distribution::Processed)) };
    for verification in [Verification::Token, Verification::Block] {
        let mut v = random_verify(&mut rng, RandomSpec::new(64, 6, 3, DType::F32, Some(DType::F32)));
        v.verification = verification;
        let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
        let rows = v.requests() * (v.max_drafts + 1);
        for asks in [[None, Some(processed)], [Some(processed), Some(top)], [Some(top), None]] {
            let got = in_device_ranks(&cuda, 2, |r, rank, exchange| {
                let mut ws = rank.sharded_workspace(rows, 2).expect("a workspace");
                rank_verify(&v, ids(&halves, r)).run_device_logprobs_with(rank, asks[r], |call, out| {
                    rank.sharded_rejection_sample(&mut ws, halves[r], exchange, call, out)
                })
            });
            for (r, got) in got.iter().enumerate() {
                assert!(matches!(got, Err(Error::Exchange(_))), "{verification:?}, {asks:?}: rank {r}: {got:?}");
            }
        }
    }
}

/// Request `r`'s outputs: its tokens, emitted and accepted counts, and its rows' statuses.
fn request(v: &Verify, got: &Verified, r: usize) -> (Vec<i64>, i32, i32, Vec<u32>) {
    let rows = v.offsets[r] as usize..v.offsets[r + 1] as usize;
    (got.request(r).to_vec(), got.num_emitted[r], got.accepted[r], got.row_status[rows].to_vec())
}

/// Whether request `r` is flagged: tokens `-1`, nothing emitted or accepted, its rows `INVALID_SHARD`.
fn flagged(v: &Verify, got: &Verified, r: usize) -> bool {
    let (tokens, emitted, accepted, status) = request(v, got, r);
    tokens.iter().all(|&t| t == -1) && (emitted, accepted) == (0, 0) && status.iter().all(|s| s & INVALID_SHARD != 0)
}

/// What the sharded CUDA call refuses (a shard off the runs) is a typed
/// error on the rank that sees it; a rank whose own checks pass takes part
/// in the exchange all the same and flags every request, so that none
/// waits. Ranks whose messages differ in length (filters or block
/// verification on one rank alone) fail the exchange on every rank. Ranks
/// that disagree on a seed or a slot's filter flag the requests that read
/// it on every rank.
#[test]
fn sharded_calls_that_cannot_run_fail_on_every_rank() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_5D);
    let v = random_verify(&mut rng, RandomSpec::new(64, 6, 3, DType::F32, Some(DType::F32)));
    let halves = [Shard { offset: 0, vocab: 64 }, Shard { offset: 32, vocab: 64 }];
    let flagged_all =
        |got: &specdec::Result<Verified>| got.as_ref().is_ok_and(|got| (0..v.requests()).all(|r| flagged(&v, got, r)));

    // Rank 1 starts at 36, a multiple of 4 but not of 16 (rank 0 holds 0..32):
    // its error, rank 0's flags.
    let off_run = [Shard { offset: 0, vocab: 64 }, Shard { offset: 36, vocab: 64 }];
    let got =
        run_sharded_verify_device(&cuda, &v, &off_run, |r, mine| if r == 0 { rank_verify(&v, 0..32) } else { mine });
    assert!(matches!(&got[1], Err(Error::InvalidShard { .. })), "{:?}", got[1]);
    assert!(flagged_all(&got[0]), "{:?}", got[0]);
    // Rank 0's ids end at 20, neither a multiple of 16 nor the row's end: its error, rank 1's flags.
    let got =
        run_sharded_verify_device(&cuda, &v, &halves, |r, mine| if r == 0 { rank_verify(&v, 0..20) } else { mine });
    assert!(matches!(&got[0], Err(Error::InvalidShard { .. })), "{:?}", got[0]);
    assert!(flagged_all(&got[1]), "{:?}", got[1]);

    // Filters on rank 0's target alone: its round-1 message carries lists,
    // so the ranks' messages differ in length: every rank's error.
    let got = run_sharded_verify_device(&cuda, &v, &halves, |r, mut mine| {
        if r == 0 {
            mine.filters = FilterTable::uniform(Filter { top_k: 5, ..Filter::OFF }, v.temperature.len());
        }
        mine
    });
    assert!(got.iter().all(|g| matches!(g, Err(Error::Exchange(_)))), "{got:?}");
    // Block verification on rank 0 alone: its round-2 message is longer: every rank's error.
    let got = run_sharded_verify_device(&cuda, &v, &halves, |r, mut mine| {
        if r == 0 {
            mine.verification = Verification::Block;
        }
        mine
    });
    assert!(got.iter().all(|g| matches!(g, Err(Error::Exchange(_)))), "{got:?}");

    // Rank 1 disagrees on a sampling request's seed, or on its slot's top-k
    // (which the ranks read in device memory): that slot's requests flagged
    // on every rank, the others flagged too or the unsharded call's.
    let r = (0..v.requests()).find(|&r| !v.is_greedy(r)).expect("a sampling request");
    let slot = v.slots[r];
    let mut top_k = v.clone();
    top_k.filters = FilterTable::uniform(Filter { top_k: 5, top_p: 0.9, ..Filter::OFF }, v.temperature.len());
    for (what, v) in [("seeds", &v), ("top-k", &top_k)] {
        let want = unsharded(&cuda, v, what);
        let got = run_sharded_verify_device(&cuda, v, &halves, |rank, mut mine| {
            match what {
                "seeds" => mine.seed[slot as usize] += rank as u64,
                _ => mine.filters.top_k.as_mut().expect("a top-k array")[slot as usize] += rank as i32,
            }
            mine
        });
        for (rank, got) in got.into_iter().enumerate() {
            let got = got.unwrap_or_else(|e| panic!("{what}: rank {rank}: {e}"));
            for q in 0..v.requests() {
                let (mine, theirs) = (request(v, &got, q), request(v, &want, q));
                let ok = flagged(v, &got, q) || (v.slots[q] != slot && mine == theirs);
                assert!(ok, "rank {rank} request {q} on slot {} ({what} differ on {slot}): {mine:?}", v.slots[q]);
            }
            assert!(flagged(v, &got, r), "{what}: rank {rank} request {r} on slot {slot}");
        }
    }
}

/// A filter the ranks cannot send in their lists (top-p or min-p without a
/// top-k, or a top-k over `shard::MAX_TOP_K`), on the target or on the
/// draft logits, lives in device memory: the requests of its slots are
/// flagged `INVALID_FILTER` on every rank (tokens `-1`, nothing emitted),
/// greedy ones aside (they ignore filters); every other request gets the
/// unsharded call's outputs.
#[test]
fn sharded_filters_without_lists_are_flagged() {
    let cuda = specdec_suite::cuda_device();
    let mut rng = Rng::new(0x6A_60);
    let vocab = 1000;
    for draft_side in [false, true] {
        let mut v = random_verify(&mut rng, RandomSpec::new(vocab, 24, 3, DType::F32, Some(DType::BF16)));
        let unsendable = [
            Filter { top_p: 0.9, ..Filter::OFF },
            Filter { min_p: 0.1, ..Filter::OFF },
            Filter { top_k: MAX_TOP_K + 1, ..Filter::OFF },
        ];
        let filters: Vec<Filter> = (0..v.temperature.len())
            .map(|s| if s % 3 == 0 { unsendable[s / 3 % 3] } else { Filter { top_k: 20, ..Filter::OFF } })
            .collect();
        let sendable = FilterTable::uniform(Filter { top_k: 20, ..Filter::OFF }, v.temperature.len());
        if draft_side {
            (v.filters, v.draft_filters) = (sendable.clone(), FilterTable::per_slot(&filters));
        } else {
            (v.filters, v.draft_filters) = (FilterTable::per_slot(&filters), sendable.clone());
        }
        // The unsharded call on the same rows with every slot sendable.
        let mut plain = v.clone();
        (plain.filters, plain.draft_filters) = (sendable.clone(), sendable);
        let want = unsharded(&cuda, &plain, "sendable");
        let shards = run_shards(vocab, 2, &mut rng);
        for (rank, got) in run_sharded_verify_device(&cuda, &v, &shards, |_, mine| mine).into_iter().enumerate() {
            let got = got.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            for r in 0..v.requests() {
                let ctx = format!("draft side {draft_side}, rank {rank}, request {r} on slot {}", v.slots[r]);
                let unsent = v.slots[r] >= 0 && v.slots[r] % 3 == 0 && !v.is_greedy(r);
                if unsent {
                    let rows = v.offsets[r] as usize..v.offsets[r + 1] as usize;
                    assert_eq!(got.num_emitted[r], 0, "{ctx}");
                    assert!(
                        rows.clone().all(|j| got.row_status[j] & INVALID_FILTER != 0),
                        "{ctx}: {:?}",
                        &got.row_status[rows]
                    );
                } else {
                    assert_eq!(request(&v, &got, r), request(&v, &want, r), "{ctx}");
                }
            }
        }
    }
}

/// The chi-square suite's rule at `P = 2` (uneven shards): requests verify
/// drafts sampled by the draft model at the verification's keys, and the
/// tokens emitted at every position fit the target's softmax and not its
/// neighbours'; the sharded outputs are also the unsharded ones.
#[test]
fn sharded_tokens_follow_the_target() {
    const VOCAB: usize = 64;
    let (cuda, backend) = (specdec_suite::cuda_device(), specdec_suite::cuda());
    let requests = gpu_sized(64_000);
    let base = zipf_logits(VOCAB, 1.0, 16, 0x6A5);
    let halves = [Shard { offset: 0, vocab: VOCAB }, Shard { offset: 16, vocab: VOCAB }];
    let cases =
        [(false, 1.0f32, Verification::Token), (true, 3.0, Verification::Token), (false, 1.0, Verification::Block)];
    for (c, (one_hot, sharpen, verification)) in cases.into_iter().enumerate() {
        let case = FixedPositions {
            one_hot,
            pos0: 0x6A5 << 40 | (c as u64) << 32,
            ..FixedPositions::new(VOCAB, 3, 1.0, requests)
        };
        let draft = |i: usize, target: &[f32]| perturbed(i, target, 1.5).into_iter().map(|x| x * sharpen).collect();
        let Drafted { mut verify, targets } = case.build(&backend, &base, draft);
        verify.verification = verification;
        let ctx = format!("{verification:?} {case:?}");
        let out = check_equal(&cuda, &verify, &halves, &ctx);
        let draws = check_positions(&out, &targets, case.t, &format!("{ctx} at P = 2"));
        assert!(draws[0] == requests && draws[1] >= requests / 8, "{ctx}: draws per position {draws:?}");
        // The fit can fail: position 1's tokens are not position 0's target, nor its draft's.
        let counts = histogram(&emitted_at(&out, 1), VOCAB);
        for wrong in [probs(&targets[0], case.t), probs(&draft(1, &targets[1]), case.t)] {
            let fit = chi_square(&counts, &wrong);
            assert!(fit.p_value < 1e-6, "{ctx}: position 1 fits a wrong distribution, p = {}", fit.p_value);
        }
    }
}
