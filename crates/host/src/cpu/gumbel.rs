//! `gumbel_sample` on the CPU: the twin of `crates/kernels/src/gumbel.rs`.

use super::filter::{self, Largest, kept_of_largest};
use super::logprobs::{self, Asked, Emitted};
use super::sharded_logprobs::{self, Processed};
use super::simd::{self, Level, Logit};
use super::{AsCore, Cpu, first_argmax};
use crate::error::{Error, Result};
use crate::gumbel::{GumbelOutput, GumbelSample};
use crate::logprobs::Logprobs;
use crate::memory::Host;
use crate::params::Filters;
use crate::shard::{self, Candidate, Exchange, Header, Reader, Shard, Writer};
use crate::tensor::{Column, DraftLogitsMut, Tokens, Values, ValuesMut};
use rayon::prelude::*;
use specdec_core::argmax::ArgMax;
use specdec_core::dtype::{Bf16, DType, Element, F16};
use specdec_core::exp_sum::ExpSum;
use specdec_core::filter::Filter;
use specdec_core::rng::Stream;
use specdec_core::sample::Sampler;
use specdec_core::status::NAN_LOGITS;
use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

impl Cpu {
    /// `gumbel_sample` (SPEC §3) on host buffers.
    ///
    /// # Errors
    /// Shape, stride and length errors, and invalid slots, temperatures or
    /// columns, all before anything is written.
    pub fn gumbel_sample(&self, args: &GumbelSample<'_, Host>, out: &mut GumbelOutput<'_, Host>) -> Result<()> {
        let shape = args.check(out)?;
        args.check_values(out, shape)?;
        let GumbelOutput { tokens, row_status, draft_logits, logprobs } = out;
        let rows = Rows::of(args, None);
        let mut out = RowOut { tokens, row_status: row_status.as_deref_mut() };
        sample_call(args, &rows, draft_logits.as_mut(), &mut |row, (c, _)| {
            write_row(&mut out, row, c.best.index, c.nan)
        });
        if !logprobs.is_none() {
            let draft = draft_logits.as_ref();
            match &args.logits.data {
                Values::F32(l) => row_logprobs(&rows, l, draft, tokens, logprobs),
                Values::BF16(l) => row_logprobs(&rows, l.as_core(), draft, tokens, logprobs),
                Values::F16(l) => row_logprobs(&rows, l.as_core(), draft, tokens, logprobs),
            }
        }
        Ok(())
    }

