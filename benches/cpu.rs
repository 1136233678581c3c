//! The CPU backend's throughput and the host-side overhead of a call (criterion):
//! `cargo bench --bench cpu` (`-- --quick` for a short run). Not part of CI.
//!
//! - `gumbel_sample_cpu`: greedy and random (T = 0.8) sampling at V = 151936,
//!   f32 and bf16 logits, 1 and 8 rows, and random drafting that also fills
//!   bf16 draft logits; throughput in logits bytes.
//! - `rejection_sample_cpu`: greedy / one-hot / bf16 draft logits at small
//!   sizes (B ∈ {1, 4}, K = 3, V = 32000); throughput in target logits.
//! - `memory_bound_cpu`: greedy sampling of a batch larger than the caches
//!   (128 rows of V = 151936 f32, 78 MB) beside one core's read bandwidth on
//!   the same buffer (an integer XOR over its words, which the compiler
//!   vectorises): the greedy path's fraction of what one core can read.
//! - `cpu_threads`: random `gumbel_sample` (64 rows of V = 151936 f32) and
//!   `rejection_sample` (B = 16, K = 4, V = 151936, f32 target, bf16 draft
//!   logits) in a rayon pool of one thread and in one of every core
//!   (`ThreadPool::install`); throughput in rows (target rows for
//!   verification), so time ÷ rows is the per-row time and the two pools'
//!   ratio the scaling.
//! - `filters_cpu`: random `gumbel_sample` (8 rows of V = 151936 f32) and
//!   `rejection_sample` (B = 4, K = 3, V = 32000, bf16 draft logits sampled
//!   with the same filters) unfiltered and with the filter settings
//!   (k = 50 and P = 0.9; k = 20; m = 0.05; P = 0.95), side by side:
//!   throughput in rows, so each setting's time over `off`'s is its cost.
//! - `sharded_cpu`: the `outputs_cpu` verify call (B = 4, K = 3, V = 32,000,
//!   bf16 draft logits) unsharded and split over 2 ranks (`InProcess`, one
//!   scoped thread a rank, spawned in every iteration), side by side: as it
//!   is, with top-k 50 and top-p 0.9, and with processed log-probabilities
//!   and a top-5; prints the bytes each rank sends in each exchange, as counted.
//! - `host_overhead`: a whole call on the smallest input (`Backend::cpu()`,
//!   rows = 1, V = 1), and the argument validation alone: calls whose only
//!   error is in the last value checked, so every check runs and nothing is
//!   sampled.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::bf16;
use specdec::shard::Exchange;
use specdec::{
    Backend, Column, Cpu, Distribution, DraftLogits, DraftLogitsMut, DraftLogitsShape, Filters, GumbelOutput,
    GumbelSample, Host, Logits, Logprobs, RejectionOutput, RejectionSample, SamplingParams, Verification,
};
use std::hint::black_box;
use std::time::Duration;

const V: usize = 151_936;
const T: f32 = 0.8;

/// Roughly N(0, 1): a sum of four uniforms, centred and scaled.
fn normal(salt: u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let w = specdec::rng::random_quad(salt, i as u64, specdec::rng::Stream::Accept, 0);
            let u: f32 = w.iter().map(|&x| x as f32 / 4_294_967_296.0).sum();
            (u - 2.0) * 1.732
        })
        .collect()
}

/// The first `rows` rows of `[_, V]` logits, of the f32 values or their bf16 copy.
fn logits_of<'a>(dtype: &str, f32s: &'a [f32], bf16s: &'a [bf16], rows: usize) -> Logits<'a, Host> {
    match dtype {
        "f32" => Logits::new(&f32s[..rows * V], rows, V),
        _ => Logits::new(&bf16s[..rows * V], rows, V),
    }
}

