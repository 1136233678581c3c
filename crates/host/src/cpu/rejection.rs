//! `rejection_sample` on the CPU: the twin of `crates/kernels/src/rejection/`.
//!
//! It walks each request's drafts in order and stops at the first rejection,
//! so it reads only the rows it needs; the kernels compute every row's
//! statistics in parallel. Both apply the same `specdec-core` rules.

use super::dist::Dist;
use super::filter::{Kept, fold_kept, kept, listed_quads};
use super::logprobs::{self, Emitted};
use super::simd::{self, Level, Logit};
use super::{AsCore, Cpu, first_argmax, quads};
use crate::error::Result;
use crate::logprobs::Logprobs;
use crate::memory::Host;
use crate::rejection::{RejectionOutput, RejectionSample, Verification};
use crate::tensor::{Tokens, Values};
use rayon::prelude::*;
use specdec_core::argmax::ArgMax;
use specdec_core::block_verification::{below, block_verify, ln_weight, one_hot_mass, ratio};
use specdec_core::filter::Filter;
use specdec_core::gumbel::{COARSE_BOUND, TOP_BUCKET};
use specdec_core::logspace::ln_residual;
use specdec_core::rng::{Stream, random_u32};
use specdec_core::sample::{Resampled, Sampler, accepts};
use specdec_core::status::NAN_LOGITS;

/// `2^60`: block verification's residual masses are added in units of
/// `2^-60` (a mass is at most about 1, so the sum fits a `u64` many times over).
const MASS_UNITS: f64 = (1u64 << 60) as f64;

impl Cpu {
    /// `rejection_sample` (SPEC §4) on host buffers.
    ///
    /// # Errors
    /// Shape, stride and length errors, bad offsets, draft ids, slots and
    /// temperatures, all before anything is written.
    pub fn rejection_sample(
        &self,
        args: &RejectionSample<'_, Host>,
        out: &mut RejectionOutput<'_, Host>,
    ) -> Result<()> {
        let shape = args.check(out)?;
        args.check_values(shape)?;
        match &args.target.data {
            Values::F32(t) => with_draft(args, t, out),
            Values::BF16(t) => with_draft(args, t.as_core(), out),
            Values::F16(t) => with_draft(args, t.as_core(), out),
        }
        Ok(())
    }
}

fn with_draft<T: Logit + Sync>(args: &RejectionSample<'_, Host>, target: &[T], out: &mut RejectionOutput<'_, Host>) {
    match args.draft_logits.as_ref().map(|d| &d.data) {
        None => verify::<T, T>(args, target, None, out),
        Some(Values::F32(d)) => verify(args, target, Some(*d), out),
        Some(Values::BF16(d)) => verify(args, target, Some(d.as_core()), out),
        Some(Values::F16(d)) => verify(args, target, Some(d.as_core()), out),
    }
}

/// One request's view of the call.
struct Request<'a, 'b, T, C> {
    args: &'a RejectionSample<'b, Host>,
    target: &'a [T],
    draft: Option<&'a [C]>,
    row0: usize,
    slot: i32,
    sampler: Sampler,
    /// The slot's filters on the target, and those its drafts were sampled with.
    target_filter: Filter,
    draft_filter: Filter,
    /// The vector code's instruction set.
    level: Level,
}

/// The first rejected draft of a request: its id and its row's distributions.
struct Rejected {
    id: usize,
    dists: RowDists,
}

impl<T: Logit, C: Logit> Request<'_, '_, T, C> {
    fn target_row(&self, i: usize) -> &[T] {
        let start = (self.row0 + i) * self.args.target.row_stride;
        &self.target[start..start + self.args.target.vocab]
    }

    /// Draft column `i` of the request's slot.
    fn draft_row(&self, i: usize) -> Option<&[C]> {
        let (d, shape) = (self.draft?, self.args.draft_logits.as_ref()?.shape);
        let start = self.slot as usize * shape.stride0 + i * shape.stride1;
        Some(&d[start..start + self.args.target.vocab])
    }

    fn pos(&self, i: usize) -> u64 {
        self.args.pos[self.row0 + i]
    }

    fn argmax(&self, i: usize) -> u32 {
        first_argmax(self.level, self.target_row(i)).0
    }

    /// Draft row `i`'s target distribution `p'` and the draft distribution
    /// its draft was drawn from (none: one-hot).
    fn dists(&self, i: usize) -> RowDists {
        RowDists {
            target: Dist::of(self.level, &self.sampler, self.target_row(i), self.target_filter),
            draft: self.draft_row(i).map(|q| Dist::of(self.level, &self.sampler, q, self.draft_filter)),
        }
    }

    /// `(log p(d), log q(d))` of draft `d` at row `i`, of distributions
    /// `dists` (a one-hot draft's `log q = 0`; a draft outside the target's
    /// kept set has `log p' = -inf`).
    fn log_probs(&self, i: usize, d: usize, dists: &RowDists) -> (f32, f32) {
        let s = &self.sampler;
        let log_p = dists.target.log_prob(s.scaled(self.target_row(i)[d].to_f32()));
        let log_q = match (self.draft_row(i), &dists.draft) {
            (Some(q), Some(dq)) => dq.log_prob(s.scaled(q[d].to_f32())),
            _ => 0.0,
        };
        (log_p, log_q)
    }