    /// `gumbel_sample` on this rank's shard of every row (`docs/VOCAB_PARALLEL.md`):
    /// `args.logits` holds ids `shard.offset ..` of rows of `shard.vocab` ids,
    /// the draft logits (if any) the same ids of their rows. The ranks
    /// exchange one candidate per row through `exchange`, and every rank
    /// writes the tokens and row statuses of the unsharded call on the
    /// whole rows, bit for bit; each writes its own ids of the draft logits.
    /// Every rank must pass the same slots, positions and parameters.
    ///
    /// Rows whose slot filters with a top-k (top-p and min-p on top of it
    /// too) send their `k` largest values instead ([`filter::Largest`]), from
    /// which every rank finds the row's kept set; a second exchange then
    /// combines the ranks' candidates over it.
    ///
    /// Log-probabilities add to the first exchange each row's sums (raw and
    /// scaled, REFERENCE §2.6) and its candidate's raw value (to the second
    /// for filtered rows); a top-n (with ranks) takes one more exchange.
    ///
    /// # Errors
    /// This rank's errors of [`Cpu::gumbel_sample`], [`Error::InvalidShard`],
    /// and [`Error::NotSharded`] for top-p or min-p without a top-k; a rank whose checks fail (or that panics) still
    /// takes part in the exchanges, and the others return
    /// [`Error::PeerFailed`] (having written their draft logits). On every
    /// rank alike, [`Error::InvalidShard`] where the ranks' shards do not
    /// tile the row or their calls differ (row length, slots, positions,
    /// temperatures, seeds, filters), and [`Error::Exchange`] if an exchange
    /// fails.
    pub fn sharded_gumbel_sample(
        &self,
        shard: Shard,
        exchange: &mut dyn Exchange<Host>,
        args: &GumbelSample<'_, Host>,
        out: &mut GumbelOutput<'_, Host>,
    ) -> Result<()> {
        // The message's length, from a real buffer (a rank whose row count is
        // wrong sends as much as the others, and fails alike): `pos` has an
        // entry for every row on a valid call.
        let rows = args.pos.len();
        let p = &args.params;
        let filters: Vec<Filter> = (0..rows)
            .map(|row| shard::message_filter(&p.filters, p.temperature, args.slots.get(row).copied().unwrap_or(-1)))
            .collect();
        let lengths: Vec<usize> = filters.iter().map(|&f| shard::list_length(f, shard.vocab)).collect();
        let asked = Asked::of(&out.logprobs);
        // A rank that panics still sends its message (failed), so that no other waits for it.
        let mine = catch_unwind(AssertUnwindSafe(|| shard_candidates(shard, args, out, &lengths)));
        let (header, sampled, parts) = match &mine {
            Ok(Ok((sampled, parts))) => (header(shard, args, out), &sampled[..], &parts[..]),
            _ => (Header::FAILED, &[][..], &[][..]),
        };
        let candidates: Vec<Candidate> =
            (0..rows).map(|row| sampled.get(row).map_or(Candidate::NONE, |s| s.0)).collect();
        let mut message = Writer(shard::encode(header, &candidates));
        for (row, &n) in lengths.iter().enumerate().filter(|(_, n)| **n > 0) {
            Largest::write(sampled.get(row).and_then(|s| s.1.as_ref()), n, &mut message);
        }
        if asked.is_some() {
            (0..rows).for_each(|row| parts.get(row).unwrap_or(&LogprobPart::NONE).write(&mut message));
        }
        let gathered = shard::gather(exchange, &message.0);
        mine.unwrap_or_else(|panic| resume_unwind(panic))?;
        let gathered = gathered?;
        let mut combined = vec![Candidate::NONE; rows];
        let (mut headers, mut lists, mut theirs_lp) = (Vec::new(), Vec::new(), Vec::new());
        for bytes in gathered.chunks_exact(message.0.len()) {
            let mut r = Reader { bytes, at: 0 };
            let (header, theirs) = shard::decode(&mut r, rows);
            for (c, t) in combined.iter_mut().zip(theirs) {
                *c = c.combine(t);
            }
            headers.push(header);
            lists.push(lengths.iter().map(|&n| (n > 0).then(|| Largest::read(n, &mut r))).collect::<Vec<_>>());
            let lp: Vec<LogprobPart> =
                if asked.is_some() { (0..rows).map(|_| LogprobPart::read(&mut r)).collect() } else { Vec::new() };
            theirs_lp.push(lp);
        }
        Header::check_group(&headers)?;
        // Every filtered row's τ and LSE(S) from the lists.
        let kept: Vec<Option<(f32, f32)>> = (0..rows)
            .map(|row| {
                let theirs = lists.iter().filter_map(|l: &Vec<Option<Largest>>| l[row].as_ref());
                (lengths[row] > 0).then(|| kept_of_largest(theirs, filters[row], shard.vocab))
            })
            .collect();
        // Each rank's raw value of its candidate: round 1's, a filtered row's from round 2.
        let mut xs: Vec<Vec<f32>> = theirs_lp.iter().map(|lp| lp.iter().map(|p| p.x).collect()).collect();
        if lengths.iter().any(|&n| n > 0) {
            // Round 2: the ranks' bests over their kept ids.
            let taus: Vec<Option<f32>> = kept.iter().map(|k| k.map(|(tau, _)| tau)).collect();
            let (bests, kept_xs) = kept_round(exchange, args, shard, out, &taus)?;
            for (c, best) in combined.iter_mut().zip(bests) {
                c.best = c.best.combine(best);
            }
            for (x, theirs) in xs.iter_mut().zip(kept_xs).filter(|_| asked.is_some()) {
                for (row, t) in theirs.into_iter().enumerate().filter(|(row, _)| taus[*row].is_some()) {
                    x[row] = t;
                }
            }
        }
        let GumbelOutput { tokens, row_status, draft_logits, logprobs } = out;
        let mut row_out = RowOut { tokens, row_status: row_status.as_deref_mut() };
        for (row, c) in combined.iter().enumerate() {
            write_row(&mut row_out, row, c.best.index, c.nan);
        }
        let Some(asked) = asked else { return Ok(()) };
        let draft = draft_logits.as_ref();
        let p = &args.params;
        let width = (shard.offset as u32, args.logits.vocab);
        sharded_logprobs::write(exchange, logprobs, width, rows, |row| {
            let sum = |part: fn(&LogprobPart) -> &ExpSum| {
                let mut s = ExpSum::EMPTY;
                theirs_lp.iter().for_each(|lp| s.combine(part(&lp[row])));
                s.lse()
            };
            let owner = Header::owner(&headers, combined[row].best.index);
            let slot = args.slots[row];
            let t = if slot >= 0 { p.temperature[slot as usize] } else { 0.0 };
            let dist = (t != 0.0).then(|| {
                let sampler = Sampler::new(t, 0, 0, Stream::Target);
                match kept[row] {
                    Some((tau, lse)) => Processed { sampler, tau: Some(tau), lse },
                    None => Processed { sampler, tau: None, lse: sum(|p| &p.scaled) },
                }
            });
            let raw_lse = if asked.needs_raw(t == 0.0) { sum(|p| &p.raw) } else { f32::NAN };
            // The row's values (a copy, widened) only where a top-n reads them.
            let values =
                if asked.top.is_some() { Cow::Owned(sampled_row(args, draft, row)) } else { Cow::Borrowed(&[][..]) };
            Some(sharded_logprobs::Emitted { values, x: owner.map_or(f32::NAN, |o| xs[o][row]), raw_lse, dist })
        })
    }
}

