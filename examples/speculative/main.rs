//! Speculative decoding end to end over a small transformer pair in
//! candle-nn, with specdec sampling and verifying on candle tensors.
//!
//! ```sh
//! cargo run --release --example speculative -- --backend auto           # CPU here
//! cargo run --release --example speculative --features cuda -- --backend cuda
//! ```
//!
//! Options: `--backend auto|cpu|cuda`, `--requests N`, `--k K`, `--new N`
//! (tokens per request), `--temperature T`, `--top-k N`, `--block` (block
//! verification), `--vocab V`, `--layers L`. Prints tokens per second with
//! and without speculation on the same requests, acceptance per draft
//! position and tokens per verify; at `T = 0`, whether the two emitted the
//! same tokens (they must).

mod engine;
mod model;

use candle_core::Device;
use engine::{Sampling, Speculation};
use model::{Config, Model};
use specdec::Verification;
use specdec::candle::Sampler;
use std::time::Instant;

struct Args {
    backend: String,
    requests: usize,
    k: usize,
    new: usize,
    temperature: f32,
    top_k: i32,
    block: bool,
    vocab: usize,
    layers: usize,
}

fn parse() -> Args {
    let mut a = Args {
        backend: "auto".into(),
        requests: 8,
        k: 4,
        new: 64,
        temperature: 0.7,
        top_k: 0,
        block: false,
        vocab: 8192,
        layers: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => a.backend = value(),
            "--requests" => a.requests = value().parse().expect("--requests N"),
            "--k" => a.k = value().parse().expect("--k K"),
            "--new" => a.new = value().parse().expect("--new N"),
            "--temperature" => a.temperature = value().parse().expect("--temperature T"),
            "--top-k" => a.top_k = value().parse().expect("--top-k N"),
            "--block" => a.block = true,
            "--vocab" => a.vocab = value().parse().expect("--vocab V"),
            "--layers" => a.layers = value().parse().expect("--layers L"),
            other => panic!("unknown option {other} (see the example's doc comment)"),
        }
    }
    a
}

fn device(backend: &str) -> candle_core::Result<Device> {
    match backend {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0),
        "auto" => Device::cuda_if_available(0),
        other => panic!("--backend {other}: expected auto, cpu or cuda"),
    }
}

fn main() -> Result<(), specdec::Error> {
    let args = parse();
    let device = device(&args.backend)?;
    let config = Config {
        vocab: args.vocab,
        hidden: 512,
        heads: 8,
        layers: args.layers,
        max_positions: 4096,
        logit_scale: 2.5,
        deep_scale: 0.12,
    };
    let target = Model::new(config, 2026, &device)?;
    let draft = target.draft();
    let mut sampler = Sampler::new(&device)?;
    let prompts: Vec<Vec<u32>> =
        (0..args.requests).map(|r| (0..8).map(|i| ((r * 7919 + i * 104_729) % args.vocab) as u32).collect()).collect();
    let sampling: Vec<Sampling> = (0..args.requests)
        .map(|r| Sampling { temperature: args.temperature, seed: 1000 + r as u64, top_k: args.top_k })
        .collect();
    let verification = if args.block { Verification::Block } else { Verification::Token };
    println!(
        "device {:?}; target {} blocks, draft 1, vocab {}, hidden {}; {} requests × {} new tokens, K = {}, T = {}, top-k {}, {:?} verification",
        device.location(),
        config.layers,
        config.vocab,
        config.hidden,
        args.requests,
        args.new,
        args.k,
        args.temperature,
        args.top_k,
        verification
    );

    // Once each to warm up (kernel loading, allocations), then timed.
    engine::autoregressive(&target, &mut sampler, &prompts, &sampling, 2)?;
    let speculation = |max_new| Speculation { k: args.k, max_new, verification };
    engine::speculative(&target, &draft, &mut sampler, &prompts, &sampling, speculation(2))?;
    let start = Instant::now();
    let plain = engine::autoregressive(&target, &mut sampler, &prompts, &sampling, args.new)?;
    device.synchronize()?;
    let plain_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let (spec, stats) = engine::speculative(&target, &draft, &mut sampler, &prompts, &sampling, speculation(args.new))?;
    device.synchronize()?;
    let spec_s = start.elapsed().as_secs_f64();

    let tokens = (args.requests * args.new) as f64;
    println!("without speculation: {:8.1} tokens/s ({:.3} s)", tokens / plain_s, plain_s);
    println!("with speculation:    {:8.1} tokens/s ({:.3} s), {:.2}× ", tokens / spec_s, spec_s, plain_s / spec_s);
    println!("tokens per verify:   {:.3} (of at most {})", stats.tokens_per_verify(), args.k + 1);
    let acceptance: Vec<String> = stats.acceptance().iter().map(|a| format!("{a:.3}")).collect();
    println!("acceptance per draft position (given the earlier ones accepted): [{}]", acceptance.join(", "));
    if args.temperature == 0.0 {
        println!("greedy: speculative tokens equal autoregressive ones: {}", spec == plain);
        assert_eq!(spec, plain, "at T = 0 speculation must emit the greedy tokens");
    }
    println!("request 0 emitted: {:?} ...", &spec[0][..spec[0].len().min(16)]);
    Ok(())
}