    /// Row `i`'s acceptance word (SPEC §2: the acceptance stream at its position).
    fn accept_word(&self, i: usize) -> u32 {
        random_u32(self.sampler.seed, self.pos(i), Stream::Accept, 0)
    }

    /// Whether draft `d` at row `i`, of distributions `dists`, passes (SPEC §4
    /// standard rule; a draft outside the target's kept set never does).
    fn accepts(&self, i: usize, d: usize, dists: &RowDists) -> bool {
        let (log_p, log_q) = self.log_probs(i, d, dists);
        accepts(self.accept_word(i), log_q, log_p)
    }

    /// Block verification of the request's drafts (REFERENCE §4.11, the rule
    /// `specdec_core::block_verification::block_verify`): the drafts before
    /// the first placeholder are the block; the token after the accepted
    /// ones comes from the residual `max(p_τ·p − q, 0)` of row `τ` (the
    /// draft-by-draft residual with `p` weighted by `p_τ`), or from the target
    /// of the row after the block (the bonus row, or the placeholder's).
    fn verify_block(&self, n: usize) -> Verdict {
        let drafts = &self.args.drafts[self.row0..self.row0 + n];
        let block = drafts.iter().position(|&d| d == -1).unwrap_or(n);
        if block == 0 {
            return Verdict { j: 0, last: self.resample(0, None) };
        }
        let mut dists: Vec<RowDists> = (0..block).map(|i| self.dists(i)).collect();
        // As the kernels weigh them, bit for bit (`ratio`'s own `exp`).
        let mut ratios: Vec<f64> = (0..block)
            .map(|i| {
                let (log_p, log_q) = self.log_probs(i, drafts[i] as usize, &dists[i]);
                ratio(log_p, log_q)
            })
            .collect();
        let residual_mass = |i: usize, p: f64| self.residual_mass(i, drafts[i] as usize, &dists[i], p);
        let (tau, p_tau) = block_verify(&mut ratios, residual_mass, |i| self.accept_word(i));
        if tau == block {
            return Verdict { j: block, last: self.resample(block, None) };
        }
        let RowDists { target, draft } = dists.swap_remove(tau);
        let rejected =
            Rejected { id: drafts[tau] as usize, dists: RowDists { target: target.weighted(ln_weight(p_tau)), draft } };
        Verdict { j: tau, last: self.resample(tau, Some(rejected)) }
    }

    /// `Σ_x max(w·p(x) − q(x), 0)` over row `i` (its target and draft
    /// distributions `dists`; one-hot: `q` the point mass at draft `d`,
    /// where it is `w·(1 − p(d))`), in f64; with draft logits by
    /// [`residual_units`].
    fn residual_mass(&self, i: usize, d: usize, dists: &RowDists, w: f64) -> f64 {
        let s = &self.sampler;
        let target = self.target_row(i);
        match (self.draft_row(i), &dists.draft) {
            (Some(q), Some(dq)) => {
                mass(residual_units(target, q, w, |x| dists.target.log_prob(s.scaled(x)), |x| dq.log_prob(s.scaled(x))))
            }
            _ => one_hot_mass(w, dists.target.log_prob(s.scaled(target[d].to_f32()))),
        }
    }

    /// The token at row `i` after a rejection, or, at a bonus row or
    /// placeholder (`None`), from the target `p'`.
    fn resample(&self, i: usize, rejected: Option<Rejected>) -> u32 {
        let sampler = Sampler { pos: self.pos(i), ..self.sampler };
        let row = self.target_row(i);
        let Some(Rejected { id: rejected, dists }) = rejected else {
            // Residual and target candidates are both the target's: this is
            // gumbel_sample's fold of a random row, vectorised.
            // Its kept set only: the fold needs no log-sum-exp.
            return if self.target_filter.is_off(row.len()) {
                simd::fold(self.level, &sampler, ArgMax::IDENTITY, 0, row).0.index
            } else {
                fold_kept(self.level, &sampler, row, &kept(self.level, &self.sampler, row, self.target_filter)).index
            };
        };
        let listed = match &dists.target {
            Dist::Kept { kept: Kept { ids: Some(ids), .. }, lse } => Some((ids, *lse)),
            _ => None,
        };
        match (self.draft_row(i), &dists.draft, listed) {
            (Some(d), Some(dq), Some((ids, lse))) => resample_listed_draft(&sampler, row, d, ids, lse, dq),
            (Some(d), Some(dq), None) => {
                let target = &dists.target;
                resample_draft(self.level, &sampler, row, d, (target.lse(), target.tau()), (dq.lse(), dq.tau()))
            }
            (_, _, Some((ids, _))) => resample_listed_one_hot(&sampler, row, ids, rejected),
            _ => resample_one_hot(self.level, &sampler, &dists.target.row(&sampler, row), rejected),
        }
    }
}

