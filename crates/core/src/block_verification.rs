//! Block verification (REFERENCE §4.11): the rule of Sun et al., "Block
//! verification accelerates speculative decoding" (ICLR 2025, arXiv
//! 2403.10444, Algorithm 2), which verifies a request's drafts jointly and
//! accepts, in expectation, at least as many as the draft-by-draft rule of
//! SPEC §4, with the same guarantee: every emitted token follows the target.
//! Its probabilities are `f64`: a handful per request, compared exactly
//! against the acceptance uniforms.

/// `u < h` for the acceptance uniform of `word`, `u = (word + 1/2) / 2^32`
/// (SPEC §2.3, exact in `f64`).
#[inline(always)]
pub fn below(word: u32, h: f64) -> bool {
    (word as f64 + 0.5) * (1.0 / 4_294_967_296.0) < h
}

/// `p(d) / q(d)` of a draft from its log-probabilities `log_p`, `log_q`
/// (`log_q = 0` for a one-hot draft) in `f64`: 0 where `log_p = -inf` (a draft
/// outside the target's kept set), `+inf` where `q(d)` underflowed, NaN from
/// a NaN logit ([`next_weight`] makes it 0). With [`exp64`], so that both
/// backends weigh a block bit for bit alike.
#[inline(always)]
pub fn ratio(log_p: f32, log_q: f32) -> f64 {
    if log_p == f32::NEG_INFINITY { 0.0 } else { exp64(f64::from(log_p) - f64::from(log_q)) }
}

/// A one-hot draft's residual mass `Σ_x max(w·p(x) − q(x), 0) = w·(1 − p(d))`
/// (`q` the point mass at `d`, where `w·p(d) <= 1`), from `log p(d)`: no
/// row to read. A NaN `log p(d)` (a NaN logit) is a probability of 0.
#[inline(always)]
pub fn one_hot_mass(w: f64, log_p: f32) -> f64 {
    let p = if log_p.is_nan() { 0.0 } else { exp64(f64::from(log_p)) };
    w * (1.0 - p)
}

/// `1/n` for `n = 1..=13`, rounded once (the compiler's division).
const RECIPROCALS: [f64; 13] = {
    let mut inv = [0.0; 13];
    let mut n = 0;
    while n < 13 {
        inv[n] = 1.0 / (n + 1) as f64;
        n += 1;
    }
    inv
};

/// `e^x` in `f64` from IEEE `+ − ×` and integer operations only (no fused
/// multiply-add, as the kernels are built), so that every backend computes
/// it bit for bit alike: `x = k·ln 2 + r` (Cody–Waite, `|r| <= ln 2 / 2`),
/// `e^r` by its Taylor series to `r^13` (truncation below `2^-60`), scaled
/// by `2^k`, in two steps where the result is subnormal. NaN for NaN, `inf`
/// above 709.78, 0 below -745.2.
#[inline(always)]
pub fn exp64(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238e-1; // 0x3fe62e42fee00000: k·LN2_HI exact for |k| < 2^11
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    if x.is_nan() {
        return x;
    }
    if x > 709.78 {
        return f64::INFINITY;
    }
    if x < -745.2 {
        return 0.0;
    }
    let t = x * core::f64::consts::LOG2_E;
    let k = if t >= 0.0 { (t + 0.5) as i32 } else { (t - 0.5) as i32 };
    let kf = f64::from(k);
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    // 1 + r/1·(1 + r/2·(… (1 + r/13))), from the inside out, by products
    // with the reciprocals (a division is a long call on a GPU).
    let mut p = 1.0;
    for inv in RECIPROCALS.iter().rev() {
        p = 1.0 + r * p * inv;
    }
    // 2^k for k in [-1075, 1024]: two normal factors.
    let half = k / 2;
    let two = |e: i32| f64::from_bits(((e + 1023) as u64) << 52);
    p * two(half) * two(k - half)
}

