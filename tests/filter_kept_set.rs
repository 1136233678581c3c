//! The kept set of SPEC §7.2 as the CPU backend computes it
//! (`specdec::cpu::kept_set`, the selection its calls use) against the
//! suite's sort-based reference (`filters::reference_kept`), and `LSE(S)`
//! against an f64 log-sum-exp over the reference's set: randomized rows,
//! tie-heavy bf16 rows whose equal values straddle `τ_k` and `τ_p`,
//! boundary rows, rows with `-inf` and NaN entries, V ∈ {1, 999, 4097, 151936}.

use half::bf16;
use specdec::cpu::kept_set;
use specdec::filter::{Filter, MASS_BITS, mass};
use specdec_suite::drafting::scale;
use specdec_suite::filters::{SETTINGS, reference_kept};
use specdec_suite::inputs::Rng;

/// The filter settings every row is checked under: the suites' and the extremes.
fn settings(vocab: usize) -> Vec<Filter> {
    let f = |top_k: u32, top_p: f32, min_p: f32| Filter { top_k, top_p, min_p };
    let extremes = [f(vocab as u32, 1.0, 0.0), f(0, 1e-30, 0.0), f(0, 1.0, 1.0), f(1000, 0.5, 0.3)];
    SETTINGS.into_iter().chain(extremes).collect()
}

/// `kept_set` keeps exactly the reference's ids and its `LSE(S)` is the
/// reference set's (f64) to f32 rounding.
fn check(row: &[f32], t: f32, f: Filter, what: &str) {
    let got = kept_set(row, t, f);
    let want = reference_kept(row, t, f);
    let s = scale(t);
    for (i, (&x, &w)) in row.iter().zip(&want).enumerate() {
        let kept = x * s >= got.threshold;
        assert_eq!(kept, w, "{what}, {f:?}, T {t}: id {i} (x = {}), τ = {}", x * s, got.threshold);
    }
    let xs: Vec<f64> =
        row.iter().zip(&want).filter(|&(&x, &k)| k && x > f32::NEG_INFINITY).map(|(&x, _)| f64::from(x * s)).collect();
    if let Some(max) = xs.iter().copied().reduce(f64::max) {
        let lse = max + xs.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        assert!(
            (f64::from(got.lse) - lse).abs() <= 1e-5 * lse.abs().max(1.0),
            "{what}, {f:?}: LSE {} vs {lse}",
            got.lse
        );
    }
}

#[test]
fn randomized_rows_match_the_reference() {
    let mut rng = Rng::new(0xF11);
    for vocab in [1usize, 999, 4097, 151_936] {
        for spread in [1.0f32, 4.0, 12.0] {
            let row: Vec<f32> = (0..vocab).map(|_| rng.uniform(-spread, spread)).collect();
            for t in [0.6f32, 1.0, 1.5] {
                for f in settings(vocab) {
                    check(&row, t, f, &format!("uniform ±{spread}, V {vocab}"));
                }
            }
        }
    }
}

/// bf16-rounded logits at T = 1 take few distinct values, so tie groups of
/// many ids straddle every `τ_k` and `τ_p`: the whole group is kept.
#[test]
fn tie_heavy_rows_keep_whole_groups() {
    let mut rng = Rng::new(0x71E5);
    for vocab in [999usize, 4097, 151_936] {
        let row: Vec<f32> = (0..vocab).map(|_| bf16::from_f32(rng.uniform(-3.0, 3.0)).to_f32()).collect();
        for f in settings(vocab) {
            check(&row, 1.0, f, &format!("bf16 ties, V {vocab}"));
        }
        // k = 1 on a tied maximum keeps every copy of it.
        let mut tied = row.clone();
        let top = tied.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        tied[0] = top;
        tied[vocab - 1] = top;
        let got = kept_set(&tied, 1.0, Filter { top_k: 1, ..Filter::OFF });
        let kept = tied.iter().filter(|&&x| x >= got.threshold).count();
        assert!(kept >= 3, "V {vocab}: the maximum's tie group has at least 3 ids, {kept} kept");
        assert_eq!(got.threshold, top);
    }
}