/// `Σ_x max(w·p(x) − q(x), 0)` over the ids of `target` and `draft` (their
/// logits), `p = e^log_p(x)` and `q = e^log_q(x)` from the raw logits (a NaN
/// log-probability is a probability of 0), each term truncated to a multiple
/// of `2^-60` and added as an integer: the same sum in any order and any
/// split of the row ([`mass`] takes it to `f64`).
pub(super) fn residual_units<T: Logit, C: Logit>(
    target: &[T],
    draft: &[C],
    w: f64,
    log_p: impl Fn(f32) -> f32,
    log_q: impl Fn(f32) -> f32,
) -> u128 {
    let prob = |lp: f32| if lp.is_nan() { 0.0 } else { f64::from(lp).exp() };
    target
        .iter()
        .zip(draft)
        .map(|(t, q)| {
            let term = (w * prob(log_p(t.to_f32())) - prob(log_q(q.to_f32()))).max(0.0);
            u128::from((term * MASS_UNITS) as u64)
        })
        .sum()
}

/// A residual mass from its [`residual_units`].
pub(super) fn mass(units: u128) -> f64 {
    units as f64 / MASS_UNITS
}

/// [`resample_listed`] with draft logits: draft row `draft`, of distribution
/// `dq`, and the target's `LSE(S)` `lse`.
fn resample_listed_draft<T: Logit, C: Logit>(
    sampler: &Sampler,
    row: &[T],
    draft: &[C],
    ids: &[u32],
    lse: f32,
    dq: &Dist,
) -> u32 {
    resample_listed(sampler, row, ids, lse, |id, a| {
        ln_residual(a, dq.log_prob(sampler.scaled(draft[id as usize].to_f32())))
    })
}

/// [`resample_listed`] of a one-hot draft: the residual is the target without the `rejected` id.
fn resample_listed_one_hot<T: Logit>(sampler: &Sampler, row: &[T], ids: &[u32], rejected: usize) -> u32 {
    resample_listed(sampler, row, ids, 0.0, |id, a| if id as usize == rejected { f32::NEG_INFINITY } else { a })
}

/// The resample of a rejected draft where the target's kept set `S` lists
/// its `ids` (ascending): `fold_resample` over the quads holding them alone,
/// each id's target weight its scaled value and its residual weight
/// `residual(id, a)` of `a`, that value less `lse` (with draft logits,
/// `lse = LSE(S)` and `ln(p' − q)`; one-hot, `0` and the target's weight
/// but at the rejected id). It gives [`resample_draft`]'s and
/// [`resample_one_hot`]'s token over the masked rows: off `S` both weights
/// are `-inf` (`p' = 0`), so such quads change neither best's value, and a
/// `-inf` residual best gives way to the target's candidate, in `S`.
fn resample_listed<T: Logit>(
    sampler: &Sampler,
    row: &[T],
    ids: &[u32],
    lse: f32,
    residual: impl Fn(u32, f32) -> f32,
) -> u32 {
    listed_candidates(sampler, 0, row, ids, lse, residual).token()
}

/// [`resample_listed`]'s candidates over ids `base .. base + row.len()` of
/// the row (`base % 4 == 0`; `ids` and `residual`'s first argument are
/// places in `row`): a vocabulary shard's part of the resample.
pub(super) fn listed_candidates<T: Logit>(
    sampler: &Sampler,
    base: u32,
    row: &[T],
    ids: &[u32],
    lse: f32,
    residual: impl Fn(u32, f32) -> f32,
) -> Resampled {
    let mut best = Resampled::IDENTITY;
    for (at, raw, n) in listed_quads(row, ids) {
        // Scaled, `-inf` off `S` as listed.
        let tgt = raw.map(|x| sampler.scaled(x));
        let a = tgt.map(|v| v - lse);
        best = sampler.fold_resample(best, base + at, tgt, a, |l| residual(at + l as u32, a[l]), n);
    }
    best
}

/// A draft row's target and draft distributions (no draft: one-hot).
struct RowDists {
    target: Dist,
    draft: Option<Dist>,
}

/// Ids per block of [`resample_draft`]: a multiple of every level's Philox block.
const DRAFT_BLOCK: usize = 512;

/// The resample of a rejected draft in draft-logits mode: `fold_resample`
/// over every quad of the residual `max(p − q, 0)` of target row `row` and
/// draft row `draft` (as long), each masked as it is read to its kept set
/// `{scaled >= τ}` (`τ = -inf`: kept whole; `simd::kept_scaled`, a masked
/// copy's values), whose scaled log-sum-exps are `lse_t` and `lse_q`, with
/// the same token. A block of ids at a time:
///
/// 1. the Philox words of all its quads are drawn by the vector code
///    ([`simd::words`]);
/// 2. an id is ruled out if its word is below the top bucket and both its
///    scores' bounds (`log p` plus [`COARSE_BOUND`] for the residual,
///    the scaled logit plus it for the target) are below the bests at the
///    block's start: `fold_resample` would skip it as well, since the bests
///    only grow and `COARSE_BOUND` bounds every such word's `gumbel_bound`;
/// 3. the quads holding any other id are folded, in id order, by
///    `fold_resample_drawn` with their words; the others change nothing.
fn resample_draft<T: Logit, C: Logit>(
    level: Level,
    sampler: &Sampler,
    row: &[T],
    draft: &[C],
    target: (f32, f32),
    draft_dist: (f32, f32),
) -> u32 {
    draft_candidates(level, sampler, 0, row, draft, target, draft_dist).token()
}

