//! What `specdec demo` reports, as text or JSON (`--json`).

use crate::text::{count, float};
use serde::Serialize;
use specdec::filter::Filter;
use specdec_stats::ChiSquare;

#[derive(Debug, Serialize)]
pub struct Report {
    /// `Backend::describe()`: "cpu" or "cuda: NVIDIA H200 (sm_90)".
    pub backend: String,
    /// Why `--backend auto` did not use the GPU.
    pub gpu_unused: Option<String>,
    pub sizes: Sizes,
    pub greedy_requests: Vec<usize>,
    /// Per draft position (1-based): how often it was verified and accepted.
    pub acceptance: Vec<Position>,
    /// Accepted drafts over proposed drafts.
    pub acceptance_rate: f64,
    /// Tokens emitted, over all requests and steps.
    pub tokens: u64,
    /// Tokens emitted by the random (non-greedy) requests.
    pub random_tokens: u64,
    /// Request-verifications (`batch × steps`).
    pub verifies: u64,
    pub tokens_per_verify: f64,
    /// The mean processed log-probability of an emitted token (REFERENCE §8;
    /// a greedy request's under its raw target row).
    pub mean_logprob: f64,
    /// With `--block`: the draft-by-draft rule's tokens per verify on the same calls.
    pub token_rule_tokens_per_verify: Option<f64>,
    pub sample_calls: u64,
    /// Wall-clock µs per `gumbel_sample` call (drafting, `batch` rows).
    pub us_per_sample_call: f64,
    pub verify_calls: u64,
    /// Wall-clock µs per `rejection_sample` call (`batch` requests, `batch·(drafts+1)` rows).
    pub us_per_verify_call: f64,
    /// Time spent generating the synthetic logits.
    pub model_seconds: f64,
    pub total_seconds: f64,
    /// Chi-square of the random requests' tokens against the target (over
    /// ranks, per target profile); `null` without random requests or draws.
    pub chi_square: Option<ChiSquare>,
    pub greedy: Greedy,
    /// Both exactness checks passed.
    pub passed: bool,
}

#[derive(Debug, Serialize)]
pub struct Sizes {
    pub batch: usize,
    pub drafts: usize,
    pub vocab: usize,
    pub steps: usize,
    pub temperature: f32,
    pub draft_noise: f32,
    /// The random requests' filters, as given (greedy requests ignore them).
    pub filters: FilterValues,
    pub one_hot: bool,
    /// Block verification (`--block`).
    pub block: bool,
    pub seed: u64,
}

/// `--top-k`, `--top-p`, `--min-p` (`0`, `1`, `0`: off).
#[derive(Debug, Serialize)]
pub struct FilterValues {
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
}

impl From<Filter> for FilterValues {
    fn from(f: Filter) -> Self {
        FilterValues { top_k: f.top_k, top_p: f.top_p, min_p: f.min_p }
    }
}

impl FilterValues {
    /// The filters that act on a row of `vocab` ids ("top_k 20, top_p 0.9"), or "none".
    fn describe(&self, vocab: usize) -> String {
        let f = Filter { top_k: self.top_k, top_p: self.top_p, min_p: self.min_p };
        let mut on = Vec::new();
        if f.has_top_k(vocab) {
            on.push(format!("top_k {}", f.top_k));
        }
        if f.has_top_p() {
            on.push(format!("top_p {}", float(f.top_p)));
        }
        if f.has_min_p() {
            on.push(format!("min_p {}", float(f.min_p)));
        }
        if on.is_empty() { "none".into() } else { on.join(", ") }
    }
}

#[derive(Debug, Serialize)]
pub struct Position {
    pub position: usize,
    /// Verifications that reached this draft (all earlier drafts accepted).
    pub reached: u64,
    pub accepted: u64,
    /// `accepted / reached`, over all requests, random ones, greedy ones.
    pub rate: Option<f64>,
    pub rate_random: Option<f64>,
    pub rate_greedy: Option<f64>,
}

/// Greedy requests must emit the target's argmax at every position.
#[derive(Debug, Serialize)]
pub struct Greedy {
    pub tokens: u64,
    pub mismatches: u64,
    pub first_mismatch: Option<String>,
    pub passed: bool,
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "  -  ".into(), |r| format!("{r:.3}"))
}

