//! The end-to-end speculative loop of `examples/speculative` (a candle-nn
//! transformer pair, specdec on candle tensors) emits what plain decoding of
//! the target emits: at `T = 0` the same tokens, at `T > 0` the same
//! distribution (the joint of the first three tokens, against the target's
//! exact distribution enumerated by its own forwards), with and without a
//! top-k filter, draft by draft and by block verification.

#[path = "../examples/speculative/engine.rs"]
mod engine;
#[path = "../examples/speculative/model.rs"]
mod model;

use candle_core::{Device, Tensor};
use engine::{Sampling, Speculation};
use model::{Config, Model};
use specdec::candle::Sampler;
use specdec::filter::Filter;
use specdec::{Backend, Verification};
use specdec_suite::filters::filtered_probs;
use specdec_suite::{candle_device, chi_square, test_device};

/// Runs `f` on a pool of two threads: the models are tiny, and candle's CPU
/// ops spread over every core of a large machine spend their time waking threads.
fn on_two_threads<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a thread pool").install(f)
}

test_device!(greedy_speculation_emits_the_greedy_tokens, |backend, _scale| {
    on_two_threads(|| greedy_speculation(&backend))
});

fn greedy_speculation(backend: &Backend) {
    let device = candle_device(backend);
    let config =
        Config { vocab: 512, hidden: 64, heads: 4, layers: 3, max_positions: 256, logit_scale: 2.5, deep_scale: 0.3 };
    let target = Model::new(config, 7, &device).unwrap();
    let draft = target.draft();
    let mut sampler = Sampler::new(&device).unwrap();
    let prompts: Vec<Vec<u32>> =
        (0..6).map(|r| (0..3 + r).map(|i| ((r * 31 + i * 17) % 512) as u32).collect()).collect();
    let greedy: Vec<Sampling> = (0..6).map(|r| Sampling { temperature: 0.0, seed: r, top_k: 0 }).collect();
    let plain = engine::autoregressive(&target, &mut sampler, &prompts, &greedy, 40).unwrap();
    for (k, verification) in [(1, Verification::Token), (3, Verification::Token), (5, Verification::Block)] {
        let speculation = Speculation { k, max_new: 40, verification };
        let (spec, stats) = engine::speculative(&target, &draft, &mut sampler, &prompts, &greedy, speculation).unwrap();
        assert_eq!(spec, plain, "K = {k}, {verification:?}");
        // The drafter is near the target but not equal to it: both paths of the verifier ran.
        let acceptance = stats.acceptance()[0];
        assert!(acceptance > 0.3 && acceptance < 1.0, "K = {k}: acceptance {acceptance}");
        assert!(stats.tokens_per_verify() > 1.0 + acceptance / 2.0, "K = {k}: {stats:?}");
    }
}

/// A model small enough to enumerate: its exact distribution of three tokens.
const VOCAB: usize = 6;
const PROMPT: [u32; 3] = [1, 4, 2];

/// `P(t1, t2, t3)` of sampling three tokens after [`PROMPT`] from `target`
/// at temperature `t` under `filter`, from the target's own logits.
fn exact_joint(target: &Model, t: f32, filter: Filter, device: &Device) -> Vec<f64> {
    let next = |prefix: &[u32]| -> Vec<f64> {
        let mut cache = target.cache();
        let logits = target.forward(&Tensor::new(prefix, device).unwrap(), &mut cache).unwrap();
        let row: Vec<f32> = logits.narrow(0, prefix.len() - 1, 1).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        filtered_probs(&row, t, filter)
    };
    let mut joint = vec![0.0; VOCAB.pow(3)];
    let p1 = next(&PROMPT);
    for a in 0..VOCAB {
        let p2 = next(&[&PROMPT[..], &[a as u32]].concat());
        for b in 0..VOCAB {
            let p3 = next(&[&PROMPT[..], &[a as u32, b as u32]].concat());
            for c in 0..VOCAB {
                joint[(a * VOCAB + b) * VOCAB + c] = p1[a] * p2[b] * p3[c];
            }
        }
    }
    joint
}

test_device!(sampled_speculation_follows_the_target, |backend, _scale| {
    on_two_threads(|| sampled_speculation(&backend))
});

fn sampled_speculation(backend: &Backend) {
    let device = candle_device(backend);
    let config =
        Config { vocab: VOCAB, hidden: 32, heads: 4, layers: 3, max_positions: 16, logit_scale: 1.5, deep_scale: 0.6 };
    let target = Model::new(config, 11, &device).unwrap();
    let draft = target.draft();
    let mut sampler = Sampler::new(&device).unwrap();
    const RUNS: usize = 4000;
    let t = 0.9;
    for (case, (top_k, k, verification)) in [
        (0, 2, Verification::Token),
        (3, 2, Verification::Token),
        (0, 3, Verification::Block),
        (3, 2, Verification::Block),
    ]
    .into_iter()
    .enumerate()
    {
        let started = std::time::Instant::now();
        let prompts = vec![PROMPT.to_vec(); RUNS];
        let sampling: Vec<Sampling> = (0..RUNS)
            .map(|r| Sampling { temperature: t, seed: 77 * case as u64 + ((r as u64) << 20), top_k })
            .collect();
        let speculation = Speculation { k, max_new: 3, verification };
        let (spec, stats) =
            engine::speculative(&target, &draft, &mut sampler, &prompts, &sampling, speculation).unwrap();
        let mut counts = vec![0u64; VOCAB.pow(3)];
        for tokens in &spec {
            counts[(tokens[0] as usize * VOCAB + tokens[1] as usize) * VOCAB + tokens[2] as usize] += 1;
        }
        let filter = Filter { top_k: top_k as u32, ..Filter::OFF };
        let ctx = format!("top-k {top_k}, K = {k}, {verification:?}");
        chi_square(&counts, &exact_joint(&target, t, filter, &device)).assert_pass(&ctx);
        let acceptance = stats.acceptance()[0];
        assert!(acceptance > 0.2 && acceptance < 0.98, "{ctx}: acceptance {acceptance}");
        // Progress of the slowest test of the GPU suite (per-request forwards of tiny models).
        eprintln!("{ctx}: passed in {:.1?}", started.elapsed());
    }
}