/// Round 2 of a sharded call with filters: every filtered row's best
/// (`taus[row]`: its kept set's `τ`) over the ranks, each rank's over its
/// ids of the kept set ([`kept_bests`]); `ArgMax::IDENTITY` for other rows.
/// With log-probabilities, also each rank's raw value of its best, per row
/// (`NaN` where none).
fn kept_round(
    exchange: &mut dyn Exchange<Host>,
    args: &GumbelSample<'_, Host>,
    shard: Shard,
    out: &GumbelOutput<'_, Host>,
    taus: &[Option<f32>],
) -> Result<(Vec<ArgMax>, Vec<Vec<f32>>)> {
    let rows = Rows::of(args, Some(shard));
    let draft = out.draft_logits.as_ref().map(|(d, _)| d.data.dtype());
    let logprobs = !out.logprobs.is_none();
    let filtered: Vec<usize> = (0..taus.len()).filter(|&row| taus[row].is_some()).collect();
    let mine = catch_unwind(AssertUnwindSafe(|| {
        let bests = match &args.logits.data {
            Values::F32(l) => kept_bests(&rows, l, draft, taus),
            Values::BF16(l) => kept_bests(&rows, l.as_core(), draft, taus),
            Values::F16(l) => kept_bests(&rows, l.as_core(), draft, taus),
        };
        let x = |row: usize| sampled_candidate(args, out.draft_logits.as_ref(), row, bests[row], shard);
        let xs: Vec<f32> = if logprobs { filtered.iter().map(|&row| x(row)).collect() } else { Vec::new() };
        (bests, xs)
    }));
    let mut message = Writer(Vec::new());
    message.u32(u32::from(mine.is_ok()));
    for (k, &row) in filtered.iter().enumerate() {
        message.arg_max(mine.as_ref().map_or(ArgMax::IDENTITY, |(bests, _)| bests[row]));
        if logprobs {
            message.f32(mine.as_ref().map_or(f32::NAN, |(_, xs)| xs[k]));
        }
    }
    let gathered = shard::gather(exchange, &message.0);
    if let Err(panic) = mine {
        resume_unwind(panic);
    }
    let mut combined = vec![ArgMax::IDENTITY; taus.len()];
    let mut xs = Vec::new();
    for (rank, bytes) in gathered?.chunks_exact(message.0.len()).enumerate() {
        let mut r = Reader { bytes, at: 0 };
        if r.u32() == 0 {
            return Err(Error::PeerFailed { rank });
        }
        let mut x = vec![f32::NAN; taus.len()];
        for &row in &filtered {
            combined[row] = combined[row].combine(r.arg_max());
            if logprobs {
                x[row] = r.f32();
            }
        }
        xs.push(x);
    }
    Ok((combined, xs))
}

/// A rank's part of a row's log-probabilities in round 1: the §2.6 sums of
/// the raw row and of the scaled row (each where a position needs it; a
/// filtered row's `LSE(S)` comes from its lists) and the raw value of its
/// candidate's id, over the values the row was sampled from.
struct LogprobPart {
    raw: ExpSum,
    scaled: ExpSum,
    x: f32,
}

impl LogprobPart {
    const NONE: LogprobPart = LogprobPart { raw: ExpSum::EMPTY, scaled: ExpSum::EMPTY, x: f32::NAN };

