//! The loops an engine runs, over a batch of requests: plain autoregressive
//! decoding, and speculative decoding with specdec's `gumbel_sample`
//! (drafting, writing the draft logits) and `rejection_sample`.
//!
//! Each request keeps its tokens and a KV cache per model; a forward feeds
//! the tokens its cache lacks, so a cache rolled back past rejected drafts,
//! or one position behind after a bonus token, catches up in the next
//! forward. Row `i` of a request's verify call sits at position `L − 1 + i`
//! (its input token's), `L` the request's length before the step, as do its
//! draft rows.

use super::model::{KvCache, Model};
use candle_core::{DType, Device, Tensor};
use specdec::Verification;
use specdec::candle::{DraftColumn, Filters, GumbelCall, Params, RejectionCall, Sampler};

pub type Result<T> = std::result::Result<T, specdec::Error>;

/// A request's sampling parameters.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// `0`: greedy.
    pub temperature: f32,
    pub seed: u64,
    /// `0`: off.
    pub top_k: i32,
}

/// What speculation did, per draft position `i`: how often draft `i` was
/// proposed with drafts `0..i` accepted (`reached`), and accepted.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub verifies: usize,
    /// Request-verifies: one per request per verify call.
    pub request_verifies: usize,
    pub emitted: usize,
    pub reached: Vec<u64>,
    pub accepted: Vec<u64>,
}

impl Stats {
    /// Mean tokens a request emits per verify call.
    pub fn tokens_per_verify(&self) -> f64 {
        self.emitted as f64 / self.request_verifies.max(1) as f64
    }

    /// Draft `i`'s acceptance rate given drafts `0..i` were accepted.
    pub fn acceptance(&self) -> Vec<f64> {
        self.reached.iter().zip(&self.accepted).map(|(&n, &a)| a as f64 / n.max(1) as f64).collect()
    }
}

/// The per-slot tables of a batch (request `r` on slot `r`).
struct Tables {
    temperature: Tensor,
    seed: Tensor,
    top_k: Option<Tensor>,
}

impl Tables {
    fn new(sampling: &[Sampling], device: &Device) -> Result<Tables> {
        let temperature: Vec<f32> = sampling.iter().map(|s| s.temperature).collect();
        let seed: Vec<i64> = sampling.iter().map(|s| s.seed as i64).collect();
        let top_k: Vec<i32> = sampling.iter().map(|s| s.top_k).collect();
        Ok(Tables {
            temperature: Tensor::new(temperature, device)?,
            seed: Tensor::new(seed, device)?,
            top_k: top_k.iter().any(|&k| k > 0).then(|| Tensor::new(top_k, device)).transpose()?,
        })
    }

    fn filters(&self) -> Filters<'_> {
        Filters { top_k: self.top_k.as_ref(), ..Filters::default() }
    }

    fn params(&self) -> Params<'_> {
        Params::new(&self.temperature, &self.seed).with_filters(self.filters())
    }
}

/// One request in flight.
struct Request {
    tokens: Vec<u32>,
    prompt: usize,
    target: KvCache,
    draft: Option<KvCache>,
}

impl Request {
    fn generated(&self) -> usize {
        self.tokens.len() - self.prompt
    }
}

/// The logits after `model` reads `feed` at the end of `cache`: `[feed.len(), vocab]`.
fn forward(model: &Model, cache: &mut KvCache, feed: &[u32], device: &Device) -> Result<Tensor> {
    Ok(model.forward(&Tensor::new(feed, device)?, cache)?)
}

/// The logits after the last of `feed` only: `[1, vocab]`.
fn next_logits(model: &Model, cache: &mut KvCache, feed: &[u32], device: &Device) -> Result<Tensor> {
    Ok(forward(model, cache, feed, device)?.narrow(0, feed.len() - 1, 1)?)
}

fn ids(tokens: &Tensor) -> Result<Vec<u32>> {
    Ok(tokens.to_vec1::<i64>()?.into_iter().map(|t| u32::try_from(t).expect("a sampled id")).collect())
}

/// Decodes `max_new` tokens after each prompt, one target forward and one
/// `gumbel_sample` per step.
pub fn autoregressive(
    target: &Model,
    sampler: &mut Sampler,
    prompts: &[Vec<u32>],
    sampling: &[Sampling],
    max_new: usize,
) -> Result<Vec<Vec<u32>>> {
    let device = sampler.device().clone();
    let tables = Tables::new(sampling, &device)?;
    let mut requests: Vec<Request> = prompts
        .iter()
        .map(|p| Request { tokens: p.clone(), prompt: p.len(), target: target.cache(), draft: None })
        .collect();
    for _ in 0..max_new {
        let mut rows = Vec::with_capacity(requests.len());
        for r in requests.iter_mut() {
            let feed = r.tokens[r.target.len()..].to_vec();
            rows.push(next_logits(target, &mut r.target, &feed, &device)?);
        }
        let logits = Tensor::cat(&rows, 0)?;
        let slots = Tensor::arange(0i32, requests.len() as i32, &device)?;
        let pos: Vec<i64> = requests.iter().map(|r| r.tokens.len() as i64 - 1).collect();
        let pos = Tensor::new(pos, &device)?;
        let out = sampler.gumbel_sample(&GumbelCall::new(&logits, &slots, &pos, tables.params()))?;
        for (r, t) in requests.iter_mut().zip(ids(&out.tokens)?) {
            r.tokens.push(t);
        }
    }
    Ok(requests.into_iter().map(|r| r.tokens[r.prompt..].to_vec()).collect())
}