fn verdict(passed: bool) -> &'static str {
    if passed { "pass" } else { "FAIL" }
}

impl Report {
    pub fn print(&self) {
        let s = &self.sizes;
        match &self.gpu_unused {
            Some(why) => println!("backend: {} (GPU not used: {why})", self.backend),
            None => println!("backend: {}", self.backend),
        }
        let drafts = match (s.one_hot, s.block) {
            (true, false) => "one-hot drafts",
            (false, false) => "draft logits in f32",
            (true, true) => "one-hot drafts, block verification",
            (false, true) => "draft logits in f32, block verification",
        };
        let greedy: Vec<String> = self.greedy_requests.iter().map(|r| r.to_string()).collect();
        let requests = match greedy.len() {
            0 => format!("all at T = {}", float(s.temperature)),
            n if n == s.batch => "all greedy".into(),
            _ => format!("greedy: {}; others at T = {}", greedy.join(", "), float(s.temperature)),
        };
        println!(
            "sizes:   batch {} ({requests}), K = {} per step, vocab {}, {}",
            s.batch,
            count(s.drafts as u64, "draft"),
            s.vocab,
            count(s.steps as u64, "step")
        );
        println!("         draft noise {}, {drafts}, seed {}", float(s.draft_noise), s.seed);
        println!("         filters: {}", s.filters.describe(s.vocab));
        println!();
        println!("acceptance per draft position (accepted / reached):");
        println!("  draft   all     random  greedy   reached");
        for p in &self.acceptance {
            println!(
                "  {:>5}   {}   {}   {}   {:>7}",
                p.position,
                rate(p.rate),
                rate(p.rate_random),
                rate(p.rate_greedy),
                p.reached
            );
        }
        println!("  overall {:.3} of proposed drafts accepted", self.acceptance_rate);
        println!(
            "tokens per verify: {:.3} ({} in {})",
            self.tokens_per_verify,
            count(self.tokens, "token"),
            count(self.verifies, "request-verification")
        );
        println!("  mean log-probability per emitted token: {:.4}", self.mean_logprob);
        if let Some(token_rule) = self.token_rule_tokens_per_verify {
            println!(
                "  block verification: {:+.3} tokens per verify over the draft-by-draft rule on the same calls ({token_rule:.3})",
                self.tokens_per_verify - token_rule
            );
        }
        println!();
        println!(
            "gumbel_sample (drafting, {}):     {:>10.1} µs per call ({})",
            count(s.batch as u64, "row"),
            self.us_per_sample_call,
            count(self.sample_calls, "call")
        );
        println!(
            "rejection_sample ({} req, {}):  {:>10.1} µs per call ({})",
            s.batch,
            count((s.batch * (s.drafts + 1)) as u64, "row"),
            self.us_per_verify_call,
            count(self.verify_calls, "call")
        );
        println!(
            "synthetic logits: {:.2} s; total {:.2} s (wall clock, host-data API)",
            self.model_seconds, self.total_seconds
        );
        println!();
        let random = match &self.chi_square {
            Some(c) => format!(
                "chi-square over token ranks, {}: chi2 = {:.1}, df = {}, threshold {:.1}, p = {:.3} → {}",
                count(c.draws, "token"),
                c.chi2,
                c.df,
                c.threshold,
                c.p_value,
                verdict(c.passed)
            ),
            None if self.greedy_requests.len() == s.batch => "none (every request is greedy)".into(),
            None if s.vocab == 1 => format!(
                "{}, each the only token of a vocabulary of 1 (nothing for a chi-square to test)",
                count(self.random_tokens, "token")
            ),
            None => format!(
                "{}, no chi-square: no degree of freedom (no target profile has two ranks expecting 5 or more tokens)",
                count(self.random_tokens, "token")
            ),
        };
        println!("exactness, random requests: {random}");
        let g = &self.greedy;
        let greedy = match &g.first_mismatch {
            _ if self.greedy_requests.is_empty() => {
                format!("none (every request samples at T = {})", float(s.temperature))
            }
            None => format!("{}, all the target argmax → {}", count(g.tokens, "token"), verdict(g.passed)),
            Some(m) => format!("{} of {} wrong ({m}) → FAIL", g.mismatches, count(g.tokens, "token")),
        };
        println!("exactness, greedy requests: {greedy}");
    }
}