    /// This rank's part of row `row` (`unfiltered`: its `LSE` is a sum's),
    /// whose candidate is `best`.
    fn of(
        args: &GumbelSample<'_, Host>,
        out: &GumbelOutput<'_, Host>,
        shard: Shard,
        row: usize,
        best: ArgMax,
        unfiltered: bool,
    ) -> Self {
        let Some(asked) = Asked::of(&out.logprobs) else { return LogprobPart::NONE };
        let values = sampled_row(args, out.draft_logits.as_ref(), row);
        let slot = args.slots[row];
        let t = if slot >= 0 { args.params.temperature[slot as usize] } else { 0.0 };
        let level = Level::detect();
        let scaled =
            || simd::exp_sum_kept(level, &Sampler::new(t, 0, 0, Stream::Target), &values[..], f32::NEG_INFINITY);
        LogprobPart {
            raw: if asked.needs_raw(t == 0.0) { simd::raw_exp_sum(level, &values[..]) } else { ExpSum::EMPTY },
            scaled: if asked.needs_dist(t == 0.0) && unfiltered { scaled() } else { ExpSum::EMPTY },
            x: candidate_value(&values, best, shard),
        }
    }

    fn write(&self, w: &mut Writer) {
        w.exp_sum(&self.raw);
        w.exp_sum(&self.scaled);
        w.f32(self.x);
    }

    fn read(r: &mut Reader) -> Self {
        LogprobPart { raw: r.exp_sum(), scaled: r.exp_sum(), x: r.f32() }
    }
}

/// The value in this rank's `values` of a row of its candidate `best` (`NaN` for none).
fn candidate_value(values: &[f32], best: ArgMax, shard: Shard) -> f32 {
    let local = best.index.checked_sub(shard.offset as u32);
    local.and_then(|i| values.get(i as usize)).copied().unwrap_or(f32::NAN)
}

/// Row `row`'s values on this rank as its log-probabilities take them,
/// widened to `f32` (exactly): its logits, or where the draft logits round
/// them, those stored there, read back after the call's writes (as
/// [`row_logprobs`] reads them).
fn sampled_row(
    args: &GumbelSample<'_, Host>,
    draft: Option<&(DraftLogitsMut<'_, Host>, Column<'_, Host>)>,
    row: usize,
) -> Vec<f32> {
    sampled_ids(args, draft, row, 0..args.logits.vocab)
}

/// [`sampled_row`]'s value of this rank's candidate `best` of row `row`
/// (`NaN` for none), read alone.
fn sampled_candidate(
    args: &GumbelSample<'_, Host>,
    draft: Option<&(DraftLogitsMut<'_, Host>, Column<'_, Host>)>,
    row: usize,
    best: ArgMax,
    shard: Shard,
) -> f32 {
    let local = best.index.checked_sub(shard.offset as u32).map(|i| i as usize);
    match local.filter(|&i| i < args.logits.vocab) {
        Some(i) => sampled_ids(args, draft, row, i..i + 1)[0],
        None => f32::NAN,
    }
}

/// [`sampled_row`]'s values of this rank's ids `ids` of row `row`.
fn sampled_ids(
    args: &GumbelSample<'_, Host>,
    draft: Option<&(DraftLogitsMut<'_, Host>, Column<'_, Host>)>,
    row: usize,
    ids: std::ops::Range<usize>,
) -> Vec<f32> {
    fn widen<V: Logit>(v: &[V]) -> Vec<f32> {
        v.iter().map(|x| x.to_f32()).collect()
    }
    let (l, slot) = (&args.logits, args.slots[row]);
    match draft.filter(|(d, _)| slot >= 0 && l.data.dtype().rounds_into(d.data.dtype())) {
        Some((d, column)) => {
            let stored = stored_row(d, column, row, slot, l.vocab);
            let at = stored.start + ids.start..stored.start + ids.end;
            match &d.data {
                ValuesMut::F32(v) => v[at].to_vec(),
                ValuesMut::BF16(v) => widen(&v.as_core()[at]),
                ValuesMut::F16(v) => widen(&v.as_core()[at]),
            }
        }
        None => {
            let at = row * l.row_stride + ids.start..row * l.row_stride + ids.end;
            match &l.data {
                Values::F32(v) => v[at].to_vec(),
                Values::BF16(v) => widen(&v.as_core()[at]),
                Values::F16(v) => widen(&v.as_core()[at]),
            }
        }
    }
}

/// This rank's header: its shard, and the digest of what every rank passes alike.
fn header(shard: Shard, args: &GumbelSample<'_, Host>, out: &GumbelOutput<'_, Host>) -> Header {
    let p = &args.params;
    let words = [args.logits.rows as u64, u64::from(args.drafting)]
        .into_iter()
        .chain(args.slots.iter().map(|&s| s as u64))
        .chain(args.pos.iter().copied())
        .chain(p.temperature.iter().map(|t| u64::from(t.to_bits())))
        .chain(p.seed.iter().copied())
        .chain(shard::filter_words(&p.filters))
        .chain(out.logprobs.digest_words());
    Header::of(shard, args.logits.vocab, words)
}

