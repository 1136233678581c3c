//! Building blocks of the `rejection_sample` suites (SPEC §4, §6):
//!
//! - the probabilities the backends really sample ([`probs`], [`log_probs`]);
//! - [`FixedPositions`]: many requests verifying drafts against one target and
//!   one draft model per position, the drafts sampled by the backend's own
//!   `gumbel_sample(drafting)` at the verification's `(seed, pos)`;
//! - [`random_verify`]: ragged random batches (mixed temperatures, padding,
//!   placeholders, strided draft logits of any dtype);
//! - request sub-batches ([`slice_requests`], [`select_requests`]), a
//!   multi-threaded CPU runner ([`run_split`]) and the target samples
//!   `gumbel_sample` gives each row ([`target_samples`]).

use crate::batch::{Batch, ColumnSpec, DraftLogitsSpec, Values};
use crate::filters::{FilterTable, filtered_probs};
use crate::inputs::{PAST_VOCAB, Rng, TEMPERATURES, first_argmax, histogram};
use crate::stats::{chi_square, softmax};
use crate::verify::{Verified, Verify};
use specdec::filter::Filter;
use specdec::{Backend, DType, DraftLogitsShape};
use std::ops::Range;

/// The factor the backends multiply logits by: `1/T` rounded to f32 (`1` when greedy).
pub fn scale(t: f32) -> f32 {
    if t == 0.0 { 1.0 } else { 1.0 / t }
}

/// `softmax(row / T)` in f64 at the temperature the backends really use (they
/// multiply by [`scale`]); `T = 0`: one-hot at the first argmax.
pub fn probs(row: &[f32], t: f32) -> Vec<f64> {
    if t == 0.0 { softmax(row, 0.0) } else { softmax(row, 1.0 / f64::from(scale(t))) }
}

/// `log p(x)` of every id: the scaled logits exactly as the backends round
/// them (`x · scale` in f32), normalised by a log-sum-exp taken in f64. NaN
/// counts as `-inf`, as in the backends' sums.
pub fn log_probs(row: &[f32], t: f32) -> Vec<f64> {
    let s = scale(t);
    let scaled: Vec<f64> = row.iter().map(|&x| if x.is_nan() { f64::NEG_INFINITY } else { f64::from(x * s) }).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return scaled;
    }
    let lse = max + scaled.iter().map(|&x| (x - max).exp()).sum::<f64>().ln();
    scaled.iter().map(|&x| x - lse).collect()
}

/// Zipf-like logits: id `x` of rank `k` (a random permutation, so the mass is
/// spread over the whole row) gets `-exponent · ln(k + 1)`; about one id in
/// `mask_every` (never one of the top 16 ranks) is `-inf`.
pub fn zipf_logits(vocab: usize, exponent: f32, mask_every: usize, salt: u64) -> Vec<f32> {
    let mut rng = Rng::new(salt);
    let mut rank: Vec<usize> = (0..vocab).collect();
    rng.shuffle(&mut rank);
    let mut logit = |k: usize| match k >= 16 && rng.below(mask_every) == 0 {
        true => f32::NEG_INFINITY,
        false => -exponent * ((k + 1) as f32).ln(),
    };
    rank.iter().map(|&k| logit(k)).collect()
}

/// A draft model for position `i`: the target plus uniform noise in `±noise`;
/// 1 in 4 of the target's masked ids becomes a finite (low) proposal, 1 in
/// 64 live ids is masked.
pub fn perturbed(i: usize, target: &[f32], noise: f32) -> Vec<f32> {
    let mut rng = Rng::new(0xD4AF7 + i as u64);
    target
        .iter()
        .map(|&t| match (t == f32::NEG_INFINITY, rng.below(64)) {
            (true, 0..=15) => rng.uniform(-9.0, -5.0),
            (true, _) | (false, 0) => f32::NEG_INFINITY,
            _ => t + rng.uniform(-noise, noise),
        })
        .collect()
}

/// Slots (each with its own seed) the requests of a [`FixedPositions`] batch
/// cycle through; requests sharing a slot differ by position.
pub const FIXED_SLOTS: usize = 4;

