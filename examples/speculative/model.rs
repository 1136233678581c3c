//! A small decoder-only transformer in candle-nn, and its drafter.
//!
//! Pre-norm blocks (causal multi-head attention, GELU MLP), learned
//! positions, an output head, a KV cache that can be rolled back. Weights
//! come from a fixed seed (no download), so they carry no language; the
//! draft is the target's first block with its embeddings, final norm and
//! head (an early-exit drafter: it shares the embeddings), and the target's later blocks are scaled
//! down so the draft's distribution is near the target's, as a trained
//! drafter's would be.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub vocab: usize,
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub max_positions: usize,
    /// Logits are `logit_scale · LN(h)·Wᵀ / √hidden`: how peaked the model is.
    pub logit_scale: f64,
    /// The output projections of blocks past the first are scaled by this:
    /// how far the target strays from its one-block draft.
    pub deep_scale: f64,
}

struct Block {
    ln1: LayerNorm,
    qkv: Linear,
    out: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

/// A model's keys and values per block, `[1, heads, len, head_dim]`.
pub struct KvCache {
    blocks: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Tokens cached: the next one goes at this position.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Forgets every position from `len` on (the drafts a verifier rejected).
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len < self.len {
            for kv in self.blocks.iter_mut().flatten() {
                *kv = (kv.0.narrow(2, 0, len)?, kv.1.narrow(2, 0, len)?);
            }
            self.len = len;
        }
        Ok(())
    }
}

#[derive(Clone)]
pub struct Model {
    config: Config,
    embed: Embedding,
    positions: Embedding,
    blocks: std::sync::Arc<Vec<Block>>,
    /// Blocks this model runs: all of them, or the first for the draft.
    depth: usize,
    norm: LayerNorm,
    head: Linear,
}

/// Normal weights from SplitMix64 and Box–Muller: the same on every run and device.
struct Weights {
    state: u64,
}

