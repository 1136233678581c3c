//! The `rejection_sample` call (SPEC §4): its arguments and the checks every
//! backend runs before verifying.

use crate::error::{Error, Result};
use crate::logprobs::Logprobs;
use crate::memory::{Host, Memory};
use crate::params::SamplingParams;
use crate::tensor::{DraftLogits, Logits, TokenId, Tokens, ViewMut, check_len};
use specdec_core::status;

/// Largest `max_drafts` (K) a call may use.
pub const MAX_DRAFTS: usize = 1 << 16;

/// Verify each request's drafts against the target, exactly (SPEC §4).
///
/// Request `r` owns target rows `offsets[r] .. offsets[r+1]`: one row per
/// draft, then its bonus row, so it has `n_r = offsets[r+1] − offsets[r] − 1`
/// drafts (`0 ..= max_drafts`). The target logits are raw (the kernel divides
/// by `T`); the draft logits, when given, are the raw logits `gumbel_sample`
/// stored: draft `i` of a request is column `i` of its slot. Everything here is read.
pub struct RejectionSample<'a, M: Memory> {
    /// `[rows, >= vocab]`, after the caller's logits processors, before temperature.
    pub target: Logits<'a, M>,
    /// `i32 [requests + 1]`: row offsets, `offsets[0] = 0`, increasing, `offsets[requests] = rows`.
    pub offsets: M::Ref<'a, i32>,
    /// `i32 [rows]`: the draft proposed at each draft row (`-1` placeholder:
    /// verification stops there and samples the target); bonus rows' entries are ignored.
    pub drafts: M::Ref<'a, i32>,
    /// `i32 [requests]`: each request's slot (`-1`: a greedy padding request).
    pub slots: M::Ref<'a, i32>,
    /// `u64 [rows]`: the absolute position of each row's input token.
    pub pos: M::Ref<'a, u64>,
    pub params: SamplingParams<'a, M>,
    /// `K`: the most drafts any request has in this call.
    pub max_drafts: usize,
    /// How the drafts are accepted: draft by draft, as a block, or at given rates.
    pub verification: Verification<'a>,
    /// The draft model's logits, or `None` for one-hot drafts (`q = onehot(d)`).
    pub draft_logits: Option<DraftLogits<'a, M>>,
}

/// How `rejection_sample` decides how many of a request's drafts to accept
/// (REFERENCE §4.3, §4.11, §4.12). `Token` and `Block` are exact: every
/// emitted token follows the target; greedy requests accept the drafts that
/// are their rows' argmax under either. `Synthetic` is not: it is for
/// benchmarking a deployment at chosen acceptance rates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Verification<'a> {
    /// Draft by draft (SPEC §4): each draft is tested on its own and the
    /// first rejection stops the request.
    #[default]
    Token,
    /// Block verification (Sun et al., ICLR 2025): the drafts tested
    /// jointly, accepting at least as many in expectation as [`Verification::Token`].
    Block,
    /// Synthetic acceptance, **not exact**: draft `i` of every request
    /// (greedy or not) is accepted iff its acceptance uniform is below
    /// `rates[i]` (`f32 [max_drafts]`, each in `[0, 1]`: the chance of
    /// accepting draft `i` once drafts `0..i` are), whatever the target says;
    /// the token after the accepted drafts is drawn as for `Token`. The rows
    /// are read as by a real call, so it costs what one costs:
    /// for benchmarking a deployment before its drafter exists.
    /// [`synthetic_rates`] gives the rates of a mean number of accepted drafts.
    Synthetic(&'a [f32]),
}

/// The constant rates `c` of [`Verification::Synthetic`] under which a
/// request of `max_drafts` drafts accepts `mean_accepted` of them on average
/// (`Σ_{i=1..K} c^i`), `mean_accepted` in `0 ..= max_drafts` (clamped).
pub fn synthetic_rates(mean_accepted: f64, max_drafts: usize) -> Vec<f32> {
    let k = max_drafts as f64;
    let target = mean_accepted.clamp(0.0, k);
    let mean = |c: f64| (1..=max_drafts).map(|i| c.powi(i as i32)).sum::<f64>();
    // The mean grows with c from 0 to K: bisect to f32 resolution.
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if mean(mid) < target { lo = mid } else { hi = mid }
    }
    vec![(0.5 * (lo + hi)) as f32; max_drafts]
}