fn gumbel(c: &mut Criterion) {
    let mut group = c.benchmark_group("gumbel_sample_cpu");
    let max_rows = 8;
    let f32s = normal(1, max_rows * V);
    let bf16s: Vec<bf16> = f32s.iter().map(|&x| bf16::from_f32(x)).collect();
    let slots: Vec<i32> = (0..max_rows as i32).collect();
    let pos: Vec<u64> = (100..100 + max_rows as u64).collect();
    let seed = vec![7u64; max_rows];
    let mut draft_logits = vec![bf16::ZERO; max_rows * V];
    let shape = DraftLogitsShape::dense(max_rows, 1, V);
    for (mode, t, drafting) in
        [("greedy", 0.0f32, false), ("random T=0.8", T, false), ("drafting T=0.8 bf16 draft logits", T, true)]
    {
        let temperature = vec![t; max_rows];
        for rows in [1usize, 8] {
            for dtype in ["f32", "bf16"] {
                let bytes = rows * V * if dtype == "f32" { 4 } else { 2 };
                group.throughput(Throughput::Bytes(bytes as u64));
                let id = BenchmarkId::new(mode, format!("rows={rows}/V={V}/{dtype}"));
                let call = GumbelSample {
                    drafting,
                    ..GumbelSample::new(
                        logits_of(dtype, &f32s, &bf16s, rows),
                        &slots[..rows],
                        &pos[..rows],
                        SamplingParams::new(&temperature, &seed),
                    )
                };
                let mut tokens = vec![0i32; rows];
                group.bench_function(id, |b| {
                    b.iter(|| {
                        let mut out = GumbelOutput::new(&mut tokens);
                        if drafting {
                            out = out.with_draft_logits(DraftLogitsMut::new(&mut draft_logits, shape), Column::All(0));
                        }
                        Cpu.gumbel_sample(black_box(&call), &mut out).expect("gumbel_sample");
                        black_box(tokens[0])
                    })
                });
            }
        }
    }
    group.finish();
}

fn memory_bound(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_bound_cpu");
    let rows = 128;
    let f32s = normal(3, rows * V);
    group.throughput(Throughput::Bytes((rows * V * 4) as u64));
    group.bench_function(BenchmarkId::new("read (xor of every word)", format!("rows={rows}/V={V}/f32")), |b| {
        b.iter(|| black_box(black_box(&f32s[..]).iter().fold(0u32, |acc, x| acc ^ x.to_bits())))
    });
    let slots: Vec<i32> = (0..rows as i32).collect();
    let pos: Vec<u64> = (0..rows as u64).collect();
    let (temperature, seed) = (vec![0f32; rows], vec![7u64; rows]);
    let call = GumbelSample::new(Logits::new(&f32s, rows, V), &slots, &pos, SamplingParams::new(&temperature, &seed));
    let mut tokens = vec![0i32; rows];
    group.bench_function(BenchmarkId::new("greedy", format!("rows={rows}/V={V}/f32")), |b| {
        b.iter(|| {
            Cpu.gumbel_sample(black_box(&call), &mut GumbelOutput::new(&mut tokens)).expect("gumbel_sample");
            black_box(tokens[0])
        })
    });
    group.finish();
}

fn rejection(c: &mut Criterion) {
    let mut group = c.benchmark_group("rejection_sample_cpu");
    let (vocab, k) = (32_000usize, 3usize);
    let max_b = 4;
    let rows_max = max_b * (k + 1);
    let target = normal(1, rows_max * vocab);
    let noise = normal(2, rows_max * vocab);
    // Draft logits 0.8·target + 0.6·noise, laid out [slots, K, V]: draft i of request r beside its target row.
    let mut draft = vec![bf16::ZERO; max_b * k * vocab];
    for r in 0..max_b {
        for i in 0..k {
            let (row, at) = (r * (k + 1) + i, (r * k + i) * vocab);
            for x in 0..vocab {
                let t = row * vocab + x;
                draft[at + x] = bf16::from_f32(0.8 * target[t] + 0.6 * noise[t]);
            }
        }
    }
    // Drafts: the argmax of each draft row (a plausible proposal).
    let mut drafts = vec![0i32; rows_max];
    for r in 0..max_b {
        for i in 0..k {
            let at = (r * k + i) * vocab;
            let row = &draft[at..at + vocab];
            let best = (0..vocab).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap();
            drafts[r * (k + 1) + i] = best as i32;
        }
    }
    let slots: Vec<i32> = (0..max_b as i32).collect();
    let pos: Vec<u64> = (0..rows_max as u64).collect();
    let seed = vec![7u64; max_b];
    for (mode, t) in [("greedy", 0.0f32), ("one-hot", T), ("bf16-draft", T)] {
        let temperature = vec![t; max_b];
        for b in [1usize, 4] {
            let rows = b * (k + 1);
            let offsets: Vec<i32> = (0..=b as i32).map(|r| r * (k as i32 + 1)).collect();
            group.throughput(Throughput::Elements((rows * vocab) as u64));
            let id = BenchmarkId::new(mode, format!("B={b}/K={k}/V={vocab}/f32"));
            let args = RejectionSample {
                target: Logits::new(&target[..rows * vocab], rows, vocab),
                offsets: &offsets[..],
                drafts: &drafts[..rows],
                slots: &slots[..b],
                pos: &pos[..rows],
                params: SamplingParams::new(&temperature, &seed),
                max_drafts: k,
                verification: Verification::Token,
                draft_logits: (mode == "bf16-draft")
                    .then(|| DraftLogits::new(&draft, DraftLogitsShape::dense(max_b, k, vocab))),
            };
            let mut tokens = vec![0i32; b * (k + 1)];
            let mut num_emitted = vec![0i32; b];
            group.bench_function(id, |bench| bench.iter(|| verify(&args, &mut tokens, &mut num_emitted)));
        }
    }
    group.finish();
}