#[test]
fn rows_with_minus_inf_and_nan() {
    let mut rng = Rng::new(0x1AF);
    for vocab in [1usize, 999, 4097] {
        let row: Vec<f32> = (0..vocab)
            .map(|_| match rng.below(5) {
                0 => f32::NEG_INFINITY,
                1 if vocab > 1 => f32::NAN,
                _ => rng.uniform(-4.0, 4.0),
            })
            .collect();
        for f in settings(vocab) {
            let got = kept_set(&row, 1.0, f);
            let want = reference_kept(&row, 1.0, f);
            for (i, (&x, &w)) in row.iter().zip(&want).enumerate() {
                // NaN is never kept, -inf only when nothing finite is.
                assert_eq!(x >= got.threshold, w, "V {vocab}, {f:?}, id {i} ({x})");
            }
        }
        // Only -inf and one finite value: top-k = 50 keeps that one value alone.
        let mut lonely = vec![f32::NEG_INFINITY; vocab];
        lonely[vocab / 2] = 0.5;
        let got = kept_set(&lonely, 1.0, Filter { top_k: 50, top_p: 0.9, min_p: 0.0 });
        assert_eq!(got.threshold, 0.5, "V {vocab}");
        assert_eq!(got.lse, 0.5, "V {vocab}");
    }
}

/// Where top-p's group boundary falls, decided exactly: with the top
/// group's mass `a` of the survivors' `total`, `top_p` at and around `a /
/// total` keeps the top group alone iff `a >= top_p · total` (computed
/// here in exact integer arithmetic), else the next group too.
#[test]
fn top_p_at_the_boundary_of_a_group() {
    // Three ids at 0, two at -0.75, the rest far below (mass 0: never decisive).
    let mut row = vec![-40.0f32; 999];
    row[..3].fill(0.0);
    row[3..5].fill(-0.75);
    let a = 3 * mass(0.0, 0.0);
    let total = a + 2 * mass(-0.75, 0.0);
    let share = (a as f64 / total as f64) as f32;
    for p in [share.next_down(), share, share.next_up()] {
        // p = mant · 2^e, exactly.
        let (mant, e) = {
            let bits = p.to_bits();
            ((bits & 0x7f_ffff | 0x80_0000) as u128, ((bits >> 23) & 0xff) as i32 - 150)
        };
        let top_only = (a as u128) << (-e) as u32 >= total as u128 * mant;
        let got = kept_set(&row, 1.0, Filter { top_p: p, ..Filter::OFF });
        let kept = row.iter().filter(|&&x| x >= got.threshold).count();
        assert_eq!(kept, if top_only { 3 } else { 5 }, "top_p {p:e} (share {share:e})");
        check(&row, 1.0, Filter { top_p: p, ..Filter::OFF }, "boundary");
    }
    // Ids of mass 0 are never what top-p keeps beyond the first group that reaches P.
    let got = kept_set(&row, 1.0, Filter { top_p: 0.999_999_9, ..Filter::OFF });
    assert_eq!(row.iter().filter(|&&x| x >= got.threshold).count(), 5);
    assert!(mass(-40.0, 0.0) == 0 && MASS_BITS == 32);
}

#[test]
fn extreme_settings() {
    let mut rng = Rng::new(0xE7);
    let row: Vec<f32> = (0..4097).map(|_| rng.uniform(-5.0, 5.0)).collect();
    let argmax = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // A tiny top-p, k = 1 and min-p = 1 each keep the argmax alone.
    for f in [
        Filter { top_p: 1e-30, ..Filter::OFF },
        Filter { top_p: f32::from_bits(1), ..Filter::OFF },
        Filter { top_k: 1, ..Filter::OFF },
        Filter { min_p: 1.0, ..Filter::OFF },
    ] {
        let got = kept_set(&row, 1.0, f);
        assert_eq!(got.threshold, argmax, "{f:?}");
        assert_eq!(row.iter().filter(|&&x| x >= got.threshold).count(), 1, "{f:?}");
    }
    // k >= V, P = 1, m = 0: nothing is filtered.
    for f in [Filter { top_k: 4097, ..Filter::OFF }, Filter { top_k: 1 << 30, ..Filter::OFF }, Filter::OFF] {
        assert_eq!(kept_set(&row, 1.0, f).threshold, f32::NEG_INFINITY, "{f:?}");
    }
}
