//! The per-element sampling rule (SPEC §3), shared by the kernels and the CPU
//! backend so both fold exactly the same scores.
//!
//! A row is folded four consecutive ids at a time (one Philox call's words):
//! greedy rows fold raw logits; random rows fold `logit·(1/T) + gumbel(word)`.
//! The scale is `1/T` rounded once, then a multiply per element ([`Sampler::scaled`]);
//! this *is* the definition of the scaled logit on every backend. A finite
//! logit whose scaled value leaves the f32 range saturates at `±f32::MAX`
//! rather than becoming `±inf`, so it stays finite (SPEC §3.4: `-inf` loses to
//! every finite logit); two logits both beyond the range compare equal.
//!
//! Noise is skipped where it provably cannot matter: for a quad whose best
//! possible score, a bound on its largest scaled logit
//! ([`Sampler::scaled_bound`]) plus [`GUMBEL_MAX`], is strictly below the
//! running best (no Philox call at all), for a quad whose bound plus its
//! words' [`quad_bound`](crate::gumbel::quad_bound) is (no logarithms; at
//! most one table lookup, [`quad_ruled_out`]), and for an id whose scaled
//! logit plus its word's bound [`gumbel_bound`] is.
//! Rounding is monotone, so no skipped id could win or tie, and the result is
//! the same as with noise everywhere.

use crate::argmax::ArgMax;
use crate::gumbel::{GUMBEL_MAX, gumbel, gumbel_bound, quad_ruled_out};
use crate::rng::{Stream, random_quad};

/// How one row turns logits into a token.
#[derive(Clone, Copy, Debug)]
pub struct Sampler {
    /// `1/T`; unused when greedy.
    pub scale: f32,
    pub greedy: bool,
    pub seed: u64,
    pub pos: u64,
    pub stream: Stream,
}

impl Sampler {
    /// A sampler for temperature `t` (`0` = greedy; the caller has validated it).
    #[inline(always)]
    pub fn new(t: f32, seed: u64, pos: u64, stream: Stream) -> Self {
        let greedy = t == 0.0;
        Sampler { scale: if greedy { 1.0 } else { 1.0 / t }, greedy, seed, pos, stream }
    }

    /// The random words of ids `base .. base + 4` (`base % 4 == 0`) in this
    /// sampler's stream: one Philox call.
    #[inline(always)]
    pub fn quad_words(&self, base: u32) -> [u32; 4] {
        random_quad(self.seed, self.pos, self.stream, base / 4)
    }

    /// `x·(1/T)`, saturating at `±f32::MAX` for finite `x` (see the module docs).
    #[inline(always)]
    // `max`/`min` are one instruction each on the GPU; `clamp` keeps NaN by
    // compare-and-select, which is never needed here.
    #[allow(clippy::manual_clamp)]
    pub fn scaled(&self, x: f32) -> f32 {
        let y = x * self.scale;
        // `x` finite: `y` is finite or ±inf, never NaN, and clamps to ±MAX.
        if x.abs() < f32::INFINITY { y.max(-f32::MAX).min(f32::MAX) } else { y }
    }

    /// An upper bound on [`Sampler::scaled`] of `x` and of every value below
    /// it, for the quad tests: `x·(1/T)`, raised to `-f32::MAX` where that is
    /// `-inf` (the saturation `scaled` applies to a finite `x`; for `x = -inf`
    /// a bound above the true `-inf`). Two instructions where `scaled` takes
    /// five.
    #[inline(always)]
    pub fn scaled_bound(&self, x: f32) -> f32 {
        (x * self.scale).max(-f32::MAX)
    }

    /// Folds ids `base .. base + n` (`base % 4 == 0`, `n <= 4`) with logits
    /// `vals[..n]` into `best`.
    #[inline(always)]
    pub fn fold_quad(&self, best: ArgMax, base: u32, vals: [f32; 4], n: u32) -> ArgMax {
        self.fold_quad_skipping(best, base, vals, n, NO_LANE)
    }