/// Requests that all verify `k` drafts against the same target logits at
/// each position `i` and propose drafts from the same draft model logits.
#[derive(Clone, Debug)]
pub struct FixedPositions {
    pub vocab: usize,
    pub k: usize,
    pub t: f32,
    pub requests: usize,
    /// The draft logits' dtype (of the drafting call's logits and of the
    /// buffer it fills).
    pub draft_dtype: DType,
    /// Verify one-hot (no draft logits): the verifier sees only the tokens.
    pub one_hot: bool,
    /// A distinct target per position (each a cyclic shift of the base row,
    /// `vocab % (k + 1) == 0`), else one broadcast row (row stride 0).
    pub distinct_targets: bool,
    /// Row `j` of the batch is at position `pos0 + j`.
    pub pos0: u64,
    pub seed: u64,
    /// Every slot's filters on the target (SPEC §7).
    pub target_filter: Filter,
    /// The filters the drafter samples with.
    pub draft_filter: Filter,
    /// The filters the verifier is told the drafts were sampled with: the
    /// drafter's, unless a test lies (the negative control of SPEC §7.3).
    pub declared_draft_filter: Filter,
}

/// A [`FixedPositions`] batch, built and drafted.
pub struct Drafted {
    pub verify: Verify,
    /// The `k + 1` target rows (position `i` of every request).
    pub targets: Vec<Vec<f32>>,
}

impl FixedPositions {
    /// `requests` requests of `k` drafts at temperature `t`: f32 draft
    /// logits (not one-hot), distinct targets, positions from 0, a fixed seed.
    pub fn new(vocab: usize, k: usize, t: f32, requests: usize) -> Self {
        FixedPositions {
            vocab,
            k,
            t,
            requests,
            draft_dtype: DType::F32,
            one_hot: false,
            distinct_targets: true,
            pos0: 0,
            seed: 0x5EED_0AC0_C0DE_0001,
            target_filter: Filter::OFF,
            draft_filter: Filter::OFF,
            declared_draft_filter: Filter::OFF,
        }
    }

    /// Builds the batch from a base target row and the draft model's logits
    /// at each position (`draft(i, target_i)`), and samples every draft with
    /// `gumbel_sample(drafting)` on `backend` at the slot, seed and position
    /// of its verification row; unless one-hot, the draft logits are filled by
    /// `gumbel_sample` too.
    pub fn build(&self, backend: &Backend, base: &[f32], draft: impl Fn(usize, &[f32]) -> Vec<f32>) -> Drafted {
        let (vocab, k1) = (self.vocab, self.k + 1);
        assert_eq!(base.len(), vocab);
        // Row j starts at j·stride of a buffer repeating `base`: with stride
        // vocab/(k+1), row r·(k+1) + i is `base` rotated by i·stride.
        let stride = if self.distinct_targets {
            assert_eq!(vocab % k1, 0, "distinct targets need (k + 1) | vocab");
            vocab / k1
        } else {
            0
        };
        let rows = self.requests * k1;
        let buffer: Vec<f32> = (0..(rows.max(1) - 1) * stride + vocab).map(|e| base[e % vocab]).collect();
        let mut v = Verify::new(Values::F32(buffer), vocab, &[], self.k, self.t);
        v.rows = rows;
        v.row_stride = stride;
        v.offsets = (0..=self.requests as i32).map(|r| r * k1 as i32).collect();
        v.drafts = vec![-1; rows];
        v.slots = (0..self.requests).map(|r| (r % FIXED_SLOTS) as i32).collect();
        v.pos = (0..rows as u64).map(|j| self.pos0 + j).collect();
        v.temperature = vec![self.t; FIXED_SLOTS];
        v.seed = (0..FIXED_SLOTS as u64).map(|s| self.seed.wrapping_add(s * 0x9E37)).collect();
        v.filters = FilterTable::of_slots(self.target_filter, FIXED_SLOTS);
        v.draft_filters = FilterTable::of_slots(self.declared_draft_filter, FIXED_SLOTS);
        let targets: Vec<Vec<f32>> = (0..k1).map(|i| v.target.f32s(i * stride..i * stride + vocab)).collect();
        let drafts: Vec<Vec<f32>> =
            (0..self.k).map(|i| Values::from_f32(self.draft_dtype, &draft(i, &targets[i])).f32s(0..vocab)).collect();
        for (i, row) in drafts.iter().enumerate() {
            let mut b = drafting_batch(&v, row, self.draft_dtype, self.requests);
            b.filters = FilterTable::of_slots(self.draft_filter, FIXED_SLOTS);
            b.pos = (0..self.requests).map(|r| v.pos[r * k1 + i]).collect();
            let tokens = b.run_parallel(backend).tokens;
            for (r, &tok) in tokens.iter().enumerate() {
                v.drafts[r * k1 + i] = tok as i32;
            }
        }
        if !self.one_hot && self.k > 0 {
            v.draft = Some(self.fill_draft_logits(backend, &v, &drafts));
        }
        Drafted { verify: v, targets }
    }

