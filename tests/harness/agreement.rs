//! CPU/GPU agreement of `rejection_sample` (SPEC §2.5): both backends give
//! the same outputs, except where a decision sits so close to its threshold
//! that their differently ordered log-sum-exps may decide it differently.
//! The margins are recomputed here in f64 from the logits, over the kept
//! sets when the call filters (SPEC §7.2, `filters::filtered_log_probs`).

use crate::drafting::{draft_row, target_row};
use crate::filters::filtered_log_probs;
use crate::verify::{Verified, Verify};
use specdec::noise::{exponential, gumbel};
use specdec::rng::{Stream, random_u32};

/// Decisions and resample scores within this of their threshold may come out
/// differently on the two backends (SPEC §4: the log-sum-exps are summed in
/// different orders, so they differ in their last bits).
pub const NEAR: f64 = 1e-5;
/// The largest tolerated fraction of near-threshold decisions: about `2·NEAR`
/// of decisions land there by chance; more means the comparison hides drift.
pub const MAX_NEAR_RATE: f64 = 1e-4;
/// Fewest decisions the comparison must see for that rate to mean anything.
pub const MIN_DECISIONS: usize = 50_000;

/// `log p'(x)` of target row `j` and `log q'(x)` of draft column `i` (none:
/// one-hot) of request `r`, with the request's slot's filters.
fn log_pq(v: &Verify, r: usize, i: usize) -> (Vec<f64>, Option<Vec<f64>>) {
    let (j, slot) = (v.offsets[r] as usize + i, v.slots[r]);
    let t = v.temperature[slot as usize];
    let log_p = filtered_log_probs(&target_row(v, j), t, v.filters.slot(slot as usize));
    let log_q = draft_row(v, slot, i).map(|q| filtered_log_probs(&q, t, v.draft_filters.slot(slot as usize)));
    (log_p, log_q)
}

/// `log u + log q(d) − log p(d)` of draft `i` of request `r`, in f64 from
/// the logits (accept iff negative).
pub fn margin(v: &Verify, r: usize, i: usize) -> f64 {
    let j = v.offsets[r] as usize + i;
    let (slot, d) = (v.slots[r] as usize, v.drafts[j] as usize);
    let log_u = -f64::from(exponential(random_u32(v.seed[slot], v.pos[j], Stream::Accept, 0)));
    let (log_p, log_q) = log_pq(v, r, i);
    log_u + log_q.map_or(0.0, |q| q[d]) - log_p[d]
}

/// The residual Gumbel-max scores `log(p − q)(x) + g(x)` of the ids `xs` at
/// draft `i` of request `r`, in f64 (none for one-hot drafts, whose residual
/// involves no sum).
pub fn residual_scores(v: &Verify, r: usize, i: usize, xs: [usize; 2]) -> Option<[f64; 2]> {
    weighted_residual_scores(v, r, i, 1.0, xs)
}

/// A block-verified request (REFERENCE §4.11) recomputed in f64 from the
/// logits: the block's length `n` (drafts before the first placeholder), its
/// weights `w_0 … w_n`, the `τ` the rule gives, and each decision's
/// relative distance to its threshold, `|u − h| / h`: the end test
/// (`u_{n−1}` against `w_n`, row `n`) and every row's stop test (`u_{i−1}`
/// against `h_i`, rows `n − 1` down to 1).
pub struct BlockDecisions {
    pub n: usize,
    pub weights: Vec<f64>,
    pub tau: usize,
    /// `(row, margin)`, the end test first.
    pub margins: Vec<(usize, f64)>,
}

impl BlockDecisions {
    /// Whether a decision at or above row `row` (row 1 at least: row 0 has
    /// none) is within [`NEAR`] of its threshold: where a backend's `τ` may
    /// differ from another `τ` no larger than `row`.
    pub fn near_at_or_above(&self, row: usize) -> bool {
        self.margins.iter().any(|&(at, m)| at >= row.max(1) && m < NEAR)
    }
}