/// Issue 29's outputs and rules beside the plain call (bf16 draft logits, B = 4,
/// K = 3, V = 32,000, T = 0.8): processed log-probabilities, the top 20 with
/// ranks, block verification; each a ratio to the plain call's time.
fn outputs(c: &mut Criterion) {
    let mut group = c.benchmark_group("outputs_cpu");
    let (vocab, k, b) = (32_000usize, 3usize, 4usize);
    let batch = VerifyBatch::new(b, k, vocab, 11);
    let positions = b * (k + 1);
    let (mut tokens, mut num_emitted) = (vec![0i32; positions], vec![0i32; b]);
    let (mut processed, mut top, mut ids, mut ranks) =
        (vec![0f32; positions], vec![0f32; positions * 20], vec![0i32; positions * 20], vec![0i32; positions]);
    let name = |what: &str| BenchmarkId::new(what, format!("B={b}/K={k}/V={vocab}/bf16-draft"));
    let (plain, block) = (batch.call(Verification::Token), batch.call(Verification::Block));
    group.bench_function(name("plain"), |bench| bench.iter(|| verify(&plain, &mut tokens, &mut num_emitted)));
    group.bench_function(name("processed logprobs"), |bench| {
        bench.iter(|| {
            let logprobs = Logprobs::none().with_processed(&mut processed);
            let mut out = RejectionOutput::new(&mut tokens, &mut num_emitted).with_logprobs(logprobs);
            Cpu.rejection_sample(black_box(&plain), &mut out).expect("rejection_sample");
        })
    });
    group.bench_function(name("top-20 logprobs"), |bench| {
        bench.iter(|| {
            let logprobs = Logprobs::none().with_top(20, Distribution::Processed, &mut top, &mut ids, &mut ranks);
            let mut out = RejectionOutput::new(&mut tokens, &mut num_emitted).with_logprobs(logprobs);
            Cpu.rejection_sample(black_box(&plain), &mut out).expect("rejection_sample");
        })
    });
    group.bench_function(name("block verification"), |bench| {
        bench.iter(|| verify(&block, &mut tokens, &mut num_emitted))
    });
    group.finish();
}

/// A verify call's inputs: `b` requests of `k` drafts over `vocab` ids, at
/// T = 0.8, f32 target rows `normal(salt)`, bf16 draft logits `0.8·target +
/// 0.6·normal(salt + 1)` laid out `[b, k, vocab]`, each draft its draft row's
/// argmax (a plausible proposal).
struct VerifyBatch {
    b: usize,
    k: usize,
    vocab: usize,
    target: Vec<f32>,
    draft: Vec<bf16>,
    drafts: Vec<i32>,
    offsets: Vec<i32>,
    slots: Vec<i32>,
    pos: Vec<u64>,
    temperature: Vec<f32>,
    seed: Vec<u64>,
}

impl VerifyBatch {
    fn new(b: usize, k: usize, vocab: usize, salt: u64) -> Self {
        let rows = b * (k + 1);
        let target = normal(salt, rows * vocab);
        let noise = normal(salt + 1, b * k * vocab);
        let mut draft = vec![bf16::ZERO; b * k * vocab];
        let mut drafts = vec![0i32; rows];
        for r in 0..b {
            for i in 0..k {
                let (row, at) = (r * (k + 1) + i, (r * k + i) * vocab);
                for x in 0..vocab {
                    draft[at + x] = bf16::from_f32(0.8 * target[row * vocab + x] + 0.6 * noise[at + x]);
                }
                let d = &draft[at..at + vocab];
                drafts[row] = (0..vocab).max_by(|&a, &c| d[a].total_cmp(&d[c]).then(c.cmp(&a))).unwrap() as i32;
            }
        }
        VerifyBatch {
            b,
            k,
            vocab,
            target,
            draft,
            drafts,
            offsets: (0..=b as i32).map(|r| r * (k as i32 + 1)).collect(),
            slots: (0..b as i32).collect(),
            pos: (0..rows as u64).collect(),
            temperature: vec![T; b],
            seed: vec![7u64; b],
        }
    }

