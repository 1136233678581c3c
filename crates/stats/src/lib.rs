//! The statistical acceptance rule of `docs/REFERENCE.md` §6 and the f64
//! softmax it is checked against: one implementation for the test suites
//! (`tests/harness`) and the CLI's demo.
//!
//! - [`chi_square`] (one group of bins) and [`chi_square_groups`] (several
//!   independent groups, their statistics and degrees of freedom added): bins
//!   expecting fewer than 5 draws are merged into one "other" bin, dropped
//!   when it too expects fewer than 5 — but then its draws must stay within
//!   `expected + 5·max(1, sqrt(expected))`; pass iff that holds and
//!   `chi2 < df + 10·sqrt(2·df)`.
//! - [`tail_z`]: the z-score of a tail count.
//! - [`softmax`]: `softmax(logits / t)` in f64.

use serde::Serialize;
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// A chi-square goodness-of-fit result.
#[derive(Debug, Clone, Serialize)]
pub struct ChiSquare {
    pub chi2: f64,
    pub df: usize,
    /// `df + 10·sqrt(2·df)`.
    pub threshold: f64,
    pub p_value: f64,
    pub draws: u64,
    /// Draws in the dropped "other" bins (expecting fewer than 5), and their expectation.
    pub sparse_observed: u64,
    pub sparse_expected: f64,
    /// `chi2 < threshold`, and the dropped bins within their bound.
    pub passed: bool,
}

impl ChiSquare {
    /// Panics with the numbers (and `context`) unless the fit passed.
    pub fn assert_pass(&self, context: &str) {
        assert!(
            self.passed,
            "chi-square failed ({context}): chi2 = {:.1} (threshold {:.1}, df = {}, p = {:.3e}, draws = {}); \
             {} draws in bins expecting {:.2}",
            self.chi2, self.threshold, self.df, self.p_value, self.draws, self.sparse_observed, self.sparse_expected
        );
    }

    fn with_df(chi2: f64, df: usize, draws: u64, sparse: (u64, f64, bool)) -> ChiSquare {
        let threshold = df as f64 + 10.0 * (2.0 * df as f64).sqrt();
        let p_value = ChiSquared::new(df as f64).map(|d| d.sf(chi2)).unwrap_or(f64::NAN);
        let (sparse_observed, sparse_expected, sparse_ok) = sparse;
        let passed = chi2 < threshold && sparse_ok;
        ChiSquare { chi2, df, threshold, p_value, draws, sparse_observed, sparse_expected, passed }
    }
}

/// The groups' statistic, degrees of freedom (`0` when the groups leave none:
/// too few draws), draws and dropped bins (draws, expectation, within bound).
fn statistic<'a>(groups: impl IntoIterator<Item = (&'a [u64], &'a [f64])>) -> (f64, usize, u64, (u64, f64, bool)) {
    let (mut chi2, mut df, mut draws) = (0.0, 0usize, 0u64);
    let (mut sparse_observed, mut sparse_expected, mut sparse_ok) = (0u64, 0.0, true);
    for (counts, probs) in groups {
        assert_eq!(counts.len(), probs.len(), "one probability per bin");
        let n: u64 = counts.iter().sum();
        if n == 0 {
            continue;
        }
        draws += n;
        let (mut bins, mut other_obs, mut other_exp) = (0usize, 0u64, 0.0);
        for (&c, &p) in counts.iter().zip(probs) {
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
            // Mass where the target has (almost) none: a sizeable count there
            // is a failure the merged bin would otherwise hide.
            sparse_observed += other_obs;
            sparse_expected += other_exp;
            sparse_ok &= other_obs as f64 <= other_exp + 5.0 * other_exp.sqrt().max(1.0);
        }
        df += bins.saturating_sub(1);
    }
    (chi2, df, draws, (sparse_observed, sparse_expected, sparse_ok))
}

