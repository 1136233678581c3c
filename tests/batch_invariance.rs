//! A request's outputs do not depend on the batch it comes in (REFERENCE
//! §2.6): verified (or sampled) inside a batch and alone, one a call, it
//! gets the same tokens, `num_emitted` and log-probabilities, bit for bit.
//! On the GPU the batch decides how many chunks split each row, so this
//! holds only because the row sums (pass 1's log-sum-exps, the
//! log-probability kernels') are order-free.

use specdec::filter::Filter;
use specdec::{DType, GumbelOutput, Logprobs, RejectionOutput};
use specdec_suite::batch::{Batch, Values};
use specdec_suite::drafting::{RandomSpec, random_verify, slice_requests};
use specdec_suite::filters::FilterTable;
use specdec_suite::inputs::{Rng, mixed_logits};
use specdec_suite::test_device;
use specdec_suite::verify::Verify;

/// A call's tokens, `num_emitted` and processed and raw log-probabilities.
#[derive(Debug, PartialEq)]
struct Outputs {
    tokens: Vec<i32>,
    emitted: Vec<i32>,
    /// As bits: NaN past the emitted tokens compares equal.
    processed: Vec<u32>,
    raw: Vec<u32>,
}

impl Outputs {
    fn of(backend: &specdec::Backend, v: &Verify) -> Outputs {
        Outputs::asking(backend, v, true)
    }

    /// With the processed log-probabilities alone (no log-probability
    /// kernel after the call; with raw ones too, the raw sums' kernel).
    fn processed(backend: &specdec::Backend, v: &Verify) -> Outputs {
        Outputs::asking(backend, v, false)
    }

    fn asking(backend: &specdec::Backend, v: &Verify, with_raw: bool) -> Outputs {
        let positions = v.requests() * (v.max_drafts + 1);
        let (mut tokens, mut emitted) = (vec![0i32; positions], vec![0i32; v.requests()]);
        let (mut processed, mut raw) = (vec![0f32; positions], vec![0f32; if with_raw { positions } else { 0 }]);
        let logprobs = Logprobs::none().with_processed(&mut processed);
        let logprobs = if with_raw { logprobs.with_raw(&mut raw) } else { logprobs };
        let mut out = RejectionOutput::new(&mut tokens, &mut emitted).with_logprobs(logprobs);
        backend.rejection_sample(&v.call(), &mut out).expect("a valid call");
        let bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect();
        Outputs { tokens, emitted, processed: bits(processed), raw: bits(raw) }
    }

    /// Request `r`'s outputs, as a call of it alone returns them.
    fn request(&self, r: usize) -> Outputs {
        let k1 = self.tokens.len() / self.emitted.len();
        let at = r * k1..(r + 1) * k1;
        Outputs {
            tokens: self.tokens[at.clone()].to_vec(),
            emitted: vec![self.emitted[r]],
            processed: self.processed[at.clone()].to_vec(),
            raw: self.raw.get(at).map_or_else(Vec::new, <[u32]>::to_vec),
        }
    }
}

// Random batches of every request kind (greedy and sampling slots, ragged,
// padding, NaN rows), one-hot and with draft logits; a few requests of each
// verified alone.
test_device!(a_request_gets_the_same_bits_alone_and_in_a_batch, |backend, scale| {
    let mut rng = Rng::new(0xBA7C);
    let sizes: &[(usize, usize, usize)] =
        if scale == 1 { &[(4097, 16, 3)] } else { &[(151_936, 64, 3), (32_000, 256, 4), (4097, 512, 7)] };
    for &(vocab, requests, k) in sizes {
        for target in [DType::F32, DType::BF16] {
            for draft in [None, Some(DType::BF16)] {
                let v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, target, draft));
                let batch = Outputs::of(&backend, &v);
                for r in (0..requests).step_by(requests / 8) {
                    let alone = Outputs::of(&backend, &slice_requests(&v, r..r + 1));
                    assert_eq!(
                        batch.request(r),
                        alone,
                        "V {vocab}, {requests} requests, target {target:?}, draft {draft:?}: request {r}"
                    );
                }
            }
        }
    }
});

