//! Sampling filters on the CPU (SPEC §7). A filtered row's kept set
//! `S = {x >= τ}` is found by one pass over the row that keeps candidates
//! (values that can be at or above `τ`), skipping blocks whose maximum is
//! below the running cutoff; `τ` comes from `specdec_core::filter::threshold`
//! over the candidates' tie groups, the rule the kernels apply too. A small
//! `S` is then sampled from its own ids (the Gumbel-max over the quads that
//! hold them, as a fold of the row with every other id at `-inf` would give);
//! a large one by that fold of the masked row.

use super::simd::{self, Level, Logit};
use crate::shard::{Reader, Writer};
use specdec_core::argmax::ArgMax;
use specdec_core::dtype::Element;
use specdec_core::exp_sum::ExpSum;
use specdec_core::filter::{Filter, Group, key, merge_groups, min_p_threshold, radix_threshold, threshold};
use specdec_core::rng::Stream;
use specdec_core::sample::Sampler;
use std::borrow::Cow;

/// Ids per block of the candidate pass (its maximum decides whether to look inside).
const BLOCK: usize = 64;

/// The most ids of `S` sampled from their own list; above it the masked row is folded.
const SPARSE_MAX: usize = 4096;

/// The most candidates whose tie groups are sorted and walked
/// (`filter::threshold`); above it `τ` is found by `filter::radix_threshold`
/// (four histogram passes, the kernels' way), which gives the same.
const GROUP_WALK_MAX: usize = 2048;

/// How far below the maximum a value can still have a non-zero mass
/// (`ln 2^-MASS_BITS ≈ -22.18`, with room): top-p never puts `τ` lower.
const MASS_RANGE: f32 = 23.0;

/// A filtered row's kept set.
pub(super) struct Kept {
    /// `S = {i : scaled(x_i) >= tau}`.
    pub tau: f32,
    /// The ids of `S`, ascending, when there are at most [`SPARSE_MAX`] of
    /// them and `τ` is finite.
    pub ids: Option<Vec<u32>>,
    /// Whether the row holds a NaN.
    pub nan: bool,
}

impl Kept {
    /// Whether id `i`, of scaled value `y`, is in `S` (NaN never is).
    pub fn holds(&self, y: f32) -> bool {
        y >= self.tau
    }

    /// `LSE(S)` of the scaled `values` of the row this is the kept set of:
    /// over its ids when it lists them, else over the masked row.
    pub fn lse<L: Logit>(&self, level: Level, s: &Sampler, values: &[L]) -> f32 {
        match &self.ids {
            Some(ids) => {
                let mut sum = ExpSum::EMPTY;
                ids.iter().for_each(|&i| sum.push(s.scaled(values[i as usize].to_f32())));
                sum.lse()
            }
            None => simd::lse_kept(level, s, values, self.tau),
        }
    }
}

