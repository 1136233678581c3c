//! `rejection_sample` over a vocabulary shard (REFERENCE §9), in two
//! exchanges. Round 1: every rank sends, for every row, what the walk needs
//! from its ids: the raw argmax (greedy requests), the order-free sums of
//! the scaled target and draft rows (`ExpSum`, REFERENCE §2.6) and the
//! draft token's scaled logits where it holds the token. Every rank then
//! has every row's `LSE_t`, `LSE_q`, `log p(d)`, `log q(d)` exactly as the
//! unsharded call computes them, and walks every request alike (acceptance
//! words are keyed by seed and position, not by id). Round 2: each rank
//! sends, per request, its candidates for the token after the accepted
//! drafts (the residual's and the target's Gumbel-max over its ids, by
//! global id), which combine by the argmax rule; with block verification,
//! candidates for every row the token may come from and its parts of the
//! residual masses, from which every rank finds the same `τ`.
//!
//! Filters with a top-k (top-p and min-p on top of one too) add to round 1
//! each filtered row's `k` largest values over the rank's ids
//! (`filter::Largest`): every value of the kept set is in some rank's list,
//! so every rank finds the row's `τ` and `LSE(S)` from the lists alone.
//! Top-p or min-p without a top-k keep sets of no bounded size: refused.
//!
//! Log-probabilities add to round 1 each row's raw sums and the raw values
//! of its argmax and draft token, and to round 2 the raw values of the
//! candidates; a top-n (and rank) takes a third exchange
//! (`sharded_logprobs`).

use super::filter::{Largest, fold_listed, kept_ids, kept_of_largest, masked};
use super::logprobs::Asked;
use super::rejection::{
    Verdict, draft_candidates, listed_candidates, mass, one_hot_candidates, residual_units, write_request,
};
use super::sharded_logprobs::{self, Emitted, Processed, log_prob};
use super::simd::{self, Level, Logit};
use super::{AsCore, Cpu, first_argmax};
use crate::error::{Error, Result};
use crate::memory::Host;
use crate::rejection::{RejectionOutput, RejectionSample, Verification};
use crate::shard::{self, EXP_SUM_BYTES, Exchange, Header, Reader, Shard, Writer};
use crate::tensor::Values;
use specdec_core::argmax::ArgMax;
use specdec_core::block_verification::{below, block_verify, ln_weight, next_weight, one_hot_mass, ratio};
use specdec_core::exp_sum::ExpSum;
use specdec_core::filter::Filter;
use specdec_core::logspace::ln_residual;
use specdec_core::rng::{Stream, random_u32};
use specdec_core::sample::{Resampled, Sampler, accepts};
use specdec_core::status::NAN_LOGITS;
use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

impl Cpu {
    /// `rejection_sample` over this rank's shard of every row (REFERENCE §9):
    /// `args.target` holds ids `shard.offset ..` of each row (`[rows, V_r]`),
    /// the draft logits (if any) the same ids of each draft row
    /// (`[slots, k, >= V_r]`); the drafts, slots, positions, parameters and
    /// verification are the whole call's, alike on every rank. Every rank
    /// writes the unsharded call's tokens, counts and row statuses, bit for bit.
    ///
    /// # Errors
    /// The unsharded call's, with draft ids checked against `shard.vocab`;
    /// `InvalidShard` where the ranks' shards or calls do not fit together,
    /// `PeerFailed` where another rank's checks failed; `NotSharded` for
    /// top-p or min-p without a top-k.
    pub fn sharded_rejection_sample(
        &self,
        shard: Shard,
        exchange: &mut dyn Exchange<Host>,
        args: &RejectionSample<'_, Host>,
        out: &mut RejectionOutput<'_, Host>,
    ) -> Result<()> {
        match &args.target.data {
            Values::F32(t) => with_draft(shard, exchange, args, t, out),
            Values::BF16(t) => with_draft(shard, exchange, args, t.as_core(), out),
            Values::F16(t) => with_draft(shard, exchange, args, t.as_core(), out),
        }
    }
}

fn with_draft<T: Logit + Sync>(
    shard: Shard,
    exchange: &mut dyn Exchange<Host>,
    args: &RejectionSample<'_, Host>,
    target: &[T],
    out: &mut RejectionOutput<'_, Host>,
) -> Result<()> {
    let o = shard.offset;
    match args.draft_logits.as_ref().map(|d| &d.data) {
        None => run(shard, exchange, View::new(args, target, None::<&[T]>, o), out),
        Some(Values::F32(d)) => run(shard, exchange, View::new(args, target, Some(*d), o), out),
        Some(Values::BF16(d)) => run(shard, exchange, View::new(args, target, Some(d.as_core()), o), out),
        Some(Values::F16(d)) => run(shard, exchange, View::new(args, target, Some(d.as_core()), o), out),
    }
}