// Filtered requests (top-k alone or with top-p or min-p, or min-p or top-p
// alone, on the target and the draft): a request whose filters may pool its
// kept sets (a top-k on either) has its `LSE(S)`s summed a term a kept value
// (REFERENCE §7.4), so it gets the same processed log-probabilities
// (written from pass 1's sums) whether the GPU's threshold kernel pools its
// kept sets (the request alone, two threshold blocks a row) or pass 1 reads
// its rows (in a batch of more filtered rows than a workspace pools: one
// threshold block a row), and the CPU's bits, whose rule it is; a request
// of neither by the run rule, alone or in the batch. The same with raw
// log-probabilities asked too (the GPU's pass 1 of the plain outputs: a
// launch a rule, each request's rows in the one of its own; the
// log-probabilities from the kernels after the call).
test_device!(a_filtered_request_gets_the_same_bits_pooled_or_read, |backend, _scale| {
    let mut rng = Rng::new(0xF117);
    // 520 requests of 4 rows: 4,160 threshold entries, past the 4,096 a workspace pools.
    let (vocab, requests, k) = (8_200, 520, 3);
    for draft in [None, Some(DType::BF16)] {
        let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, k, DType::F32, draft));
        let mut filter = |_| {
            let top_k = 1 + rng.below(64) as u32;
            match rng.below(5) {
                0 => Filter { top_k, ..Filter::OFF },
                1 => Filter { top_k, top_p: 0.8, ..Filter::OFF },
                2 => Filter { top_k, min_p: 0.05, ..Filter::OFF },
                3 => Filter { min_p: 0.05, ..Filter::OFF },
                _ => Filter { top_p: 0.8, ..Filter::OFF },
            }
        };
        let filters: Vec<Filter> = (0..v.temperature.len()).map(&mut filter).collect();
        v.filters = FilterTable::per_slot(&filters);
        if draft.is_some() {
            let filters: Vec<Filter> = (0..v.temperature.len()).map(&mut filter).collect();
            v.draft_filters = FilterTable::per_slot(&filters);
        }
        let batch = Outputs::processed(&backend, &v);
        let plain = Outputs::of(&backend, &v);
        let cpu = Outputs::processed(&specdec::Backend::cpu(), &v);
        let ctx = |r| format!("draft {draft:?}: request {r}");
        for r in 0..requests {
            let slot = v.slots[r];
            let sampling = slot >= 0 && v.temperature[slot as usize] > 0.0;
            let top_k = |t: &FilterTable| t.slot(slot as usize).top_k > 0;
            if sampling && (top_k(&v.filters) || top_k(&v.draft_filters)) {
                assert_eq!(batch.request(r), cpu.request(r), "{} against the CPU", ctx(r));
            }
            if r % 13 == 0 {
                let alone = slice_requests(&v, r..r + 1);
                assert_eq!(batch.request(r), Outputs::processed(&backend, &alone), "{} alone", ctx(r));
                assert_eq!(plain.request(r), Outputs::of(&backend, &alone), "{} alone, with raw ones", ctx(r));
            }
        }
    }
});

/// A `gumbel_sample` call's tokens and its processed and raw
/// log-probabilities, as bits.
fn sampled(backend: &specdec::Backend, b: &Batch) -> (Vec<i32>, Vec<u32>, Vec<u32>) {
    let mut tokens = vec![0i32; b.rows];
    let (mut processed, mut raw) = (vec![0f32; b.rows], vec![0f32; b.rows]);
    let logprobs = Logprobs::none().with_processed(&mut processed).with_raw(&mut raw);
    let mut out = GumbelOutput::new(&mut tokens).with_logprobs(logprobs);
    backend.gumbel_sample(&b.call(), &mut out).expect("a valid call");
    let bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect();
    (tokens, bits(processed), bits(raw))
}

// `gumbel_sample` rows on greedy and sampling slots (the log-probability
// kernels' sums), a few of them sampled alone.
test_device!(a_row_gets_the_same_bits_alone_and_in_a_batch, |backend, scale| {
    let mut rng = Rng::new(0x5A3B);
    let sizes: &[(usize, usize)] = if scale == 1 { &[(4097, 16)] } else { &[(151_936, 256), (32_000, 1024)] };
    for &(vocab, rows) in sizes {
        for dtype in [DType::F32, DType::BF16] {
            let logits: Vec<f32> = (0..rows).flat_map(|r| mixed_logits(vocab, 7 * r as u64 + vocab as u64)).collect();
            let mut b = Batch::new(Values::from_f32(dtype, &logits), rows, vocab, 1.0, 0x5eed);
            b.temperature = vec![0.0, 0.7, 1.0, 1.3];
            b.seed = vec![1, 2, 3, 4];
            b.slots = (0..rows).map(|_| rng.below(4) as i32).collect();
            let batch = sampled(&backend, &b);
            for r in (0..rows).step_by(rows / 8) {
                let alone = Batch {
                    logits: b.logits.gather(r * vocab..(r + 1) * vocab),
                    rows: 1,
                    slots: vec![b.slots[r]],
                    pos: vec![b.pos[r]],
                    ..b.clone()
                };
                let one = |x: &Vec<u32>| vec![x[r]];
                let want = (vec![batch.0[r]], one(&batch.1), one(&batch.2));
                assert_eq!(sampled(&backend, &alone), want, "V {vocab}, {rows} rows, {dtype:?}: row {r}");
            }
        }
    }
});