/// [`BlockDecisions`] of sampling request `r` of `v`, none for a block of
/// no draft. Its own f64 arithmetic (`exp`, sums in order), apart from
/// the backends'.
pub fn block_decisions(v: &Verify, r: usize) -> Option<BlockDecisions> {
    let (row0, slot) = (v.offsets[r] as usize, v.slots[r] as usize);
    let n_r = (v.offsets[r + 1] - v.offsets[r] - 1) as usize;
    let n = (0..n_r).position(|i| v.drafts[row0 + i] == -1).unwrap_or(n_r);
    if n == 0 {
        return None;
    }
    let u =
        |i: usize| (f64::from(random_u32(v.seed[slot], v.pos[row0 + i], Stream::Accept, 0)) + 0.5) / 4_294_967_296.0;
    let rows: Vec<_> = (0..n).map(|i| log_pq(v, r, i)).collect();
    let mut weights = vec![1.0f64];
    for (i, (log_p, log_q)) in rows.iter().enumerate() {
        let d = v.drafts[row0 + i] as usize;
        let ratio = (log_p[d] - log_q.as_ref().map_or(0.0, |q| q[d])).exp();
        let w = weights[i] * ratio;
        weights.push(if w.is_nan() { 0.0 } else { w.min(1.0) });
    }
    let relative = |u: f64, h: f64| (u - h).abs() / h.max(f64::MIN_POSITIVE);
    let mut margins = vec![(n, relative(u(n - 1), weights[n]))];
    let mut tau = if u(n - 1) < weights[n] { Some(n) } else { None };
    for i in (1..n).rev() {
        let (w, (log_p, log_q)) = (weights[i], &rows[i]);
        let mass: f64 = match log_q {
            Some(q) => log_p.iter().zip(q).map(|(p, q)| (w * p.exp() - q.exp()).max(0.0)).sum(),
            None => w * (1.0 - log_p[v.drafts[row0 + i] as usize].exp()),
        };
        let d = mass + 1.0 - w;
        let h = if d > 0.0 { mass / d } else { 1.0 };
        margins.push((i, relative(u(i - 1), h)));
        if tau.is_none() && u(i - 1) < h {
            tau = Some(i);
        }
    }
    Some(BlockDecisions { n, weights, tau: tau.unwrap_or(0), margins })
}

/// The weighted residual's Gumbel-max scores `log(w·p − q)(x) + g(x)` of
/// the ids `xs` at row `i` of request `r` (weight `w`), in f64; none for
/// one-hot drafts, whose residual involves no sum.
fn weighted_residual_scores(v: &Verify, r: usize, i: usize, w: f64, xs: [usize; 2]) -> Option<[f64; 2]> {
    let j = v.offsets[r] as usize + i;
    let slot = v.slots[r] as usize;
    let (log_p, log_q) = log_pq(v, r, i);
    let log_q = log_q?;
    Some(xs.map(|x| {
        let res = (w * log_p[x].exp() - log_q[x].exp()).ln();
        res + f64::from(gumbel(random_u32(v.seed[slot], v.pos[j], Stream::Target, x as u32)))
    }))
}

/// [`compare`] for block verification: the outputs of `requests` of `v`
/// equal, except a sampling request whose `τ` differs where one of the
/// block's decisions at or above the smaller `τ` is within [`NEAR`] of its
/// threshold, or whose last token differs by a near-tie of its weighted
/// residual's scores. Counts every decision of the blocks and the near ones.
pub fn compare_blocks(
    v: &Verify,
    cpu: &Verified,
    gpu: &Verified,
    requests: &[usize],
    tally: &mut Agreement,
    ctx: &str,
) {
    assert_eq!(cpu.row_status, gpu.row_status, "{ctx}: row status");
    for (k, &r) in requests.iter().enumerate() {
        let block = if v.is_greedy(r) { None } else { block_decisions(v, r) };
        if let Some(b) = &block {
            tally.decisions += b.margins.len();
            tally.near += b.margins.iter().filter(|m| m.1 < NEAR).count();
        }
        if cpu.request(k) == gpu.request(k)
            && (cpu.num_emitted[k], cpu.accepted[k]) == (gpu.num_emitted[k], gpu.accepted[k])
        {
            continue;
        }
        let why = format!("{ctx}: request {r} (slot {}) cpu {:?} gpu {:?}", v.slots[r], cpu.request(k), gpu.request(k));
        let b = block.unwrap_or_else(|| panic!("{why}: greedy requests and blocks of no draft must agree exactly"));
        let (tc, tg) = (cpu.accepted[k].max(0) as usize, gpu.accepted[k].max(0) as usize);
        let near = if tc != tg {
            b.near_at_or_above(tc.min(tg))
        } else {
            let ids = [cpu.request(k)[tc] as usize, gpu.request(k)[tc] as usize];
            tc < b.n
                && weighted_residual_scores(v, r, tc, b.weights[tc], ids).is_some_and(|[a, c]| (a - c).abs() < NEAR)
        };
        assert!(near, "{why}: they differ at position {}, with no decision near its threshold", tc.min(tg));
        tally.near_mismatches += 1;
    }
}

