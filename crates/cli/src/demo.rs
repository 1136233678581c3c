//! `specdec demo`: a synthetic speculative-decoding loop.
//!
//! Each step, for `B` requests: `K` drafting calls of `gumbel_sample`
//! (drafting mode, one row per request, the draft model's logits, writing
//! column `i` of the request's slot in the draft logits), then one
//! `rejection_sample` call verifying the `K` drafts plus a bonus row per
//! request against the target logits. Each request advances by the tokens it
//! emitted. Every fourth request (3, 7, ...) is greedy; the others sample at
//! `--temperature`, drafting and verifying with the filters `--top-k`,
//! `--top-p` and `--min-p` (SPEC §7; greedy requests ignore them). The
//! emitted tokens are checked: greedy ones must be the target's argmax,
//! random ones must follow the filtered target distribution (chi-square over
//! the tokens' ranks, see `model.rs`).
//!
//! Progress goes to stderr, never stdout: on a terminal a bar, shown once the
//! run has taken a second (not with `--json`); off a terminal a plain line
//! (`demo: 30% (30/100 verify calls, 4.1 s)`) at each tenth of the run, once
//! the run has taken [`PROGRESS_AFTER`], or the milliseconds in the
//! environment variable `SPECDEC_PROGRESS_AFTER_MS` (`0`: from the start).

use crate::backend::{BackendArg, Chosen};
use crate::error::{Failure, Result};
use crate::filters::SlotFilters;
use crate::model::{Model, PROFILES, mix};
use crate::report::{Greedy, Position, Report, Sizes};
use crate::text::{count, float};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use specdec::filter::{self, Filter};
use specdec::{
    Backend, Column, DraftLogits, DraftLogitsMut, DraftLogitsShape, GumbelOutput, GumbelSample, Logits, Logprobs,
    RejectionOutput, RejectionSample, SamplingParams, Verification,
};
use specdec_stats::chi_square_groups;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How long a run goes before progress lines appear when stderr is not a terminal.
const PROGRESS_AFTER: Duration = Duration::from_secs(2);
/// The environment variable that overrides [`PROGRESS_AFTER`], in milliseconds.
const PROGRESS_AFTER_VAR: &str = "SPECDEC_PROGRESS_AFTER_MS";

/// A synthetic speculative-decoding loop: acceptance, speed and exactness
///
/// Each step drafts K tokens per request with `gumbel_sample` (drafting mode,
/// filling the draft logits) and verifies them with `rejection_sample`.
/// Prints the acceptance rate per draft position, tokens per verify, time per
/// call, and checks the emitted tokens against the target (chi-square against
/// the filtered target for sampled requests, the argmax chain for greedy ones).
///
/// Progress goes to stderr: a bar on a terminal (not with --json); otherwise a
/// line at each tenth of the run once it has lasted 2 s, or the milliseconds in
/// the environment variable SPECDEC_PROGRESS_AFTER_MS.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    backend: BackendArg,
    // The numbers are parsed wide and signed, negative ones too (a float flag
    // takes any value that follows it, `-1e-40` or `-inf` included), so that
    // `check` can say what is wrong with them, naming the flag.
    /// Requests per batch (B); requests 3, 7, 11, ... are greedy.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    batch: i64,
    /// Drafts per request per step (K, 1 ..= 64).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    drafts: i64,
    /// Vocabulary size (V).
    #[arg(long, default_value_t = 128_256, allow_negative_numbers = true)]
    vocab: i64,
    /// Speculative steps (each: K drafting calls and one verification).
    #[arg(long, default_value_t = 100, allow_negative_numbers = true)]
    steps: i64,
    /// Temperature of the non-greedy requests (0: every request is greedy).
    #[arg(long, default_value_t = 0.8, allow_hyphen_values = true)]
    temperature: f32,
    /// Seed of the synthetic models and of the requests' sampling seeds (0 ..= 2^64 - 1).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    seed: i128,
    /// Standard deviation of the noise the draft model adds to the target's
    /// logits (0: the draft equals the target and every draft is accepted).
    #[arg(long, default_value_t = 0.5, allow_hyphen_values = true)]
    draft_noise: f32,
    /// Sample (draft and verify) from the top_k most likely tokens of each
    /// row, ties kept (0: off).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    top_k: i64,
    /// Sample from the most likely tokens of each row that hold top_p of its
    /// probability, ties kept; in (0, 1] (1: off).
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    top_p: f32,
    /// Sample from the tokens of each row at least min_p times as likely as
    /// its most likely one; in [0, 1] (0: off).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    min_p: f32,
    /// Verify one-hot drafts (no draft logits, like EAGLE/MTP/n-gram drafters).
    #[arg(long)]
    one_hot: bool,
    /// Block verification (the drafts decided jointly; as exact, more
    /// accepted): also reports the token-by-token rule's tokens per verify
    /// on the same inputs.
    #[arg(long)]
    block: bool,
    /// Print the results as JSON on stdout (no progress bar).
    #[arg(long)]
    json: bool,
}

