//! `specdec demo --json` on the CPU backend with small sizes, and `specdec info`.

mod common;

use common::specdec;
use serde_json::Value;

/// Runs the demo with `extra` arguments and returns its JSON report.
fn demo(extra: &[&str]) -> Value {
    let mut args = vec!["demo", "--backend", "cpu", "--json", "--vocab", "4096", "--batch", "8", "--drafts", "3"];
    args.extend_from_slice(extra);
    let out = specdec(&args);
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
        (&["--drafts", "0"][..], "--drafts must be in"),
        (&["--temperature=-1"][..], "--temperature must be"),
        (&["--vocab", "0"][..], "--vocab must be in"),
    ] {
        let out = specdec(&[&["demo", "--backend", "cpu"][..], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("Error: ") && stderr.contains(message), "{args:?}: {stderr}");
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