/// [`resample_draft`]'s candidates over ids `base .. base + row.len()` of
/// the rows (`base % 4 == 0`; `row` and `draft` are those ids' logits): a
/// vocabulary shard's part of the resample, whose candidates combine with
/// the other shards' into the whole row's.
pub(super) fn draft_candidates<T: Logit, C: Logit>(
    level: Level,
    sampler: &Sampler,
    base: u32,
    row: &[T],
    draft: &[C],
    (lse_t, tau_t): (f32, f32),
    (lse_q, tau_q): (f32, f32),
) -> Resampled {
    debug_assert_eq!(row.len(), draft.len());
    let key = simd::RowKey::new(sampler);
    let (mut words, mut tgt, mut keep) = ([0u32; DRAFT_BLOCK], [0f32; DRAFT_BLOCK], [0u8; DRAFT_BLOCK]);
    let mut best = Resampled::IDENTITY;
    for (b, (row, draft)) in row.chunks(DRAFT_BLOCK).zip(draft.chunks(DRAFT_BLOCK)).enumerate() {
        let first = base + (b * DRAFT_BLOCK) as u32;
        let len4 = row.len().next_multiple_of(4);
        simd::words(level, &key, first / 4, &mut words[..len4]);
        let (res0, tgt0) = (best.residual.value, best.target.value);
        // Branch-free, so that it vectorises; lanes past the row stay ruled out.
        keep[row.len()..len4].fill(0);
        for (((x, y), k), &w) in row.iter().zip(&mut tgt).zip(&mut keep).zip(&words) {
            *y = simd::kept_scaled(sampler, x.to_f32(), tau_t);
            // `!(… < best)`: a NaN score is kept, as fold_resample keeps it.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let alive = (w >= TOP_BUCKET) | !((*y - lse_t) + COARSE_BOUND < res0) | !(*y + COARSE_BOUND < tgt0);
            *k = alive as u8;
        }
        let (keep, _) = keep[..len4].as_chunks::<4>();
        let (quad_words, _) = words[..len4].as_chunks::<4>();
        for (q, (k, &quad_words)) in keep.iter().zip(quad_words).enumerate() {
            if u32::from_ne_bytes(*k) == 0 {
                continue;
            }
            let at = 4 * q;
            let n = (row.len() - at).min(4);
            // Lanes past the row are ignored (as `quads` leaves them, 0 scaled).
            let tgt: [f32; 4] = core::array::from_fn(|l| if l < n { tgt[at + l] } else { 0.0 });
            // log(p − q) <= log p = tgt − lse_t.
            let a = tgt.map(|v| v - lse_t);
            let res = |l: usize| {
                let qv = draft.get(at + l).map_or(0.0, |v| v.to_f32());
                ln_residual(a[l], simd::kept_scaled(sampler, qv, tau_q) - lse_q)
            };
            best = sampler.fold_resample_drawn(best, first + at as u32, tgt, a, res, n as u32, || quad_words);
        }
    }
    best
}

/// The resample of a rejected one-hot draft: the target row without id
/// `rejected` (`< row.len()`). Every other id's residual score is its target
/// score, so the vectorised fold takes the row but the rejected id's quad,
/// which `fold_resample` takes; candidates combine in any order (a total
/// order), so the token is that of `fold_resample` over every quad.
fn resample_one_hot<T: Logit>(level: Level, sampler: &Sampler, row: &[T], rejected: usize) -> u32 {
    one_hot_candidates(level, sampler, 0, row, Some(rejected)).token()
}

/// [`resample_one_hot`]'s candidates over ids `base .. base + row.len()`
/// (`base % 4 == 0`, `row` their logits), `rejected` the rejected id's
/// place in `row` if it is one of them (else the residual's candidates are
/// the target's): a vocabulary shard's part of the resample.
pub(super) fn one_hot_candidates<T: Logit>(
    level: Level,
    sampler: &Sampler,
    base: u32,
    row: &[T],
    rejected: Option<usize>,
) -> Resampled {
    // An empty range is skipped: after a ragged last quad, `lo` is not a multiple of 4.
    let fold = |best, lo: usize, hi: usize| {
        if lo == hi { best } else { simd::fold(level, sampler, best, base + lo as u32, &row[lo..hi]).0 }
    };
    let Some(rejected) = rejected else {
        let all = fold(ArgMax::IDENTITY, 0, row.len());
        return Resampled { residual: all, target: all };
    };
    let at = rejected / 4 * 4;
    let end = (at + 4).min(row.len());
    let rest = fold(fold(ArgMax::IDENTITY, 0, at), end, row.len());
    let (_, t, n) = quads(&row[at..end]).next().expect("the rejected id is in the row");
    let tgt = t.map(|v| sampler.scaled(v));
    let res = |l: usize| if at + l == rejected { f32::NEG_INFINITY } else { tgt[l] };
    let quad = sampler.fold_resample(Resampled::IDENTITY, base + at as u32, tgt, tgt, res, n);
    Resampled { residual: rest.combine(quad.residual), target: rest.combine(quad.target) }
}