/// The demo's parameters, checked (`DemoArgs::check`).
#[derive(Debug)]
struct Config {
    batch: usize,
    drafts: usize,
    vocab: usize,
    steps: usize,
    temperature: f32,
    seed: u64,
    draft_noise: f32,
    /// The filters of every random request (SPEC §7).
    filter: Filter,
    one_hot: bool,
    block: bool,
}

impl DemoArgs {
    fn check(&self) -> Result<Config> {
        let bad = |what: String| Err(Failure::input(what));
        let batch = whole("--batch", self.batch, 1, usize::MAX)?;
        let drafts = whole("--drafts", self.drafts, 1, 64)?;
        let vocab = whole("--vocab", self.vocab, 1, specdec::MAX_VOCAB)?;
        let steps = whole("--steps", self.steps, 1, usize::MAX)?;
        let Ok(seed) = u64::try_from(self.seed) else {
            return bad(format!("--seed must be in 0 ..= {} (2^64 - 1), got {}", u64::MAX, self.seed));
        };
        if !specdec::status::temperature_is_valid(self.temperature) {
            return bad(format!(
                "--temperature must be 0 (all greedy) or a positive, finite, normal value (at least {:e}), got {}",
                f32::MIN_POSITIVE,
                float(self.temperature)
            ));
        }
        if !(self.draft_noise.is_finite() && self.draft_noise >= 0.0) {
            return bad(format!("--draft-noise must be a finite value >= 0, got {}", float(self.draft_noise)));
        }
        // The library takes top_k as an i32.
        let Some(top_k) = u32::try_from(self.top_k).ok().filter(|&k| k <= i32::MAX as u32) else {
            return bad(format!("--top-k must be in 0 ..= {} (0: off), got {}", i32::MAX, self.top_k));
        };
        if !filter::top_p_is_valid(self.top_p) {
            return bad(format!("--top-p must be in (0, 1] (1: off), got {}", float(self.top_p)));
        }
        if !filter::min_p_is_valid(self.min_p) {
            return bad(format!("--min-p must be in [0, 1] (0: off), got {}", float(self.min_p)));
        }
        // The target, draft-logits and draft-row buffers: B·(2K + 2)·V floats (this also bounds B).
        let elements = (batch as u128) * (2 * drafts as u128 + 2) * vocab as u128;
        if elements > 1 << 32 {
            return bad("--batch × --drafts × --vocab is too large for the demo's buffers (over 16 GiB)".into());
        }
        Ok(Config {
            batch,
            drafts,
            vocab,
            steps,
            temperature: self.temperature,
            seed,
            draft_noise: self.draft_noise,
            filter: Filter { top_k, top_p: self.top_p, min_p: self.min_p },
            one_hot: self.one_hot,
            block: self.block,
        })
    }
}

/// `value`, given for `flag`, as a count in `min ..= max` (`usize::MAX`: no upper bound).
fn whole(flag: &str, value: i64, min: usize, max: usize) -> Result<usize> {
    match usize::try_from(value) {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ if max == usize::MAX => Err(Failure::input(format!("{flag} must be at least {min}, got {value}"))),
        _ => Err(Failure::input(format!("{flag} must be in {min} ..= {max}, got {value}"))),
    }
}

/// The progress threshold off a terminal: `SPECDEC_PROGRESS_AFTER_MS` when set, else [`PROGRESS_AFTER`].
fn progress_after() -> Result<Duration> {
    let Some(value) = std::env::var_os(PROGRESS_AFTER_VAR) else { return Ok(PROGRESS_AFTER) };
    match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => {
            Err(Failure::input(format!("{PROGRESS_AFTER_VAR} must be a whole number of milliseconds, got {value:?}")))
        }
    }
}