/// The block's weight after one more draft: `p_i = min(p_{i-1} · ratio, 1)`,
/// `ratio = p(d_i) / q(d_i)` of draft `d_i` under its row's target and draft
/// distributions. A product that is NaN (a NaN ratio, from a NaN logit, or
/// `0 · inf`) is 0: a weight that cannot be told claims nothing, as a NaN
/// logit's draft is rejected (SPEC §4.10), and a block cut to 0 stays 0.
#[inline(always)]
pub fn next_weight(p: f64, ratio: f64) -> f64 {
    let w = p * ratio;
    if w >= 1.0 {
        1.0
    } else if w >= 0.0 {
        w
    } else {
        0.0
    }
}

/// `ln w` in f32 for a weight `w` in `(0, 1]` (`-inf` for 0 or below f64's
/// normal range): `w = m·2^e` with `m` in `[1, 2)` exactly, `ln m` by the
/// IEEE-only [`crate::gumbel::ln`], so a weight below f32's normal range
/// (a block far over-drafted) still weighs its residual.
#[inline(always)]
pub fn ln_weight(w: f64) -> f32 {
    if w.is_nan() || w < f64::MIN_POSITIVE {
        return f32::NEG_INFINITY;
    }
    let e = ((w.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let m = f64::from_bits((w.to_bits() & ((1u64 << 52) - 1)) | (1023u64 << 52));
    crate::gumbel::ln(m as f32) + e as f32 * core::f32::consts::LN_2
}

/// The probability of stopping after `i < γ` drafts when no later draft
/// stopped: `h_i = r / (r + 1 − p_i)`, `r = Σ_x max(p_i·p(x) − q(x), 0)`
/// over row `i`'s distributions (the next token's after the first `i`
/// drafts); `1` where `r + 1 − p_i = 0` (then `p` stays 1 to the block's end
/// and nothing stops short of it).
#[inline(always)]
pub fn stop_probability(p: f64, residual_mass: f64) -> f64 {
    let d = residual_mass + (1.0 - p);
    if d > 0.0 { residual_mass / d } else { 1.0 }
}

/// Block verification of the `n = ratios.len()` drafts of a request (`n >=
/// 1`, no placeholder among them): the number `τ` of drafts accepted and
/// the block's weight `p_τ` there. The token after them is drawn from row
/// `τ`'s residual `max(p_τ·p(x) − q(x), 0)` (normalised) where `τ < n`, else
/// from row `n`'s target `p` (the bonus token).
///
/// - `ratios[i]`, `i < n`: `p(d_i) / q(d_i)` of draft `i` at its row
///   (`+inf` where `q(d_i) = 0 < p(d_i)`); replaced by the weights `p_{i+1}`;
/// - `residual_mass(i, p_i)`, `1 <= i < n`: `Σ_x max(p_i·p(x) − q(x), 0)` over row `i`;
/// - `word(i)`, `i < n`: the acceptance word of draft `i`'s row (SPEC §2, the
///   acceptance stream, as the draft-by-draft rule draws it).
///
/// The rule, in the paper's steps (its `M_b`, `M_s` are our `p`, `q`; step
/// `i = 1..n` is draft `i − 1`):
/// 1. `p_0 = 1`, `p_i = min(p_{i−1}·p(d_{i−1})/q(d_{i−1}), 1)`: with `Q(X^i)`
///    and `P(X^i)` the drafter's and the target's probabilities of the
///    block's first `i` drafts, `p_i·Q(X^i)` is the part of `P(X^i)` that
///    keeping `X^i` may claim: never more than `P(X^i)`, and all of it
///    wherever no prefix of the block was over-drafted.
/// 2. After `X^i`, the target's next-token mass not yet claimed is
///    `r_i = Σ_x max(p_i·p(x) − q(x), 0)`; `1 − p_i` is the part of the
///    drafter's paths through `X^i` that `X^i` could not claim.
/// 3. `h_i = r_i / (r_i + 1 − p_i)` (`h_n = p_n`) is the chance of stopping
///    at `i` among the paths that went past it, chosen so that stopping at
///    `i` and then drawing `y` from step 2's normalised residual has
///    probability `Q(X^i)·max(p_i·p(y) − q(y), 0)` in all.
/// 4. `τ` = the largest `i` whose uniform `η_i < h_i` (0 if none): the rows
///    are scanned from the last, so a row's residual mass is summed only if
///    no later row stopped. Summed over every draft block, each emitted
///    sequence then has exactly its target probability (the paper's
///    Theorem 1; `tests/block_verification.rs` enumerates it exactly), and
///    no rule over the same drafts accepts more in expectation (Theorem 2).
///
/// With `n = 1` this is the draft-by-draft rule: `h_1 = p_1 = min(p/q, 1)`,
/// and with the same word the same decision.
pub fn block_verify(
    ratios: &mut [f64],
    mut residual_mass: impl FnMut(usize, f64) -> f64,
    word: impl Fn(usize) -> u32,
) -> (usize, f64) {
    let n = ratios.len();
    debug_assert!(n >= 1);
    let mut p = 1.0;
    for r in ratios.iter_mut() {
        p = next_weight(p, *r);
        *r = p;
    }
    if below(word(n - 1), ratios[n - 1]) {
        return (n, ratios[n - 1]);
    }
    for i in (1..n).rev() {
        let p = ratios[i - 1];
        if below(word(i - 1), stop_probability(p, residual_mass(i, p))) {
            return (i, p);
        }
    }
    (0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NaN ratios and `0 · inf` give weight 0; weights never exceed 1.
    #[test]
    fn weights_are_in_0_1_and_nan_is_0() {
        assert_eq!(next_weight(1.0, f64::NAN), 0.0);
        assert_eq!(next_weight(0.0, f64::INFINITY), 0.0);
        assert_eq!(next_weight(0.5, f64::INFINITY), 1.0);
        assert_eq!(next_weight(0.5, 4.0), 1.0);
        assert_eq!(next_weight(0.5, 0.5), 0.25);
        assert_eq!(next_weight(1.0, 0.0), 0.0);
    }

    /// `ln_weight` against f64's `ln`, from 1 down past f32's normal range; 0 gives `-inf`.
    #[test]
    fn ln_weight_is_accurate_below_f32s_range() {
        extern crate std;
        for w in [1.0f64, 0.75, 0.5, 1e-3, 1e-30, 1.1e-38, 1e-40, 1e-100, 1e-300] {
            let (got, want) = (f64::from(ln_weight(w)), w.ln());
            assert!((got - want).abs() <= 4e-7 * want.abs().max(1.0), "ln_weight({w}) = {got}, ln = {want}");
        }
        assert_eq!(ln_weight(0.0), f32::NEG_INFINITY);
    }

    /// `exp64` against std's `exp` (within 2 ulp) from the subnormal range to overflow.
    #[test]
    fn exp64_is_accurate() {
        extern crate std;
        for x in [-745.0f64, -708.5, -300.25, -30.0, -1.5, -0.34, 0.0, 1e-12, 0.5, 3.0, 88.8, 300.0, 709.7] {
            let (got, want) = (exp64(x), x.exp());
            assert!((got - want).abs() <= 2.0 * f64::EPSILON * want, "exp64({x}) = {got:e}, exp = {want:e}");
        }
        assert_eq!(exp64(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp64(f64::INFINITY), f64::INFINITY);
        assert!(exp64(f64::NAN).is_nan());
        assert_eq!(ratio(f32::NEG_INFINITY, -1.0), 0.0);
        assert_eq!(ratio(-1.0, f32::NEG_INFINITY), f64::INFINITY);
        assert_eq!(one_hot_mass(0.5, f32::NAN), 0.5);
    }

    /// A weight of 0 never stops a block there: `h = r / (r + 1)` with `r = 0`.
    #[test]
    fn a_zero_weight_never_stops() {
        assert_eq!(stop_probability(0.0, 0.0), 0.0);
        assert_eq!(stop_probability(1.0, 0.0), 1.0);
        assert_eq!(stop_probability(0.5, 0.5), 0.5);
    }
}