/// Observed `counts` against probabilities `probs` (summing to 1, up to
/// rounding), with at least one degree of freedom (a row whose draws all
/// fall in one bin still checks that bin's count).
pub fn chi_square(counts: &[u64], probs: &[f64]) -> ChiSquare {
    let (chi2, df, draws, sparse) = statistic([(counts, probs)]);
    ChiSquare::with_df(chi2, df.max(1), draws, sparse)
}

/// Several independent groups `(counts, probs)`, their statistics and
/// degrees of freedom added. `None` when they leave no degree of freedom (too
/// few draws) and no dropped bin failed.
pub fn chi_square_groups<'a>(groups: impl IntoIterator<Item = (&'a [u64], &'a [f64])>) -> Option<ChiSquare> {
    let (chi2, df, draws, sparse) = statistic(groups);
    if df == 0 && sparse.2 {
        return None;
    }
    Some(ChiSquare::with_df(chi2, df, draws, sparse))
}

/// z-score of `hits` successes in `n` trials against probability `p`.
pub fn tail_z(hits: u64, n: u64, p: f64) -> f64 {
    let (n, h) = (n as f64, hits as f64);
    (h - n * p) / (n * p * (1.0 - p)).sqrt()
}

/// `softmax(logits / t)` in f64 (`t = 0`: one-hot at the first argmax).
pub fn softmax(logits: &[f32], t: f64) -> Vec<f64> {
    if t == 0.0 {
        let mut best = 0;
        for (i, &l) in logits.iter().enumerate() {
            if l > logits[best] {
                best = i;
            }
        }
        let mut p = vec![0.0; logits.len()];
        p[best] = 1.0;
        return p;
    }
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let w: Vec<f64> = logits.iter().map(|&l| ((l as f64 - m) / t).exp()).collect();
    let s: f64 = w.iter().sum();
    w.into_iter().map(|x| x / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_counts_pass() {
        let r = chi_square(&[1000, 1010, 990, 1000], &[0.25; 4]);
        assert!(r.passed && r.df == 3 && r.p_value > 0.5, "{r:?}");
    }

    #[test]
    #[should_panic(expected = "chi-square failed")]
    fn biased_counts_fail() {
        chi_square(&[1300, 900, 900, 900], &[0.25; 4]).assert_pass("biased");
    }

    #[test]
    #[should_panic(expected = "60 draws in bins expecting 0.00")]
    fn draws_where_the_target_has_none_fail() {
        chi_square(&[500, 440, 60], &[0.5, 0.5, 0.0]).assert_pass("no mass");
    }

    #[test]
    fn groups_add_up() {
        let probs = [0.5, 0.3, 0.2];
        let good = [500u64, 300, 200];
        let g = chi_square_groups([(&good[..], &probs[..]), (&good[..], &probs[..])]).expect("four degrees of freedom");
        assert!(g.passed && g.df == 4 && g.draws == 2000, "{g:?}");
        let bad = [300u64, 300, 400];
        assert!(!chi_square_groups([(&bad[..], &probs[..])]).expect("two").passed);
        // Too few draws for any degree of freedom.
        assert!(chi_square_groups([(&[1u64, 0, 0][..], &probs[..])]).is_none());
        // Draws where the target has (almost) no mass fail.
        let probs = [0.999_99, 0.000_01];
        assert!(!chi_square_groups([(&[50u64, 50][..], &probs[..])]).expect("a failed bin").passed);
    }

    #[test]
    fn one_bin_keeps_a_degree_of_freedom() {
        let r = chi_square(&[100], &[1.0]);
        assert!(r.passed && r.df == 1 && r.chi2 == 0.0, "{r:?}");
    }

    #[test]
    fn softmax_matches_closed_form() {
        let p = softmax(&[0.0, (2f32).ln()], 1.0);
        assert!((p[0] - 1.0 / 3.0).abs() < 1e-7 && (p[1] - 2.0 / 3.0).abs() < 1e-7);
        assert_eq!(softmax(&[1.0, 3.0, 3.0], 0.0), vec![0.0, 1.0, 0.0]);
    }
}