/// How to speculate.
#[derive(Clone, Copy, Debug)]
pub struct Speculation<'a> {
    /// Drafts per request per step.
    pub k: usize,
    /// Tokens to decode per request.
    pub max_new: usize,
    pub verification: Verification<'a>,
}

/// Decodes at least `max_new` tokens after each prompt by speculation: `k`
/// drafts per step from `draft`, verified against `target` in one forward;
/// returns exactly `max_new` per request.
pub fn speculative(
    target: &Model,
    draft: &Model,
    sampler: &mut Sampler,
    prompts: &[Vec<u32>],
    sampling: &[Sampling],
    speculation: Speculation<'_>,
) -> Result<(Vec<Vec<u32>>, Stats)> {
    let Speculation { k, max_new, verification } = speculation;
    let device = sampler.device().clone();
    let tables = Tables::new(sampling, &device)?;
    let vocab = target.config().vocab;
    let draft_logits = Tensor::zeros((prompts.len(), k, vocab), DType::F32, &device)?;
    let mut requests: Vec<Request> = prompts
        .iter()
        .map(|p| Request { tokens: p.clone(), prompt: p.len(), target: target.cache(), draft: Some(draft.cache()) })
        .collect();
    let mut stats = Stats { reached: vec![0; k], accepted: vec![0; k], ..Stats::default() };
    loop {
        let active: Vec<usize> = (0..requests.len()).filter(|&r| requests[r].generated() < max_new).collect();
        if active.is_empty() {
            break;
        }
        let slots = Tensor::new(active.iter().map(|&r| r as i32).collect::<Vec<_>>(), &device)?;
        // Draft k tokens per request, each step one gumbel_sample over the batch.
        let mut drafts: Vec<Vec<u32>> = vec![Vec::with_capacity(k); active.len()];
        for i in 0..k {
            let mut rows = Vec::with_capacity(active.len());
            for (a, &r) in active.iter().enumerate() {
                let req = &mut requests[r];
                let cache = req.draft.as_mut().expect("speculative requests have a draft cache");
                let feed = if i == 0 { req.tokens[cache.len()..].to_vec() } else { vec![drafts[a][i - 1]] };
                rows.push(next_logits(draft, cache, &feed, &device)?);
            }
            let logits = Tensor::cat(&rows, 0)?;
            let pos: Vec<i64> = active.iter().map(|&r| (requests[r].tokens.len() - 1 + i) as i64).collect();
            let pos = Tensor::new(pos, &device)?;
            let call =
                GumbelCall::new(&logits, &slots, &pos, tables.params()).drafting(&draft_logits, DraftColumn::All(i));
            for (a, t) in ids(&sampler.gumbel_sample(&call)?.tokens)?.into_iter().enumerate() {
                drafts[a].push(t);
            }
        }
        // One target forward per request over its last token and its drafts.
        let mut rows = Vec::with_capacity(active.len());
        let (mut flat_drafts, mut pos) = (Vec::new(), Vec::new());
        for (a, &r) in active.iter().enumerate() {
            let req = &mut requests[r];
            let len = req.tokens.len();
            let mut feed = req.tokens[req.target.len()..].to_vec();
            feed.extend(&drafts[a]);
            let logits = forward(target, &mut req.target, &feed, &device)?;
            rows.push(logits.narrow(0, feed.len() - (k + 1), k + 1)?);
            flat_drafts.extend(drafts[a].iter().map(|&d| d as i32).chain([-1]));
            pos.extend((0..=k).map(|i| (len - 1 + i) as i64));
        }
        let target_logits = Tensor::cat(&rows, 0)?;
        let offsets = Tensor::new((0..=active.len()).map(|a| (a * (k + 1)) as i32).collect::<Vec<_>>(), &device)?;
        let (flat_drafts, pos) = (Tensor::new(flat_drafts, &device)?, Tensor::new(pos, &device)?);
        // The draft logits are indexed by slot: request r's rows are slot r's.
        let call = RejectionCall::new(&target_logits, &offsets, &flat_drafts, &slots, &pos, tables.params(), k)
            .with_draft_logits(&draft_logits, tables.filters())
            .with_verification(verification);
        let out = sampler.rejection_sample(&call)?;
        let (tokens, emitted) = (out.tokens.to_vec2::<i64>()?, out.num_emitted.to_vec1::<i32>()?);
        stats.verifies += 1;
        for (a, &r) in active.iter().enumerate() {
            let req = &mut requests[r];
            let (len, e) = (req.tokens.len(), emitted[a] as usize);
            let accepted = e - 1;
            req.tokens.extend(tokens[a][..e].iter().map(|&t| u32::try_from(t).expect("an emitted id")));
            // The caches keep the inputs up to the last accepted draft.
            req.target.truncate(len + accepted)?;
            let cache = req.draft.as_mut().expect("speculative requests have a draft cache");
            cache.truncate(len + accepted)?;
            stats.request_verifies += 1;
            stats.emitted += e;
            for i in 0..=accepted.min(k - 1) {
                stats.reached[i] += 1;
                stats.accepted[i] += u64::from(i < accepted);
            }
        }
    }
    let outputs = requests.into_iter().map(|r| r.tokens[r.prompt..r.prompt + max_new].to_vec()).collect();
    Ok((outputs, stats))
}