    /// `[FIXED_SLOTS, k, vocab]` draft logits whose column `i` holds `drafts[i]`
    /// in every slot, written by one `gumbel_sample(drafting)` call.
    fn fill_draft_logits(&self, backend: &Backend, v: &Verify, drafts: &[Vec<f32>]) -> (Values, DraftLogitsShape) {
        let rows: Vec<f32> = (0..FIXED_SLOTS).flat_map(|_| drafts.iter().flatten().copied()).collect();
        let n = FIXED_SLOTS * self.k;
        let mut b = drafting_batch(v, &rows, self.draft_dtype, n);
        b.row_stride = self.vocab;
        b.slots = (0..n).map(|j| (j / self.k) as i32).collect();
        b.pos = vec![0; n];
        let columns = (0..n).map(|j| (j % self.k) as i32).collect();
        b.draft_logits = Some(DraftLogitsSpec::dense(
            self.draft_dtype,
            FIXED_SLOTS,
            self.k,
            self.vocab,
            ColumnSpec::PerRow(columns),
        ));
        b.run(backend).expect("gumbel_sample filling the draft logits");
        let c = b.draft_logits.expect("the batch keeps its draft logits");
        let shape = c.shape();
        (c.data, shape)
    }
}

/// A drafting `gumbel_sample` batch over `rows` rows of `logits` (one row
/// broadcast unless the caller sets a stride) with `v`'s slot table and
/// request `r`'s slot on row `r`.
fn drafting_batch(v: &Verify, logits: &[f32], dtype: DType, rows: usize) -> Batch {
    let mut b = Batch::broadcast(&logits[..v.vocab], dtype, rows, 1.0, 0, 0);
    b.logits = Values::from_f32(dtype, logits);
    b.slots = (0..rows).map(|r| v.slots[r % v.slots.len()]).collect();
    b.temperature = v.temperature.clone();
    b.seed = v.seed.clone();
    b.drafting = true;
    b
}

/// The tokens emitted at position `i`: position `i` of every request that
/// emitted more than `i` tokens.
pub fn emitted_at(out: &Verified, i: usize) -> Vec<i64> {
    (0..out.num_emitted.len()).filter(|&r| out.num_emitted[r] as usize > i).map(|r| out.request(r)[i]).collect()
}

/// Draws fewer than this at a position make no chi-square (too few to say
/// anything); callers insist on enough draws where their design promises them.
pub const MIN_POSITION_DRAWS: usize = 100;

/// The bins SPEC §6's rule keeps for `draws` draws from `probs`: those
/// expecting 5 or more, plus the merged rest if it expects 5 or more.
fn kept_bins(probs: &[f64], draws: usize) -> usize {
    let n = draws as f64;
    let rest: f64 = probs.iter().filter(|&&p| p * n < 5.0).sum();
    probs.iter().filter(|&&p| p * n >= 5.0).count() + (rest * n >= 5.0) as usize
}

/// Chi-square (SPEC §6) of the tokens emitted at every position against that
/// position's target `probs(targets[i], t)`, where there are at least
/// [`MIN_POSITION_DRAWS`] draws and two bins to compare. Returns the draws
/// per position.
pub fn check_positions(out: &Verified, targets: &[Vec<f32>], t: f32, ctx: &str) -> Vec<usize> {
    check_filtered_positions(out, targets, t, Filter::OFF, ctx)
}

/// [`check_positions`] against the filtered targets `p'` of SPEC §7.2
/// ([`filtered_probs`], the suite's reference); `Filter::OFF`: `softmax(target / T)`.
pub fn check_filtered_positions(out: &Verified, targets: &[Vec<f32>], t: f32, filter: Filter, ctx: &str) -> Vec<usize> {
    (0..targets.len())
        .map(|i| {
            let tokens = emitted_at(out, i);
            let p = if filter == Filter::OFF { probs(&targets[i], t) } else { filtered_probs(&targets[i], t, filter) };
            let counts = histogram(&tokens, targets[i].len());
            if tokens.len() >= MIN_POSITION_DRAWS && kept_bins(&p, tokens.len()) >= 2 {
                let fit = chi_square(&counts, &p);
                let (chi2, df, p_value) = (fit.chi2, fit.df, fit.p_value);
                eprintln!("{ctx} position {i}: {} draws, chi2 {chi2:.1} df {df} p {p_value:.3}", tokens.len());
                fit.assert_pass(&format!("{ctx} position {i}"));
            } else {
                eprintln!("{ctx} position {i}: {} draws, too few to fit", tokens.len());
            }
            tokens.len()
        })
        .collect()
}

