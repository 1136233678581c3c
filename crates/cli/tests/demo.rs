//! `specdec demo --json` on the CPU backend with small sizes, and `specdec info`.

mod common;

use common::{assert_refused, specdec, specdec_command};
use serde_json::Value;
use std::process::Output;

/// How long a run may go before progress lines appear on a piped stderr.
const PROGRESS_AFTER_MS: &str = "SPECDEC_PROGRESS_AFTER_MS";

/// Runs `specdec demo --backend cpu` with `args`, stderr piped, and
/// `SPECDEC_PROGRESS_AFTER_MS` set to `after_ms` (unset when `None`).
fn run_demo(args: &[&str], after_ms: Option<&str>) -> Output {
    let mut command = specdec_command();
    command.args(["demo", "--backend", "cpu"]).args(args).env_remove(PROGRESS_AFTER_MS);
    if let Some(ms) = after_ms {
        command.env(PROGRESS_AFTER_MS, ms);
    }
    command.output().expect("the specdec binary runs")
}

/// Runs the demo with `extra` arguments and returns its JSON report.
fn demo(extra: &[&str]) -> Value {
    let mut args = vec!["--json", "--vocab", "4096", "--batch", "8", "--drafts", "3"];
    args.extend_from_slice(extra);
    // No progress lines however long the run takes: stderr stays empty.
    let out = run_demo(&args, Some("3600000"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo {extra:?} failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "no progress bar with --json: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).expect("the demo prints JSON")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// The checks every report must pass.
fn check(report: &Value, drafts: u64) {
    assert_eq!(report["backend"], "cpu");
    assert_eq!(report["passed"], true, "{report:#}");
    let acceptance = report["acceptance"].as_array().unwrap();
    assert_eq!(acceptance.len() as u64, drafts);
    let mut reached_before = u64::MAX;
    for p in acceptance {
        let (reached, accepted) = (p["reached"].as_u64().unwrap(), p["accepted"].as_u64().unwrap());
        assert!(accepted <= reached && reached <= reached_before, "{p}");
        reached_before = accepted;
        for key in ["rate", "rate_random", "rate_greedy"] {
            if !p[key].is_null() {
                assert!((0.0..=1.0).contains(&f(&p[key])), "{key} of {p}");
            }
        }
    }
    assert!((0.0..=1.0).contains(&f(&report["acceptance_rate"])));
    let tpv = f(&report["tokens_per_verify"]);
    assert!((1.0..=(drafts + 1) as f64).contains(&tpv), "tokens per verify {tpv}");
    assert!(f(&report["us_per_sample_call"]) > 0.0 && f(&report["us_per_verify_call"]) > 0.0);
    // Each emitted token's log-probability is that of a token drawn from
    // its distribution: their mean estimates minus its entropy, at most ln V.
    let (mean, vocab) = (f(&report["mean_logprob"]), f(&report["sizes"]["vocab"]));
    assert!(mean < 0.0 && mean > -vocab.ln(), "mean log-probability {mean} at V = {vocab}");
    let greedy = &report["greedy"];
    assert_eq!(greedy["mismatches"], 0, "greedy requests emit the argmax chain: {greedy}");
    assert!(greedy["tokens"].as_u64().unwrap() > 0);
}

#[test]
fn demo_with_draft_logits() {
    let report = demo(&["--steps", "300"]);
    check(&report, 3);
    assert_eq!(report["greedy_requests"], serde_json::json!([3, 7]));
    let chi = &report["chi_square"];
    assert_eq!(chi["passed"], true, "{chi}");
    assert!(f(&chi["chi2"]) < f(&chi["threshold"]) && chi["df"].as_u64().unwrap() >= 5, "{chi}");
    assert!(chi["draws"].as_u64().unwrap() > 3000, "{chi}");
    let rate = f(&report["acceptance_rate"]);
    assert!(rate > 0.2 && rate < 0.99, "a noisy draft is sometimes rejected: {rate}");
}

#[test]
fn demo_with_one_hot_drafts_and_hot_temperature() {
    let report = demo(&["--steps", "150", "--one-hot", "--temperature", "1.5", "--seed", "7"]);
    check(&report, 3);
    assert_eq!(report["sizes"]["one_hot"], true);
    assert_eq!(report["chi_square"]["passed"], true);
}

/// `--block`: block verification passes the exactness checks and emits at
/// least as many tokens per verify as the draft-by-draft rule on the same
/// calls, which the report gives beside it; without `--block` there is no such figure.
#[test]
fn demo_with_block_verification() {
    let report = demo(&["--steps", "200", "--block"]);
    check(&report, 3);
    assert_eq!(report["sizes"]["block"], true);
    let (block, token) = (f(&report["tokens_per_verify"]), f(&report["token_rule_tokens_per_verify"]));
    assert!(block >= token - 0.05, "block {block} against the draft-by-draft rule's {token}");
    assert!(demo(&["--steps", "2"])["token_rule_tokens_per_verify"].is_null());
}

/// Filters on the random requests: drafted, verified and checked against
/// the filtered target (chi-square over the kept ranks).
#[test]
fn demo_with_filters_passes_its_chi_square() {
    let report = demo(&["--steps", "150", "--top-k", "20", "--top-p", "0.9"]);
    check(&report, 3);
    let filters = &report["sizes"]["filters"];
    assert_eq!(filters["top_k"], 20, "{filters}");
    assert!((f(&filters["top_p"]) - 0.9).abs() < 1e-6 && f(&filters["min_p"]) == 0.0, "{filters}");
    let chi = &report["chi_square"];
    assert_eq!(chi["passed"], true, "{chi}");
    assert!(chi["df"].as_u64().unwrap() >= 5 && chi["draws"].as_u64().unwrap() > 1000, "{chi}");
    // Each profile keeps at most 20 ranks: at most 4 · 19 degrees of freedom.
    assert!(chi["df"].as_u64().unwrap() <= 76, "{chi}");
    // min-p on one-hot drafts (q a point mass, whatever the drafter's filters).
    let report = demo(&["--steps", "150", "--one-hot", "--temperature", "1.5", "--min-p", "0.05"]);
    check(&report, 3);
    assert_eq!(report["chi_square"]["passed"], true, "{}", report["chi_square"]);
}

/// The report without its timings (the only part of a run that varies).
fn without_timings(mut report: Value) -> Value {
    for key in ["us_per_sample_call", "us_per_verify_call", "model_seconds", "total_seconds"] {
        report.as_object_mut().unwrap().remove(key).expect("a timing");
    }
    report
}

/// Filters given at their off values are no filters: the same report, token for token.
#[test]
fn demo_with_filters_off_reports_the_same_as_without() {
    let off = demo(&["--steps", "20", "--top-k", "0", "--top-p", "1", "--min-p", "0"]);
    let none = demo(&["--steps", "20"]);
    assert_eq!(without_timings(off), without_timings(none));
}

#[test]
fn demo_edge_cases() {
    // A draft equal to the target: every draft is accepted.
    let report = demo(&["--steps", "10", "--draft-noise", "0"]);
    check(&report, 3);
    assert_eq!(f(&report["acceptance_rate"]), 1.0);
    // All greedy: no chi-square, every token the argmax.
    let report = demo(&["--steps", "10", "--temperature", "0"]);
    check(&report, 3);
    assert!(report["chi_square"].is_null());
    assert_eq!(report["greedy_requests"].as_array().unwrap().len(), 8);
}

#[test]
fn demo_rejects_bad_sizes() {
    for (args, message) in [
        (&["--drafts", "0"][..], "--drafts must be in 1 ..= 64, got 0"),
        (&["--temperature=-1"][..], "--temperature must be"),
        (&["--vocab", "0"][..], "--vocab must be in"),
        (&["--batch", "0"][..], "--batch must be at least 1, got 0"),
    ] {
        assert_refused(&format!("{args:?}"), &run_demo(args, None), message);
    }
}

/// Negative numbers after a flag reach the demo's own checks (clap once
/// took them for unknown arguments), and every message names the flag.
#[test]
fn demo_rejects_negative_numbers_naming_the_flag() {
    for (args, message) in [
        (&["--seed", "-1"][..], "--seed must be in 0 ..= 18446744073709551615 (2^64 - 1), got -1"),
        (&["--seed", "18446744073709551616"][..], "--seed must be in 0 ..= 18446744073709551615"),
        (&["--temperature", "-1"][..], "--temperature must be 0 (all greedy) or a positive, finite, normal value"),
        (&["--temperature", "-1e-40"][..], "--temperature must be"),
        (&["--temperature", "-inf"][..], "--temperature must be"),
        (&["--draft-noise", "-0.5"][..], "--draft-noise must be a finite value >= 0, got -0.5"),
        (&["--batch", "-2"][..], "--batch must be at least 1, got -2"),
        (&["--drafts", "-1"][..], "--drafts must be in 1 ..= 64, got -1"),
        (&["--vocab", "-5"][..], "--vocab must be in 1 ..= 1073741824, got -5"),
        (&["--steps", "-1"][..], "--steps must be at least 1, got -1"),
    ] {
        assert_refused(&format!("{args:?}"), &run_demo(args, None), message);
    }
}

/// Filter values out of range are refused, naming the flag.
#[test]
fn demo_rejects_bad_filters() {
    for (args, message) in [
        (&["--top-p", "0"][..], "--top-p must be in (0, 1] (1: off), got 0"),
        (&["--top-p", "1.5"][..], "--top-p must be in (0, 1] (1: off), got 1.5"),
        (&["--top-p", "NaN"][..], "--top-p must be in (0, 1] (1: off), got NaN"),
        (&["--min-p", "2"][..], "--min-p must be in [0, 1] (0: off), got 2"),
        (&["--min-p", "-0.5"][..], "--min-p must be in [0, 1] (0: off), got -0.5"),
        (&["--top-k", "-1"][..], "--top-k must be in 0 ..= 2147483647 (0: off), got -1"),
        (&["--top-k", "2147483648"][..], "--top-k must be in 0 ..= 2147483647 (0: off), got 2147483648"),
    ] {
        assert_refused(&format!("{args:?}"), &run_demo(args, None), message);
    }
}

/// A temperature too small to divide by is refused by the demo, naming
/// `--temperature`, and printed short (it once reached the library, which
/// printed 40 digits and no flag).
#[test]
fn demo_rejects_a_subnormal_temperature() {
    let out = run_demo(&["--temperature", "1e-40", "--vocab", "64", "--steps", "1"], None);
    assert_refused("1e-40", &out, "--temperature must be 0 (all greedy) or a positive, finite, normal value");
    assert_refused("1e-40", &out, "got 1e-40");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("00000"), "{:?}", out.stderr);
}

/// The largest seed is accepted.
#[test]
fn demo_takes_the_largest_seed() {
    let out = run_demo(&["--json", "--steps", "2", "--vocab", "64", "--seed", "18446744073709551615"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("the demo prints JSON");
    assert_eq!(report["sizes"]["seed"], u64::MAX);
}

/// Off a terminal a run that takes longer than the threshold prints a line
/// on stderr at each tenth; stdout holds the report only (pure JSON with `--json`).
#[test]
fn progress_lines_off_a_terminal() {
    let args = ["--vocab", "64", "--batch", "2", "--drafts", "1", "--steps", "20"];
    let want: Vec<String> = (1..=10).map(|t| format!("demo: {}% ({}/20 verify calls, ", 10 * t, 2 * t)).collect();
    let lines_of = |out: &Output| -> Vec<String> {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).lines().map(str::to_owned).collect()
    };
    for json in [true, false] {
        let args = [&args[..], if json { &["--json"][..] } else { &[][..] }].concat();
        let out = run_demo(&args, Some("0"));
        let lines = lines_of(&out);
        assert_eq!(lines.len(), want.len(), "{lines:?}");
        for (line, want) in lines.iter().zip(&want) {
            assert!(line.starts_with(want.as_str()) && line.ends_with(" s)"), "{line:?}, expected {want:?}...");
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("demo: "), "progress on stdout: {stdout}");
        if json {
            let report: Value = serde_json::from_str(&stdout).expect("stdout is the JSON report alone");
            assert_eq!(report["passed"], true);
        } else {
            assert!(stdout.starts_with("backend: cpu"), "{stdout}");
        }
    }
    // A short run under the default threshold prints nothing on stderr.
    let out = run_demo(&["--vocab", "64", "--batch", "1", "--drafts", "1", "--steps", "3", "--json"], None);
    assert!(lines_of(&out).is_empty(), "{:?}", String::from_utf8_lossy(&out.stderr));
    // A threshold that is not a number of milliseconds is named.
    let out = run_demo(&["--steps", "1"], Some("2s"));
    assert_refused("2s", &out, "SPECDEC_PROGRESS_AFTER_MS must be a whole number of milliseconds, got \"2s\"");
}

/// Runs the demo with `args` as text and returns its report.
fn report_text(args: &[&str]) -> String {
    let out = run_demo(args, None);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One of anything is singular; a run without greedy requests says so
/// instead of passing on no tokens; temperatures print short.
#[test]
fn report_wording_for_single_things_and_no_greedy_requests() {
    let text =
        report_text(&["--batch", "1", "--drafts", "1", "--steps", "1", "--vocab", "64", "--temperature", "1e-30"]);
    for want in [
        "batch 1 (all at T = 1e-30), K = 1 draft per step, vocab 64, 1 step",
        " in 1 request-verification)",
        "gumbel_sample (drafting, 1 row):",
        "rejection_sample (1 req, 2 rows):",
        "µs per call (1 call)",
        "exactness, random requests: ",
        " no chi-square: no degree of freedom",
        "exactness, greedy requests: none (every request samples at T = 1e-30)",
    ] {
        assert!(text.contains(want), "expected {want:?} in\n{text}");
    }
    for plural in [" 1 rows", " 1 calls", " 1 steps", " 1 drafts", " 1 tokens", "-verifications", "000000"] {
        assert!(!text.contains(plural), "{plural:?} in\n{text}");
    }
}

/// A vocabulary of 1 has random requests (they are counted, not called
/// missing); an all-greedy run says that there are no random requests.
#[test]
fn report_wording_for_one_token_and_all_greedy() {
    let text = report_text(&["--batch", "4", "--drafts", "2", "--steps", "3", "--vocab", "1"]);
    assert!(text.contains("exactness, random requests: 27 tokens, each the only token of a vocabulary of 1"), "{text}");
    assert!(!text.contains("no random requests"), "{text}");
    assert!(text.contains("exactness, greedy requests: 9 tokens, all the target argmax → pass"), "{text}");
    let text = report_text(&["--batch", "4", "--drafts", "2", "--steps", "3", "--vocab", "64", "--temperature", "0"]);
    assert!(text.contains("batch 4 (all greedy), K = 2 drafts per step, vocab 64, 3 steps"), "{text}");
    assert!(text.contains("exactness, random requests: none (every request is greedy)"), "{text}");
}

/// The report lists the filters that act on the rows, or none.
#[test]
fn report_lists_the_filters() {
    let small = ["--batch", "2", "--drafts", "1", "--steps", "2", "--vocab", "64"];
    let text = report_text(&[&small[..], &["--top-k", "20", "--min-p", "0.05"]].concat());
    assert!(text.contains("\n         filters: top_k 20, min_p 0.05\n"), "{text}");
    // top_k >= V keeps every id.
    for off in [&[][..], &["--top-k", "64", "--top-p", "1"][..]] {
        let text = report_text(&[&small[..], off].concat());
        assert!(text.contains("\n         filters: none\n"), "{off:?}: {text}");
    }
}

#[test]
fn info_lists_the_backends() {
    let out = specdec(&["info"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("specdec {}", env!("CARGO_PKG_VERSION"))), "{stdout}");
    assert!(stdout.contains(&format!("PTX target: {}", specdec::cuda::PTX_ARCH)), "{stdout}");
    assert!(stdout.contains("cpu   available"), "{stdout}");
    assert!(stdout.contains("cuda  "), "{stdout}");
}