/// This rank's candidate for each row (a filtered row's: its NaN flag, and
/// its top-value list), its draft logits written; with log-probabilities,
/// each row's [`LogprobPart`] (`lengths`: the rows' list lengths, 0 for none).
fn shard_candidates(
    shard: Shard,
    args: &GumbelSample<'_, Host>,
    out: &mut GumbelOutput<'_, Host>,
    lengths: &[usize],
) -> Result<(Vec<Sampled>, Vec<LogprobPart>)> {
    let shape = args.check(out)?;
    shard.check(args.logits.vocab)?;
    args.check_values(out, shape)?;
    shard::check_filters(args.slots, args.params.temperature, shard.vocab, &[&args.params.filters])?;
    let mut sampled = vec![(Candidate::NONE, None); args.logits.rows];
    let rows = Rows::of(args, Some(shard));
    sample_call(args, &rows, out.draft_logits.as_mut(), &mut |row, c| sampled[row] = c);
    let parts = if out.logprobs.is_none() {
        Vec::new()
    } else {
        let part = |row: usize| LogprobPart::of(args, out, shard, row, sampled[row].0.best, lengths[row] == 0);
        (0..args.logits.rows).map(part).collect()
    };
    Ok((sampled, parts))
}

/// The read-only per-call inputs.
struct Rows<'r, 'a> {
    slots: &'r [i32],
    pos: &'r [u64],
    temperature: &'r [f32],
    seed: &'r [u64],
    filters: &'r Filters<'a, Host>,
    stream: Stream,
    /// The instruction set random rows are folded with.
    level: Level,
    rows: usize,
    vocab: usize,
    row_stride: usize,
    /// The global id of each row's first value (a sharded call's offset, else 0).
    base: u32,
    /// The whole row's ids (a sharded call's `shard.vocab`, else `vocab`).
    whole: usize,
    /// Whether a filtered row sends its top-value list (a sharded call)
    /// rather than being sampled.
    lists: bool,
}

impl<'r, 'a> Rows<'r, 'a> {
    /// The rows of `args`, or of this rank's shard of them.
    fn of(args: &'r GumbelSample<'a, Host>, shard: Option<Shard>) -> Self {
        let GumbelSample { logits, slots, pos, params, drafting } = args;
        Rows {
            slots,
            pos,
            temperature: params.temperature,
            seed: params.seed,
            filters: &params.filters,
            stream: if *drafting { Stream::Draft } else { Stream::Target },
            level: Level::detect(),
            rows: logits.rows,
            vocab: logits.vocab,
            row_stride: logits.row_stride,
            base: shard.map_or(0, |s| s.offset as u32),
            whole: shard.map_or(logits.vocab, |s| s.vocab),
            lists: shard.is_some(),
        }
    }
}

/// Samples every row of `args` (described by `rows`), writing the draft
/// logits, and hands each row's candidate to `out`.
fn sample_call(
    args: &GumbelSample<'_, Host>,
    rows: &Rows<'_, '_>,
    draft: Option<&mut (DraftLogitsMut<'_, Host>, Column<'_, Host>)>,
    out: Sink<'_>,
) {
    match &args.logits.data {
        Values::F32(l) => with_draft_logits(rows, l, draft, out),
        Values::BF16(l) => with_draft_logits(rows, l.as_core(), draft, out),
        Values::F16(l) => with_draft_logits(rows, l.as_core(), draft, out),
    }
}

/// What a row gives: its candidate, and a sharded call's filtered row its
/// top-value list (its candidate then holds only its NaN flag).
type Sampled = (Candidate, Option<Largest>);

/// Where each row's [`Sampled`] goes.
type Sink<'s> = &'s mut dyn FnMut(usize, Sampled);

/// Where each row's token and status go.
struct RowOut<'o, 'a> {
    tokens: &'o mut Tokens<'a, Host>,
    row_status: Option<&'o mut [u32]>,
}

/// The draft logits and where each row's column starts in them.
struct DraftRows<'c, 'd, D> {
    data: &'c mut [D],
    stride0: usize,
    stride1: usize,
    column: &'c Column<'d, Host>,
}

impl<D> DraftRows<'_, '_, D> {
    /// Where row `row`, on slot `slot` (`>= 0`), writes its logits.
    fn start(&self, row: usize, slot: i32) -> usize {
        let col = match self.column {
            Column::All(col) => *col,
            Column::PerRow(cols) => cols[row] as usize,
        };
        slot as usize * self.stride0 + col * self.stride1
    }
}

