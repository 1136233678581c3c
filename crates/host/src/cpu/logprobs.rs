//! Log-probabilities of emitted tokens on the CPU (REFERENCE §8): after a
//! call's tokens are known, each emitted position's row is read again for
//! the log-sum-exps it needs, and once more for its top-n and rank. A
//! sharded call (`sharded_logprobs`) takes the same outputs from the parts
//! its ranks send.

use super::dist::Dist;
use super::simd::{self, Level, Logit};
use crate::logprobs::{Distribution, Logprobs, MAX_TOP_LOGPROBS};
use crate::memory::Host;
use rayon::prelude::*;
use specdec_core::argmax::ArgMax;
use specdec_core::filter::Filter;
use specdec_core::rng::Stream;
use specdec_core::sample::Sampler;

/// An emitted position: the row its token was drawn from, as the sampler
/// read it, and how (`temperature` `0`: greedy, whose processed
/// distribution is the raw one).
pub(super) struct Emitted<'r, L> {
    pub values: &'r [L],
    pub temperature: f32,
    pub filter: Filter,
    pub token: u32,
}

/// What [`Logprobs`] asks of each position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Asked {
    pub processed: bool,
    pub raw: bool,
    /// `n` and the distribution of the top-n and rank.
    pub top: Option<(usize, Distribution)>,
}

impl Asked {
    /// What `logprobs` asks for (`None`: nothing).
    pub fn of(logprobs: &Logprobs<'_, Host>) -> Option<Asked> {
        (!logprobs.is_none()).then(|| Asked {
            processed: logprobs.processed.is_some(),
            raw: logprobs.raw.is_some(),
            top: logprobs.top.as_ref().map(|t| (t.n, t.distribution)),
        })
    }

    fn wants(&self, d: Distribution) -> bool {
        self.top.is_some_and(|(_, t)| t == d)
    }

    /// Whether a position of a `greedy` row (whose processed distribution is
    /// the raw one) needs its row's raw log-sum-exp.
    pub fn needs_raw(&self, greedy: bool) -> bool {
        self.raw || self.wants(Distribution::Raw) || (greedy && self.wants_processed())
    }

    /// Whether a position of a row sampled at a temperature needs its row's
    /// processed distribution.
    pub fn needs_dist(&self, greedy: bool) -> bool {
        !greedy && self.wants_processed()
    }

    fn wants_processed(&self) -> bool {
        self.processed || self.wants(Distribution::Processed)
    }
}

/// One position's outputs.
pub(super) struct Found {
    pub processed: f32,
    pub raw: f32,
    /// The top-n, best first: (log-probability, id).
    pub top: Vec<(f32, u32)>,
    pub rank: i32,
}

/// Writes `logprobs` at the positions `0..positions` for which `emitted(i)`
/// gives the token emitted there (others are left as they are), spread over
/// rayon's pool when `parallel`.
pub(super) fn write<'r, L: Logit + Sync + 'r>(
    logprobs: &mut Logprobs<'_, Host>,
    positions: usize,
    parallel: bool,
    emitted: impl Fn(usize) -> Option<Emitted<'r, L>> + Sync,
) {
    let Some(asked) = Asked::of(logprobs) else { return };
    let level = Level::detect();
    let find = |i: usize| emitted(i).map(|e| (i, find(level, asked, &e)));
    let found: Vec<Option<(usize, Found)>> =
        if parallel { (0..positions).into_par_iter().map(find).collect() } else { (0..positions).map(find).collect() };
    for (i, f) in found.into_iter().flatten() {
        put(logprobs, i, Some(&f));
    }
}

/// Position `i` past its request's emitted tokens: NaN log-probabilities, `-1` ids and rank.
pub(super) fn past(logprobs: &mut Logprobs<'_, Host>, i: usize) {
    put(logprobs, i, None);
}

/// Position `i`'s outputs: `f`'s, or (`None`) those of a position past its request's tokens.
pub(super) fn put(logprobs: &mut Logprobs<'_, Host>, i: usize, f: Option<&Found>) {
    if let Some(p) = logprobs.processed.as_deref_mut() {
        p[i] = f.map_or(f32::NAN, |f| f.processed);
    }
    if let Some(r) = logprobs.raw.as_deref_mut() {
        r[i] = f.map_or(f32::NAN, |f| f.raw);
    }
    if let Some(top) = logprobs.top.as_mut() {
        let n = top.n;
        for k in 0..n {
            let entry = f.and_then(|f| f.top.get(k));
            top.logprobs[i * n + k] = entry.map_or(f32::NAN, |e| e.0);
            top.ids[i * n + k] = entry.map_or(-1, |e| e.1 as i32);
        }
        top.ranks[i] = f.map_or(-1, |f| f.rank);
    }
}

