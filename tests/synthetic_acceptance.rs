//! Synthetic acceptance (REFERENCE §4.12): draft `i` is accepted iff its
//! acceptance uniform is below the given rate, for greedy and sampling
//! requests alike; the measured acceptance at every position matches its
//! rate within 6 standard errors, and on the GPU the accepted drafts are
//! the CPU's, request by request (the decisions read only the acceptance
//! words); `synthetic_rates` gives the mean asked for; bad rates are typed
//! errors. Each case on both backends.

use specdec::{Backend, Error, RejectionOutput, RejectionSample, Verification, synthetic_rates};
use specdec_suite::drafting::{Drafted, FixedPositions, perturbed, zipf_logits};
use specdec_suite::test_device;

/// Runs `verify`'s call under `rates` on `backend`: each request's accepted drafts.
fn accepted_under(backend: &Backend, verify: &specdec_suite::Verify, rates: &[f32]) -> Vec<i32> {
    let call = RejectionSample { verification: Verification::Synthetic(rates), ..verify.call() };
    let requests = verify.requests();
    let (mut tokens, mut emitted, mut accepted) =
        (vec![0i32; requests * (verify.max_drafts + 1)], vec![0i32; requests], vec![0i32; requests]);
    let mut out = RejectionOutput::new(&mut tokens, &mut emitted).with_accepted(&mut accepted);
    backend.rejection_sample(&call, &mut out).expect("a valid call");
    for (r, &a) in accepted.iter().enumerate() {
        let row = &tokens[r * (verify.max_drafts + 1)..][..verify.max_drafts + 1];
        assert!(row[..a as usize].iter().zip(&verify.drafts[verify.offsets[r] as usize..]).all(|(t, d)| t == d));
        assert!((0..verify.vocab as i32).contains(&row[a as usize]), "request {r}: a token after the drafts");
    }
    accepted
}

// At every position, the share of the requests that reached it and accept
// its draft is within 6 standard errors of its rate: sampling requests
// with draft logits and one-hot, and greedy ones; on the GPU, the CPU's
// accepted drafts exactly.
test_device!(measured_acceptance_matches_the_rates, |backend, scale| {
    let (vocab, k, requests) = (1024, 4, 20_000);
    let base = zipf_logits(vocab, 1.0, 64, 3);
    let rates = [0.9f32, 0.7, 0.5, 0.3];
    for (t, one_hot) in [(1.0f32, false), (0.8, true), (0.0, false)] {
        let case = FixedPositions {
            one_hot,
            distinct_targets: false,
            pos0: 0x5C << 40,
            ..FixedPositions::new(vocab, k, t, requests)
        };
        let Drafted { verify, .. } = case.build(&backend, &base, |i, row| perturbed(i, row, 1.5));
        let accepted = accepted_under(&backend, &verify, &rates);
        if matches!(backend, Backend::Cuda(_)) {
            assert_eq!(accepted, accepted_under(&Backend::cpu(), &verify, &rates), "T {t}, one-hot {one_hot}");
        }
        for (i, &c) in rates.iter().enumerate() {
            let reached = accepted.iter().filter(|&&a| a as usize >= i).count() as f64;
            let passed = accepted.iter().filter(|&&a| a as usize > i).count() as f64;
            let (rate, c) = (passed / reached, f64::from(c));
            let se = (c * (1.0 - c) / reached).sqrt();
            assert!(
                (rate - c).abs() <= 6.0 * se,
                "T {t}, one-hot {one_hot}, position {i}: {rate:.4} against {c} (se {se:.4})"
            );
        }
    }
});

// `synthetic_rates` gives rates whose mean accepted drafts is the one
// asked for: exactly in its formula, and within 6 standard errors through a call.
test_device!(synthetic_rates_give_the_mean_asked_for, |backend, scale| {
    for (mean, k) in [(0.5f64, 1usize), (2.4, 4), (5.0, 7)] {
        let rates = synthetic_rates(mean, k);
        let c = f64::from(rates[0]);
        let exact: f64 = (1..=k).map(|i| c.powi(i as i32)).sum();
        assert!((exact - mean).abs() < 1e-5, "K {k}: rates {c} give {exact}, not {mean}");
        let case = FixedPositions {
            distinct_targets: false,
            pos0: 0x5D << 40 | (k as u64) << 8,
            ..FixedPositions::new(512, k, 1.0, 20_000)
        };
        let Drafted { verify, .. } =
            case.build(&backend, &zipf_logits(512, 1.0, 64, 9), |i, row| perturbed(i, row, 1.0));
        let accepted: Vec<f64> = accepted_under(&backend, &verify, &rates).into_iter().map(f64::from).collect();
        let n = accepted.len() as f64;
        let got = accepted.iter().sum::<f64>() / n;
        let se = (accepted.iter().map(|a| (a - got).powi(2)).sum::<f64>() / (n - 1.0) / n).sqrt();
        assert!((got - mean).abs() <= 6.0 * se, "K {k}: mean accepted {got:.4} against {mean} (se {se:.4})");
    }
    assert_eq!(synthetic_rates(9.0, 3), vec![1.0; 3], "a mean past K is clamped to K");
});

// Rates of the wrong length, outside `[0, 1]` or NaN are typed errors and
// nothing is written.
test_device!(bad_rates_are_typed_errors, |backend, scale| {
    let case = FixedPositions { distinct_targets: false, ..FixedPositions::new(256, 2, 1.0, 4) };
    let Drafted { verify, .. } = case.build(&backend, &zipf_logits(256, 1.0, 64, 1), |i, row| perturbed(i, row, 1.0));
    for (rates, want) in [
        (vec![0.5f32], "length"),
        (vec![0.5, 1.5], "rate 1"),
        (vec![-0.1, 0.5], "rate 0"),
        (vec![0.5, f32::NAN], "rate 1"),
    ] {
        let call = RejectionSample { verification: Verification::Synthetic(&rates), ..verify.call() };
        let (mut tokens, mut emitted) = (vec![-7i32; 12], vec![-7i32; 4]);
        let err = backend.rejection_sample(&call, &mut RejectionOutput::new(&mut tokens, &mut emitted)).unwrap_err();
        match (&err, want) {
            (Error::LengthMismatch { what: "synthetic rates", expected: 2, got: 1 }, "length") => {}
            (Error::InvalidRate { position: 1, .. }, "rate 1") | (Error::InvalidRate { position: 0, .. }, "rate 0") => {
            }
            _ => panic!("rates {rates:?}: {err}"),
        }
        assert!(tokens.iter().chain(&emitted).all(|&x| x == -7), "nothing written");
    }
});