fn with_draft_logits<L: Logit + Send + Sync>(
    rows: &Rows<'_, '_>,
    logits: &[L],
    draft: Option<&mut (DraftLogitsMut<'_, Host>, Column<'_, Host>)>,
    out: Sink<'_>,
) {
    let Some((draft, column)) = draft else {
        return sample_rows::<L, L>(rows, logits, None, out);
    };
    let (stride0, stride1) = (draft.shape.stride0, draft.shape.stride1);
    match &mut draft.data {
        ValuesMut::F32(d) => sample_rows(rows, logits, Some(DraftRows { data: d, stride0, stride1, column }), out),
        ValuesMut::BF16(d) => {
            sample_rows(rows, logits, Some(DraftRows { data: d.as_core_mut(), stride0, stride1, column }), out)
        }
        ValuesMut::F16(d) => {
            sample_rows(rows, logits, Some(DraftRows { data: d.as_core_mut(), stride0, stride1, column }), out)
        }
    }
}

/// Every row, in order on this thread, or spread over rayon's current pool
/// when [`super::parallel`] says so. Rows are independent, so both give the
/// same outputs. In parallel each row gets its own draft row, split off the
/// draft logits; a call where two rows write the same draft row (a race on the GPU)
/// runs in order instead, so the last of them lands, as it always has.
fn sample_rows<L: Logit + Sync, D: Logit + Send>(
    rows: &Rows<'_, '_>,
    logits: &[L],
    mut draft: Option<DraftRows<'_, '_, D>>,
    out: Sink<'_>,
) {
    if super::parallel(rows.rows, rows.rows * rows.vocab) {
        let split = match &mut draft {
            None => Some((0..rows.rows).map(|_| None).collect()),
            Some(d) => split_draft_rows(rows, d),
        };
        if let Some(split) = split {
            let mut sampled = Vec::with_capacity(rows.rows);
            split
                .into_par_iter()
                .enumerate()
                .map(|(row, draft_row)| sample_one(rows, logits, row, draft_row))
                .collect_into_vec(&mut sampled);
            for (row, candidate) in sampled.into_iter().enumerate() {
                out(row, candidate);
            }
            return;
        }
    }
    for row in 0..rows.rows {
        let slot = rows.slots[row];
        let draft_row = match &mut draft {
            Some(d) if slot >= 0 => {
                let start = d.start(row, slot);
                Some(&mut d.data[start..start + rows.vocab])
            }
            _ => None,
        };
        out(row, sample_one(rows, logits, row, draft_row));
    }
}

/// Each row's draft row (`None` for a padding row), split off `draft` in
/// address order; `None` if two rows write the same draft row. The draft
/// logits' `(slot, column)` rows are validated disjoint, so distinct ones start at
/// least `vocab` apart.
fn split_draft_rows<'s, D>(
    rows: &Rows<'_, '_>,
    draft: &'s mut DraftRows<'_, '_, D>,
) -> Option<Vec<Option<&'s mut [D]>>> {
    let mut starts: Vec<(usize, usize)> =
        (0..rows.rows).filter(|&r| rows.slots[r] >= 0).map(|r| (draft.start(r, rows.slots[r]), r)).collect();
    starts.sort_unstable();
    let mut split: Vec<Option<&mut [D]>> = (0..rows.rows).map(|_| None).collect();
    let (mut rest, mut at) = (&mut *draft.data, 0);
    for (start, row) in starts {
        if start < at {
            return None;
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - at);
        let (mine, tail) = tail.split_at_mut(rows.vocab);
        split[row] = Some(mine);
        (rest, at) = (tail, start + rows.vocab);
    }
    Some(split)
}

/// Row `row`'s candidate: its best id (global) and score, and whether it
/// holds a NaN; its raw logits go to `draft_row`, the row's own draft row
/// (`None`: no draft logits or a padding row).
fn sample_one<L: Logit, D: Logit>(
    rows: &Rows<'_, '_>,
    logits: &[L],
    row: usize,
    draft_row: Option<&mut [D]>,
) -> Sampled {
    let slot = rows.slots[row];
    let (t, seed, filter) = if slot >= 0 {
        let slot = slot as usize;
        (rows.temperature[slot], rows.seed[slot], rows.filters.slot(slot))
    } else {
        (0.0, 0, Filter::OFF)
    };
    let sampler = Sampler::new(t, seed, rows.pos[row], rows.stream);
    let start = row * rows.row_stride;
    let values = &logits[start..start + rows.vocab];
    if sampler.greedy {
        if let Some(d) = draft_row {
            copy(values, d);
        }
        let (index, nan) = first_argmax(rows.level, values);
        (Candidate { best: ArgMax::new(values[index as usize].to_f32(), rows.base + index), nan }, None)
    } else {
        let (best, nan, list) = sample_row(rows, &sampler, filter, values, draft_row);
        (Candidate { best, nan }, list)
    }
}