/// Counts of a CPU/GPU comparison.
#[derive(Default, Debug)]
pub struct Agreement {
    pub decisions: usize,
    pub near: usize,
    pub near_mismatches: usize,
}

impl Agreement {
    /// Panics unless enough decisions were compared and few enough were near
    /// their thresholds.
    pub fn assert_rare_near(&self, min_decisions: usize) {
        assert!(self.decisions >= min_decisions, "{self:?}: too few decisions to bound the near-threshold rate");
        let rate = self.near as f64 / self.decisions as f64;
        assert!(rate < MAX_NEAR_RATE, "{self:?}: near-threshold rate {rate:.2e}");
    }
}

/// Request `r`'s tokens, counts and row statuses in `out`, for each `r` of
/// `requests` (as if they had been run alone, in that order).
pub fn pick(v: &Verify, out: &Verified, requests: &[usize]) -> Verified {
    let k1 = v.max_drafts + 1;
    Verified {
        tokens: requests.iter().flat_map(|&r| out.tokens[r * k1..(r + 1) * k1].to_vec()).collect(),
        num_emitted: requests.iter().map(|&r| out.num_emitted[r]).collect(),
        accepted: requests.iter().map(|&r| out.accepted[r]).collect(),
        row_status: requests
            .iter()
            .flat_map(|&r| out.row_status[v.offsets[r] as usize..v.offsets[r + 1] as usize].to_vec())
            .collect(),
    }
}

/// Compares GPU and CPU outputs of `requests` of `v` (output `k` is request
/// `requests[k]`): equal, except a request whose first differing decision is
/// near its threshold, or whose resampled token differs by a near-tie of
/// residual scores. Counts the CPU's decisions and the near-threshold ones.
pub fn compare(v: &Verify, cpu: &Verified, gpu: &Verified, requests: &[usize], tally: &mut Agreement, ctx: &str) {
    assert_eq!(cpu.row_status, gpu.row_status, "{ctx}: row status");
    for (k, &r) in requests.iter().enumerate() {
        let greedy = v.is_greedy(r);
        let (row0, n, acc) =
            (v.offsets[r] as usize, (v.offsets[r + 1] - v.offsets[r] - 1) as usize, cpu.accepted[k] as usize);
        if !greedy {
            for i in (0..n.min(acc + 1)).take_while(|&i| v.drafts[row0 + i] != -1) {
                tally.decisions += 1;
                tally.near += (margin(v, r, i).abs() < NEAR) as usize;
            }
        }
        if cpu.request(k) == gpu.request(k)
            && (cpu.num_emitted[k], cpu.accepted[k]) == (gpu.num_emitted[k], gpu.accepted[k])
        {
            continue;
        }
        let why = format!("{ctx}: request {r} (slot {}) cpu {:?} gpu {:?}", v.slots[r], cpu.request(k), gpu.request(k));
        assert!(!greedy, "{why}: greedy requests must agree exactly");
        let first = acc.min(gpu.accepted[k].max(0) as usize);
        let near = if acc != gpu.accepted[k] as usize {
            margin(v, r, first).abs() < NEAR
        } else {
            let ids = [cpu.request(k)[first] as usize, gpu.request(k)[first] as usize];
            residual_scores(v, r, first, ids).is_some_and(|[a, b]| (a - b).abs() < NEAR)
        };
        assert!(near, "{why}: they differ at position {first}, which is not near its threshold");
        tally.near_mismatches += 1;
    }
}