    /// [`Sampler::fold_quad`] of the quad's lanes other than `skip`
    /// ([`NO_LANE`]: none), the lead that [`Sampler::fold_quad_lead`] folded.
    #[inline(always)]
    pub fn fold_quad_skipping(&self, best: ArgMax, base: u32, vals: [f32; 4], n: u32, skip: u32) -> ArgMax {
        // Lanes are spelled out with constant indices so that, on the GPU, the
        // arrays stay in registers (a loop the unroller declines would put
        // them in local memory).
        if self.greedy {
            let lane = |best: ArgMax, i: usize| {
                if (i as u32) < n && i as u32 != skip {
                    best.combine(ArgMax::new(vals[i], base + i as u32))
                } else {
                    best
                }
            };
            return lane(lane(lane(lane(best, 0), 1), 2), 3);
        }
        // Scaling is monotone, so the largest scaled logit is at most the
        // bound of the largest: one multiply per quad unless the quad may
        // hold a winner.
        let t = self.scaled_bound(top(vals, n));
        self.fold_scores(best, base, t, |i| self.scaled(vals[i]), n, skip, || self.quad_words(base))
    }

    /// The first half of a quad's fold in two: folds only the quad's lead,
    /// the lane whose score has the largest bound, and says which it was
    /// ([`NO_LANE`] if the quad tests ruled the whole quad out). The fold
    /// is completed by [`Sampler::fold_quad_skipping`] of the lead, after
    /// the leads of a group's quads have raised its floor (`Floored`): at
    /// a cold floor a warp would otherwise evaluate the noise of every lane,
    /// one lane at a time, where its best lead rules out most of the rest.
    /// Greedy samplers have no lead.
    #[inline(always)]
    pub fn fold_quad_lead(&self, best: ArgMax, base: u32, vals: [f32; 4], n: u32) -> (ArgMax, u32) {
        let t = self.scaled_bound(top(vals, n));
        if self.greedy || n == 0 || t + GUMBEL_MAX < best.value {
            return (best, NO_LANE);
        }
        let words = self.quad_words(base);
        if quad_ruled_out(words, |bound| t + bound < best.value) {
            return (best, NO_LANE);
        }
        let k = lead(|i| self.scaled_bound(vals[i]) + gumbel_bound(words[i]), n);
        (score_lane(best, self.scaled(pick(vals, k)), pick(words, k), base + k), k)
    }

    /// Folds ids `base .. base + n` with unnormalised log-weights `w[..n]`
    /// (scores `w + gumbel`) into `best`: Gumbel-max over any weights, e.g.
    /// the residual `log(p − q)` of a rejected draft. Ignores `greedy`.
    #[inline(always)]
    pub fn fold_log_weights(&self, best: ArgMax, base: u32, w: [f32; 4], n: u32) -> ArgMax {
        self.fold_log_weights_drawn(best, base, w, n, || self.quad_words(base))
    }

    /// [`Sampler::fold_log_weights`] with the quad's random words supplied by
    /// `words`, which must return [`Sampler::quad_words`]`(base)`;
    /// it is called only if the quad is not skipped. The CPU backend draws
    /// the words of many quads at once.
    #[inline(always)]
    pub fn fold_log_weights_drawn(
        &self,
        best: ArgMax,
        base: u32,
        w: [f32; 4],
        n: u32,
        words: impl FnOnce() -> [u32; 4],
    ) -> ArgMax {
        self.fold_scores(best, base, top(w, n), |i| w[i], n, NO_LANE, words)
    }

    /// The fold of scores `w(i) + gumbel(word i)` of lanes other than
    /// `skip`, where `t` is at least the largest of `w(..n)` (NaN skipped).
    /// Three tests, each only if the last failed: the quad against
    /// [`GUMBEL_MAX`] (no Philox call), the quad against its words'
    /// [`quad_bound`](crate::gumbel::quad_bound) ([`quad_ruled_out`]), each id
    /// against its word's [`gumbel_bound`] (no logarithm; [`score_lane`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fold_scores(
        &self,
        best: ArgMax,
        base: u32,
        t: f32,
        w: impl Fn(usize) -> f32,
        n: u32,
        skip: u32,
        words: impl FnOnce() -> [u32; 4],
    ) -> ArgMax {
        if t + GUMBEL_MAX < best.value {
            return best;
        }
        let words = words();
        if quad_ruled_out(words, |bound| t + bound < best.value) {
            return best;
        }
        let lane = |best: ArgMax, i: usize| {
            if (i as u32) < n && i as u32 != skip { score_lane(best, w(i), words[i], base + i as u32) } else { best }
        };
        lane(lane(lane(lane(best, 0), 1), 2), 3)
    }
}