fn write_row(out: &mut RowOut<'_, '_>, row: usize, token: u32, nan: bool) {
    let token = token as i64;
    match out.tokens {
        Tokens::I32(t) => t[row] = token as i32,
        Tokens::I64(t) => t[row] = token,
    }
    if let Some(s) = &mut out.row_status {
        s[row] = if nan { NAN_LOGITS } else { 0 };
    }
}

/// Ids per step of a random row with draft logits: a step's logits stay in
/// L1 between their copy into the draft row and their fold.
const STEP: usize = 4096;

/// A random row, folded exactly as a kernel thread folds it, four ids at a
/// time (see [`simd`]), writing the draft row as it goes. Where the draft dtype
/// rounds the logits
/// ([`DType::rounds_into`](specdec_core::dtype::DType::rounds_into)), the values folded are the
/// stored ones (SPEC §3.3: the verifier's `q` is the distribution sampled).
/// A filtered row folds its kept set ([`kept`]) of those values (SPEC §7.3:
/// the verifier reproduces it from the stored row), or, in a sharded call,
/// gives their top-value list instead.
fn sample_row<L: Logit, D: Logit>(
    rows: &Rows<'_, '_>,
    sampler: &Sampler,
    filter: Filter,
    values: &[L],
    draft: Option<&mut [D]>,
) -> (ArgMax, bool, Option<Largest>) {
    let (level, base) = (rows.level, rows.base);
    if !filter.is_off(rows.whole) {
        return match draft {
            None => kept_row(rows, sampler, filter, values),
            Some(draft) => {
                copy(values, draft);
                if L::DTYPE.rounds_into(D::DTYPE) {
                    kept_row(rows, sampler, filter, draft)
                } else {
                    kept_row(rows, sampler, filter, values)
                }
            }
        };
    }
    let Some(draft) = draft else {
        let (best, nan) = simd::fold(level, sampler, ArgMax::IDENTITY, base, values);
        return (best, nan, None);
    };
    let stored = L::DTYPE.rounds_into(D::DTYPE);
    let (mut best, mut nan) = (ArgMax::IDENTITY, false);
    for (step, (values, draft)) in values.chunks(STEP).zip(draft.chunks_mut(STEP)).enumerate() {
        copy(values, draft);
        let base = base + (step * STEP) as u32;
        let (b, n) = if stored {
            simd::fold(level, sampler, best, base, draft)
        } else {
            simd::fold(level, sampler, best, base, values)
        };
        (best, nan) = (b, nan | n);
    }
    (best, nan, None)
}

/// The Gumbel-max over the kept set of a filtered row `values`, and whether
/// the row holds a NaN; in a sharded call, no best, and the row's top-value
/// list (its filter has a top-k: the call's checks).
fn kept_row<V: Logit>(
    rows: &Rows<'_, '_>,
    sampler: &Sampler,
    filter: Filter,
    values: &[V],
) -> (ArgMax, bool, Option<Largest>) {
    if rows.lists {
        let (list, nan) = Largest::of(rows.level, sampler, values, shard::list_length(filter, rows.whole));
        return (ArgMax::IDENTITY, nan, Some(list));
    }
    let kept = filter::kept(rows.level, sampler, values, filter);
    (filter::fold_kept(rows.level, sampler, values, &kept), kept.nan, None)
}

/// Round 2 of a sharded call with filters, on this rank: each filtered
/// row's best (`taus[row]`: its kept set's `τ`) over its ids of the kept
/// set, of the values the row was sampled from: its logits, or where the
/// draft logits round them, the stored values (converted again: a later
/// row of the call may have stored over them); `ArgMax::IDENTITY` for the
/// other rows; `draft` is the draft logits' dtype, if any. The unsharded
/// call's fold of the kept set (`filter::fold_kept`), split by ids.
fn kept_bests<L: Logit>(rows: &Rows<'_, '_>, logits: &[L], draft: Option<DType>, taus: &[Option<f32>]) -> Vec<ArgMax> {
    let stored = draft.filter(|&d| L::DTYPE.rounds_into(d));
    let mut best = vec![ArgMax::IDENTITY; rows.rows];
    for (row, tau) in taus.iter().enumerate() {
        let (Some(tau), slot) = (*tau, rows.slots[row]) else { continue };
        let values = &logits[row * rows.row_stride..row * rows.row_stride + rows.vocab];
        if values.is_empty() {
            continue;
        }
        let s = Sampler::new(rows.temperature[slot as usize], rows.seed[slot as usize], rows.pos[row], rows.stream);
        best[row] = match stored {
            Some(DType::BF16) => fold_shard_kept::<Bf16>(rows, &s, &convert(values), tau),
            Some(DType::F16) => fold_shard_kept::<F16>(rows, &s, &convert(values), tau),
            _ => fold_shard_kept(rows, &s, values, tau),
        };
    }
    best
}