/// Every request, in order on this thread, or spread over rayon's current
/// pool when [`super::parallel`] says so. Requests are independent, so both
/// give the same outputs; in parallel each request gets its own rows of the
/// row status, split off in order (the offsets increase).
fn verify<T: Logit + Sync, C: Logit + Sync>(
    args: &RejectionSample<'_, Host>,
    target: &[T],
    draft: Option<&[C]>,
    out: &mut RejectionOutput<'_, Host>,
) {
    let level = Level::detect();
    let requests = args.slots.len();
    let rows_of = |r: usize| args.offsets[r] as usize..args.offsets[r + 1] as usize;
    let verdict = |r: usize, status: Option<&mut [u32]>| verify_request(args, target, draft, level, r, status);
    if super::parallel(requests, args.target.rows * args.target.vocab) {
        let mut rest = out.row_status.as_deref_mut();
        let statuses: Vec<Option<&mut [u32]>> = (0..requests)
            .map(|r| {
                let (mine, tail) = rest.take()?.split_at_mut(rows_of(r).len());
                rest = Some(tail);
                Some(mine)
            })
            .collect();
        let mut verdicts = Vec::with_capacity(requests);
        statuses.into_par_iter().enumerate().map(|(r, status)| verdict(r, status)).collect_into_vec(&mut verdicts);
        for (r, &v) in verdicts.iter().enumerate() {
            write_request(args, out, r, v);
        }
        request_logprobs(args, target, &verdicts, &mut out.logprobs);
    } else {
        let mut verdicts = Vec::with_capacity(requests);
        for r in 0..requests {
            let status = out.row_status.as_deref_mut().map(|s| &mut s[rows_of(r)]);
            let v = verdict(r, status);
            write_request(args, out, r, v);
            verdicts.push(v);
        }
        request_logprobs(args, target, &verdicts, &mut out.logprobs);
    }
}

/// The log-probabilities of each request's emitted tokens (REFERENCE §8),
/// each under its target row: accepted drafts, then the resampled or bonus
/// token; positions past them NaN and `-1`.
fn request_logprobs<T: Logit + Sync>(
    args: &RejectionSample<'_, Host>,
    target: &[T],
    verdicts: &[Verdict],
    out: &mut Logprobs<'_, Host>,
) {
    if out.is_none() {
        return;
    }
    let k1 = args.max_drafts + 1;
    for (r, v) in verdicts.iter().enumerate() {
        for i in v.j + 1..k1 {
            logprobs::past(out, r * k1 + i);
        }
    }
    let parallel = super::parallel(verdicts.len(), args.target.rows * args.target.vocab);
    logprobs::write(out, verdicts.len() * k1, parallel, |at| {
        let (r, i, Verdict { j, last }) = (at / k1, at % k1, verdicts[at / k1]);
        if i > j {
            return None;
        }
        let row = args.offsets[r] as usize + i;
        let token = if i < j { args.drafts[row] as u32 } else { last };
        let slot = args.slots[r];
        let (temperature, filter) = if slot >= 0 {
            (args.params.temperature[slot as usize], args.params.filters.slot(slot as usize))
        } else {
            (0.0, Filter::OFF)
        };
        let start = row * args.target.row_stride;
        Some(Emitted { values: &target[start..start + args.target.vocab], temperature, filter, token })
    });
}

/// What request `r` emits: its accepted drafts `j` and the token after them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Verdict {
    pub j: usize,
    pub last: u32,
}