/// The `skip` of a whole quad's fold, and the lead of a quad that has none.
pub const NO_LANE: u32 = 4;

/// Folds id `id` of weight `w` and random word `word` into `best`, unless
/// its word's [`gumbel_bound`] rules it out.
#[inline(always)]
fn score_lane(best: ArgMax, w: f32, word: u32, id: u32) -> ArgMax {
    // `!(bound < best)`, not `bound >= best`: a NaN weight must still be
    // folded (as -inf with its id), or an all-NaN row would keep no id.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(w + gumbel_bound(word) < best.value) { best.combine(ArgMax::new(w + gumbel(word), id)) } else { best }
}

/// The first of lanes `..n` (`n >= 1`) with the largest `key`, which must
/// not be NaN.
#[inline(always)]
fn lead(key: impl Fn(usize) -> f32, n: u32) -> u32 {
    let (mut k, mut top) = (0, key(0));
    let mut lane = |i: usize| {
        if (i as u32) < n && key(i) > top {
            (k, top) = (i as u32, key(i));
        }
    };
    lane(1);
    lane(2);
    lane(3);
    k
}

/// `a[k]` for `k < 4` by selects: on the GPU, a variable index into a
/// register array would move it to local memory.
#[inline(always)]
fn pick<T: Copy>(a: [T; 4], k: u32) -> T {
    let low = if k == 0 { a[0] } else { a[1] };
    let high = if k == 2 { a[2] } else { a[3] };
    if k < 2 { low } else { high }
}

/// The two candidates of a resampled token: Gumbel-max over the residual
/// weights, and over the target's with the same noise. The residual's wins
/// unless the residual is empty, which happens only when rounding makes
/// `q >= p` everywhere; then the token follows `p`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Resampled {
    pub residual: ArgMax,
    pub target: ArgMax,
}

impl Resampled {
    pub const IDENTITY: Resampled = Resampled { residual: ArgMax::IDENTITY, target: ArgMax::IDENTITY };

    #[inline(always)]
    pub fn combine(self, o: Resampled) -> Resampled {
        Resampled { residual: self.residual.combine(o.residual), target: self.target.combine(o.target) }
    }

    #[inline(always)]
    pub fn token(self) -> u32 {
        if self.residual.value == f32::NEG_INFINITY { self.target.index } else { self.residual.index }
    }

    /// Whether candidates folded against floors seeded at `floors`
    /// (residual, target; [`Floored::seeded`](crate::argmax::Floored::seeded))
    /// give the [`token`](Resampled::token) of an unseeded fold: the
    /// residual's reached its floor and is not empty, or it is empty with
    /// no floor and the target's reached its own. Otherwise the fold must be
    /// repeated unseeded. A NaN floor is never reached.
    #[inline(always)]
    pub fn certified(self, (residual, target): (f32, f32)) -> bool {
        let ninf = f32::NEG_INFINITY;
        (self.residual.value >= residual && self.residual.value > ninf)
            || (self.residual.value == ninf && residual == ninf && self.target.value >= target)
    }
}

/// How far below the log-mass of a Gumbel-max's weights a resample seeds
/// its floors. The best score `max(w + g)` over weights of total mass `m` is
/// Gumbel-distributed around `ln m`, so it falls below `ln m − FLOOR_MARGIN`
/// with probability `exp(−e^FLOOR_MARGIN)` ≈ 4·10⁻¹⁵, when the fold must be
/// repeated (`Resampled::certified`); meanwhile the seeded floors rule out
/// from its first quad what a cold floor would fold, about
/// `e^FLOOR_MARGIN` ≈ 33 ids a row needing their noise's logarithms.
pub const FLOOR_MARGIN: f32 = 3.5;

impl Sampler {
    /// Folds ids `base .. base + n` into both candidates of `best`: residual
    /// log-weights `res(i)` and target log-weights `tgt[..n]`, each plus the
    /// same noise `gumbel(word(id))`.
    ///
    /// `res` is only called for lanes that might matter: `ub[i]` must bound
    /// `res(i)` from above (`log p` for the residual `log(p − q)`, the target
    /// weight itself when the residual is the target with ids removed). As in
    /// [`Sampler::fold_log_weights`], a lane is skipped only when both of its
    /// scores are provably below their running bests: by `GUMBEL_MAX` for the
    /// whole quad (no Philox call), else by [`gumbel_bound`] of its word (no
    /// logarithm, no residual weight). The result is that of scoring every id.
    #[inline(always)]
    pub fn fold_resample(
        &self,
        best: Resampled,
        base: u32,
        tgt: [f32; 4],
        ub: [f32; 4],
        res: impl Fn(usize) -> f32,
        n: u32,
    ) -> Resampled {
        self.fold_resample_drawn(best, base, tgt, ub, res, n, || self.quad_words(base))
    }

