//! `rejection_sample` on the GPU against the CPU backend (SPEC §2.5, §4,
//! §5): the same tokens on random batches, except where a decision sits so
//! close to its threshold that the backends' differently ordered log-sum-exps
//! may decide it differently; device-side validation through the zero-copy
//! API; and a chi-square at a real LM vocabulary. Needs a GPU (feature `gpu`).
#![cfg(feature = "gpu")]

use specdec::status::{INVALID_DRAFT, INVALID_OFFSETS, INVALID_SLOT, INVALID_TEMPERATURE};
use specdec::{Backend, DType, Verification};
use specdec_suite::agreement::{Agreement, MIN_DECISIONS, compare, compare_blocks, pick};
use specdec_suite::drafting::{
    Drafted, FixedPositions, RandomSpec, check_positions, perturbed, random_verify, run_split, select_requests,
    zipf_logits,
};
use specdec_suite::inputs::Rng;
use specdec_suite::{Verified, Verify, cuda, gpu_sized};

/// Random batches as (vocabulary, requests, most drafts per request): SPEC
/// §6's vocabularies, and drafts beyond one warp's 32 lanes (pass 2 walks
/// rows `lane, lane + 32, ...`). The CPU computes the reference.
const COMPARE_SIZES: [(usize, usize, usize); 5] =
    [(1, 512, 4), (999, 8192, 4), (4097, 512, 4), (151_936, 8, 4), (999, 64, 40)];

#[test]
fn gpu_tokens_equal_cpu_tokens_but_near_thresholds() {
    let (gpu, mut rng, mut tally) = (cuda(), Rng::new(0x6A0C), Agreement::default());
    for (vocab, requests, k) in COMPARE_SIZES {
        for target in DType::ALL {
            for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
                let v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, target, draft));
                let ctx = format!("V {vocab} K {k} target {target:?} draft {draft:?}");
                let (want, got) = (run_split(&v, &Backend::cpu()), v.run(&gpu).expect("rejection_sample on the GPU"));
                compare(&v, &want, &got, &(0..requests).collect::<Vec<_>>(), &mut tally, &ctx);
            }
        }
    }
    eprintln!("CPU vs GPU: {tally:?}");
    tally.assert_rare_near(MIN_DECISIONS);
}

/// The fewest block decisions `block_verification_gives_the_cpu_tokens` must compare.
const BLOCK_DECISIONS: usize = 20_000;

/// Block verification (REFERENCE §4.11) on the GPU against the CPU twin,
/// on random batches (ragged, padding, placeholders, greedy and sampling
/// slots, one-hot drafts and draft logits, rows of one chunk and of many,
/// blocks past one warp's lanes): the same outputs, request by request, but
/// where one of a block's decisions sits near its threshold (the residual
/// masses and log-sum-exps are summed in another order on each backend), as
/// `agreement::compare_blocks` recomputes them in f64; those stay rare.
#[test]
fn block_verification_gives_the_cpu_tokens() {
    let (gpu, mut rng, mut tally) = (cuda(), Rng::new(0xB10C), Agreement::default());
    for (vocab, requests, k) in [(999, 2048, 4), (4097, 512, 7), (151_936, 8, 4), (151_936, 1, 7), (999, 64, 40)] {
        for target in DType::ALL {
            for draft in [None, Some(DType::F32), Some(DType::BF16)] {
                let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, target, draft));
                v.verification = Verification::Block;
                let ctx = format!("V {vocab} K {k} target {target:?} draft {draft:?}");
                let (want, got) = (run_split(&v, &Backend::cpu()), v.run(&gpu).expect("block verification on the GPU"));
                compare_blocks(&v, &want, &got, &(0..requests).collect::<Vec<_>>(), &mut tally, &ctx);
            }
        }
    }
    eprintln!("block verification, CPU vs GPU: {tally:?}");
    // About 1.3 decisions a request (short and cut blocks, greedy slots): fewer than the token rule's.
    tally.assert_rare_near(BLOCK_DECISIONS);
}