/// Position `e`'s outputs as `asked`; those not asked are NaN, empty or 0.
fn find<L: Logit>(level: Level, asked: Asked, e: &Emitted<'_, L>) -> Found {
    let greedy = e.temperature == 0.0;
    let (need_raw, need_dist) = (asked.needs_raw(greedy), asked.needs_dist(greedy));
    let raw_lse = if need_raw { simd::raw_exp_sum(level, e.values).lse() } else { f32::NAN };
    let sampler = Sampler::new(e.temperature, 0, 0, Stream::Target);
    let dist = need_dist.then(|| Dist::of(level, &sampler, e.values, e.filter));
    // A NaN logit is an impossible id, as for the argmax.
    let raw = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x - raw_lse };
    let processed = |x: f32| match &dist {
        Some(d) if !x.is_nan() => d.log_prob(sampler.scaled(x)),
        Some(_) => f32::NEG_INFINITY,
        None => raw(x),
    };
    let x = e.values[e.token as usize].to_f32();
    let (mut top, mut rank) = (Vec::new(), 0);
    if let Some((n, d)) = asked.top {
        (top, rank) = match d {
            Distribution::Processed => top_and_rank(e.values, n, e.token, processed),
            Distribution::Raw => top_and_rank(e.values, n, e.token, raw),
        };
    }
    Found {
        processed: if asked.processed { processed(x) } else { f32::NAN },
        raw: if asked.raw { raw(x) } else { f32::NAN },
        top,
        rank,
    }
}

/// The `n` best ids of `values` by `logprob` of their value in the argmax's
/// order (larger first, the smaller id on ties, NaN as `-inf`), each with
/// its log-probability, and the rank of `token`: 1 + the number of ids
/// whose log-probability is larger than its.
fn top_and_rank<L: Logit>(values: &[L], n: usize, token: u32, logprob: impl Fn(f32) -> f32) -> (Vec<(f32, u32)>, i32) {
    let mine = logprob(values[token as usize].to_f32());
    let (top, larger) = top_and_larger(values, 0, n, mine, &logprob);
    (top, larger + 1)
}

/// The `n` best of `values` (ids from `base`) as [`top_and_rank`] lists
/// them, and how many have a log-probability larger than `mine`: a rank's
/// part of a sharded call's top-n and rank (the parts merge by [`merge_top`]
/// and add up).
pub(super) fn top_and_larger<L: Logit>(
    values: &[L],
    base: u32,
    n: usize,
    mine: f32,
    logprob: impl Fn(f32) -> f32,
) -> (Vec<(f32, u32)>, i32) {
    debug_assert!(n <= MAX_TOP_LOGPROBS);
    let mine = ArgMax::new(mine, 0).value;
    let mut best: Vec<ArgMax> = Vec::with_capacity(n + 1);
    let mut larger = 0i32;
    for (i, v) in values.iter().enumerate() {
        let c = ArgMax::new(logprob(v.to_f32()), base + i as u32);
        larger += (c.value > mine) as i32;
        if best.len() < n || best.last().is_some_and(|last| c.beats(*last)) {
            let at = best.partition_point(|b| b.beats(c));
            best.insert(at, c);
            best.truncate(n);
        }
    }
    let top = best.into_iter().map(|b| (logprob(values[(b.index - base) as usize].to_f32()), b.index)).collect();
    (top, larger)
}

/// The `n` best of several lists of [`top_and_larger`] over disjoint ids,
/// in its order: the list of the ids together.
pub(super) fn merge_top(lists: impl IntoIterator<Item = (f32, u32)>, n: usize) -> Vec<(f32, u32)> {
    let key = |&(v, id): &(f32, u32)| ArgMax::new(v, id);
    let mut all: Vec<(f32, u32)> = lists.into_iter().collect();
    all.sort_by(|a, b| {
        let (a, b) = (key(a), key(b));
        if a.beats(b) {
            std::cmp::Ordering::Less
        } else if b.beats(a) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    all.truncate(n);
    all
}