/// The two rounds of the module docs, then the outputs.
fn run<T: Logit + Sync, C: Logit + Sync>(
    shard: Shard,
    exchange: &mut dyn Exchange<Host>,
    view: View<'_, '_, T, C>,
    out: &mut RejectionOutput<'_, Host>,
) -> Result<()> {
    let args = view.args;
    // The messages' length, from a real buffer (a rank whose row count is
    // wrong sends as much as the others, and fails alike): `pos` has a row's
    // entry for every row on a valid call.
    let rows = args.pos.len();
    let filters = row_filters(args, shard.vocab);
    let asked = Asked::of(&out.logprobs);
    let logprobs = asked.is_some();
    // Round 1. A rank that fails or panics still sends (a failed header), so
    // that no other waits for it.
    let mine = catch_unwind(AssertUnwindSafe(|| {
        check(shard, args, out).map(|()| view.row_stats(out.row_status.is_some(), &filters, asked))
    }));
    let mut message = Writer(Vec::with_capacity(Header::BYTES + rows * RowStats::bytes(logprobs)));
    match &mine {
        Ok(Ok(stats)) => {
            message.header(header(shard, args, out));
            stats.iter().for_each(|s| s.write(&mut message, logprobs));
            for (f, s) in filters.iter().zip(stats) {
                s.lists.write(f, &mut message);
            }
        }
        _ => {
            message.header(Header::FAILED);
            (0..rows).for_each(|_| RowStats::NONE.write(&mut message, logprobs));
            filters.iter().for_each(|f| Lists::default().write(f, &mut message));
        }
    }
    let gathered = shard::gather(exchange, &message.0);
    mine.unwrap_or_else(|panic| resume_unwind(panic))?;
    let gathered = gathered?;
    let mut readers: Vec<Reader> =
        gathered.chunks_exact(message.0.len()).map(|bytes| Reader { bytes, at: 0 }).collect();
    let headers: Vec<Header> = readers.iter_mut().map(Reader::header).collect();
    Header::check_group(&headers)?;
    let ranks: Vec<Vec<RowStats>> = readers
        .iter_mut()
        .map(|r| {
            let mut stats: Vec<RowStats> = (0..rows).map(|_| RowStats::read(r, logprobs)).collect();
            for (f, s) in filters.iter().zip(&mut stats) {
                s.lists = Lists::read(f, r);
            }
            stats
        })
        .collect();
    let totals: Vec<RowTotals> =
        (0..rows).map(|row| RowTotals::combine(args, &headers, &ranks, row, filters[row])).collect();

    // The walk, alike on every rank.
    let plans: Vec<Plan> = (0..args.slots.len()).map(|r| plan(args, &totals, r)).collect();

    // Round 2: each request's parts of its residual masses and its candidates.
    let has_draft = args.draft_logits.is_some();
    let mine = catch_unwind(AssertUnwindSafe(|| {
        plans.iter().enumerate().map(|(r, p)| view.part(r, p, &totals, logprobs)).collect::<Vec<_>>()
    }));
    let mut message = Writer(Vec::new());
    message.u32(u32::from(mine.is_ok()));
    for (r, plan) in plans.iter().enumerate() {
        match &mine {
            Ok(parts) => parts[r].write(&mut message),
            Err(_) => Part::empty(plan.sizes(has_draft), logprobs).write(&mut message),
        }
    }
    let gathered = shard::gather(exchange, &message.0);
    if let Err(panic) = mine {
        resume_unwind(panic);
    }
    let gathered = gathered?;
    let mut combined: Vec<Part> = plans.iter().map(|p| Part::empty(p.sizes(has_draft), logprobs)).collect();
    for (rank, bytes) in gathered.chunks_exact(message.0.len()).enumerate() {
        let mut r = Reader { bytes, at: 0 };
        if r.u32() == 0 {
            return Err(Error::PeerFailed { rank });
        }
        for part in &mut combined {
            part.add(&mut r);
        }
    }

    let mut verdicts = Vec::with_capacity(plans.len());
    for (r, (plan, part)) in plans.iter().zip(&combined).enumerate() {
        let verdict = plan.verdict(args, &totals, r, part);
        write_request(args, out, r, verdict);
        verdicts.push((verdict, plan.last_value(&totals, args.offsets[r] as usize, verdict.j, part)));
    }
    if let Some(status) = out.row_status.as_deref_mut() {
        for (s, t) in status.iter_mut().zip(&totals) {
            *s = if t.nan { NAN_LOGITS } else { 0 };
        }
    }
    let k1 = args.max_drafts + 1;
    let width = (shard.offset as u32, args.target.vocab);
    sharded_logprobs::write(exchange, &mut out.logprobs, width, verdicts.len() * k1, |at| {
        let (r, i, (Verdict { j, .. }, last_x)) = (at / k1, at % k1, verdicts[at / k1]);
        if i > j {
            return None;
        }
        let row = args.offsets[r] as usize + i;
        let t = &totals[row];
        let x = if i < j { t.drafted_x } else { last_x };
        let s = sampler(args, r);
        let dist = (!s.greedy).then_some(Processed { sampler: s, tau: t.tau_t, lse: t.lse_t });
        Some(Emitted { values: Cow::Borrowed(view.target_row(row)), x, raw_lse: t.raw_lse, dist })
    })
}