    fn call(&self, verification: Verification<'static>) -> RejectionSample<'_, Host> {
        let (b, k, vocab) = (self.b, self.k, self.vocab);
        RejectionSample {
            target: Logits::new(&self.target, b * (k + 1), vocab),
            offsets: &self.offsets[..],
            drafts: &self.drafts[..],
            slots: &self.slots[..],
            pos: &self.pos[..],
            params: SamplingParams::new(&self.temperature, &self.seed),
            max_drafts: k,
            verification,
            draft_logits: Some(DraftLogits::new(&self.draft, DraftLogitsShape::dense(b, k, vocab))),
        }
    }
}

/// One `Cpu::rejection_sample` call of `args` into `tokens` and `num_emitted`.
fn verify(args: &RejectionSample<'_, Host>, tokens: &mut [i32], num_emitted: &mut [i32]) -> i32 {
    Cpu.rejection_sample(black_box(args), &mut RejectionOutput::new(tokens, &mut *num_emitted))
        .expect("rejection_sample");
    black_box(num_emitted[0])
}

/// The filter settings of issue 28's speed targets, by name: `(top_k, top_p, min_p)`.
const FILTERS: [(&str, i32, f32, f32); 5] = [
    ("off", 0, 1.0, 0.0),
    ("k=50 P=0.9", 50, 0.9, 0.0),
    ("k=20", 20, 1.0, 0.0),
    ("m=0.05", 0, 1.0, 0.05),
    ("P=0.95", 0, 0.95, 0.0),
];

fn filters(c: &mut Criterion) {
    let mut group = c.benchmark_group("filters_cpu");
    let rows = 8;
    let logits = normal(1, rows * V);
    let slots: Vec<i32> = (0..rows as i32).collect();
    let pos: Vec<u64> = (100..100 + rows as u64).collect();
    let (temperature, seed) = (vec![T; rows], vec![7u64; rows]);
    for (name, k, p, m) in FILTERS {
        let (k, p, m) = (vec![k; rows], vec![p; rows], vec![m; rows]);
        let table = || Filters::none().with_top_k(&k).with_top_p(&p).with_min_p(&m);
        group.throughput(Throughput::Elements(rows as u64));
        let params = SamplingParams::new(&temperature, &seed).with_filters(table());
        let call = GumbelSample::new(Logits::new(&logits, rows, V), &slots, &pos, params);
        let mut tokens = vec![0i32; rows];
        group.bench_function(
            BenchmarkId::new("gumbel_sample random T=0.8", format!("{name}/rows={rows}/V={V}")),
            |b| {
                b.iter(|| {
                    Cpu.gumbel_sample(black_box(&call), &mut GumbelOutput::new(&mut tokens)).expect("gumbel_sample");
                    black_box(tokens[0])
                })
            },
        );
    }
    let (b, kd, vocab) = (4usize, 3usize, 32_000usize);
    let rows = b * (kd + 1);
    let target = normal(3, rows * vocab);
    let noise = normal(4, rows * vocab);
    let draft: Vec<bf16> = (0..b * kd * vocab).map(|e| bf16::from_f32(0.8 * target[e] + 0.6 * noise[e])).collect();
    let offsets: Vec<i32> = (0..=b as i32).map(|r| r * (kd as i32 + 1)).collect();
    // Each request's drafts: its draft rows' argmax (kept by every setting).
    let drafts: Vec<i32> = (0..rows)
        .map(|j| {
            let (r, i) = (j / (kd + 1), j % (kd + 1));
            if i == kd {
                return -1;
            }
            let row = &draft[(r * kd + i) * vocab..(r * kd + i + 1) * vocab];
            (0..vocab).max_by(|&a, &c| row[a].total_cmp(&row[c]).then(c.cmp(&a))).unwrap() as i32
        })
        .collect();
    let (slots, pos, temperature, seed) =
        ((0..b as i32).collect::<Vec<_>>(), (0..rows as u64).collect::<Vec<_>>(), vec![T; b], vec![7u64; b]);
    for (name, k, p, m) in FILTERS {
        let (k, p, m) = (vec![k; b], vec![p; b], vec![m; b]);
        let table = || Filters::none().with_top_k(&k).with_top_p(&p).with_min_p(&m);
        group.throughput(Throughput::Elements(rows as u64));
        let args = RejectionSample {
            target: Logits::new(&target, rows, vocab),
            offsets: &offsets[..],
            drafts: &drafts[..],
            slots: &slots[..],
            pos: &pos[..],
            params: SamplingParams::new(&temperature, &seed).with_filters(table()),
            max_drafts: kd,
            verification: Verification::Token,
            draft_logits: Some(DraftLogits::new(&draft, DraftLogitsShape::dense(b, kd, vocab)).with_filters(table())),
        };
        let (mut tokens, mut num_emitted) = (vec![0i32; rows], vec![0i32; b]);
        let id = BenchmarkId::new("rejection_sample bf16-draft T=0.8", format!("{name}/B={b}/K={kd}/V={vocab}"));
        group.bench_function(id, |bench| bench.iter(|| verify(&args, &mut tokens, &mut num_emitted)));
    }
    group.finish();
}

/// A rayon pool of one thread, and one of every core of the machine (if more than one).
fn pools() -> Vec<(usize, rayon::ThreadPool)> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sizes = if cores > 1 { vec![1, cores] } else { vec![1] };
    sizes.into_iter().map(|n| (n, rayon::ThreadPoolBuilder::new().num_threads(n).build().expect("pool"))).collect()
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu_threads");
    let pools = pools();

