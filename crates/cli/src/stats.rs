//! The chi-square acceptance rule of SPEC §6, for the demo's exactness check.

use serde::Serialize;
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// A chi-square goodness-of-fit result over one or more independent groups.
#[derive(Debug, Clone, Serialize)]
pub struct ChiSquare {
    pub chi2: f64,
    pub df: usize,
    /// `df + 10·sqrt(2·df)`: the test passes iff `chi2 < threshold`.
    pub threshold: f64,
    pub p_value: f64,
    pub draws: u64,
    /// Draws in bins (merged) whose expectation is below 5, and that expectation.
    pub sparse_observed: u64,
    pub sparse_expected: f64,
    pub passed: bool,
}

/// Goodness of fit of each group's `counts` against its probabilities
/// (`probs`, summing to 1); the groups' statistics and degrees of freedom add
/// up. In each group, bins expecting fewer than 5 draws are merged into one
/// "other" bin, which is dropped when it too expects fewer than 5 — but then
/// its observed count must stay within `expected + 5·max(1, sqrt(expected))`
/// (mass where the target has almost none is a failure the merging would hide).
/// `None` when the groups leave no degree of freedom (too few draws) and
/// nothing failed.
pub fn chi_square<'a>(groups: impl IntoIterator<Item = (&'a [u64], Vec<f64>)>) -> Option<ChiSquare> {
    let (mut chi2, mut df, mut draws) = (0.0, 0usize, 0u64);
    let (mut sparse_observed, mut sparse_expected, mut sparse_ok) = (0u64, 0.0, true);
    for (counts, probs) in groups {
        let n: u64 = counts.iter().sum();
        if n == 0 {
            continue;
        }
        draws += n;
        let (mut bins, mut other_obs, mut other_exp) = (0usize, 0u64, 0.0);
        for (&c, &p) in counts.iter().zip(&probs) {
            let e = p * n as f64;
            if e < 5.0 {
                other_obs += c;
                other_exp += e;
            } else {
                chi2 += (c as f64 - e).powi(2) / e;
                bins += 1;
            }
        }
        if other_exp >= 5.0 {
            chi2 += (other_obs as f64 - other_exp).powi(2) / other_exp;
            bins += 1;
        } else {
            sparse_observed += other_obs;
            sparse_expected += other_exp;
            sparse_ok &= other_obs as f64 <= other_exp + 5.0 * other_exp.sqrt().max(1.0);
        }
        df += bins.saturating_sub(1);
    }
    if df == 0 && sparse_ok {
        return None;
    }
    let threshold = df as f64 + 10.0 * (2.0 * df as f64).sqrt();
    let p_value = ChiSquared::new(df as f64).map(|d| d.sf(chi2)).unwrap_or(f64::NAN);
    let passed = chi2 < threshold && sparse_ok;
    Some(ChiSquare { chi2, df, threshold, p_value, draws, sparse_observed, sparse_expected, passed })
}

/// `softmax(logits / t)` in f64 (`t > 0`).
pub fn softmax(logits: &[f32], t: f32) -> Vec<f64> {
    let t = t as f64;
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l as f64 / t));
    let weights: Vec<f64> = logits.iter().map(|&l| (l as f64 / t - max).exp()).collect();
    let sum: f64 = weights.iter().sum();
    weights.into_iter().map(|w| w / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_and_misfits() {
        let probs = vec![0.5, 0.3, 0.2];
        let good = [500u64, 300, 200];
        assert!(chi_square([(&good[..], probs.clone())]).unwrap().passed);
        let bad = [300u64, 300, 400];
        assert!(!chi_square([(&bad[..], probs.clone())]).unwrap().passed);
        // Too few draws for any degree of freedom.
        assert!(chi_square([(&[1u64, 0, 0][..], probs)]).is_none());
        // Draws where the target has (almost) no mass fail.
        let probs = vec![0.999_99, 0.000_01];
        assert!(!chi_square([(&[50u64, 50][..], probs)]).unwrap().passed);
    }
}