/// This rank's header: its shard, and the digest of what every rank passes alike.
fn header(shard: Shard, args: &RejectionSample<'_, Host>, out: &RejectionOutput<'_, Host>) -> Header {
    let p = &args.params;
    let (verification, rates): (u64, &[f32]) = match args.verification {
        Verification::Token => (0, &[]),
        Verification::Block => (1, &[]),
        Verification::Synthetic(rates) => (2, rates),
    };
    let words = [
        args.target.rows as u64,
        args.max_drafts as u64,
        verification,
        u64::from(args.draft_logits.is_some()),
        u64::from(out.row_status.is_some()),
    ]
    .into_iter()
    .chain(out.logprobs.digest_words())
    .chain(rates.iter().map(|r| u64::from(r.to_bits())))
    .chain(args.offsets.iter().map(|&o| o as u64))
    .chain(args.drafts.iter().map(|&d| d as u64))
    .chain(args.slots.iter().map(|&s| s as u64))
    .chain(args.pos.iter().copied())
    .chain(p.temperature.iter().map(|t| u64::from(t.to_bits())))
    .chain(p.seed.iter().copied())
    .chain(shard::filter_words(&p.filters))
    .chain(args.draft_logits.iter().flat_map(|d| shard::filter_words(&d.filters)));
    Header::of(shard, args.target.vocab, words)
}

/// What a rank sends about one row in round 1: over its ids, whether one is
/// NaN (where the call writes row statuses), the raw first argmax (rows of
/// greedy requests), the sums of the scaled target and draft logits, and the
/// draft token's scaled target and draft logits (draft rows of random
/// requests; the logits `-inf` where another rank holds the token).
/// The sums are left empty in a row whose filter lists its values instead
/// (`lists`, sent after every row's fixed part). With log-probabilities,
/// also the raw row's sums (`raw`, where a position asks for them) and the
/// raw values of its first argmax (rows of greedy requests) and of the
/// draft token (`NaN` where another rank holds them).
#[derive(Clone, Debug, PartialEq)]
struct RowStats {
    nan: bool,
    greedy: ArgMax,
    target: ExpSum,
    draft: ExpSum,
    drafted: (f32, f32),
    raw: ExpSum,
    argmax_x: f32,
    drafted_x: f32,
    lists: Lists,
}

impl RowStats {
    /// The fixed part's bytes, with or without `logprobs`.
    const fn bytes(logprobs: bool) -> usize {
        4 + 8 + 2 * EXP_SUM_BYTES + 8 + if logprobs { EXP_SUM_BYTES + 8 } else { 0 }
    }

    const NONE: RowStats = RowStats {
        nan: false,
        greedy: ArgMax::IDENTITY,
        target: ExpSum::EMPTY,
        draft: ExpSum::EMPTY,
        drafted: (f32::NEG_INFINITY, f32::NEG_INFINITY),
        raw: ExpSum::EMPTY,
        argmax_x: f32::NAN,
        drafted_x: f32::NAN,
        lists: Lists { target: None, draft: None },
    };

    fn write(&self, w: &mut Writer, logprobs: bool) {
        w.u32(u32::from(self.nan));
        w.arg_max(self.greedy);
        w.exp_sum(&self.target);
        w.exp_sum(&self.draft);
        w.f32(self.drafted.0);
        w.f32(self.drafted.1);
        if logprobs {
            w.exp_sum(&self.raw);
            w.f32(self.argmax_x);
            w.f32(self.drafted_x);
        }
    }

    fn read(r: &mut Reader, logprobs: bool) -> RowStats {
        let mut s = RowStats {
            nan: r.u32() != 0,
            greedy: r.arg_max(),
            target: r.exp_sum(),
            draft: r.exp_sum(),
            drafted: (r.f32(), r.f32()),
            ..RowStats::NONE
        };
        if logprobs {
            (s.raw, s.argmax_x, s.drafted_x) = (r.exp_sum(), r.f32(), r.f32());
        }
        s
    }
}