    /// [`Sampler::fold_resample`] with the quad's random words supplied by
    /// `words`, which must return [`Sampler::quad_words`]`(base)`;
    /// it is called only if the quad is not skipped. The CPU backend draws
    /// the words of many quads at once.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn fold_resample_drawn(
        &self,
        best: Resampled,
        base: u32,
        tgt: [f32; 4],
        ub: [f32; 4],
        res: impl Fn(usize) -> f32,
        n: u32,
        words: impl FnOnce() -> [u32; 4],
    ) -> Resampled {
        let tops = (top(ub, n), top(tgt, n));
        self.resample_scores(best, base, tops, |i| (tgt[i], ub[i]), |i, _| res(i), n, words)
    }

    /// [`Sampler::fold_resample`] from the target's raw logits `logits[..n]`,
    /// scaled only for ids the quad tests cannot rule out: the target
    /// weights are `tgt = scaled(logits)`, their bounds `ub = tgt − shift`
    /// and `res(i, tgt[i])` the residual weights (at most `ub`).
    #[inline(always)]
    pub fn fold_resample_logits(
        &self,
        best: Resampled,
        base: u32,
        logits: [f32; 4],
        shift: f32,
        res: impl Fn(usize, f32) -> f32,
        n: u32,
    ) -> Resampled {
        // Scaling and subtracting are monotone: the bound of the top bounds them all.
        let top_tgt = self.scaled_bound(top(logits, n));
        let weights = |i: usize| {
            let t = self.scaled(logits[i]);
            (t, t - shift)
        };
        self.resample_scores(best, base, (top_tgt - shift, top_tgt), weights, res, n, || self.quad_words(base))
    }

    /// Both candidates' folds of a quad, where `weights(i)` is id `i`'s
    /// `(tgt, ub)` and `tops` at least the largest of each over `..n` (NaN skipped).
    /// As in `fold_scores`, three tests each rule out work if they
    /// can: [`GUMBEL_MAX`], [`quad_ruled_out`], then each id's [`gumbel_bound`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn resample_scores(
        &self,
        best: Resampled,
        base: u32,
        (top_ub, top_tgt): (f32, f32),
        weights: impl Fn(usize) -> (f32, f32),
        res: impl Fn(usize, f32) -> f32,
        n: u32,
        words: impl FnOnce() -> [u32; 4],
    ) -> Resampled {
        if top_ub + GUMBEL_MAX < best.residual.value && top_tgt + GUMBEL_MAX < best.target.value {
            return best;
        }
        let words = words();
        if quad_ruled_out(words, |bound| top_ub + bound < best.residual.value && top_tgt + bound < best.target.value) {
            return best;
        }
        // `!(… < best)`: a NaN weight takes the exact path (see `fold_scores`).
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let lane = |b: Resampled, i: usize| {
            if (i as u32) >= n {
                return b;
            }
            let bound = gumbel_bound(words[i]);
            let (tgt, ub) = weights(i);
            if !(ub + bound < b.residual.value) || !(tgt + bound < b.target.value) {
                let g = gumbel(words[i]);
                let id = base + i as u32;
                Resampled {
                    residual: b.residual.combine(ArgMax::new(res(i, tgt) + g, id)),
                    target: b.target.combine(ArgMax::new(tgt + g, id)),
                }
            } else {
                b
            }
        };
        lane(lane(lane(lane(best, 0), 1), 2), 3)
    }
}

/// The largest of `w[..n]`, skipping NaN (`-inf` if none): `max` ignores a
/// NaN operand (one instruction on the GPU); constant lanes keep `w` in registers.
#[inline(always)]
fn top(w: [f32; 4], n: u32) -> f32 {
    let t = |hi: f32, i: usize| if (i as u32) < n { hi.max(w[i]) } else { hi };
    t(t(t(t(f32::NEG_INFINITY, 0), 1), 2), 3)
}