/// The candidates of a row for `filter`, in id order: `(scaled value, id)`
/// of every id that can be in `S` or decide `τ` (with min-p alone, the
/// first `SPARSE_MAX + 1` or more where there are more), and the row's largest
/// scaled value (`-inf` if none). Two passes: the blocks' maxima, then the
/// blocks whose maximum reaches the cutoff under which no value matters —
/// with top-k, the `k`-th largest block maximum (each of those blocks holds a
/// value at least as large, so the row's `k`-th value is no smaller);
/// without, `τ_m`, and with top-p also the lowest value with a mass (a value
/// of mass 0 never becomes `τ_p`).
fn candidates<L: Logit>(level: Level, s: &Sampler, values: &[L], filter: Filter) -> Candidates {
    let mut nan = false;
    // Scaling is monotone: the scaled maximum of a block is its maximum scaled.
    let tops: Vec<f32> = values
        .chunks(BLOCK)
        .map(|block| {
            let (top, block_nan) = simd::block_max(level, block);
            nan |= block_nan;
            s.scaled(top)
        })
        .collect();
    let max = tops.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let cutoff = if filter.has_top_k(values.len()) {
        let k = filter.top_k as usize;
        if k <= tops.len() { kth_largest(tops.clone(), k) } else { f32::NEG_INFINITY }
    } else {
        let tau_m = if filter.has_min_p() { min_p_threshold(max, filter.min_p) } else { f32::NEG_INFINITY };
        if filter.has_top_p() { tau_m.max(max - MASS_RANGE) } else { tau_m }
    };
    // With min-p alone `τ = τ_m` is the cutoff: past SPARSE_MAX candidates
    // the kept set is folded as the masked row, and no more are needed.
    let most = if filter.has_top_k(values.len()) || filter.has_top_p() { usize::MAX } else { SPARSE_MAX + 1 };
    let mut cands = Vec::new();
    let mut ys = [0f32; BLOCK];
    for (b, (block, &top)) in values.chunks(BLOCK).zip(&tops).enumerate() {
        if top < cutoff || top == f32::NEG_INFINITY {
            continue;
        }
        if cands.len() >= most {
            break;
        }
        // Branch-free, so that it vectorises: the scaled values, then a mask
        // of those that pass; then the ones that do, bit by bit.
        for (y, v) in ys.iter_mut().zip(block) {
            *y = s.scaled(v.to_f32());
        }
        let mut pass = 0u64;
        for (i, &y) in ys[..block.len()].iter().enumerate() {
            pass |= ((y >= cutoff && y > f32::NEG_INFINITY) as u64) << i;
        }
        while pass != 0 {
            let i = pass.trailing_zeros() as usize;
            pass &= pass - 1;
            cands.push((ys[i], (b * BLOCK + i) as u32));
        }
    }
    Candidates { cands, max, nan }
}

/// What [`candidates`] finds.
struct Candidates {
    cands: Vec<(f32, u32)>,
    max: f32,
    nan: bool,
}

/// The `k`-th largest of `values` (`1 <= k <= len`), counted with multiplicity.
fn kth_largest(mut values: Vec<f32>, k: usize) -> f32 {
    *values.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a)).1
}

/// `τ` of a row of raw logits `values` sampled by `s` (not greedy) with
/// `filter` (not off), and its candidates (a superset of `S`).
fn row_threshold<L: Logit>(level: Level, s: &Sampler, values: &[L], filter: Filter) -> (f32, Candidates) {
    let found = candidates(level, s, values, filter);
    let (cands, max) = (&found.cands, found.max);
    if max == f32::NEG_INFINITY {
        return (f32::NEG_INFINITY, found);
    }
    let vocab = values.len();
    let mut ys: Vec<f32> = if filter.has_top_p() || filter.has_top_k(vocab) {
        cands.iter().map(|c| c.0).collect()
    } else {
        // min-p alone: τ_m needs the maximum only.
        vec![max]
    };
    if filter.has_top_k(vocab) && filter.top_k as usize <= ys.len() {
        // Only the k largest and their ties decide τ_k; top-p and min-p keep a subset of them.
        let kth = kth_largest(ys.clone(), filter.top_k as usize);
        ys.retain(|&y| y >= kth);
    }
    if ys.len() > GROUP_WALK_MAX && max < f32::INFINITY {
        // Many candidates (top-p over most of the row): a radix search, not a sort.
        let mut masses = vec![0u64; ys.len()];
        simd::masses(level, &ys, max, &mut masses);
        return (radix_threshold(&ys, &masses, max, filter, vocab), found);
    }
    (threshold(&groups(ys), filter, vocab), found)
}

/// The tie groups of the values `ys` (none NaN or `-inf`), largest first,
/// with their masses against the largest (none where it is `+inf`): what
/// [`threshold`] takes.
fn groups(ys: Vec<f32>) -> Vec<Group> {
    groups_of(ys.into_iter().map(|y| Group { value: y, count: 1, mass: 0 }).collect())
}

/// [`merge_groups`] of `entries` (values with their counts, any order).
fn groups_of(mut entries: Vec<Group>) -> Vec<Group> {
    entries.sort_unstable_by_key(|e| std::cmp::Reverse(key(e.value)));
    let n = merge_groups(&mut entries);
    entries.truncate(n);
    entries
}