/// A row's filters as the sharded call applies them: its request's target
/// filter (every row of a random request) and draft filter (its rows with a
/// draft, given draft logits); off elsewhere, and for greedy requests.
#[derive(Clone, Copy, Debug)]
struct RowFilters {
    target: Filter,
    draft: Filter,
    vocab: usize,
}

impl RowFilters {
    /// The length of the row's target and draft lists ([`Lists`]; 0: none).
    fn lengths(&self) -> (usize, usize) {
        (shard::list_length(self.target, self.vocab), shard::list_length(self.draft, self.vocab))
    }
}

/// Every row's [`RowFilters`], read before the checks ([`shard::message_filter`]).
fn row_filters(args: &RejectionSample<'_, Host>, vocab: usize) -> Vec<RowFilters> {
    let rows = args.pos.len();
    let off = RowFilters { target: Filter::OFF, draft: Filter::OFF, vocab };
    let mut filters = vec![off; rows];
    let t = args.params.temperature;
    for (r, &slot) in args.slots.iter().enumerate() {
        let (Some(&o0), Some(&o1)) = (args.offsets.get(r), args.offsets.get(r + 1)) else {
            continue;
        };
        let target = shard::message_filter(&args.params.filters, t, slot);
        let draft = args.draft_logits.as_ref().map_or(Filter::OFF, |d| shard::message_filter(&d.filters, t, slot));
        let (o0, o1) = ((o0.max(0) as usize).min(rows), (o1.max(0) as usize).min(rows));
        for (row, f) in filters.iter_mut().enumerate().take(o1).skip(o0) {
            let drafted = row + 1 < o1 && args.drafts.get(row).is_some_and(|&d| d != -1);
            *f = RowFilters { target, draft: if drafted { draft } else { Filter::OFF }, vocab };
        }
    }
    filters
}

/// A row's top-value lists (`filter::Largest`), where its filters have a
/// top-k ([`RowFilters::lengths`]): what the ranks find the row's kept sets from.
#[derive(Clone, Debug, Default, PartialEq)]
struct Lists {
    target: Option<Largest>,
    draft: Option<Largest>,
}

impl Lists {
    fn write(&self, f: &RowFilters, w: &mut Writer) {
        let (t, d) = f.lengths();
        for (list, n) in [(&self.target, t), (&self.draft, d)] {
            if n > 0 {
                Largest::write(list.as_ref(), n, w);
            }
        }
    }

    fn read(f: &RowFilters, r: &mut Reader) -> Lists {
        let (t, d) = f.lengths();
        let target = (t > 0).then(|| Largest::read(t, r));
        Lists { target, draft: (d > 0).then(|| Largest::read(d, r)) }
    }
}

/// A row over all ranks: NaN anywhere, the first argmax's id, the scaled
/// rows' log-sum-exps (of their kept sets `{y >= τ}` where filtered, `τ`
/// then `Some`), and the draft token's scaled logits; for log-probabilities,
/// the raw row's log-sum-exp and the raw values of the argmax and the draft token.
struct RowTotals {
    nan: bool,
    argmax: u32,
    lse_t: f32,
    lse_q: f32,
    tau_t: Option<f32>,
    tau_q: Option<f32>,
    drafted: (f32, f32),
    raw_lse: f32,
    argmax_x: f32,
    drafted_x: f32,
}

impl RowTotals {
    fn combine(
        args: &RejectionSample<'_, Host>,
        headers: &[Header],
        ranks: &[Vec<RowStats>],
        row: usize,
        filters: RowFilters,
    ) -> RowTotals {
        let (mut nan, mut greedy) = (false, ArgMax::IDENTITY);
        let (mut target, mut draft, mut raw) = (ExpSum::EMPTY, ExpSum::EMPTY, ExpSum::EMPTY);
        for stats in ranks {
            let s = &stats[row];
            nan |= s.nan;
            greedy = greedy.combine(s.greedy);
            target.combine(&s.target);
            draft.combine(&s.draft);
            raw.combine(&s.raw);
        }
        // The draft token's logits, from the rank that holds it.
        let d = args.drafts[row];
        let owner = |id: i32| u32::try_from(id).ok().and_then(|id| Header::owner(headers, id));
        let drafted = owner(d).map_or((f32::NEG_INFINITY, f32::NEG_INFINITY), |o| ranks[o][row].drafted);
        let drafted_x = owner(d).map_or(f32::NAN, |o| ranks[o][row].drafted_x);
        // Nothing above -inf: id 0, as the unsharded argmax rule says.
        let argmax = if greedy.value == f32::NEG_INFINITY { 0 } else { greedy.index };
        let argmax_x = owner(argmax as i32).map_or(f32::NAN, |o| ranks[o][row].argmax_x);
        // A filtered row's `τ` and `LSE(S)`, from every rank's list.
        let kept = |filter: Filter, list: fn(&Lists) -> Option<&Largest>, sum: ExpSum| {
            if list(&ranks[0][row].lists).is_none() {
                return (None, sum.lse());
            }
            let (tau, lse) = kept_of_largest(ranks.iter().filter_map(|s| list(&s[row].lists)), filter, filters.vocab);
            (Some(tau), lse)
        };
        let (tau_t, lse_t) = kept(filters.target, |l| l.target.as_ref(), target);
        let (tau_q, lse_q) = kept(filters.draft, |l| l.draft.as_ref(), draft);
        RowTotals { nan, argmax, lse_t, lse_q, tau_t, tau_q, drafted, raw_lse: raw.lse(), argmax_x, drafted_x }
    }

