//! The demo's synthetic target and draft models.
//!
//! A target row (one request at one position) is a Zipf profile over ranks,
//! `logit(rank) = −s·ln(rank + 1)`, with one of [`PROFILES`] exponents and the
//! ranks dealt to token ids by a per-row affine bijection
//! `rank(x) = (a·x + b) mod V` (`gcd(a, V) = 1`). So every row looks different
//! (its top tokens are scattered over the vocabulary) yet the distribution of
//! a token's *rank* is one of four known distributions: emitted tokens can be
//! checked against the target with a chi-square over ranks, and the target's
//! argmax is the token of rank 0.
//!
//! The draft model's row is the target row plus `noise · n(x)`, `n` roughly
//! standard normal (a sum of four random bytes, scaled). Everything comes
//! from the project's counter RNG keyed by `(seed, request, position)`, so a
//! row is the same whenever it is generated.

use specdec::rng::{Stream, random_quad};

/// Zipf exponents of the target profiles: flat (many plausible tokens) to peaked.
pub const PROFILES: [f32; 4] = [0.8, 1.1, 1.5, 2.2];

/// The parameters of one target row.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// Multiplier of the id → rank bijection, coprime with V.
    a: u64,
    /// Offset of the id → rank bijection.
    b: u64,
    /// Which of [`PROFILES`] the row uses.
    pub profile: usize,
    /// Key of the row's draft noise.
    noise_key: u64,
    pos: u64,
}

pub struct Model {
    vocab: usize,
    /// `PROFILES.len() × V` logits by rank.
    by_rank: Vec<Vec<f32>>,
    key: u64,
    noise: f32,
}

impl Model {
    pub fn new(vocab: usize, seed: u64, noise: f32) -> Self {
        let by_rank = PROFILES.iter().map(|&s| (0..vocab).map(|r| -s * ((r + 1) as f32).ln()).collect()).collect();
        Model { vocab, by_rank, key: mix(seed ^ 0x6d6f_6465_6c73), noise }
    }

    /// The logits of profile `p`, by rank.
    pub fn profile(&self, p: usize) -> &[f32] {
        &self.by_rank[p]
    }

    /// The target row of `request` at position `pos`.
    pub fn row(&self, request: usize, pos: u64) -> Row {
        let key = self.key.wrapping_add(mix(request as u64));
        let [w0, w1, w2, w3] = random_quad(key, pos, Stream::Target, 0);
        let v = self.vocab as u64;
        let mut a = (w0 as u64 | (w1 as u64) << 32) % v;
        while gcd(a, v) != 1 {
            a = (a + 1) % v;
        }
        let b = ((w2 as u64) << 32 | w3 as u64) % v;
        let noise_key = key ^ (w1 as u64) << 32 ^ w2 as u64;
        Row { a, b, profile: (w3 as usize) % PROFILES.len(), noise_key, pos }
    }

    /// The rank of token `x` in `row` (0 = the argmax).
    pub fn rank(&self, row: &Row, x: usize) -> usize {
        ((row.a as u128 * x as u128 + row.b as u128) % self.vocab as u128) as usize
    }

    /// Writes the target row's logits (`V` values).
    pub fn target(&self, row: &Row, out: &mut [f32]) {
        let by_rank = &self.by_rank[row.profile];
        let v = self.vocab as u64;
        let mut rank = row.b;
        for o in &mut out[..self.vocab] {
            *o = by_rank[rank as usize];
            rank += row.a;
            if rank >= v {
                rank -= v;
            }
        }
    }

    /// Writes the draft row: the target's logits (`target`) plus noise.
    pub fn draft(&self, row: &Row, target: &[f32], out: &mut [f32]) {
        // A sum of four uniform bytes has mean 510 and variance 4·(256² − 1)/12.
        const MEAN: f32 = 510.0;
        let scale = self.noise / (4.0 * 65535.0f32 / 12.0).sqrt();
        let target = &target[..self.vocab];
        for (q, (o, t)) in out[..self.vocab].chunks_mut(4).zip(target.chunks(4)).enumerate() {
            let words = random_quad(row.noise_key, row.pos, Stream::Draft, q as u32);
            for ((o, &t), w) in o.iter_mut().zip(t).zip(words) {
                let bytes = w.to_le_bytes().iter().map(|&b| b as u32).sum::<u32>();
                *o = t + (bytes as f32 - MEAN) * scale;
            }
        }
    }
}

/// SplitMix64's finaliser: spreads a small integer over 64 bits.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_permuted_profiles() {
        for vocab in [1, 7, 999, 128_256] {
            let model = Model::new(vocab, 3, 1.0);
            let (mut t, mut d) = (vec![0f32; vocab], vec![0f32; vocab]);
            for pos in [0, 5, 1 << 40] {
                let row = model.row(2, pos);
                model.target(&row, &mut t);
                let mut seen = vec![false; vocab];
                for (x, &l) in t.iter().enumerate() {
                    let r = model.rank(&row, x);
                    assert!(!seen[r], "rank {r} twice (V {vocab})");
                    seen[r] = true;
                    assert_eq!(l, model.profile(row.profile)[r]);
                }
                model.draft(&row, &t, &mut d);
                let mean = d.iter().zip(&t).map(|(d, t)| (d - t) as f64).sum::<f64>() / vocab as f64;
                assert!(vocab < 999 || mean.abs() < 0.1, "noise mean {mean}");
            }
        }
    }
}