/// The acceptance rule of SPEC §4 in log space: accept the draft iff
/// `log u + log q(d) < log p(d)`, with `log u = −E` for the acceptance word's
/// exponential variate `E` (all 32 bits of the word count).
#[inline(always)]
pub fn accepts(word: u32, log_q: f32, log_p: f32) -> bool {
    -crate::gumbel::exponential(word) + log_q < log_p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argmax::Floored;

    /// A test logit from hash `h`: NaN and `-inf` once in `m` each, else one
    /// of `m − 2` values `spread` apart around 0.
    fn test_logit(h: u32, m: u32, spread: f32) -> f32 {
        match h % m {
            0 => f32::NAN,
            1 => f32::NEG_INFINITY,
            k => (k as f32 - (m / 2) as f32) * spread,
        }
    }

    /// Folding with pruning gives the same winner as scoring every id.
    #[test]
    fn pruning_never_changes_the_winner() {
        let s = Sampler::new(0.7, 99, 5, Stream::Target);
        for trial in 0..200u32 {
            let vals: [f32; 64] = core::array::from_fn(|i| {
                let h = crate::rng::random_u32(trial as u64, 0, Stream::Accept, i as u32);
                // Wide spread so pruning triggers often, plus exact ties.
                ((h % 61) as f32 - 30.0) * if trial % 2 == 0 { 1.0 } else { 0.25 }
            });
            let mut folded = ArgMax::IDENTITY;
            for q in 0..16 {
                let quad = [vals[4 * q], vals[4 * q + 1], vals[4 * q + 2], vals[4 * q + 3]];
                folded = s.fold_quad(folded, 4 * q as u32, quad, 4);
            }
            let mut full = ArgMax::IDENTITY;
            for (i, &v) in vals.iter().enumerate() {
                let w = crate::rng::random_u32(99, 5, Stream::Target, i as u32);
                full = full.combine(ArgMax::new(s.scaled(v) + gumbel(w), i as u32));
            }
            assert_eq!(folded, full, "trial {trial}");
        }
    }

    /// A quad folded in two halves, its lead and then the rest, gives the
    /// whole quad's fold, also where a group's floor rose in between as
    /// high as a floor may (the quad's own best score).
    #[test]
    fn a_lead_and_the_rest_fold_as_the_whole_quad() {
        let s = Sampler::new(0.6, 21, 9, Stream::Target);
        let mut leads = 0;
        for trial in 0..4000u32 {
            let h = |salt: u32, i: usize| crate::rng::random_u32(trial as u64, salt as u64, Stream::Accept, i as u32);
            let vals: [f32; 4] =
                core::array::from_fn(|i| test_logit(h(0, i), 29, [0.05, 0.5, 2.0][trial as usize % 3]));
            let n = 1 + h(1, 0) % 4;
            let base = 4 * (h(2, 0) % 1000);
            let best = match h(3, 0) % 3 {
                0 => ArgMax::IDENTITY,
                k => ArgMax::new((h(4, 0) % 40) as f32 * 0.25 - 5.0 * k as f32, h(5, 0) % 5000),
            };
            let whole = s.fold_quad(best, base, vals, n);
            let (led, k) = s.fold_quad_lead(best, base, vals, n);
            leads += (k != NO_LANE) as u32;
            assert_eq!(s.fold_quad_skipping(led, base, vals, n, k), whole, "trial {trial}");
            let raised = Floored { own: led, floor: whole.value };
            let rest = raised.settle(s.fold_quad_skipping(raised.probe(), base, vals, n, k));
            assert_eq!(rest.own, whole, "trial {trial}, floor raised");
        }
        assert!(leads > 1000, "{leads} leads in 4000 quads: the quad tests rule out too much to test");
    }

    /// The pruned resample fold gives both candidates of scoring every id,
    /// and computes few residual weights on a spread-out row.
    #[test]
    fn resample_pruning_never_changes_the_candidates() {
        let s = Sampler::new(0.8, 5, 77, Stream::Target);
        let mut calls = 0;
        let mut lanes = 0;
        for trial in 0..300u32 {
            let h = |salt: u32, i: usize| crate::rng::random_u32(trial as u64, salt as u64, Stream::Accept, i as u32);
            let spread = [0.25f32, 1.0, 4.0][trial as usize % 3];
            let tgt: [f32; 256] = core::array::from_fn(|i| ((h(0, i) % 97) as f32 - 60.0) * spread);
            let ub: [f32; 256] = core::array::from_fn(|i| tgt[i] - 3.0);
            // At most its bound; sometimes equal to it, sometimes empty (-inf).
            let res: [f32; 256] = core::array::from_fn(|i| match h(1, i) % 4 {
                0 => ub[i],
                1 => f32::NEG_INFINITY,
                k => ub[i] - (k as f32) * 1.7,
            });
            let calls_here = core::cell::Cell::new(0);
            let mut folded = Resampled::IDENTITY;
            for q in 0..64 {
                let at = |a: &[f32; 256]| [a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]];
                let n = if q == 63 { 3 } else { 4 }; // a ragged last quad
                let lazy = |l: usize| {
                    calls_here.set(calls_here.get() + 1);
                    res[4 * q + l]
                };
                folded = s.fold_resample(folded, 4 * q as u32, at(&tgt), at(&ub), lazy, n);
            }
            let mut full = Resampled::IDENTITY;
            for i in 0..255 {
                let g = gumbel(crate::rng::random_u32(5, 77, Stream::Target, i as u32));
                full = Resampled {
                    residual: full.residual.combine(ArgMax::new(res[i] + g, i as u32)),
                    target: full.target.combine(ArgMax::new(tgt[i] + g, i as u32)),
                };
            }
            assert_eq!(folded, full, "trial {trial}");
            calls += calls_here.get();
            lanes += 255;
        }
        assert!(calls * 4 < lanes, "{calls} residual weights computed for {lanes} lanes: pruning does not work");
    }

    /// Scaling a quad's target logits lazily gives the candidates of
    /// scaling them all first, for every kind of residual a kernel folds.
    #[test]
    fn lazy_scaling_gives_the_eager_candidates() {
        let s = Sampler::new(0.7, 11, 3, Stream::Target);
        for trial in 0..200u32 {
            let h = |salt: u32, i: usize| crate::rng::random_u32(trial as u64, salt as u64, Stream::Accept, i as u32);
            let logits: [f32; 64] =
                core::array::from_fn(|i| test_logit(h(2, i), 41, [0.1, 1.0, 3.0][trial as usize % 3]));
            let shift = [0.0, 2.5, 7.0][trial as usize % 3];
            let q: [f32; 64] = core::array::from_fn(|i| (h(3, i) % 23) as f32 - 11.0);
            let res = |id: usize, t: f32| {
                if id.is_multiple_of(5) { f32::NEG_INFINITY } else { t - shift - (q[id] * 0.01).abs() }
            };
            let (mut lazy, mut eager) = (Resampled::IDENTITY, Resampled::IDENTITY);
            for x in (0..64).step_by(4) {
                let n = if x == 60 { 2 } else { 4 };
                let quad: [f32; 4] = core::array::from_fn(|i| logits[x + i]);
                lazy = s.fold_resample_logits(lazy, x as u32, quad, shift, |i, t| res(x + i, t), n);
                let tgt = quad.map(|v| s.scaled(v));
                eager = s.fold_resample(eager, x as u32, tgt, tgt.map(|t| t - shift), |i| res(x + i, tgt[i]), n);
            }
            assert_eq!(lazy, eager, "trial {trial}");
        }
    }

    /// Resample folds against seeded floors are certified only where their
    /// token is the unseeded one (floors from below the best to above
    /// it, empty residuals, NaN floors), else refolded.
    #[test]
    fn certified_seeded_resamples_give_the_unseeded_token() {
        let s = Sampler::new(0.9, 17, 4, Stream::Target);
        let ninf = f32::NEG_INFINITY;
        let (mut certified, mut refolded) = (0, 0);
        for trial in 0..600u32 {
            let h = |salt: u32, i: usize| crate::rng::random_u32(trial as u64, salt as u64, Stream::Accept, i as u32);
            let tgt: [f32; 64] = core::array::from_fn(|i| ((h(0, i) % 41) as f32 - 20.0) * 0.3);
            let empty = trial % 5 == 0;
            let res = |i: usize| if empty || h(1, i) % 3 == 0 { ninf } else { tgt[i] - 1.0 };
            let fold = |floors: (f32, f32)| {
                let (mut r, mut t) = (Floored::seeded(floors.0), Floored::seeded(floors.1));
                for q in 0..16 {
                    let b = Resampled { residual: r.probe(), target: t.probe() };
                    let quad: [f32; 4] = core::array::from_fn(|i| tgt[4 * q + i]);
                    let out = s.fold_resample(b, 4 * q as u32, quad, quad, |i| res(4 * q + i), 4);
                    (r, t) = (r.settle(out.residual), t.settle(out.target));
                }
                Resampled { residual: r.own, target: t.own }
            };
            let full = fold((ninf, ninf));
            assert!(full.certified((ninf, ninf)), "trial {trial}: an unseeded fold is its own result");
            let guess = |salt: u32| match h(salt, 99) % 6 {
                0 => ninf,
                1 => f32::NAN,
                k => (k as f32 - 3.0) * 4.0,
            };
            let floors = (if empty && h(4, 0) % 2 == 0 { ninf } else { guess(2) }, guess(3));
            let seeded = fold(floors);
            if seeded.certified(floors) {
                assert_eq!(seeded.token(), full.token(), "trial {trial}, floors {floors:?}");
                certified += 1;
            } else {
                refolded += 1;
            }
        }
        assert!(certified > 100 && refolded > 100, "{certified} certified, {refolded} refolded: cases not covered");
    }

    #[test]
    fn an_empty_residual_falls_back_to_the_target() {
        let s = Sampler::new(1.0, 3, 9, Stream::Target);
        let ninf = f32::NEG_INFINITY;
        let tgt = [0.0, 5.0, 0.0, -2.0];
        let empty = s.fold_resample(Resampled::IDENTITY, 0, tgt, tgt, |_| ninf, 4);
        assert_eq!(empty.token(), s.fold_log_weights(ArgMax::IDENTITY, 0, tgt, 4).index);
        // A non-empty residual wins even where the target's candidate is larger.
        let res = [ninf, ninf, -30.0, ninf];
        let one = s.fold_resample(Resampled::IDENTITY, 0, tgt, tgt, |i| res[i], 4);
        assert_eq!(one.token(), 2);
    }

    #[test]
    fn scaling_saturates_instead_of_overflowing() {
        let s = Sampler::new(0.5, 0, 0, Stream::Target);
        assert_eq!(s.scaled(-3.0e38), -f32::MAX);
        assert_eq!(s.scaled(3.0e38), f32::MAX);
        assert_eq!(s.scaled(f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert_eq!(s.scaled(f32::INFINITY), f32::INFINITY);
        assert!(s.scaled(f32::NAN).is_nan());
        assert_eq!(s.scaled(3.0), 6.0);
        // The smallest valid temperature still has a finite scale.
        assert!(Sampler::new(f32::MIN_POSITIVE, 0, 0, Stream::Target).scale.is_finite());
    }

    /// The quad tests' bound is at least the scaled value, at every kind of
    /// logit and at temperatures that overflow the scaling either way.
    #[test]
    fn scaled_bound_bounds_scaled() {
        let xs = [
            f32::NEG_INFINITY,
            -f32::MAX,
            -3.0e38,
            -1.0e30,
            -2.5,
            -0.0,
            0.0,
            1.0e-40,
            7.0,
            2.0e38,
            f32::MAX,
            f32::INFINITY,
        ];
        for t in [f32::MIN_POSITIVE, 1.0e-30, 0.5, 0.8, 1.0, 3.0, 1.0e30] {
            let s = Sampler::new(t, 0, 0, Stream::Target);
            for &x in &xs {
                assert!(s.scaled_bound(x) >= s.scaled(x), "T = {t}, x = {x}");
                // And of every smaller value (scaling is monotone).
                for &y in xs.iter().filter(|&&y| y <= x) {
                    assert!(s.scaled_bound(x) >= s.scaled(y), "T = {t}, x = {x}, y = {y}");
                }
            }
        }
    }

    #[test]
    fn masked_lanes_are_ignored() {
        let s = Sampler::new(0.0, 0, 0, Stream::Target);
        let best = s.fold_quad(ArgMax::IDENTITY, 8, [1.0, 2.0, 9.0, 9.0], 2);
        assert_eq!(best, ArgMax::new(2.0, 9));
    }
}