    /// `log p'` of a target value `y` (scaled): `-inf` off the kept set.
    fn log_p(&self, y: f32) -> f32 {
        log_prob(y, self.tau_t, self.lse_t)
    }

    /// `log q` of a draft value `y` (scaled): `-inf` off the kept set.
    fn log_q(&self, y: f32) -> f32 {
        log_prob(y, self.tau_q, self.lse_q)
    }
}

/// Request `r`'s sampler (seed and temperature of its slot; greedy for padding).
fn sampler(args: &RejectionSample<'_, Host>, r: usize) -> Sampler {
    let slot = args.slots[r];
    let (t, seed) =
        if slot >= 0 { (args.params.temperature[slot as usize], args.params.seed[slot as usize]) } else { (0.0, 0) };
    Sampler::new(t, seed, 0, Stream::Target)
}

/// The call's checks (the unsharded call's, with draft ids against the whole
/// row), then the filters a sharded call cannot run.
fn check(shard: Shard, args: &RejectionSample<'_, Host>, out: &RejectionOutput<'_, Host>) -> Result<()> {
    let shape = args.check(out)?;
    shard.check(args.target.vocab)?;
    args.check_values_of(shape, shard.vocab)?;
    let mut tables = vec![&args.params.filters];
    tables.extend(args.draft_logits.as_ref().map(|d| &d.filters));
    shard::check_filters(args.slots, args.params.temperature, shard.vocab, &tables)
}

/// This rank's logits in the call.
struct View<'a, 'b, T, C> {
    args: &'a RejectionSample<'b, Host>,
    target: &'a [T],
    draft: Option<&'a [C]>,
    offset: usize,
    level: Level,
}

impl<'a, 'b, T: Logit, C: Logit> View<'a, 'b, T, C> {
    fn new(args: &'a RejectionSample<'b, Host>, target: &'a [T], draft: Option<&'a [C]>, offset: usize) -> Self {
        View { args, target, draft, offset, level: Level::detect() }
    }

    fn target_row(&self, row: usize) -> &[T] {
        let start = row * self.args.target.row_stride;
        &self.target[start..start + self.args.target.vocab]
    }

    /// Draft column `i` of request `r`'s slot.
    fn draft_row(&self, r: usize, i: usize) -> Option<&[C]> {
        let (d, shape) = (self.draft?, self.args.draft_logits.as_ref()?.shape);
        let start = self.args.slots[r] as usize * shape.stride0 + i * shape.stride1;
        Some(&d[start..start + self.args.target.vocab])
    }

    /// The place in this rank's ids of global id `d`, if it holds it.
    fn local(&self, d: i32) -> Option<usize> {
        let local = (d as usize).checked_sub(self.offset)?;
        (d >= 0 && local < self.args.target.vocab).then_some(local)
    }