/// A vocabulary shard's part of a top-`n` filter: the `n` largest scaled
/// values of its ids, largest first, counted with multiplicity (fewer where
/// it holds fewer above `-inf`; NaN is no value), and how many more of its
/// ids tie with the last of them.
///
/// Every value at or above the whole row's `n`-th largest is then in some
/// shard's list, with its full count: a shard's own `n`-th value is no
/// larger than the row's. So the lists decide `τ` and `LSE(S)` of any
/// filter whose top-k is at most `n` ([`kept_of_largest`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Largest {
    pub values: Vec<f32>,
    pub ties: u32,
}

impl Largest {
    /// A shard's list: the candidates of a top-`n` filter over its ids
    /// (all of its values where it holds no more than `n` ids), sorted; and
    /// whether its ids hold a NaN.
    pub fn of<L: Logit>(level: Level, s: &Sampler, values: &[L], n: usize) -> (Largest, bool) {
        let (mut ys, nan): (Vec<f32>, bool) = if n < values.len() {
            let found = candidates(level, s, values, Filter { top_k: n as u32, ..Filter::OFF });
            (found.cands.into_iter().map(|c| c.0).collect(), found.nan)
        } else {
            let ys: Vec<f32> = values.iter().map(|v| s.scaled(v.to_f32())).collect();
            let nan = ys.iter().any(|y| y.is_nan());
            (ys.into_iter().filter(|&y| y > f32::NEG_INFINITY).collect(), nan)
        };
        ys.sort_unstable_by_key(|&y| std::cmp::Reverse(key(y)));
        let ties = match n.checked_sub(1).and_then(|last| ys.get(last)) {
            Some(&last) => ys[n..].iter().take_while(|&&y| y == last).count() as u32,
            None => 0,
        };
        ys.truncate(n);
        (Largest { values: ys, ties }, nan)
    }

    /// `list` in a message whose lists have `n` values: its values, `-inf`
    /// past them (none: all `-inf`), then its ties; `4n + 4` bytes.
    pub fn write(list: Option<&Largest>, n: usize, w: &mut Writer) {
        let values = list.map_or(&[][..], |l| &l.values[..]);
        (0..n).for_each(|i| w.f32(values.get(i).copied().unwrap_or(f32::NEG_INFINITY)));
        w.u32(list.map_or(0, |l| l.ties));
    }

    /// A list of `n` values, as [`Largest::write`] wrote it.
    pub fn read(n: usize, r: &mut Reader) -> Largest {
        let values = (0..n).map(|_| r.f32()).filter(|&y| y > f32::NEG_INFINITY).collect();
        Largest { values, ties: r.u32() }
    }
}

/// `τ` and `LSE(S)` of a row filtered by `filter` (its top-k on, and at most
/// every list's length) from its shards' [`Largest`] lists: the unsharded
/// row's, bit for bit, as both are functions of the multiset of values at or
/// above the row's `k`-th largest (`threshold`, `ExpSum`).
pub(super) fn kept_of_largest<'a>(
    lists: impl Iterator<Item = &'a Largest>,
    filter: Filter,
    vocab: usize,
) -> (f32, f32) {
    let mut entries = Vec::new();
    for list in lists {
        entries.extend(list.values.iter().map(|&y| Group { value: y, count: 1, mass: 0 }));
        // The list's further ties join its last value's group (counted, not listed).
        entries.extend(list.values.last().map(|&last| Group { value: last, count: list.ties, mass: 0 }));
    }
    entries.retain(|e| e.count > 0);
    let groups = groups_of(entries);
    let tau = threshold(&groups, filter, vocab);
    let mut sum = ExpSum::EMPTY;
    for g in groups.iter().take_while(|g| g.value >= tau) {
        sum.push_count(g.value, g.count);
    }
    (tau, sum.lse())
}

/// The kept set of a filtered row (`filter` not off, `s` not greedy).
pub(super) fn kept<L: Logit>(level: Level, s: &Sampler, values: &[L], filter: Filter) -> Kept {
    let (tau, Candidates { mut cands, nan, .. }) = row_threshold(level, s, values, filter);
    cands.retain(|c| c.0 >= tau);
    let finite = tau > f32::NEG_INFINITY && tau < f32::INFINITY;
    let ids = (cands.len() <= SPARSE_MAX && finite).then(|| cands.into_iter().map(|c| c.1).collect());
    Kept { tau, ids, nan }
}