    // gumbel_sample, random rows.
    let rows = 64;
    let logits = normal(4, rows * V);
    let slots: Vec<i32> = (0..rows as i32).collect();
    let pos: Vec<u64> = (100..100 + rows as u64).collect();
    let (temperature, seed) = (vec![T; rows], vec![7u64; rows]);
    let call = GumbelSample::new(Logits::new(&logits, rows, V), &slots, &pos, SamplingParams::new(&temperature, &seed));
    let mut tokens = vec![0i32; rows];
    group.throughput(Throughput::Elements(rows as u64));
    for (n, pool) in &pools {
        let id = BenchmarkId::new("gumbel_sample random T=0.8", format!("rows={rows}/V={V}/f32/threads={n}"));
        group.bench_function(id, |b| {
            pool.install(|| {
                b.iter(|| {
                    Cpu.gumbel_sample(black_box(&call), &mut GumbelOutput::new(&mut tokens)).expect("gumbel_sample");
                    black_box(tokens[0])
                })
            })
        });
    }
    drop(logits);

    // rejection_sample, bf16 draft logits 0.8·target + 0.6·noise laid out [B, K, V].
    let (b, k) = (16usize, 4usize);
    let rows = b * (k + 1);
    let batch = VerifyBatch::new(b, k, V, 5);
    let args = batch.call(Verification::Token);
    let mut tokens = vec![0i32; rows];
    let mut num_emitted = vec![0i32; b];
    group.throughput(Throughput::Elements(rows as u64));
    for (n, pool) in &pools {
        let id = BenchmarkId::new("rejection_sample bf16-draft T=0.8", format!("B={b}/K={k}/V={V}/f32/threads={n}"));
        group.bench_function(id, |bench| pool.install(|| bench.iter(|| verify(&args, &mut tokens, &mut num_emitted))));
    }
    group.finish();
}

