//! Log-probabilities of a sharded call's emitted tokens (REFERENCE §8,
//! `docs/VOCAB_PARALLEL.md` §4). Once the ranks agree on the tokens, every
//! rank has what a position's log-probabilities need from the call's own
//! rounds: the token's value (sent by the rank that holds it) and its row's
//! log-sum-exps (order-free sums of round 1), so these take no exchange.
//! The top-n and the rank take one more: each rank's top-n of its ids and
//! its count of ids above the token, merged and added up. A resampled
//! token's rank cannot come sooner: it counts the row's values above a token
//! that round 2 chooses.

use super::logprobs::{Asked, Found, merge_top, put, top_and_larger};
use super::simd::Logit;
use crate::error::{Error, Result};
use crate::logprobs::{Distribution, Logprobs};
use crate::memory::Host;
use crate::shard::{self, Exchange, Reader, Writer};
use rayon::prelude::*;
use specdec_core::sample::Sampler;
use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// An emitted position of a sharded call, as every rank knows it once the
/// ranks agree on its token.
pub(super) struct Emitted<'r, L: Clone> {
    /// This rank's ids of the row the token was drawn from: read only for
    /// a top-n (and rank), so a call without one may pass none.
    pub values: Cow<'r, [L]>,
    /// The emitted token's value, from the rank that holds it.
    pub x: f32,
    /// The row's raw log-sum-exp, where [`Asked::needs_raw`].
    pub raw_lse: f32,
    /// The distribution the token was drawn from; `None` for a greedy row,
    /// whose processed distribution is the raw one.
    pub dist: Option<Processed>,
}

/// A sampled row's distribution: the scaled row's softmax over its kept set
/// `{y >= τ}` (`tau`; `None`: the whole row), of log-sum-exp `lse`.
pub(super) struct Processed {
    pub sampler: Sampler,
    pub tau: Option<f32>,
    pub lse: f32,
}

/// `y − lse`, or `-inf` where a kept set `{y >= tau}` leaves `y` out (the
/// unsharded call's `Dist::log_prob`).
pub(super) fn log_prob(y: f32, tau: Option<f32>, lse: f32) -> f32 {
    match tau {
        // NaN is off every kept set.
        Some(tau) if y.partial_cmp(&tau).is_none_or(|o| o.is_lt()) => f32::NEG_INFINITY,
        _ => y - lse,
    }
}

impl<L: Logit> Emitted<'_, L> {
    /// The raw log-probability of an id of value `x` (NaN: an impossible id).
    fn raw(&self, x: f32) -> f32 {
        if x.is_nan() { f32::NEG_INFINITY } else { x - self.raw_lse }
    }

    /// The processed log-probability of an id of value `x`.
    fn processed(&self, x: f32) -> f32 {
        match &self.dist {
            Some(_) if x.is_nan() => f32::NEG_INFINITY,
            Some(d) => log_prob(d.sampler.scaled(x), d.tau, d.lse),
            None => self.raw(x),
        }
    }

    fn logprob(&self, d: Distribution, x: f32) -> f32 {
        match d {
            Distribution::Processed => self.processed(x),
            Distribution::Raw => self.raw(x),
        }
    }

    /// This rank's part of the position's top-n under `d` (its ids from
    /// `base`) and of its rank: how many of its ids are above the token.
    fn top_part(&self, base: u32, n: usize, d: Distribution) -> (Vec<(f32, u32)>, i32) {
        top_and_larger(&self.values, base, n, self.logprob(d, self.x), |x| self.logprob(d, x))
    }
}

/// Writes `logprobs` at positions `0..positions`: those of `emitted(i)`, or
/// of a position past its request's tokens (`None`). A top-n (and rank)
/// takes one exchange of `4 + 8n` bytes a position, after a 4-byte flag;
/// this rank holds ids `base ..` of every row, `width` of them. Every rank
/// must call it alike.
pub(super) fn write<'r, L: Logit + Sync + 'r>(
    exchange: &mut dyn Exchange<Host>,
    logprobs: &mut Logprobs<'_, Host>,
    (base, width): (u32, usize),
    positions: usize,
    emitted: impl Fn(usize) -> Option<Emitted<'r, L>> + Sync,
) -> Result<()> {
    let Some(asked) = Asked::of(logprobs) else { return Ok(()) };
    // A position's outputs but the top-n and rank, and this rank's part of those.
    let find = |i: usize| {
        let e = emitted(i)?;
        let found = Found {
            processed: if asked.processed { e.processed(e.x) } else { f32::NAN },
            raw: if asked.raw { e.raw(e.x) } else { f32::NAN },
            top: Vec::new(),
            rank: 0,
        };
        Some((found, asked.top.map(|(n, d)| e.top_part(base, n, d))))
    };
    // A rank that panics still sends (flagged), so that no other waits for it.
    let mine = catch_unwind(AssertUnwindSafe(|| {
        if super::parallel(positions, positions * width) {
            (0..positions).into_par_iter().map(find).collect::<Vec<_>>()
        } else {
            (0..positions).map(find).collect()
        }
    }));
    let Some((n, _)) = asked.top else {
        let found = mine.unwrap_or_else(|panic| resume_unwind(panic));
        for (i, f) in found.iter().enumerate() {
            put(logprobs, i, f.as_ref().map(|f| &f.0));
        }
        return Ok(());
    };
    let mut message = Writer(Vec::with_capacity(4 + positions * (4 + 8 * n)));
    message.u32(u32::from(mine.is_ok()));
    for i in 0..positions {
        let part = mine.as_ref().ok().and_then(|found| found[i].as_ref()).and_then(|f| f.1.as_ref());
        message.u32(part.map_or(0, |p| p.1 as u32));
        for k in 0..n {
            // Past a part's ids: an id no row has.
            let (value, id) = part.and_then(|p| p.0.get(k)).copied().unwrap_or((f32::NEG_INFINITY, u32::MAX));
            message.f32(value);
            message.u32(id);
        }
    }
    let gathered = shard::gather(exchange, &message.0);
    let mut found = mine.unwrap_or_else(|panic| resume_unwind(panic));
    let gathered = gathered?;
    let mut lists: Vec<Vec<(f32, u32)>> = vec![Vec::new(); positions];
    let mut larger = vec![0i32; positions];
    for (rank, bytes) in gathered.chunks_exact(message.0.len()).enumerate() {
        let mut r = Reader { bytes, at: 0 };
        if r.u32() == 0 {
            return Err(Error::PeerFailed { rank });
        }
        for (list, larger) in lists.iter_mut().zip(&mut larger) {
            *larger += r.u32() as i32;
            for _ in 0..n {
                let (value, id) = (r.f32(), r.u32());
                if id != u32::MAX {
                    list.push((value, id));
                }
            }
        }
    }
    for (i, ((f, list), larger)) in found.iter_mut().zip(lists).zip(larger).enumerate() {
        if let Some((f, _)) = f {
            f.top = merge_top(list, n);
            f.rank = larger + 1;
        }
        put(logprobs, i, f.as_ref().map(|f| &f.0));
    }
    Ok(())
}