/// Counters gathered over the run.
#[derive(Default)]
struct Tally {
    /// Per draft position: (reached, accepted) for random and greedy requests.
    random: Vec<(u64, u64)>,
    greedy: Vec<(u64, u64)>,
    tokens: u64,
    /// The emitted tokens' processed log-probabilities (REFERENCE §8), summed.
    logprob_sum: f64,
    verifies: u64,
    /// With `--block`: the tokens the draft-by-draft rule emits on the same inputs.
    token_rule_tokens: u64,
    sample: Duration,
    sample_calls: u64,
    verify: Duration,
    verify_calls: u64,
    model: Duration,
    /// Per profile: how often each rank was emitted by a random request.
    ranks: Vec<Vec<u64>>,
    greedy_tokens: u64,
    greedy_mismatches: u64,
    first_mismatch: Option<String>,
}

pub fn run(args: &DemoArgs) -> Result<()> {
    let config = args.check()?;
    let after = progress_after()?;
    let chosen = args.backend.open()?;
    let mut demo = Demo::new(&config, &chosen.backend);
    let start = Instant::now();
    let mut progress = if std::io::stderr().is_terminal() {
        Progress::bar(config.steps as u64, !args.json, start)
    } else {
        Progress::lines(config.steps as u64, after, start)
    };
    for _ in 0..config.steps {
        for i in 0..config.drafts {
            demo.draft(i)?;
        }
        demo.verify()?;
        demo.record()?;
        progress.step();
    }
    progress.finish();
    let report = demo.report(&chosen, start.elapsed());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("the report serialises"));
    } else {
        report.print();
    }
    if report.passed {
        Ok(())
    } else {
        Err(Failure::run("the exactness check failed: the emitted tokens do not follow the target"))
    }
}

/// The loop's state: the synthetic models, the per-request tables, the
/// buffers every call reuses, and the tally.
struct Demo<'a> {
    backend: &'a Backend,
    args: &'a Config,
    model: Model,
    greedy: Vec<bool>,
    temperature: Vec<f32>,
    seeds: Vec<u64>,
    /// Every slot's filters, given to the drafter, the target and the draft logits alike.
    filters: SlotFilters,
    slots: Vec<i32>,
    /// Each request's length: the position of its next token.
    len: Vec<u64>,
    /// `[B·(K+1), V]`: request r's rows `r·(K+1) ..`, K draft rows then the bonus row.
    target: Vec<f32>,
    /// `[B, V]`: the draft model's row of each request in the current drafting call.
    draft_rows: Vec<f32>,
    /// `[B, K, V]`: the draft logits (empty with `--one-hot`).
    draft_logits: Vec<f32>,
    offsets: Vec<i32>,
    /// `[B·(K+1)]`: drafts by target row (bonus rows hold -1).
    drafts: Vec<i32>,
    pos: Vec<u64>,
    draft_pos: Vec<u64>,
    draft_tokens: Vec<i32>,
    tokens: Vec<i32>,
    num_emitted: Vec<i32>,
    accepted: Vec<i32>,
    /// `[B·(K+1)]`: each emitted token's processed log-probability.
    logprobs: Vec<f32>,
    tally: Tally,
}

impl<'a> Demo<'a> {
    fn new(args: &'a Config, backend: &'a Backend) -> Self {
        let (b, k, v) = (args.batch, args.drafts, args.vocab);
        let greedy: Vec<bool> = (0..b).map(|r| r % 4 == 3 || args.temperature == 0.0).collect();
        Demo {
            backend,
            args,
            model: Model::new(v, args.seed, args.draft_noise),
            temperature: greedy.iter().map(|&g| if g { 0.0 } else { args.temperature }).collect(),
            greedy,
            seeds: (0..b as u64).map(|r| mix(args.seed ^ mix(r))).collect(),
            filters: SlotFilters::uniform(args.filter, b, v),
            slots: (0..b as i32).collect(),
            // Prompt lengths: each request starts at its own position.
            len: (0..b as u64).map(|r| 16 + 5 * r).collect(),
            target: vec![0.0; b * (k + 1) * v],
            draft_rows: vec![0.0; b * v],
            draft_logits: if args.one_hot { Vec::new() } else { vec![0.0; b * k * v] },
            offsets: (0..=b).map(|r| (r * (k + 1)) as i32).collect(),
            drafts: vec![-1; b * (k + 1)],
            pos: vec![0; b * (k + 1)],
            draft_pos: vec![0; b],
            draft_tokens: vec![0; b],
            tokens: vec![0; b * (k + 1)],
            num_emitted: vec![0; b],
            accepted: vec![0; b],
            logprobs: vec![0.0; b * (k + 1)],
            tally: Tally {
                random: vec![(0, 0); k],
                greedy: vec![(0, 0); k],
                ranks: vec![vec![0; v]; PROFILES.len()],
                ..Tally::default()
            },
        }
    }