fn overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("host_overhead");
    group.sample_size(50);

    // A whole call on the smallest input: validation plus one row of one id.
    {
        let logits = [0.5f32];
        let (slots, pos, temperature, seed) = ([0i32], [3u64], [T], [7u64]);
        let backend = Backend::cpu();
        let mut tokens = [0i32];
        group.bench_function("gumbel_sample rows=1 V=1 (Backend::cpu)", |b| {
            b.iter(|| {
                let call = GumbelSample::new(
                    Logits::new(&logits, 1, 1),
                    &slots,
                    &pos,
                    SamplingParams::new(&temperature, &seed),
                );
                backend.gumbel_sample(black_box(&call), &mut GumbelOutput::new(&mut tokens)).expect("gumbel_sample");
                black_box(tokens[0])
            })
        });
    }

    // Validation alone: `rows` rows with per-row draft columns, the last one out of range, so
    // every shape, slot, temperature and column check runs and the call fails before sampling.
    for rows in [1usize, 64, 1024] {
        let vocab = 1024;
        let logits = vec![0f32; vocab];
        let slots: Vec<i32> = (0..rows as i32).collect();
        let pos: Vec<u64> = (0..rows as u64).collect();
        let temperature = vec![T; rows];
        let seed = vec![7u64; rows];
        let mut columns = vec![1i32; rows];
        columns[rows - 1] = 2; // the draft logits have k = 2 columns
        let mut draft_logits = vec![bf16::ZERO; rows * 2 * vocab];
        let mut tokens = vec![0i32; rows];
        let mut call = || {
            let args = GumbelSample::new(
                Logits::new(&logits, rows, vocab).with_row_stride(0),
                &slots,
                &pos,
                SamplingParams::new(&temperature, &seed),
            )
            .drafting();
            let mut out = GumbelOutput::new(&mut tokens).with_draft_logits(
                DraftLogitsMut::new(&mut draft_logits, DraftLogitsShape::dense(rows, 2, vocab)),
                Column::per_row(&columns),
            );
            Cpu.gumbel_sample(black_box(&args), &mut out)
        };
        let err = call().expect_err("the last row's column is out of range");
        assert!(err.to_string().contains(&format!("row {}", rows - 1)), "{err}");
        group.throughput(Throughput::Elements(rows as u64));
        group.bench_function(BenchmarkId::new("gumbel_sample validation, fails at the last check", rows), |b| {
            b.iter(|| black_box(call().is_err()))
        });
    }

    // The same for verification: B requests of K = 7, the last draft out of range.
    for b in [1usize, 64, 256] {
        let (vocab, k) = (1024usize, 7usize);
        let rows = b * (k + 1);
        let target = vec![0f32; vocab];
        let offsets: Vec<i32> = (0..=b as i32).map(|r| r * (k as i32 + 1)).collect();
        let mut drafts = vec![5i32; rows];
        drafts[rows - 2] = vocab as i32; // the last request's last draft (rows - 1 is its bonus row)
        let slots: Vec<i32> = (0..b as i32).collect();
        let pos: Vec<u64> = (0..rows as u64).collect();
        let temperature = vec![T; b];
        let seed = vec![7u64; b];
        let mut tokens = vec![0i32; b * (k + 1)];
        let mut num_emitted = vec![0i32; b];
        let args = RejectionSample {
            target: Logits::new(&target, rows, vocab).with_row_stride(0),
            offsets: &offsets[..],
            drafts: &drafts[..],
            slots: &slots[..],
            pos: &pos[..],
            params: SamplingParams::new(&temperature, &seed),
            max_drafts: k,
            verification: Verification::Token,
            draft_logits: None,
        };
        let mut call =
            || Cpu.rejection_sample(black_box(&args), &mut RejectionOutput::new(&mut tokens, &mut num_emitted));
        let err = call().expect_err("the last draft is out of range");
        assert!(err.to_string().contains(&format!("row {}", rows - 2)), "{err}");
        group.throughput(Throughput::Elements(b as u64));
        group.bench_function(BenchmarkId::new("rejection_sample validation, fails at the last check", b), |bench| {
            bench.iter(|| black_box(call().is_err()))
        });
    }
    group.finish();
}

