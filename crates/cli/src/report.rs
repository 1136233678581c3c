//! What `specdec demo` reports, as text or JSON (`--json`).

use crate::stats::ChiSquare;
use serde::Serialize;

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
    /// Request-verifications (`batch × steps`).
    pub verifies: u64,
    pub tokens_per_verify: f64,
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
    pub one_hot: bool,
    pub seed: u64,
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
        let drafts = if s.one_hot { "one-hot drafts" } else { "draft logits cached in f32" };
        let greedy: Vec<String> = self.greedy_requests.iter().map(|r| r.to_string()).collect();
        println!(
            "sizes:   batch {} (greedy: {}; others at T = {}), K = {} drafts per step, vocab {}, {} steps",
            s.batch,
            if greedy.is_empty() { "none".into() } else { greedy.join(", ") },
            s.temperature,
            s.drafts,
            s.vocab,
            s.steps
        );
        println!("         draft noise {}, {drafts}, seed {}", s.draft_noise, s.seed);
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
            "tokens per verify: {:.3} ({} tokens in {} request-verifications)",
            self.tokens_per_verify, self.tokens, self.verifies
        );
        println!();
        println!(
            "gumbel_sample (drafting, {} rows):     {:>10.1} µs per call ({} calls)",
            s.batch, self.us_per_sample_call, self.sample_calls
        );
        println!(
            "rejection_sample ({} req, {} rows):  {:>10.1} µs per call ({} calls)",
            s.batch,
            s.batch * (s.drafts + 1),
            self.us_per_verify_call,
            self.verify_calls
        );
        println!(
            "synthetic logits: {:.2} s; total {:.2} s (wall clock, host-data API)",
            self.model_seconds, self.total_seconds
        );
        println!();
        match &self.chi_square {
            Some(c) => println!(
                "exactness, random requests: chi-square over token ranks, {} tokens: chi2 = {:.1}, df = {}, threshold {:.1}, p = {:.3} → {}",
                c.draws,
                c.chi2,
                c.df,
                c.threshold,
                c.p_value,
                verdict(c.passed)
            ),
            None => println!("exactness, random requests: no chi-square (no random requests, or too few tokens)"),
        }
        let g = &self.greedy;
        match &g.first_mismatch {
            None => println!(
                "exactness, greedy requests: {} tokens, all the target argmax → {}",
                g.tokens,
                verdict(g.passed)
            ),
            Some(m) => {
                println!("exactness, greedy requests: {} of {} tokens wrong ({m}) → FAIL", g.mismatches, g.tokens)
            }
        }
    }
}