/// What `rejection_sample` writes.
#[non_exhaustive]
pub struct RejectionOutput<'a, M: Memory> {
    /// `[requests, max_drafts + 1]`: accepted drafts, then the resampled or
    /// bonus token, then `-1`. An invalid request (device-side check) is all `-1`.
    pub tokens: Tokens<'a, M>,
    /// `i32 [requests]`: tokens emitted, accepted drafts + 1 (`0` for an invalid request).
    pub num_emitted: M::Mut<'a, i32>,
    /// `i32 [requests]`: accepted drafts.
    pub accepted: Option<M::Mut<'a, i32>>,
    /// `u32 [rows]`: each row's `specdec_core::status` flags; `NAN_LOGITS`
    /// marks a row that is not valid (it held a NaN). Rows of invalid
    /// requests are not written.
    pub row_status: Option<M::Mut<'a, u32>>,
    /// Log-probabilities of the emitted tokens (REFERENCE §8; positions:
    /// `[requests, max_drafts + 1]`, as `tokens`).
    pub logprobs: Logprobs<'a, M>,
}

impl<'a, M: Memory> RejectionOutput<'a, M> {
    /// The tokens (`i32` or `i64 [requests, max_drafts + 1]`) and the count
    /// each request emitted (`i32 [requests]`).
    pub fn new<B, N>(tokens: B, num_emitted: N) -> Self
    where
        B: ViewMut<'a, Memory = M>,
        B::Elem: TokenId,
        N: ViewMut<'a, Memory = M, Elem = i32>,
    {
        Self::from_parts(Tokens::new(tokens), num_emitted.view_mut())
    }

    /// The tokens, as a dtype-tagged buffer, and the counts (for code generic over [`Memory`]).
    pub fn from_parts(tokens: Tokens<'a, M>, num_emitted: M::Mut<'a, i32>) -> Self {
        RejectionOutput { tokens, num_emitted, accepted: None, row_status: None, logprobs: Logprobs::none() }
    }

    /// Also each request's accepted drafts (`i32 [requests]`).
    #[must_use]
    pub fn with_accepted<B: ViewMut<'a, Memory = M, Elem = i32>>(self, accepted: B) -> Self {
        RejectionOutput { accepted: Some(accepted.view_mut()), ..self }
    }

    /// Also each row's status flags (`u32 [rows]`).
    #[must_use]
    pub fn with_row_status<B: ViewMut<'a, Memory = M, Elem = u32>>(self, row_status: B) -> Self {
        RejectionOutput { row_status: Some(row_status.view_mut()), ..self }
    }

    /// Also log-probabilities of the emitted tokens.
    #[must_use]
    pub fn with_logprobs(self, logprobs: Logprobs<'a, M>) -> Self {
        RejectionOutput { logprobs, ..self }
    }
}

/// The validated shape of a call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RejectionShape {
    pub rows: usize,
    pub requests: usize,
    pub num_slots: usize,
}

impl<M: Memory> RejectionSample<'_, M> {
    /// Shape, length and stride checks: everything the host knows without
    /// reading buffer contents.
    pub(crate) fn check(&self, out: &RejectionOutput<'_, M>) -> Result<RejectionShape> {
        self.target.check()?;
        let rows = self.target.rows;
        let num_slots = self.params.check()?;
        let requests = M::len(&self.slots);
        if self.max_drafts > MAX_DRAFTS {
            return Err(Error::MaxDrafts { max_drafts: self.max_drafts, max: MAX_DRAFTS });
        }
        check_len("offsets", requests + 1, M::len(&self.offsets))?;
        check_len("drafts", rows, M::len(&self.drafts))?;
        check_len("positions", rows, M::len(&self.pos))?;
        check_len("tokens", requests * (self.max_drafts + 1), out.tokens.len())?;
        check_len("num_emitted", requests, M::len_mut(&out.num_emitted))?;
        if let Some(a) = &out.accepted {
            check_len("accepted", requests, M::len_mut(a))?;
        }
        if let Some(s) = &out.row_status {
            check_len("row status", rows, M::len_mut(s))?;
        }
        out.logprobs.check(requests * (self.max_drafts + 1))?;
        if let Verification::Synthetic(rates) = self.verification {
            check_len("synthetic rates", self.max_drafts, rates.len())?;
            if let Some((position, &value)) = rates.iter().enumerate().find(|(_, r)| !(0.0..=1.0).contains(*r)) {
                return Err(Error::InvalidRate { position, value });
            }
        }
        if let Some(d) = &self.draft_logits {
            d.shape.check(d.data.len(), self.target.vocab, num_slots)?;
            d.filters.check(num_slots)?;
            if d.shape.k < self.max_drafts {
                return Err(Error::DraftColumns { k: d.shape.k, max_drafts: self.max_drafts });
            }
        }
        Ok(RejectionShape { rows, requests, num_slots })
    }
}