/// Verifies request `r`, writing its rows' statuses to `status` (the
/// request's own rows of the row status, if the call has one).
fn verify_request<T: Logit, C: Logit>(
    args: &RejectionSample<'_, Host>,
    target: &[T],
    draft: Option<&[C]>,
    level: Level,
    r: usize,
    status: Option<&mut [u32]>,
) -> Verdict {
    let (o0, o1) = (args.offsets[r] as usize, args.offsets[r + 1] as usize);
    let n = o1 - o0 - 1;
    let slot = args.slots[r];
    let (t, seed, target_filter, draft_filter) = if slot >= 0 {
        let slot = slot as usize;
        let draft_filter = args.draft_logits.as_ref().map_or(Filter::OFF, |d| d.filters.slot(slot));
        (args.params.temperature[slot], args.params.seed[slot], args.params.filters.slot(slot), draft_filter)
    } else {
        (0.0, 0, Filter::OFF, Filter::OFF)
    };
    let sampler = Sampler::new(t, seed, 0, Stream::Target);
    let req = Request { args, target, draft, row0: o0, slot, sampler, target_filter, draft_filter, level };
    let greedy = req.sampler.greedy;

    if let Some(status) = status {
        for (i, s) in status.iter_mut().enumerate() {
            let nan = req.target_row(i).iter().any(|x| x.to_f32().is_nan());
            *s = if nan { NAN_LOGITS } else { 0 };
        }
    }

    if args.verification == Verification::Block && !greedy {
        return req.verify_block(n);
    }
    // Walk the drafts; stop at the first placeholder or rejection.
    let mut j = n;
    let mut rejected = None;
    for i in 0..n {
        let d = args.drafts[o0 + i];
        if d == -1 {
            j = i;
            break;
        }
        let synthetic = |i: usize| match args.verification {
            Verification::Synthetic(rates) => Some(below(req.accept_word(i), f64::from(rates[i]))),
            _ => None,
        };
        if greedy {
            // The argmax is found as for a real call, whatever decides.
            let best = req.argmax(i);
            if !synthetic(i).unwrap_or(d as u32 == best) {
                j = i;
                break;
            }
            continue;
        }
        // A random row's distributions, kept for the resample if it rejects.
        let dists = req.dists(i);
        if !synthetic(i).unwrap_or_else(|| req.accepts(i, d as usize, &dists)) {
            (j, rejected) = (i, Some(Rejected { id: d as usize, dists }));
            break;
        }
    }
    let last = if greedy { req.argmax(j) } else { req.resample(j, rejected) };
    Verdict { j, last }
}

