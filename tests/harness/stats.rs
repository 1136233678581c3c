//! The statistical acceptance rule of SPEC §6, with statrs for p-values.

use statrs::distribution::{ChiSquared, ContinuousCDF};

/// A chi-square goodness-of-fit result.
#[derive(Debug, Clone)]
pub struct ChiSquare {
    pub chi2: f64,
    pub df: usize,
    pub p_value: f64,
    /// `df + 10·sqrt(2·df)`.
    pub threshold: f64,
    pub draws: u64,
}

impl ChiSquare {
    pub fn passed(&self) -> bool {
        self.chi2 < self.threshold
    }

    /// Panics with the numbers (and `context`) unless the fit passes.
    pub fn assert_pass(&self, context: &str) {
        assert!(
            self.passed(),
            "chi-square failed ({context}): chi2 = {:.1} >= {:.1} (df = {}, p = {:.3e}, draws = {})",
            self.chi2,
            self.threshold,
            self.df,
            self.p_value,
            self.draws
        );
    }
}

/// Observed counts against expected probabilities (summing to 1, up to
/// rounding). Bins expecting fewer than 5 draws are merged into one "other"
/// bin, which is dropped when it too expects fewer than 5.
pub fn chi_square(counts: &[u64], probs: &[f64]) -> ChiSquare {
    assert_eq!(counts.len(), probs.len(), "one probability per bin");
    let n: u64 = counts.iter().sum();
    let nf = n as f64;
    let (mut chi2, mut bins) = (0.0, 0usize);
    let (mut other_obs, mut other_exp) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(probs) {
        let e = p * nf;
        if e < 5.0 {
            other_obs += c as f64;
            other_exp += e;
        } else {
            chi2 += (c as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if other_exp >= 5.0 {
        chi2 += (other_obs - other_exp).powi(2) / other_exp;
        bins += 1;
    } else {
        // Mass where the target has (almost) none: any sizeable count there is a
        // failure the merged-bin rule would otherwise hide.
        assert!(
            other_obs <= other_exp + 5.0 * other_exp.sqrt().max(1.0),
            "{other_obs} draws in bins expecting {other_exp:.2}"
        );
    }
    let df = bins.saturating_sub(1).max(1);
    let p_value = ChiSquared::new(df as f64).map(|d| d.sf(chi2)).unwrap_or(f64::NAN);
    ChiSquare { chi2, df, p_value, threshold: df as f64 + 10.0 * (2.0 * df as f64).sqrt(), draws: n }
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
        assert!(r.passed() && r.df == 3 && r.p_value > 0.5, "{r:?}");
    }

    #[test]
    #[should_panic(expected = "chi-square failed")]
    fn biased_counts_fail() {
        chi_square(&[1300, 900, 900, 900], &[0.25; 4]).assert_pass("biased");
    }

    #[test]
    #[should_panic(expected = "draws in bins expecting")]
    fn draws_where_the_target_has_none_fail() {
        chi_square(&[500, 440, 60], &[0.5, 0.5, 0.0]);
    }

    #[test]
    fn softmax_matches_closed_form() {
        let p = softmax(&[0.0, (2f32).ln()], 1.0);
        assert!((p[0] - 1.0 / 3.0).abs() < 1e-7 && (p[1] - 2.0 / 3.0).abs() < 1e-7);
        assert_eq!(softmax(&[1.0, 3.0, 3.0], 0.0), vec![0.0, 1.0, 0.0]);
    }
}