    /// This rank's round-1 statistics of every row (NaN flags where
    /// `statuses`), with the top-value lists of `filters`, and what the
    /// `asked` log-probabilities need.
    fn row_stats(&self, statuses: bool, filters: &[RowFilters], asked: Option<Asked>) -> Vec<RowStats> {
        let args = self.args;
        let unfiltered = f32::NEG_INFINITY;
        let mut stats = vec![RowStats::NONE; args.target.rows];
        for r in 0..args.slots.len() {
            let s = sampler(args, r);
            let (o0, o1) = (args.offsets[r] as usize, args.offsets[r + 1] as usize);
            for (i, row) in (o0..o1).enumerate() {
                let values = self.target_row(row);
                let st = &mut stats[row];
                st.nan = statuses && values.iter().any(|x| x.to_f32().is_nan());
                let d = args.drafts[row];
                if let Some(asked) = asked {
                    if asked.needs_raw(s.greedy) {
                        st.raw = simd::raw_exp_sum(self.level, values);
                    }
                    st.drafted_x = self.local(d).map_or(f32::NAN, |at| values[at].to_f32());
                }
                if s.greedy {
                    let (at, _) = first_argmax(self.level, values);
                    let value = values.get(at as usize).map_or(f32::NEG_INFINITY, |v| v.to_f32());
                    if value > f32::NEG_INFINITY {
                        st.greedy = ArgMax { value, index: self.offset as u32 + at };
                    }
                    // An empty shard holds no argmax; a row with nothing above `-inf` its first id.
                    st.argmax_x = values.get(at as usize).map_or(f32::NAN, |v| v.to_f32());
                    continue;
                }
                let (list_t, list_q) = filters[row].lengths();
                if list_t > 0 {
                    st.lists.target = Some(Largest::of(self.level, &s, values, list_t).0);
                }
                let drafted = row + 1 < o1 && d != -1;
                if list_t == 0 && (drafted || asked.is_some_and(|a| a.needs_dist(false))) {
                    st.target = simd::exp_sum_kept(self.level, &s, values, unfiltered);
                }
                if drafted {
                    let draft = self.draft_row(r, i);
                    if let Some(q) = draft {
                        if list_q > 0 {
                            st.lists.draft = Some(Largest::of(self.level, &s, q, list_q).0);
                        } else {
                            st.draft = simd::exp_sum_kept(self.level, &s, q, unfiltered);
                        }
                    }
                    if let Some(at) = self.local(d) {
                        let y_q = draft.map_or(f32::NEG_INFINITY, |q| s.scaled(q[at].to_f32()));
                        st.drafted = (s.scaled(values[at].to_f32()), y_q);
                    }
                }
            }
        }
        stats
    }

    /// This rank's round-2 part of request `r` (`plan`): with block
    /// verification and draft logits, its parts of the residual masses of
    /// rows `1 .. block`; its candidates for the token at each row it may
    /// come from, with their raw values where `logprobs`.
    fn part(&self, r: usize, plan: &Plan, totals: &[RowTotals], logprobs: bool) -> Part {
        let mut part = self.part_of(r, plan, totals);
        if logprobs {
            let o0 = self.args.offsets[r] as usize;
            let j = match plan {
                Plan::Draw { j, .. } => *j,
                _ => 0,
            };
            part.values = part.candidates.iter().enumerate().map(|(k, c)| self.values_of(o0 + j + k, c)).collect();
        }
        part
    }

    /// The raw values at row `row` of `c`'s ids, where this rank holds them (else NaN).
    fn values_of(&self, row: usize, c: &Resampled) -> [f32; 2] {
        let x = |id: u32| self.local(id as i32).map_or(f32::NAN, |at| self.target_row(row)[at].to_f32());
        [x(c.residual.index), x(c.target.index)]
    }

    /// [`View::part`] without the candidates' values.
    fn part_of(&self, r: usize, plan: &Plan, totals: &[RowTotals]) -> Part {
        let o0 = self.args.offsets[r] as usize;
        match plan {
            Plan::Greedy { .. } => Part::default(),
            Plan::Draw { j, rejected } => {
                Part { candidates: vec![self.candidates(r, *j, *rejected, 1.0, totals)], ..Part::default() }
            }
            Plan::Block { ratios } => {
                let (block, weights) = (ratios.len(), weights(ratios));
                let s = sampler(self.args, r);
                let units = (1..block)
                    .filter_map(|i| {
                        let (target, t) = (self.target_row(o0 + i), &totals[o0 + i]);
                        let q = self.draft_row(r, i)?;
                        Some(residual_units(
                            target,
                            q,
                            weights[i - 1],
                            |x| t.log_p(s.scaled(x)),
                            |x| t.log_q(s.scaled(x)),
                        ))
                    })
                    .collect();
                let candidates = (0..=block)
                    .map(|tau| {
                        let rejected = (tau < block).then(|| self.args.drafts[o0 + tau]);
                        let p_tau = if tau == 0 { 1.0 } else { weights[tau - 1] };
                        self.candidates(r, tau, rejected, p_tau, totals)
                    })
                    .collect();
                Part { units, candidates, values: Vec::new() }
            }
        }
    }