impl RejectionSample<'_, Host> {
    /// The checks the kernels make on device-resident values, made on the host
    /// where the values live there; the offsets first, whole.
    pub(crate) fn check_values(&self, shape: RejectionShape) -> Result<()> {
        self.check_values_of(shape, self.target.vocab)
    }

    /// [`RejectionSample::check_values`] for rows of `vocab` ids (a sharded
    /// call's rows are wider than the rank's logits).
    pub(crate) fn check_values_of(&self, shape: RejectionShape, vocab: usize) -> Result<()> {
        self.check_offsets(shape)?;
        for r in 0..shape.requests {
            let (o0, o1) = (self.offsets[r], self.offsets[r + 1]);
            let slot = self.slots[r];
            if slot != -1 {
                if slot < 0 || slot as usize >= shape.num_slots {
                    return Err(Error::InvalidSlot { row: r, slot, num_slots: shape.num_slots });
                }
                let t = self.params.temperature[slot as usize];
                if !status::temperature_is_valid(t) {
                    return Err(Error::InvalidTemperature { slot: slot as usize, value: t });
                }
                self.params.filters.check_slot(slot as usize, false)?;
                if let Some(d) = &self.draft_logits {
                    d.filters.check_slot(slot as usize, true)?;
                }
            }
            for row in o0 as usize..o1 as usize - 1 {
                let d = self.drafts[row];
                if d < -1 || d >= 0 && d as usize >= vocab {
                    return Err(Error::InvalidDraft { row, token: d, vocab });
                }
            }
        }
        Ok(())
    }

    /// The offset rules (`offsets[0] = 0`, increasing, at most `max_drafts`
    /// drafts a request, `offsets[requests] = rows`), entry by entry from
    /// the first: the error names the first entry that breaks one.
    fn check_offsets(&self, shape: RejectionShape) -> Result<()> {
        let (offsets, rows, k) = (self.offsets, shape.rows as i64, self.max_drafts as i64);
        let bad = |entry: usize, detail: String| Err(Error::InvalidOffsets { entry, detail });
        if offsets[0] != 0 {
            return bad(0, format!("entry 0 is {}, expected 0", offsets[0]));
        }
        for (r, pair) in offsets.windows(2).enumerate() {
            let (start, end) = (pair[0] as i64, pair[1] as i64);
            if end <= start {
                return bad(
                    r + 1,
                    format!(
                        "entry {} is {end}, expected more than entry {r} ({start}): offsets increase, \
                         each request has at least its bonus row",
                        r + 1
                    ),
                );
            }
            if end > rows {
                return bad(r + 1, format!("entry {} is {end}, expected at most {rows} (the target's rows)", r + 1));
            }
            let drafts = end - start - 1;
            if drafts > k {
                let plural = if drafts == 1 { "" } else { "s" };
                return bad(
                    r + 1,
                    format!("request {r} (rows {start}..{end}) has {drafts} draft{plural}, more than max_drafts = {k}"),
                );
            }
        }
        let last = shape.requests;
        if offsets[last] as i64 != rows {
            return bad(
                last,
                format!("entry {last} (the last) is {}, expected {rows} (the target's rows)", offsets[last]),
            );
        }
        Ok(())
    }
}