    /// Drafting call `i`: one row per request at position `len + i`, its
    /// logits stored in column `i` of the request's slot in the draft logits.
    fn draft(&mut self, i: usize) -> Result<()> {
        let (b, k, v) = (self.args.batch, self.args.drafts, self.args.vocab);
        let t = Instant::now();
        for r in 0..b {
            let p = self.len[r] + i as u64;
            let row = self.model.row(r, p);
            let target = &mut self.target[(r * (k + 1) + i) * v..][..v];
            self.model.target(&row, target);
            self.model.draft(&row, target, &mut self.draft_rows[r * v..][..v]);
            self.draft_pos[r] = p;
        }
        self.tally.model += t.elapsed();
        let logits = Logits::new(&self.draft_rows, b, v);
        let params = SamplingParams::new(&self.temperature, &self.seeds).with_filters(self.filters.view());
        let call = GumbelSample::new(logits, &self.slots, &self.draft_pos, params).drafting();
        let mut out = GumbelOutput::new(&mut self.draft_tokens);
        if !self.args.one_hot {
            let draft = DraftLogitsMut::new(&mut self.draft_logits, DraftLogitsShape::dense(b, k, v));
            out = out.with_draft_logits(draft, Column::All(i));
        }
        let t = Instant::now();
        self.backend.gumbel_sample(&call, &mut out).map_err(|e| Failure::library("gumbel_sample", e))?;
        self.tally.sample += t.elapsed();
        self.tally.sample_calls += 1;
        for r in 0..b {
            self.drafts[r * (k + 1) + i] = self.draft_tokens[r];
        }
        Ok(())
    }

    /// The verification call: every request's K drafts and its bonus row.
    fn verify(&mut self) -> Result<()> {
        let (b, k, v) = (self.args.batch, self.args.drafts, self.args.vocab);
        let t = Instant::now();
        for r in 0..b {
            let row = self.model.row(r, self.len[r] + k as u64);
            self.model.target(&row, &mut self.target[(r * (k + 1) + k) * v..][..v]);
            for i in 0..=k {
                self.pos[r * (k + 1) + i] = self.len[r] + i as u64;
            }
        }
        self.tally.model += t.elapsed();
        let shape = DraftLogitsShape::dense(b, k, v);
        let mut call = RejectionSample {
            target: Logits::new(&self.target, b * (k + 1), v),
            offsets: &self.offsets[..],
            drafts: &self.drafts[..],
            slots: &self.slots[..],
            pos: &self.pos[..],
            params: SamplingParams::new(&self.temperature, &self.seeds).with_filters(self.filters.view()),
            max_drafts: k,
            verification: Verification::Token,
            // The drafts were drawn with the same filters: q is the draft logits' kept sets (SPEC §7.3).
            draft_logits: (!self.args.one_hot)
                .then(|| DraftLogits::new(&self.draft_logits, shape).with_filters(self.filters.view())),
        };
        if self.args.block {
            // The draft-by-draft rule on the same call, for the gain; its tokens are not kept.
            let (mut tokens, mut emitted) = (vec![0i32; self.tokens.len()], vec![0i32; b]);
            let mut out = RejectionOutput::new(&mut tokens, &mut emitted);
            self.backend.rejection_sample(&call, &mut out).map_err(|e| Failure::library("rejection_sample", e))?;
            self.tally.token_rule_tokens += emitted.iter().map(|&e| e as u64).sum::<u64>();
            call.verification = Verification::Block;
        }
        let mut out = RejectionOutput::new(&mut self.tokens, &mut self.num_emitted)
            .with_accepted(&mut self.accepted)
            .with_logprobs(Logprobs::none().with_processed(&mut self.logprobs));
        let t = Instant::now();
        self.backend.rejection_sample(&call, &mut out).map_err(|e| Failure::library("rejection_sample", e))?;
        self.tally.verify += t.elapsed();
        self.tally.verify_calls += 1;
        Ok(())
    }