impl Weights {
    fn normal(&mut self) -> f32 {
        let mut unit = || {
            self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let (u, v) = (unit().max(f64::MIN_POSITIVE), unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    fn tensor(&mut self, dims: &[usize], std: f64, device: &Device) -> Result<Tensor> {
        let n = dims.iter().product();
        let values: Vec<f32> = (0..n).map(|_| (f64::from(self.normal()) * std) as f32).collect();
        Tensor::from_vec(values, dims, device)
    }
}

impl Model {
    /// The target model: `config.layers` blocks, weights from `seed`.
    pub fn new(config: Config, seed: u64, device: &Device) -> Result<Model> {
        let (v, h) = (config.vocab, config.hidden);
        let mut w = Weights { state: seed };
        let mut map = HashMap::new();
        map.insert("embed.weight".to_string(), w.tensor(&[v, h], 1.0, device)?);
        map.insert("positions.weight".to_string(), w.tensor(&[config.max_positions, h], 0.5, device)?);
        let ones = Tensor::ones(h, DType::F32, device)?;
        let zeros = Tensor::zeros(h, DType::F32, device)?;
        for b in 0..config.layers {
            let scale = if b == 0 { 1.0 } else { config.deep_scale };
            let std = 1.0 / (h as f64).sqrt();
            for (name, dims, s) in [
                ("qkv", [3 * h, h], std),
                ("out", [h, h], std * scale),
                ("up", [4 * h, h], std),
                ("down", [h, 4 * h], 0.5 * std * scale),
            ] {
                map.insert(format!("blocks.{b}.{name}.weight"), w.tensor(&dims, s, device)?);
                map.insert(format!("blocks.{b}.{name}.bias"), Tensor::zeros(dims[0], DType::F32, device)?);
            }
            for ln in ["ln1", "ln2"] {
                map.insert(format!("blocks.{b}.{ln}.weight"), ones.clone());
                map.insert(format!("blocks.{b}.{ln}.bias"), zeros.clone());
            }
        }
        map.insert("head.weight".to_string(), w.tensor(&[v, h], config.logit_scale / (h as f64).sqrt(), device)?);
        map.insert("norm.weight".to_string(), ones);
        map.insert("norm.bias".to_string(), zeros);
        let vb = VarBuilder::from_tensors(map, DType::F32, device);
        let blocks = (0..config.layers)
            .map(|b| {
                let vb = vb.pp(format!("blocks.{b}"));
                Ok(Block {
                    ln1: candle_nn::layer_norm(h, 1e-5, vb.pp("ln1"))?,
                    qkv: candle_nn::linear(h, 3 * h, vb.pp("qkv"))?,
                    out: candle_nn::linear(h, h, vb.pp("out"))?,
                    ln2: candle_nn::layer_norm(h, 1e-5, vb.pp("ln2"))?,
                    up: candle_nn::linear(h, 4 * h, vb.pp("up"))?,
                    down: candle_nn::linear(4 * h, h, vb.pp("down"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Model {
            config,
            embed: candle_nn::embedding(v, h, vb.pp("embed"))?,
            positions: candle_nn::embedding(config.max_positions, h, vb.pp("positions"))?,
            blocks: std::sync::Arc::new(blocks),
            depth: config.layers,
            norm: candle_nn::layer_norm(h, 1e-5, vb.pp("norm"))?,
            head: candle_nn::linear_no_bias(h, v, vb.pp("head"))?,
        })
    }

    /// The draft: this model's first block, sharing its embeddings, norm and head.
    pub fn draft(&self) -> Model {
        Model { depth: 1, ..self.clone() }
    }

    pub fn config(&self) -> Config {
        self.config
    }

    pub fn cache(&self) -> KvCache {
        KvCache { blocks: (0..self.depth).map(|_| None).collect(), len: 0 }
    }

    /// The logits `[n, vocab]` after each of `ids` (`u32 [n]`), which sit at
    /// positions `cache.len() ..`; their keys and values join the cache.
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (n, start) = (ids.dim(0)?, cache.len);
        let (h, heads) = (self.config.hidden, self.config.heads);
        let head_dim = h / heads;
        let device = ids.device();
        let at = Tensor::arange(start as u32, (start + n) as u32, device)?;
        let mut x = (self.embed.forward(ids)? + self.positions.forward(&at)?)?;
        // Query i (position start + i) sees keys 0 ..= start + i.
        let mask: Vec<f32> = (0..n)
            .flat_map(|i| (0..start + n).map(move |j| if j > start + i { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (n, start + n), device)?;
        for (block, kv) in self.blocks[..self.depth].iter().zip(cache.blocks.iter_mut()) {
            let qkv = block.qkv.forward(&block.ln1.forward(&x)?)?;
            let split = |i: usize| -> Result<Tensor> {
                qkv.narrow(1, i * h, h)?.reshape((1, n, heads, head_dim))?.transpose(1, 2)?.contiguous()
            };
            let (q, mut k, mut v) = (split(0)?, split(1)?, split(2)?);
            if let Some((k0, v0)) = kv.as_ref() {
                k = Tensor::cat(&[k0, &k], 2)?;
                v = Tensor::cat(&[v0, &v], 2)?;
            }
            *kv = Some((k.clone(), v.clone()));
            let scores = (q.matmul(&k.t()?)? / (head_dim as f64).sqrt())?.broadcast_add(&mask)?;
            let attended = candle_nn::ops::softmax_last_dim(&scores)?.matmul(&v)?;
            let attended = attended.transpose(1, 2)?.reshape((n, h))?;
            x = (x + block.out.forward(&attended)?)?;
            let mlp = block.down.forward(&block.up.forward(&block.ln2.forward(&x)?)?.gelu()?)?;
            x = (x + mlp)?;
        }
        cache.len += n;
        self.head.forward(&self.norm.forward(&x)?)
    }
}