/// Requests `range` of `v` as a batch of their own (offsets re-based, the
/// target sliced with its stride kept, slot table and draft logits shared).
pub fn slice_requests(v: &Verify, range: Range<usize>) -> Verify {
    let (o0, o1) = (v.offsets[range.start] as usize, v.offsets[range.end] as usize);
    let target = if o1 == o0 || v.row_stride == 0 {
        v.target.clone()
    } else {
        v.target.gather(o0 * v.row_stride..(o1 - 1) * v.row_stride + v.vocab)
    };
    Verify {
        target,
        rows: o1 - o0,
        offsets: v.offsets[range.start..=range.end].iter().map(|&o| o - o0 as i32).collect(),
        drafts: v.drafts[o0..o1].to_vec(),
        slots: v.slots[range].to_vec(),
        pos: v.pos[o0..o1].to_vec(),
        ..tables_of(v)
    }
}

/// Requests `idx` of `v`, in that order, as a dense batch of their own.
pub fn select_requests(v: &Verify, idx: &[usize]) -> Verify {
    let rows: Vec<usize> = idx.iter().flat_map(|&r| v.offsets[r] as usize..v.offsets[r + 1] as usize).collect();
    let (target, row_stride) = if v.row_stride == 0 {
        (v.target.clone(), 0)
    } else {
        (v.target.gather(rows.iter().flat_map(|&j| j * v.row_stride..j * v.row_stride + v.vocab)), v.vocab)
    };
    let mut offsets = vec![0i32];
    for &r in idx {
        offsets.push(offsets.last().unwrap() + v.offsets[r + 1] - v.offsets[r]);
    }
    Verify {
        target,
        rows: rows.len(),
        row_stride,
        offsets,
        drafts: rows.iter().map(|&j| v.drafts[j]).collect(),
        slots: idx.iter().map(|&r| v.slots[r]).collect(),
        pos: rows.iter().map(|&j| v.pos[j]).collect(),
        ..tables_of(v)
    }
}

/// The per-call parts of `v` that its sub-batches share, with no requests.
fn tables_of(v: &Verify) -> Verify {
    Verify {
        target: Values::F32(Vec::new()),
        rows: 0,
        vocab: v.vocab,
        row_stride: v.row_stride,
        offsets: vec![0],
        drafts: Vec::new(),
        slots: Vec::new(),
        pos: Vec::new(),
        temperature: v.temperature.clone(),
        seed: v.seed.clone(),
        max_drafts: v.max_drafts,
        verification: v.verification,
        draft: v.draft.clone(),
        filters: v.filters.clone(),
        draft_filters: v.draft_filters.clone(),
        tokens_i64: v.tokens_i64,
    }
}

/// Outputs of consecutive sub-batches, joined.
pub fn concat(parts: Vec<Verified>) -> Verified {
    let mut all =
        Verified { tokens: Vec::new(), num_emitted: Vec::new(), accepted: Vec::new(), row_status: Vec::new() };
    for p in parts {
        all.tokens.extend(p.tokens);
        all.num_emitted.extend(p.num_emitted);
        all.accepted.extend(p.accepted);
        all.row_status.extend(p.row_status);
    }
    all
}