/// `values` with every id outside `{scaled >= τ}` set to `-inf`, NaN included.
pub(super) fn masked<'v, L: Element>(s: &Sampler, values: &'v [L], tau: f32) -> Cow<'v, [L]> {
    let off = L::from_f32(f32::NEG_INFINITY);
    values.iter().map(|&v| if s.scaled(v.to_f32()) >= tau { v } else { off }).collect::<Vec<L>>().into()
}

/// The Gumbel-max over the kept set `kept` of `values`: over the quads that
/// hold its ids (every other lane at `-inf`) when it lists them, else by the
/// fold that masks the row as it reads it (`simd::fold_kept`). Either is the
/// fold of the masked row: a quad of `-inf`
/// lanes never beats a finite candidate, and candidates combine in any order.
pub(super) fn fold_kept<L: Logit>(level: Level, s: &Sampler, values: &[L], kept: &Kept) -> ArgMax {
    let Some(ids) = &kept.ids else {
        return simd::fold_kept(level, s, ArgMax::IDENTITY, 0, values, kept.tau).0;
    };
    fold_listed(s, 0, values, ids)
}

/// The Gumbel-max over the quads of `values` that hold `ids` (places in
/// `values`, ascending), every other lane at `-inf`; `values` are ids
/// `base ..` of the row (`base % 4 == 0`).
pub(super) fn fold_listed<L: Logit>(s: &Sampler, base: u32, values: &[L], ids: &[u32]) -> ArgMax {
    listed_quads(values, ids).fold(ArgMax::IDENTITY, |best, (at, vals, n)| s.fold_quad(best, base + at, vals, n))
}

/// The places in `values` of the kept set `{scaled >= tau}` (`tau` finite),
/// ascending, if there are at most [`SPARSE_MAX`] of them: a vocabulary
/// shard's part of a kept set, sampled from its own ids as [`Kept`] lists them.
pub(super) fn kept_ids<L: Logit>(s: &Sampler, values: &[L], tau: f32) -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    for (i, v) in values.iter().enumerate() {
        if s.scaled(v.to_f32()) >= tau {
            if ids.len() == SPARSE_MAX {
                return None;
            }
            ids.push(i as u32);
        }
    }
    Some(ids)
}

/// The quads of `values` that hold any of `ids` (ascending, each below
/// `values.len()`), in id order: each quad's first id, its values at those
/// ids (`-inf` at its other lanes) and its number of lanes in the row.
pub(super) fn listed_quads<'a, L: Logit>(
    values: &'a [L],
    ids: &'a [u32],
) -> impl Iterator<Item = (u32, [f32; 4], u32)> + 'a {
    let mut at = 0;
    std::iter::from_fn(move || {
        let base = ids.get(at)? / 4 * 4;
        let mut vals = [f32::NEG_INFINITY; 4];
        while at < ids.len() && ids[at] < base + 4 {
            vals[(ids[at] - base) as usize] = values[ids[at] as usize].to_f32();
            at += 1;
        }
        Some((base, vals, (values.len() as u32 - base).min(4)))
    })
}

/// A row's kept set as the CPU backend computes it (SPEC §7.2): the
/// threshold `τ` (`S = {i : x_i >= τ}` with `x = logit · (1/T)`) and
/// `LSE(S)` of the scaled values, the log-normaliser of the filtered `p'`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeptSet {
    pub threshold: f32,
    pub lse: f32,
}