/// The `outputs_cpu` call split by vocabulary over `P = 2` ranks, beside the
/// unsharded call (`Cpu::sharded_rejection_sample`, REFERENCE §9): as it is,
/// with top-k 50 and top-p 0.9 on target and draft, and with processed
/// log-probabilities and a top-5.
fn sharded(c: &mut Criterion) {
    let mut group = c.benchmark_group("sharded_cpu");
    let (vocab, k, b) = (32_000usize, 3usize, 4usize);
    let batch = VerifyBatch::new(b, k, vocab, 11);
    let rows = b * (k + 1);
    let (top_k, top_p) = (vec![50i32; b], vec![0.9f32; b]);
    /// `call` with the filters `top` (top-k, top-p per slot) on target and draft, if any.
    fn with_filters<'a>(
        call: RejectionSample<'a, Host>,
        top: Option<(&'a [i32], &'a [f32])>,
    ) -> RejectionSample<'a, Host> {
        let Some((top_k, top_p)) = top else { return call };
        let filters = || Filters::none().with_top_k(top_k).with_top_p(top_p);
        let draft_logits = call.draft_logits.map(|d| d.with_filters(filters()));
        RejectionSample { params: call.params.with_filters(filters()), draft_logits, ..call }
    }
    // Each rank's columns of the target rows and of the draft rows.
    let ranges = [0..vocab / 2, vocab / 2..vocab];
    let columns = |ranges: &std::ops::Range<usize>| {
        let of = |n: usize, width| (0..n).flat_map(move |r| r * width + ranges.start..r * width + ranges.end);
        let target: Vec<f32> = of(rows, vocab).map(|i| batch.target[i]).collect();
        let draft: Vec<bf16> = of(b * k, vocab).map(|i| batch.draft[i]).collect();
        (target, draft)
    };
    let parts: Vec<(Vec<f32>, Vec<bf16>)> = ranges.iter().map(columns).collect();
    const TOP: usize = 5;
    for (suffix, filtered, logprobs) in
        [("", false, false), ("/top-k 50 top-p 0.9", true, false), ("/logprobs top-5", false, true)]
    {
        let top = filtered.then_some((&top_k[..], &top_p[..]));
        let name = |what: &str| BenchmarkId::new(what, format!("B={b}/K={k}/V={vocab}/bf16-draft{suffix}"));
        // `args` verified into outputs of its own (with log-probabilities where asked).
        let run = |args: &RejectionSample<'_, Host>,
                   call: &mut dyn FnMut(&RejectionSample<'_, Host>, &mut RejectionOutput<'_, Host>)| {
            let (mut tokens, mut num_emitted) = (vec![0i32; rows], vec![0i32; b]);
            let (mut processed, mut top, mut ids, mut ranks) =
                (vec![0f32; rows], vec![0f32; rows * TOP], vec![0i32; rows * TOP], vec![0i32; rows]);
            let mut out = RejectionOutput::new(&mut tokens, &mut num_emitted);
            if logprobs {
                let l = Logprobs::none().with_processed(&mut processed);
                out = out.with_logprobs(l.with_top(TOP, Distribution::Processed, &mut top, &mut ids, &mut ranks));
            }
            call(black_box(args), &mut out);
            black_box(num_emitted[0])
        };
        let whole = with_filters(batch.call(Verification::Token), top);
        let unsharded = |args: &RejectionSample<'_, Host>, out: &mut RejectionOutput<'_, Host>| {
            Cpu.rejection_sample(args, out).expect("rejection_sample")
        };
        group.bench_function(name("unsharded"), |bench| bench.iter(|| run(&whole, &mut { unsharded })));
        let batch = &batch;
        // Rank `r`'s call over `exchange`.
        let rank = |r: usize, exchange: &mut dyn Exchange<Host>| {
            let ((target, draft), range) = (&parts[r], &ranges[r]);
            let width = range.len();
            let args = RejectionSample {
                target: Logits::new(target, rows, width),
                draft_logits: Some(DraftLogits::new(draft, DraftLogitsShape::dense(b, k, width))),
                ..batch.call(Verification::Token)
            };
            let args = with_filters(args, top);
            let shard = specdec::shard::Shard { offset: range.start, vocab };
            run(&args, &mut |args, out| Cpu.sharded_rejection_sample(shard, exchange, args, out).expect("sharded call"))
        };
        let sent = specdec_suite::sharding::in_ranks(2, |r, exchange| {
            let mut counted = Counted { inner: exchange, sent: Vec::new() };
            rank(r, &mut counted);
            counted.sent
        });
        eprintln!("sharded_cpu{suffix}: each rank sends {:?} bytes in its exchanges, in order", sent[0]);
        group.bench_function(name("P=2 in-process"), |bench| {
            bench
                .iter(|| specdec_suite::sharding::in_ranks(2, |r, exchange| rank(r, exchange)).into_iter().sum::<i32>())
        });
    }
    group.finish();
}

/// An exchange that counts the bytes its rank sends, exchange by exchange.
struct Counted<'e> {
    inner: &'e mut dyn Exchange<Host>,
    sent: Vec<usize>,
}

impl Exchange<Host> for Counted<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn ranks(&self) -> usize {
        self.inner.ranks()
    }

    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> specdec::Result<()> {
        self.sent.push(send.len());
        self.inner.all_gather(send, recv)
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = gumbel, memory_bound, rejection, threads, filters, outputs, sharded, overhead
}
criterion_main!(benches);