    /// This rank's candidates for request `r`'s token at its row `j`: the
    /// residual of `rejected` there, its target weighted by `w` (block
    /// verification's `p_τ`; 1 for the token rule), or the target's
    /// Gumbel-max (`None`: a bonus row or a placeholder, which have no draft column).
    fn candidates(&self, r: usize, j: usize, rejected: Option<i32>, w: f64, totals: &[RowTotals]) -> Resampled {
        let row = self.args.offsets[r] as usize + j;
        let s = Sampler { pos: self.args.pos[row], ..sampler(self.args, r) };
        let (values, base, t) = (self.target_row(row), self.offset as u32, &totals[row]);
        // A filtered row's kept ids on this rank, where few: drawn from their
        // own quads, as the unsharded call draws from a listed kept set.
        let listed = t.tau_t.filter(|tau| tau.is_finite()).and_then(|tau| kept_ids(&s, values, tau));
        let Some(d) = rejected else {
            let Some(tau) = t.tau_t else {
                return one_hot_candidates(self.level, &s, base, values, None);
            };
            // The unsharded call's fold of a kept set (`filter::fold_kept`).
            let best = match (&listed, values.is_empty()) {
                (Some(ids), _) => fold_listed(&s, base, values, ids),
                (None, true) => ArgMax::IDENTITY,
                (None, false) => simd::fold_kept(self.level, &s, ArgMax::IDENTITY, base, values, tau).0,
            };
            return Resampled { residual: best, target: best };
        };
        let lse_t = t.lse_t - ln_weight(w);
        match (self.draft_row(r, j), listed) {
            (Some(q), Some(ids)) => listed_candidates(&s, base, values, &ids, lse_t, |at, a| {
                ln_residual(a, t.log_q(s.scaled(q[at as usize].to_f32())))
            }),
            (Some(q), None) => {
                let tau = |tau: Option<f32>| tau.unwrap_or(f32::NEG_INFINITY);
                draft_candidates(self.level, &s, base, values, q, (lse_t, tau(t.tau_t)), (t.lse_q, tau(t.tau_q)))
            }
            (None, Some(ids)) => {
                let rejected = self.local(d).map(|at| at as u32);
                listed_candidates(
                    &s,
                    base,
                    values,
                    &ids,
                    0.0,
                    |at, a| if Some(at) == rejected { f32::NEG_INFINITY } else { a },
                )
            }
            (None, None) => {
                // Filtered, the row with every id off the kept set at `-inf` (`Dist::row`).
                let values: Cow<'_, [T]> = t.tau_t.map_or(values.into(), |tau| masked(&s, values, tau));
                one_hot_candidates(self.level, &s, base, &values, self.local(d))
            }
        }
    }
}

/// What a rank sends about one request in round 2: its parts of the
/// residual masses (in `2^-60` units) and its candidates, each combined
/// over the ranks (integer sums, the argmax rule); for log-probabilities,
/// the raw values of each candidate's residual and target ids, which follow
/// the winners.
#[derive(Default)]
struct Part {
    units: Vec<u128>,
    candidates: Vec<Resampled>,
    values: Vec<[f32; 2]>,
}

impl Part {
    /// A part of `(units, candidates)` entries (candidates' values where
    /// `logprobs`) that adds nothing.
    fn empty((units, candidates): (usize, usize), logprobs: bool) -> Part {
        Part {
            units: vec![0; units],
            candidates: vec![Resampled::IDENTITY; candidates],
            values: vec![[f32::NAN; 2]; if logprobs { candidates } else { 0 }],
        }
    }

    fn write(&self, w: &mut Writer) {
        for &u in &self.units {
            w.u128(u);
        }
        for c in &self.candidates {
            w.arg_max(c.residual);
            w.arg_max(c.target);
        }
        self.values.iter().flatten().for_each(|&x| w.f32(x));
    }

    /// Adds another rank's part, read from `r`.
    fn add(&mut self, r: &mut Reader) {
        for u in &mut self.units {
            *u += r.u128();
        }
        let theirs: Vec<Resampled> =
            self.candidates.iter().map(|_| Resampled { residual: r.arg_max(), target: r.arg_max() }).collect();
        for (k, (c, t)) in self.candidates.iter_mut().zip(theirs).enumerate() {
            // `Resampled::combine`, each value with its id.
            let values = self.values.get_mut(k).map(|v| (v, [r.f32(), r.f32()]));
            let (residual, target) = (t.residual.beats(c.residual), t.target.beats(c.target));
            if let Some((mine, theirs)) = values {
                if residual {
                    mine[0] = theirs[0];
                }
                if target {
                    mine[1] = theirs[1];
                }
            }
            *c = c.combine(t);
        }
    }
}

/// Block verification's weights `p_1 ..= p_block` from the drafts' ratios,
/// as `block_verify` forms them.
fn weights(ratios: &[f64]) -> Vec<f64> {
    ratios
        .iter()
        .scan(1.0, |p, &r| {
            *p = next_weight(*p, r);
            Some(*p)
        })
        .collect()
}

/// What the walk after round 1 decided for a request.
enum Plan {
    /// A greedy request: `j` drafts accepted, then `token`.
    Greedy { j: usize, token: u32 },
    /// The token rule: `j` drafts accepted, then a token from row `j`: the
    /// residual of the `rejected` draft, or (`None`) the target.
    Draw { j: usize, rejected: Option<i32> },
    /// Block verification of the drafts with these ratios `p(d)/q(d)`: `τ`
    /// waits for the residual masses of round 2.
    Block { ratios: Vec<f64> },
}