    /// Counts acceptances, checks and tallies the emitted tokens, and
    /// advances every request by the tokens it emitted.
    fn record(&mut self) -> Result<()> {
        let (b, k, v) = (self.args.batch, self.args.drafts, self.args.vocab);
        for r in 0..b {
            let (emitted, accepted) = (self.num_emitted[r], self.accepted[r]);
            if !(1..=k as i32 + 1).contains(&emitted) || accepted != emitted - 1 {
                return Err(Failure::run(format!(
                    "request {r}: num_emitted = {emitted} and accepted = {accepted} are inconsistent (K = {k})"
                )));
            }
            let per_position = if self.greedy[r] { &mut self.tally.greedy } else { &mut self.tally.random };
            for (i, (reached, taken)) in per_position.iter_mut().enumerate().take(emitted as usize) {
                *reached += 1;
                *taken += u64::from(i < accepted as usize);
            }
            for j in 0..emitted as usize {
                let token = self.tokens[r * (k + 1) + j];
                let p = self.len[r] + j as u64;
                if !(0..v as i64).contains(&(token as i64)) {
                    return Err(Failure::run(format!(
                        "request {r} emitted token {token} at position {p}, outside 0..{v}"
                    )));
                }
                let logprob = self.logprobs[r * (k + 1) + j];
                if !logprob.is_finite() || logprob > 0.0 {
                    return Err(Failure::run(format!(
                        "request {r} emitted token {token} at position {p} with log-probability {logprob}"
                    )));
                }
                self.tally.logprob_sum += f64::from(logprob);
                let row = self.model.row(r, p);
                let rank = self.model.rank(&row, token as usize);
                if self.greedy[r] {
                    self.tally.greedy_tokens += 1;
                    if rank != 0 {
                        self.tally.greedy_mismatches += 1;
                        self.tally.first_mismatch.get_or_insert_with(|| {
                            format!("request {r}, position {p}: token {token} has rank {rank}, not the argmax")
                        });
                    }
                } else {
                    self.tally.ranks[row.profile][rank] += 1;
                }
            }
            self.tally.tokens += emitted as u64;
            self.tally.verifies += 1;
            self.len[r] += emitted as u64;
        }
        Ok(())
    }

    fn report(self, chosen: &Chosen, elapsed: Duration) -> Report {
        let args = self.args;
        let t = self.tally;
        let rate = |(reached, taken): (u64, u64)| (reached > 0).then(|| taken as f64 / reached as f64);
        let acceptance = (0..args.drafts)
            .map(|i| {
                let (r, g) = (t.random[i], t.greedy[i]);
                let all = (r.0 + g.0, r.1 + g.1);
                Position {
                    position: i + 1,
                    reached: all.0,
                    accepted: all.1,
                    rate: rate(all),
                    rate_random: rate(r),
                    rate_greedy: rate(g),
                }
            })
            .collect();
        let accepted: u64 = t.random.iter().chain(&t.greedy).map(|p| p.1).sum();
        let chi_square = (args.temperature > 0.0)
            .then(|| {
                let probs: Vec<Vec<f64>> = (0..PROFILES.len())
                    .map(|p| filtered_target(self.model.profile(p), args.temperature, args.filter))
                    .collect();
                chi_square_groups(t.ranks.iter().map(|c| &c[..]).zip(probs.iter().map(|p| &p[..])))
            })
            .flatten();
        let greedy = Greedy {
            tokens: t.greedy_tokens,
            mismatches: t.greedy_mismatches,
            first_mismatch: t.first_mismatch,
            passed: t.greedy_mismatches == 0,
        };
        let per_call = |d: Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
        Report {
            backend: self.backend.describe(),
            gpu_unused: chosen.gpu_unused.clone(),
            sizes: Sizes {
                batch: args.batch,
                drafts: args.drafts,
                vocab: args.vocab,
                steps: args.steps,
                temperature: args.temperature,
                draft_noise: args.draft_noise,
                filters: args.filter.into(),
                one_hot: args.one_hot,
                block: args.block,
                seed: args.seed,
            },
            greedy_requests: (0..args.batch).filter(|&r| self.greedy[r]).collect(),
            acceptance,
            acceptance_rate: accepted as f64 / (t.verifies * args.drafts as u64).max(1) as f64,
            tokens: t.tokens,
            random_tokens: t.ranks.iter().flatten().sum(),
            verifies: t.verifies,
            tokens_per_verify: t.tokens as f64 / t.verifies.max(1) as f64,
            mean_logprob: t.logprob_sum / t.tokens.max(1) as f64,
            token_rule_tokens_per_verify: args.block.then(|| t.token_rule_tokens as f64 / t.verifies.max(1) as f64),
            sample_calls: t.sample_calls,
            us_per_sample_call: per_call(t.sample, t.sample_calls),
            verify_calls: t.verify_calls,
            us_per_verify_call: per_call(t.verify, t.verify_calls),
            model_seconds: t.model.as_secs_f64(),
            total_seconds: elapsed.as_secs_f64(),
            passed: greedy.passed && chi_square.as_ref().is_none_or(|c| c.passed),
            chi_square,
            greedy,
        }
    }
}