/// Calls of one or two requests, as a decoder's small batches make them:
/// chunks of a few tiles, for which both passes take their small kernels
/// (the host's `Workspace::small`), at SPEC §6's vocabularies and every
/// dtype; the tokens must be the CPU's, as above.
#[test]
fn small_calls_give_the_cpu_tokens() {
    let (gpu, mut rng, mut tally) = (cuda(), Rng::new(0x5A11), Agreement::default());
    for (vocab, k, calls) in [(151_936, 4, 8), (32_000, 1, 24), (4097, 7, 48), (999, 3, 96)] {
        for target in DType::ALL {
            for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
                for call in 0..calls {
                    let requests = 1 + call % 2;
                    let v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, target, draft));
                    let ctx = format!("V {vocab} requests {requests} K {k} target {target:?} draft {draft:?}");
                    let (want, got) =
                        (run_split(&v, &Backend::cpu()), v.run(&gpu).expect("rejection_sample on the GPU"));
                    compare(&v, &want, &got, &(0..requests).collect::<Vec<_>>(), &mut tally, &ctx);
                }
            }
        }
    }
    eprintln!("CPU vs GPU, small calls: {tally:?}");
    assert!(tally.decisions >= 1_000, "{tally:?}: too few sampled decisions compared");
}

/// The resample seeds its floors below each candidate's log-mass and, where
/// no score reached them, folds the row again unseeded (`Resampled::certified`).
/// That refold happens about once in 10^14 requests at the usual margin, so
/// it is forced here (a margin of `-inf` seeds every floor at `+inf`): the
/// tokens must be those of the usual run, bit for bit, in every kind of job
/// (bonus row, placeholder, one-hot and logit drafts, every dtype) and for
/// rows of one chunk and of many.
#[test]
fn refolded_resamples_give_the_seeded_tokens() {
    let mut rng = Rng::new(0x5EED);
    let (usual, forced) = (
        cuda(),
        Backend::Cuda(specdec::Cuda::on_device(0).expect("a CUDA device").with_floor_margin(f32::NEG_INFINITY)),
    );
    let mut resampled = 0;
    for (vocab, full, k) in [(999, 2048, 4), (4097, 256, 4), (151_936, 8, 4), (151_936, 1, 7)] {
        let requests = gpu_sized(full).max(1);
        for target in DType::ALL {
            for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
                let v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, target, draft));
                let ctx = format!("V {vocab} requests {requests} K {k} target {target:?} draft {draft:?}");
                let want = v.run(&usual).expect("rejection_sample on the GPU");
                let got = v.run(&forced).expect("rejection_sample on the GPU, refolding");
                assert_eq!(want, got, "{ctx}");
                resampled += (0..requests).filter(|&r| !v.is_greedy(r)).count();
            }
        }
    }
    assert!(resampled > gpu_sized(10_000), "{resampled} sampled requests: too few to cover the refold");
}

/// Requests of the device-side validation batch, all with `VALIDATION_K` drafts.
const VALIDATION_REQUESTS: usize = 24;
const VALIDATION_K: usize = 3;

/// What a zero-copy call returned, and the workspace's status word.
struct DeviceRun {
    out: Verified,
    status: u32,
}

/// Runs `v` through `Cuda::rejection_sample` on device buffers
/// (`Verify::run_device`: outputs pre-filled with `i32::MIN`, `u32::MAX`)
/// and reads the workspace's status word.
fn run_on_device(v: &Verify) -> DeviceRun {
    let cuda = specdec::Cuda::on_device(0).expect("a CUDA device");
    let mut ws = cuda.workspace(v.requests() * (v.max_drafts + 1)).expect("a workspace");
    let out = v.run_device(&cuda, &mut ws).expect("the launch");
    DeviceRun { out, status: ws.take_status().expect("the status word") }
}