impl Plan {
    /// The residual-mass parts and candidates its round-2 [`Part`] holds.
    fn sizes(&self, has_draft: bool) -> (usize, usize) {
        match self {
            Plan::Greedy { .. } => (0, 0),
            Plan::Draw { .. } => (0, 1),
            Plan::Block { ratios } => (if has_draft { ratios.len() - 1 } else { 0 }, ratios.len() + 1),
        }
    }

    /// The raw value of the token request `r` (its rows from `o0`) emits
    /// after `j` accepted drafts, from round 2's combined `part` (with values).
    fn last_value(&self, totals: &[RowTotals], o0: usize, j: usize, part: &Part) -> f32 {
        let at = match self {
            Plan::Greedy { .. } => return totals[o0 + j].argmax_x,
            Plan::Draw { .. } => 0,
            Plan::Block { .. } => j,
        };
        // As `Resampled::token` picks.
        let (c, [residual, target]) = (part.candidates[at], part.values.get(at).copied().unwrap_or([f32::NAN; 2]));
        if c.residual.value == f32::NEG_INFINITY { target } else { residual }
    }

    /// Request `r`'s outputs, from round 2's combined `part`.
    fn verdict(&self, args: &RejectionSample<'_, Host>, totals: &[RowTotals], r: usize, part: &Part) -> Verdict {
        match self {
            Plan::Greedy { j, token } => Verdict { j: *j, last: *token },
            Plan::Draw { j, .. } => Verdict { j: *j, last: part.candidates[0].token() },
            Plan::Block { ratios } => {
                let (s, o0) = (sampler(args, r), args.offsets[r] as usize);
                let residual_mass = |i: usize, w: f64| match part.units.get(i - 1) {
                    Some(&units) => mass(units),
                    None => {
                        let t = &totals[o0 + i];
                        one_hot_mass(w, t.log_p(t.drafted.0))
                    }
                };
                let word = |i: usize| random_u32(s.seed, args.pos[o0 + i], Stream::Accept, 0);
                let (tau, _) = block_verify(&mut ratios.clone(), residual_mass, word);
                Verdict { j: tau, last: part.candidates[tau].token() }
            }
        }
    }
}

/// Request `r`'s walk over its drafts, from the rows' totals: the
/// unsharded call's decisions, from the same values.
fn plan(args: &RejectionSample<'_, Host>, totals: &[RowTotals], r: usize) -> Plan {
    let s = sampler(args, r);
    let (o0, o1) = (args.offsets[r] as usize, args.offsets[r + 1] as usize);
    let n = o1 - o0 - 1;
    let word = |i: usize| random_u32(s.seed, args.pos[o0 + i], Stream::Accept, 0);
    // `(log p(d), log q(d))` of the draft at row `i` (one-hot: `log q = 0`).
    let log_probs = |i: usize| {
        let t = &totals[o0 + i];
        let log_q = if args.draft_logits.is_some() { t.log_q(t.drafted.1) } else { 0.0 };
        (t.log_p(t.drafted.0), log_q)
    };
    if args.verification == Verification::Block && !s.greedy {
        let block = args.drafts[o0..o0 + n].iter().position(|&d| d == -1).unwrap_or(n);
        if block == 0 {
            return Plan::Draw { j: 0, rejected: None };
        }
        let ratios = (0..block).map(|i| {
            let (log_p, log_q) = log_probs(i);
            ratio(log_p, log_q)
        });
        return Plan::Block { ratios: ratios.collect() };
    }
    for i in 0..n {
        let d = args.drafts[o0 + i];
        if d == -1 {
            return if s.greedy {
                Plan::Greedy { j: i, token: totals[o0 + i].argmax }
            } else {
                Plan::Draw { j: i, rejected: None }
            };
        }
        let synthetic = match args.verification {
            Verification::Synthetic(rates) => Some(below(word(i), f64::from(rates[i]))),
            _ => None,
        };
        if s.greedy {
            if !synthetic.unwrap_or(d as u32 == totals[o0 + i].argmax) {
                return Plan::Greedy { j: i, token: totals[o0 + i].argmax };
            }
        } else if !synthetic.unwrap_or_else(|| {
            let (log_p, log_q) = log_probs(i);
            accepts(word(i), log_q, log_p)
        }) {
            return Plan::Draw { j: i, rejected: Some(d) };
        }
    }
    if s.greedy { Plan::Greedy { j: n, token: totals[o0 + n].argmax } } else { Plan::Draw { j: n, rejected: None } }
}