/// The kept set of `logits` (one row of exactly `V` logits: its length is
/// the vocabulary, which decides whether `top_k` filters) at temperature `temperature` (`> 0`)
/// with `filter`, as `gumbel_sample` and `rejection_sample` use it on the
/// CPU: for tests and for callers that want `p'` itself.
pub fn kept_set(logits: &[f32], temperature: f32, filter: Filter) -> KeptSet {
    let s = Sampler::new(temperature, 0, 0, Stream::Target);
    let level = Level::detect();
    if filter.is_off(logits.len()) {
        return KeptSet {
            threshold: f32::NEG_INFINITY,
            lse: simd::lse(level, &s, masked(&s, logits, f32::NEG_INFINITY).as_ref()),
        };
    }
    let k = kept(level, &s, logits, filter);
    KeptSet { threshold: k.tau, lse: k.lse(level, &s, logits) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_core::filter::mass;
    use specdec_core::rng::random_u32;

    /// Every level's masses are `filter::mass`, bit for bit (the top-p
    /// search's integer sums depend on them), over values from the maximum
    /// to past the end of `exp`'s range.
    #[test]
    fn every_level_has_the_masses() {
        let word = |i: usize| random_u32(7, i as u64, Stream::Accept, 0);
        for max in [0.0f32, 5.5, -30.25] {
            let ys: Vec<f32> = (0..10_007).map(|i| max - (word(i) % 1_000_000) as f32 * 1e-4).collect();
            for &level in Level::ALL.iter().filter(|l| l.supported()) {
                let mut got = vec![0u64; ys.len()];
                simd::masses(level, &ys, max, &mut got);
                for (y, g) in ys.iter().zip(&got) {
                    assert_eq!(*g, mass(*y, max), "{level:?}: y {y}, max {max}");
                }
            }
        }
    }

    /// The Gumbel-max over a kept set's own ids equals the fold of the
    /// masked row (a copy, and as the fold masks it), and so do the
    /// log-sum-exps, on every level, for kept sets from one id to thousands,
    /// on rows with ties, `-inf` and NaN, ragged last quads included.
    #[test]
    fn the_sparse_fold_is_the_masked_fold() {
        let word = |salt: u64, i: usize| random_u32(salt, i as u64, Stream::Accept, 0);
        let mut paths = [0usize; 2];
        for n in [1usize, 5, 999, 4097, 20_003] {
            let row: Vec<f32> = (0..n)
                .map(|i| match word(n as u64, i) % 40 {
                    0 => f32::NEG_INFINITY,
                    1 => f32::NAN,
                    2..=9 => 1.5,
                    w => w as f32 * 0.1 - 2.0,
                })
                .collect();
            for filter in [
                Filter { top_k: 1, ..Filter::OFF },
                Filter { top_k: 50, top_p: 0.9, ..Filter::OFF },
                Filter { top_k: 3000, ..Filter::OFF },
                Filter { min_p: 0.2, ..Filter::OFF },
                Filter { top_p: 0.5, ..Filter::OFF },
            ] {
                for (t, seed) in [(0.7f32, 3u64), (1.3, u64::MAX)] {
                    let s = Sampler::new(t, seed, 99, Stream::Target);
                    for &level in Level::ALL.iter().filter(|l| l.supported()) {
                        let k = kept(level, &s, row.as_slice(), filter);
                        let dense = Kept { ids: None, ..kept(level, &s, row.as_slice(), filter) };
                        let (got, want) = (fold_kept(level, &s, &row, &k), fold_kept(level, &s, &row, &dense));
                        paths[k.ids.is_some() as usize] += 1;
                        let ctx = format!("n {n}, {filter:?}, T {t}, {level:?}, sparse {}", k.ids.is_some());
                        assert_eq!(got.index, want.index, "{ctx}");
                        let scalar = fold_kept(Level::Scalar, &s, &row, &dense);
                        assert_eq!(want.index, scalar.index, "{ctx}: levels agree");
                        // The fold that masks as it goes is the fold of the masked row.
                        let copy = simd::fold(level, &s, ArgMax::IDENTITY, 0, masked(&s, &row, k.tau).as_ref()).0;
                        assert_eq!(want.index, copy.index, "{ctx}: the masked copy");
                        // So is the log-sum-exp that masks as it reads, bit for bit.
                        let (lse, lse_copy) = (
                            simd::lse_kept(level, &s, &row, k.tau),
                            simd::lse(level, &s, masked(&s, &row, k.tau).as_ref()),
                        );
                        assert_eq!(lse.to_bits(), lse_copy.to_bits(), "{ctx}: LSE {lse} vs {lse_copy}");
                    }
                }
            }
        }
        assert!(paths[0] > 0 && paths[1] > 0, "both paths are tested: {paths:?}");
    }
}