#[test]
fn device_side_checks_flag_bad_requests_and_keep_the_rest() {
    let mut rng = Rng::new(0xDE71);
    let mut spec = RandomSpec::new(999, VALIDATION_REQUESTS, VALIDATION_K, DType::F32, Some(DType::BF16));
    spec.drafts_of = Some(|_| VALIDATION_K);
    spec.temperatures = &[0.6, 1.0, 1.5];
    let mut v = random_verify(&mut rng, spec);
    let spare = (0..v.temperature.len() as i32).find(|s| !v.slots.contains(s)).expect("a spare slot");
    let last = VALIDATION_REQUESTS - 1;
    // (request, what breaks it, its flag)
    let row = |v: &Verify, r: usize, i: usize| v.offsets[r] as usize + i;
    let mut bad: Vec<(usize, u32)> = Vec::new();
    for (r, i, d) in [(1, 1, 999), (2, 2, -5), (13, 0, i32::MAX)] {
        let j = row(&v, r, i);
        v.drafts[j] = d; // 999 = V
        bad.push((r, INVALID_DRAFT));
    }
    let j = row(&v, 2, 0);
    v.drafts[j] = -1; // a placeholder first: the bad id after it still counts
    v.offsets[5] += 1; // request 4 gets K + 1 drafts (request 5 keeps K - 1)
    v.offsets[last + 1] += 2; // the last request ends past the rows
    bad.extend([(4, INVALID_OFFSETS), (last, INVALID_OFFSETS)]);
    (v.slots[7], v.slots[8]) = (v.temperature.len() as i32 + 2, -3);
    bad.extend([(7, INVALID_SLOT), (8, INVALID_SLOT)]);
    v.slots[10] = spare;
    v.temperature[spare as usize] = f32::NAN;
    bad.push((10, INVALID_TEMPERATURE));

    let got = run_on_device(&v);
    let want_status = bad.iter().fold(0, |s, &(_, f)| s | f);
    assert_eq!(got.status, want_status, "status word {:#x}, want {want_status:#x}", got.status);
    for &(r, flag) in &bad {
        let out = &got.out;
        let ctx = format!("invalid request {r} (flag {flag:#x})");
        assert!(out.request(r).iter().all(|&t| t == -1), "{ctx}: tokens {:?}", out.request(r));
        assert_eq!((out.num_emitted[r], out.accepted[r]), (0, 0), "{ctx}: counts");
    }
    let valid: Vec<usize> = (0..VALIDATION_REQUESTS).filter(|r| bad.iter().all(|&(b, _)| b != *r)).collect();
    let want = select_requests(&v, &valid).run(&Backend::cpu()).expect("the valid requests on the CPU");
    let mut tally = Agreement::default();
    compare(&v, &want, &pick(&v, &got.out, &valid), &valid, &mut tally, "the valid requests");
    assert_eq!(tally.near_mismatches, 0, "{tally:?}");
}

/// `RejectionOutput::row_status` promises "Rows of invalid requests are not
/// written". Regression: pass 2 (`decide`) once wrote each row's status in the
/// lane loop that discovers a bad draft id, before it knew the request was
/// invalid, so those rows got `0` (or `NAN_LOGITS`).
#[test]
fn rows_of_invalid_requests_keep_their_status() {
    let mut rng = Rng::new(0x5747);
    let mut spec = RandomSpec::new(999, 6, 2, DType::F32, Some(DType::BF16));
    spec.drafts_of = Some(|_| 2);
    spec.temperatures = &[1.0];
    let mut v = random_verify(&mut rng, spec);
    let first_draft = v.offsets[1] as usize;
    v.drafts[first_draft] = 999; // request 1: a draft id = V
    v.slots[3] = 1000; // request 3: a slot out of range
    let got = run_on_device(&v);
    let written: Vec<String> = [1, 3]
        .iter()
        .map(|&r| (r, v.offsets[r] as usize..v.offsets[r + 1] as usize))
        .filter(|(_, rows)| got.out.row_status[rows.clone()].iter().any(|&s| s != u32::MAX))
        .map(|(r, rows)| format!("request {r}: rows {rows:?} status {:?}", &got.out.row_status[rows.clone()]))
        .collect();
    assert!(written.is_empty(), "rows of invalid requests were written: {}", written.join("; "));
}

// --- A real LM vocabulary (SPEC §6) ----------------------------------------------

/// Qwen-sized vocabulary; requests (the draws at position 0); drafts each.
const LM_VOCAB: usize = 151_936;
const LM_REQUESTS: usize = 24_576;
const LM_K: usize = 3;
/// Zipf exponent of the target (realistic: a few ids hold most of the mass,
/// a long tail); one id in 64 masked; draft noise.
const LM_ZIPF: f32 = 1.1;
const LM_MASK_EVERY: usize = 64;
const LM_DRAFT_NOISE: f32 = 1.0;

#[test]
fn lm_vocabulary_every_position_follows_the_target() {
    let gpu = cuda();
    let requests = specdec_suite::gpu_sized(LM_REQUESTS);
    let base = zipf_logits(LM_VOCAB, LM_ZIPF, LM_MASK_EVERY, 0x15_1936);
    for t in [0.6, 1.0] {
        // One broadcast target row: distinct rows per position would take
        // requests × V × 4 bytes (15 GB) here.
        let case = FixedPositions {
            draft_dtype: DType::BF16,
            distinct_targets: false,
            pos0: 0x15_1936 << 24 | ((t * 10.0) as u64) << 20,
            ..FixedPositions::new(LM_VOCAB, LM_K, t, requests)
        };
        let Drafted { verify, targets } = case.build(&gpu, &base, |i, t| perturbed(i, t, LM_DRAFT_NOISE));
        let out = verify.run(&gpu).expect("rejection_sample on the GPU");
        let draws = check_positions(&out, &targets, t, &format!("V {LM_VOCAB} T {t}"));
        assert!(draws[LM_K] >= requests / 20, "T {t}: draws per position {draws:?}: too few accepted");
    }
}