/// The probability of each rank of a target profile (`logits` by rank) at
/// temperature `t > 0` with `filter`: the filtered target `p'` of SPEC §7.2,
/// the softmax (in f64) of the scaled logits on the kept set `S = {x >= τ}`,
/// 0 elsewhere (`S` from the library, its normaliser computed here). A
/// profile's rows are permutations of its values and a kept set depends on a
/// row's values only, so this is the distribution of the rank emitted at any
/// of its rows.
fn filtered_target(logits: &[f32], t: f32, filter: Filter) -> Vec<f64> {
    let tau = specdec::cpu::kept_set(logits, t, filter).threshold;
    // The library's scaled logit: `logit · (1/T)`, `1/T` rounded once.
    let scale = 1.0 / t;
    let kept = |l: f32| l * scale >= tau;
    let max = logits.iter().filter(|&&l| kept(l)).map(|&l| f64::from(l * scale)).fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = logits.iter().map(|&l| if kept(l) { (f64::from(l * scale) - max).exp() } else { 0.0 }).collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|x| x / sum).collect()
}

/// Progress on stderr, one call of `step` per step of the run.
struct Progress {
    steps: u64,
    done: u64,
    start: Instant,
    shown: Shown,
}

enum Shown {
    /// A bar, drawn once the run has taken a second (`None`: never, with `--json`).
    Bar(Option<ProgressBar>),
    /// A plain line at each tenth of the run reached once the run has taken `after`.
    Lines { after: Duration },
}

impl Progress {
    /// For a terminal: a bar, when `enabled`.
    fn bar(steps: u64, enabled: bool, start: Instant) -> Self {
        let bar = enabled.then(|| {
            let bar = ProgressBar::hidden();
            bar.set_length(steps);
            if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} steps, {eta} left") {
                bar.set_style(style);
            }
            bar
        });
        Progress { steps, done: 0, start, shown: Shown::Bar(bar) }
    }

    /// Off a terminal: lines, once the run has taken `after`.
    fn lines(steps: u64, after: Duration, start: Instant) -> Self {
        Progress { steps, done: 0, start, shown: Shown::Lines { after } }
    }

    fn step(&mut self) {
        self.done += 1;
        let elapsed = self.start.elapsed();
        match &self.shown {
            Shown::Bar(None) => {}
            Shown::Bar(Some(bar)) => {
                bar.inc(1);
                if bar.is_hidden() && elapsed > Duration::from_secs(1) {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                }
            }
            Shown::Lines { after } => {
                let tenth = |done: u64| done * 10 / self.steps;
                if tenth(self.done) > tenth(self.done - 1) && elapsed >= *after {
                    eprintln!(
                        "demo: {}% ({}/{}, {:.1} s)",
                        self.done * 100 / self.steps,
                        self.done,
                        count(self.steps, "verify call"),
                        elapsed.as_secs_f64()
                    );
                }
            }
        }
    }

    fn finish(&self) {
        if let Shown::Bar(Some(bar)) = &self.shown {
            bar.finish_and_clear();
        }
    }
}