/// Request `r`'s tokens, emitted count and accepted count.
pub(super) fn write_request(
    args: &RejectionSample<'_, Host>,
    out: &mut RejectionOutput<'_, Host>,
    r: usize,
    v: Verdict,
) {
    let (k1, o0, Verdict { j, last }) = (args.max_drafts + 1, args.offsets[r] as usize, v);
    let row = |i: usize| -> i64 {
        match i {
            i if i < j => args.drafts[o0 + i] as i64,
            i if i == j => last as i64,
            _ => -1,
        }
    };
    match &mut out.tokens {
        Tokens::I32(tok) => (0..k1).for_each(|i| tok[r * k1 + i] = row(i) as i32),
        Tokens::I64(tok) => (0..k1).for_each(|i| tok[r * k1 + i] = row(i)),
    }
    out.num_emitted[r] = j as i32 + 1;
    if let Some(a) = out.accepted.as_mut() {
        a[r] = j as i32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_core::gumbel::gumbel;
    use specdec_core::rng::random_u32;

    /// A row's `τ` where it is kept whole.
    const NO_TAU: f32 = f32::NEG_INFINITY;

    /// Target rows of `n` logits for the resample tests: spread, far apart,
    /// tied, with NaN and ±inf, all NaN, all `-inf`.
    fn target_rows(n: usize) -> [(&'static str, Vec<f32>); 6] {
        let word = |salt: u64, i: usize| random_u32(salt, i as u64, Stream::Accept, 0);
        let normal = |i: usize| (word(n as u64, i) as f32 / 4_294_967_296.0 - 0.5) * 6.0;
        [
            ("spread", (0..n).map(normal).collect()),
            ("peaked", (0..n).map(|i| normal(i) * 40.0).collect()),
            ("few levels", (0..n).map(|i| (word(7, i) % 3) as f32).collect()),
            (
                "nan, ±inf",
                (0..n)
                    .map(|i| match word(9, i) % 6 {
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 => f32::INFINITY,
                        _ => normal(i),
                    })
                    .collect(),
            ),
            ("all nan", vec![f32::NAN; n]),
            ("all -inf", vec![f32::NEG_INFINITY; n]),
        ]
    }

    /// The one-hot resample equals `fold_resample` over every quad (what the
    /// kernels compute) on every level, wherever the rejected id sits, on
    /// rows with ties, NaN, ±inf and nothing but the rejected id alive.
    #[test]
    fn one_hot_resample_is_the_quad_fold() {
        for n in [1usize, 3, 4, 5, 17, 64, 129, 1000, 4097] {
            let rows = target_rows(n);
            for (what, row) in &rows {
                for rejected in [0, n / 2, n - 1, (n - 1) / 4 * 4] {
                    // Only the rejected id alive: the residual is empty and the target decides.
                    let mut lonely = vec![f32::NEG_INFINITY; n];
                    lonely[rejected] = 1.0;
                    for (what, row) in [(*what, row), ("only the rejected id alive", &lonely)] {
                        for (t, seed) in [(0.6f32, 1u64), (1.0, u64::MAX), (1.5, 0x5eed)] {
                            let s = Sampler::new(t, seed, 42, Stream::Target);
                            let mut want = Resampled::IDENTITY;
                            for (x, v, k) in quads(row.as_slice()) {
                                let tgt = v.map(|y| s.scaled(y));
                                let res =
                                    |l: usize| if x as usize + l == rejected { f32::NEG_INFINITY } else { tgt[l] };
                                want = s.fold_resample(want, x, tgt, tgt, res, k);
                            }
                            for &level in Level::ALL.iter().filter(|l| l.supported()) {
                                let got = resample_one_hot(level, &s, row, rejected);
                                assert_eq!(got, want.token(), "{what}, n {n}, rejected {rejected}, T {t}, {level:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The old draft-mode resample: `fold_resample` per quad, each quad's
    /// words drawn as it is folded (the kernels' fold).
    fn resample_draft_by_quads<C: Logit>(s: &Sampler, row: &[f32], draft: &[C], lse_t: f32, lse_q: f32) -> u32 {
        let mut best = Resampled::IDENTITY;
        for (q, (x, t, n)) in quads(row).enumerate() {
            let tgt = t.map(|v| s.scaled(v));
            let a = tgt.map(|v| v - lse_t);
            let res = |l: usize| {
                let qv = draft.get(4 * q + l).map_or(0.0, |v| v.to_f32());
                ln_residual(a[l], s.scaled(qv) - lse_q)
            };
            best = s.fold_resample(best, x, tgt, a, res, n);
        }
        best.token()
    }

    /// The draft-mode resample equals `fold_resample` over every quad on
    /// every level, for f32 and bf16 drafts, on ragged rows with ties, NaN
    /// and ±inf, with drafts equal to the target (a residual empty but for
    /// rounding), above it everywhere (empty: the target decides), or apart.
    #[test]
    fn draft_resample_is_the_quad_fold() {
        use specdec_core::dtype::{Bf16, Element};
        let word = |salt: u64, i: usize| random_u32(salt, i as u64, Stream::Accept, 0);
        for n in [1usize, 3, 4, 5, 17, 64, 129, 1000, 4097] {
            let normal = |salt: u64, i: usize| (word(salt + n as u64, i) as f32 / 4_294_967_296.0 - 0.5) * 6.0;
            let targets = target_rows(n);
            for (what, row) in &targets {
                let drafts: [(&str, Vec<f32>, f32); 4] = [
                    // lse_q offset: 0 for the draft's own, -1 puts q above p everywhere.
                    ("draft = target", row.clone(), 0.0),
                    ("draft above the target", row.clone(), -1.0),
                    ("draft apart", (0..n).map(|i| normal(1000, i)).collect(), 0.0),
                    ("draft near", row.iter().enumerate().map(|(i, &x)| x + 0.3 * normal(2000, i)).collect(), 0.0),
                ];
                for (how, draft, shift) in &drafts {
                    for (t, seed, pos) in [(0.6f32, 1u64, 42u64), (1.0, u64::MAX, 7), (1.5, 0x5eed, u64::MAX - 3)] {
                        let s = Sampler::new(t, seed, pos, Stream::Target);
                        let lse_t = simd::lse(Level::Scalar, &s, row.as_slice());
                        let lse_q = simd::lse(Level::Scalar, &s, draft.as_slice()) + shift;
                        let bf: Vec<Bf16> = draft.iter().map(|&x| Bf16::from_f32(x)).collect();
                        let lse_bf = simd::lse(Level::Scalar, &s, bf.as_slice()) + shift;
                        let want = resample_draft_by_quads(&s, row, draft, lse_t, lse_q);
                        let want_bf = resample_draft_by_quads(&s, row, &bf, lse_t, lse_bf);
                        for &level in Level::ALL.iter().filter(|l| l.supported()) {
                            let got = resample_draft(
                                level,
                                &s,
                                row.as_slice(),
                                draft.as_slice(),
                                (lse_t, NO_TAU),
                                (lse_q, NO_TAU),
                            );
                            let ctx = format!("{what}, {how}, n {n}, T {t}, seed {seed}, pos {pos}, {level:?}");
                            assert_eq!(got, want, "f32 draft: {ctx}");
                            let got = resample_draft(
                                level,
                                &s,
                                row.as_slice(),
                                bf.as_slice(),
                                (lse_t, NO_TAU),
                                (lse_bf, NO_TAU),
                            );
                            assert_eq!(got, want_bf, "bf16 draft: {ctx}");
                        }
                    }
                }
            }
        }
    }

    /// The resample masking the rows as it reads them, and the one over a
    /// listed kept set's quads alone (with draft logits, and one-hot), give
    /// the token of the resample over masked copies of the rows (the
    /// kernels' fold), for filtered and unfiltered drafts, on rows with
    /// ties, NaN and ±inf, with NaN draft values inside and outside the
    /// target's kept set.
    #[test]
    fn filtered_resamples_are_the_masked_fold() {
        let word = |salt: u64, i: usize| random_u32(salt, i as u64, Stream::Accept, 0);
        let filters = [
            Filter { top_k: 1, ..Filter::OFF },
            Filter { top_k: 2, ..Filter::OFF },
            Filter { top_k: 20, ..Filter::OFF },
            Filter { top_k: 50, top_p: 0.9, ..Filter::OFF },
            Filter { min_p: 0.3, ..Filter::OFF },
            Filter { top_p: 0.2, ..Filter::OFF },
        ];
        let (mut listed, mut unlisted) = (0, 0);
        for n in [1usize, 5, 64, 999, 4097, 9000] {
            for (what, row) in &target_rows(n) {
                let draft: Vec<f32> = (0..n)
                    .map(|i| match word(11, i) % 50 {
                        0 => f32::NAN,
                        _ => row[i] * 0.8 + (word(12, i) as f32 / 4_294_967_296.0 - 0.5) * 2.0,
                    })
                    .collect();
                for filter in filters {
                    for draft_filter in [Filter::OFF, filter] {
                        for (t, seed, pos) in [(0.6f32, 1u64, 42u64), (1.5, 0x5eed, u64::MAX - 3)] {
                            let s = Sampler::new(t, seed, pos, Stream::Target);
                            let dist = |values: &[f32], f: Filter| {
                                if f.is_off(n) {
                                    Dist::Full { lse: simd::lse(Level::Scalar, &s, values) }
                                } else {
                                    let kept = kept(Level::Scalar, &s, values, f);
                                    Dist::Kept { lse: kept.lse(Level::Scalar, &s, values), kept }
                                }
                            };
                            let (dp, dq) = (dist(row, filter), dist(&draft, draft_filter));
                            let ctx = format!("{what}, n {n}, {filter:?}, draft {draft_filter:?}, T {t}");
                            let (p, q) = (dp.row(&s, row.as_slice()), dq.row(&s, draft.as_slice()));
                            let want =
                                resample_draft(Level::Scalar, &s, &p, &q, (dp.lse(), NO_TAU), (dq.lse(), NO_TAU));
                            for &level in Level::ALL.iter().filter(|l| l.supported()) {
                                let (lt, lq) = ((dp.lse(), dp.tau()), (dq.lse(), dq.tau()));
                                let got = resample_draft(level, &s, row.as_slice(), draft.as_slice(), lt, lq);
                                assert_eq!(got, want, "masked as read, {level:?}: {ctx}");
                            }
                            match &dp {
                                Dist::Kept { kept: Kept { ids: Some(ids), .. }, lse } => {
                                    listed += 1;
                                    let got =
                                        resample_listed_draft(&s, row.as_slice(), draft.as_slice(), ids, *lse, &dq);
                                    assert_eq!(got, want, "listed: {ctx}");
                                    // One-hot, rejecting an id of `S`, the first id, the last.
                                    for rejected in [ids[ids.len() / 2] as usize, 0, n - 1] {
                                        let want = resample_one_hot(Level::Scalar, &s, &p, rejected);
                                        let got = resample_listed_one_hot(&s, row.as_slice(), ids, rejected);
                                        assert_eq!(got, want, "listed one-hot, rejected {rejected}: {ctx}");
                                    }
                                }
                                Dist::Kept { .. } => unlisted += 1,
                                Dist::Full { .. } => {}
                            }
                        }
                    }
                }
            }
        }
        assert!(listed > 200 && unlisted > 10, "kept sets listed {listed}, not listed {unlisted}");
    }

    /// The pre-screen keeps a residual winner that is far behind on its
    /// weight and wins by its noise alone, blocks after the running best,
    /// while the target's candidate (an id the draft covers) is far ahead:
    /// with a word just below the top bucket (noise near `COARSE_BOUND`) and
    /// with one in it (noise far above).
    #[test]
    fn a_residual_winner_by_noise_alone_is_kept() {
        let s = Sampler::new(1.0, 13, 8, Stream::Target);
        let n = 1usize << 16;
        let word = |i: usize| random_u32(s.seed, s.pos, s.stream, i as u32);
        for top in [false, true] {
            let ids = (DRAFT_BLOCK..n).filter(|&i| (word(i) >= TOP_BUCKET) == top);
            let t = ids.max_by_key(|&i| word(i)).expect("the key has such words");
            let (g1, gt) = (gumbel(word(1)), gumbel(word(t)));
            assert!(gt > COARSE_BOUND - 0.1, "the key gives a winner by noise ({t}: {gt})");
            // Id 0 leads the target and has no residual (q >= p); id 1 leads
            // the residual until id t beats it by 0.01; every other id is hopeless.
            let mut row = vec![-1000.0f32; n];
            (row[0], row[1], row[t]) = (30.0, 0.0, g1 - gt + 0.01);
            let mut draft = vec![f32::NEG_INFINITY; n];
            draft[0] = 30.0;
            let lse_t = simd::lse(Level::Scalar, &s, row.as_slice());
            let lse_q = simd::lse(Level::Scalar, &s, draft.as_slice());
            assert_eq!(resample_draft_by_quads(&s, &row, &draft, lse_t, lse_q), t as u32, "top bucket: {top}");
            for &level in Level::ALL.iter().filter(|l| l.supported()) {
                let got = resample_draft(level, &s, row.as_slice(), draft.as_slice(), (lse_t, NO_TAU), (lse_q, NO_TAU));
                assert_eq!(got, t as u32, "{level:?}, top bucket: {top}");
            }
        }
    }
}