/// `values` as draft logits of dtype `D` store them.
fn convert<L: Element, D: Element>(values: &[L]) -> Vec<D> {
    values.iter().map(|&v| D::convert_from(v)).collect()
}

/// The Gumbel-max over this rank's ids `values` of a kept set `{scaled >= tau}`:
/// from the kept ids' own quads where few (`tau` finite), as the unsharded
/// call's [`filter::fold_kept`] draws from a listed kept set; else by the fold
/// that masks the shard as it reads it. Either is the fold of the masked shard.
fn fold_shard_kept<V: Logit>(rows: &Rows<'_, '_>, s: &Sampler, values: &[V], tau: f32) -> ArgMax {
    match tau.is_finite().then(|| filter::kept_ids(s, values, tau)).flatten() {
        Some(ids) => filter::fold_listed(s, rows.base, values, &ids),
        None => simd::fold_kept(rows.level, s, ArgMax::IDENTITY, rows.base, values, tau).0,
    }
}

/// Where row `row` (on slot `slot >= 0`) stored its logits in the draft logits.
fn stored_row(
    draft: &DraftLogitsMut<'_, Host>,
    column: &Column<'_, Host>,
    row: usize,
    slot: i32,
    vocab: usize,
) -> std::ops::Range<usize> {
    let col = match column {
        Column::All(col) => *col,
        Column::PerRow(cols) => cols[row] as usize,
    };
    let start = slot as usize * draft.shape.stride0 + col * draft.shape.stride1;
    start..start + vocab
}

/// The raw logits into the draft row (SPEC §3.3: converted, bit-exact for equal dtypes).
fn copy<L: Element, D: Element>(values: &[L], draft: &mut [D]) {
    for (d, &v) in draft.iter_mut().zip(values) {
        *d = D::convert_from(v);
    }
}

/// Each row's log-probabilities (REFERENCE §8) under the values it was
/// sampled from: where the draft logits round them, those stored (SPEC
/// §3.3), read back from the draft logits; else `logits` themselves.
fn row_logprobs<L: Logit + Sync>(
    rows: &Rows<'_, '_>,
    logits: &[L],
    draft: Option<&(DraftLogitsMut<'_, Host>, Column<'_, Host>)>,
    tokens: &Tokens<'_, Host>,
    out: &mut Logprobs<'_, Host>,
) {
    let stored = draft.filter(|(d, _)| L::DTYPE.rounds_into(d.data.dtype()));
    let rounded = |slot: i32| stored.is_some() && slot >= 0;
    emit(rows, tokens, out, |row, slot| {
        (!rounded(slot)).then(|| &logits[row * rows.row_stride..row * rows.row_stride + rows.vocab])
    });
    let Some((draft, column)) = stored else { return };
    let at = |row: usize, slot: i32| rounded(slot).then(|| stored_row(draft, column, row, slot, rows.vocab));
    match &draft.data {
        ValuesMut::F32(_) => unreachable!("no dtype rounds into f32"),
        ValuesMut::BF16(d) => emit(rows, tokens, out, |row, slot| at(row, slot).map(|r| &d.as_core()[r])),
        ValuesMut::F16(d) => emit(rows, tokens, out, |row, slot| at(row, slot).map(|r| &d.as_core()[r])),
    }
}

/// The log-probabilities of the rows for which `values(row, slot)` gives
/// the values the row's token was sampled from.
fn emit<'r, V: Logit + Sync + 'r>(
    rows: &Rows<'_, '_>,
    tokens: &Tokens<'_, Host>,
    out: &mut Logprobs<'_, Host>,
    values: impl Fn(usize, i32) -> Option<&'r [V]> + Sync,
) {
    let parallel = super::parallel(rows.rows, rows.rows * rows.vocab);
    logprobs::write(out, rows.rows, parallel, |row| {
        let slot = rows.slots[row];
        let values = values(row, slot)?;
        let (temperature, filter) = if slot >= 0 {
            (rows.temperature[slot as usize], rows.filters.slot(slot as usize))
        } else {
            (0.0, Filter::OFF)
        };
        let token = match tokens {
            Tokens::I32(t) => t[row] as u32,
            Tokens::I64(t) => t[row] as u32,
        };
        Some(Emitted { values, temperature, filter, token })
    });
}