/// Runs `v` split into request ranges on all cores when `backend` is the CPU
/// (requests are independent, SPEC §2.1), in one call otherwise.
pub fn run_split(v: &Verify, backend: &Backend) -> Verified {
    if !matches!(backend, Backend::Cpu(_)) {
        return v.run(backend).expect("rejection_sample");
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = v.requests().div_ceil(threads).max(1);
    let parts = std::thread::scope(|s| {
        let handles: Vec<_> = (0..v.requests())
            .step_by(per)
            .map(|a| {
                let part = slice_requests(v, a..(a + per).min(v.requests()));
                s.spawn(move || part.run(&Backend::cpu()).expect("rejection_sample"))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    });
    concat(parts)
}

/// Runs `v` one request a call, in order: small calls, as a decoder's single
/// request makes them (on the GPU, their pass 1 is the small kernel).
pub fn run_per_request(v: &Verify, backend: &Backend) -> Verified {
    concat((0..v.requests()).map(|r| slice_requests(v, r..r + 1).run(backend).expect("rejection_sample")).collect())
}

/// The request owning each row of `v`.
pub fn request_of_rows(v: &Verify) -> Vec<usize> {
    (0..v.requests()).flat_map(|r| std::iter::repeat_n(r, (v.offsets[r + 1] - v.offsets[r]) as usize)).collect()
}

/// Row `j`'s target logits `0..vocab`, widened to f32.
pub fn target_row(v: &Verify, j: usize) -> Vec<f32> {
    v.target.f32s(j * v.row_stride..j * v.row_stride + v.vocab)
}

/// Sets row `j`'s target logit of id `x` (rounded to the target's dtype).
pub fn set_target(v: &mut Verify, j: usize, x: usize, value: f32) {
    let one = Values::from_f32(v.target.dtype(), &[value]);
    v.target.store_converted(j * v.row_stride + x, &one, 0);
}

/// The rows of `v` that propose a real draft (not a placeholder, not a bonus row).
pub fn proposing_rows(v: &Verify) -> Vec<usize> {
    let owner = request_of_rows(v);
    (0..v.rows).filter(|&j| j + 1 < v.offsets[owner[j] + 1] as usize && v.drafts[j] >= 0).collect()
}

/// Draft logits column `i` of `slot`, widened to f32.
pub fn draft_row(v: &Verify, slot: i32, i: usize) -> Option<Vec<f32>> {
    let (values, shape) = v.draft.as_ref()?;
    let start = slot as usize * shape.stride0 + i * shape.stride1;
    Some(values.f32s(start..start + v.vocab))
}

/// What `gumbel_sample` (not drafting) returns for every target row of `v`,
/// on `backend`, with the row's request's slot and the row's position: the
/// token a placeholder, a bonus row or a request without drafts must emit
/// (from `p'` where the slot filters).
pub fn target_samples(v: &Verify, backend: &Backend) -> Vec<i64> {
    let owner = request_of_rows(v);
    let mut b = Batch::broadcast(&target_row(v, 0), v.target.dtype(), v.rows, 1.0, 0, 0);
    b.logits = v.target.clone();
    b.row_stride = v.row_stride;
    b.slots = owner.iter().map(|&r| v.slots[r]).collect();
    b.pos = v.pos.clone();
    b.temperature = v.temperature.clone();
    b.seed = v.seed.clone();
    b.filters = v.filters.clone();
    b.run(backend).expect("gumbel_sample").tokens
}

/// What [`random_verify`] builds.
#[derive(Clone, Copy, Debug)]
pub struct RandomSpec {
    pub vocab: usize,
    pub requests: usize,
    pub max_drafts: usize,
    pub target_dtype: DType,
    /// The draft logits' dtype, or `None` for one-hot verification.
    pub draft_dtype: Option<DType>,
    /// Temperatures slots draw from.
    pub temperatures: &'static [f32],
    /// Drafts of request `r`, or `None` for random `0..=max_drafts`.
    pub drafts_of: Option<fn(usize) -> usize>,
}

impl RandomSpec {
    pub fn new(vocab: usize, requests: usize, max_drafts: usize, target: DType, draft: Option<DType>) -> Self {
        RandomSpec {
            vocab,
            requests,
            max_drafts,
            target_dtype: target,
            draft_dtype: draft,
            temperatures: &TEMPERATURES,
            drafts_of: None,
        }
    }
}

/// One request in `PADDING_EVERY` is padding (slot `-1`).
const PADDING_EVERY: usize = 8;
/// One draft in `PLACEHOLDER_EVERY` is a placeholder.
const PLACEHOLDER_EVERY: usize = 16;
/// How far [`random_verify`]'s draft logits stray from the target.
const RANDOM_DRAFT_NOISE: f32 = 1.5;

/// A ragged random batch: `n_r` in `0..=max_drafts`; target rows in `[-6, 6]`
/// (1 in 50 `-inf`) with a row stride `vocab + 0..4` padded with
/// [`PAST_VOCAB`]; every request on a slot of its own (some padding); random
/// seeds, temperatures and 64-bit positions; draft logits (unless one-hot) in
/// a random layout holding each draft row's target plus noise in `[-1.5,
/// 1.5]`; drafts that are the target's argmax, the draft row's argmax, a
/// random id, or a placeholder.
pub fn random_verify(rng: &mut Rng, spec: RandomSpec) -> Verify {
    let (vocab, k) = (spec.vocab, spec.max_drafts);
    let n: Vec<usize> = (0..spec.requests).map(|r| spec.drafts_of.map_or_else(|| rng.below(k + 1), |f| f(r))).collect();
    let mut v = Verify::new(Values::F32(Vec::new()), vocab, &n, k, 1.0);
    v.row_stride = vocab + rng.below(4);
    let logits: Vec<f32> = (0..v.rows.max(1) * v.row_stride)
        .map(|e| match (e % v.row_stride >= vocab, rng.below(50)) {
            (true, _) => PAST_VOCAB,
            (false, 0) => f32::NEG_INFINITY,
            _ => rng.uniform(-6.0, 6.0),
        })
        .collect();
    v.target = Values::from_f32(spec.target_dtype, &logits);
    let num_slots = spec.requests + 3;
    let mut perm: Vec<i32> = (0..num_slots as i32).collect();
    rng.shuffle(&mut perm);
    v.slots = (0..spec.requests).map(|r| if rng.below(PADDING_EVERY) == 0 { -1 } else { perm[r] }).collect();
    v.temperature = (0..num_slots).map(|_| rng.pick(spec.temperatures)).collect();
    v.seed = (0..num_slots).map(|_| rng.next_u64()).collect();
    v.pos = (0..v.rows).map(|_| rng.next_u64()).collect();
    if let Some(dtype) = spec.draft_dtype {
        v.draft = Some(draft_logits_like(rng, &v, dtype, RANDOM_DRAFT_NOISE));
    }
    for (r, &n_r) in n.iter().enumerate() {
        for i in 0..n_r {
            let j = v.offsets[r] as usize + i;
            let target_argmax = first_argmax(&target_row(&v, j));
            let draft = if v.slots[r] >= 0 { draft_row(&v, v.slots[r], i) } else { None };
            v.drafts[j] = match rng.below(PLACEHOLDER_EVERY) {
                0 => -1,
                1..=5 => target_argmax as i32,
                6..=10 => draft.map_or(target_argmax, |d| first_argmax(&d)) as i32,
                _ => rng.below(vocab) as i32,
            };
        }
    }
    v
}

/// Draft logits for `v` in a random layout (dense, padded or transposed;
/// `k = max_drafts + 0..2` columns, width `vocab + 0..3`): column `i` of a
/// request's slot is its row `i`'s target, plus uniform noise in `±noise`
/// and 1 in 40 ids masked when `noise > 0` (an exact copy when `noise = 0`).
pub fn draft_logits_like(rng: &mut Rng, v: &Verify, dtype: DType, noise: f32) -> (Values, DraftLogitsShape) {
    let (slots, k, width) = (v.temperature.len(), v.max_drafts.max(1) + rng.below(2), v.vocab + rng.below(3));
    let (stride0, stride1) = match rng.below(3) {
        0 => (k * width, width),
        1 => (k * (width + 2) + 1, width + 2),
        _ => (width, slots * width + 1),
    };
    let mut draft_logits = vec![DraftLogitsSpec::SENTINEL; (slots - 1) * stride0 + (k - 1) * stride1 + width];
    // Padding requests (slot -1) are greedy and never read draft logits.
    for r in (0..v.requests()).filter(|&r| v.slots[r] >= 0) {
        for i in 0..(v.offsets[r + 1] - v.offsets[r] - 1) as usize {
            let target = target_row(v, v.offsets[r] as usize + i);
            let start = v.slots[r] as usize * stride0 + i * stride1;
            for (x, c) in draft_logits[start..start + v.vocab].iter_mut().enumerate() {
                *c = match noise > 0.0 && rng.below(40) == 0 {
                    true => f32::NEG_INFINITY,
                    false if noise > 0.0 => target[x] + rng.uniform(-noise, noise),
                    false => target[x],
                };
            }
        }
    }
    let shape = DraftLogitsShape { slots, k, width, stride0, stride1 };
    (Values::from_f32(dtype, &draft_logits), shape)
}
