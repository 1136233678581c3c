//! The Python package's reference: calls of the Rust library on fixed inputs,
//! and their results, in `crates/python/tests/reference.json`. The package's
//! tests (`crates/python/tests/test_reference.py`, and on the GPU
//! `tests/gpu/test_torch.py`) make the same calls through Python and must get
//! the same results bit for bit. This test fails when the library's results
//! differ from the file; `SPECDEC_BLESS=1 cargo test --test python_reference`
//! writes it anew (a change of results is a change of the library's contract).

use serde_json::{Value, json};
use specdec::{
    Backend, Column, Distribution, DraftLogits, DraftLogitsMut, DraftLogitsShape, Filters, GumbelOutput, GumbelSample,
    Logits, Logprobs, RejectionOutput, RejectionSample, SamplingParams, Verification,
};
use std::path::Path;

const VOCAB: usize = 40;
/// The top log-probabilities each case asks for.
const TOP: usize = 3;

/// Log-probability outputs for `positions` (processed, top `TOP` processed, ranks).
struct LogprobBufs {
    emitted: Vec<f32>,
    top: Vec<f32>,
    ids: Vec<i32>,
    ranks: Vec<i32>,
}

impl LogprobBufs {
    fn new(positions: usize) -> Self {
        LogprobBufs {
            emitted: vec![0.0; positions],
            top: vec![0.0; positions * TOP],
            ids: vec![0; positions * TOP],
            ranks: vec![0; positions],
        }
    }

    fn views(&mut self) -> Logprobs<'_, specdec::Host> {
        Logprobs::none().with_processed(&mut self.emitted).with_top(
            TOP,
            Distribution::Processed,
            &mut self.top,
            &mut self.ids,
            &mut self.ranks,
        )
    }

    /// The floats as their bits: NaN (unemitted positions) and -inf (ids a filter drops) survive JSON.
    fn json(&self) -> Value {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        json!({ "logprobs_bits": bits(&self.emitted), "top_logprobs_bits": bits(&self.top),
                "top_ids": self.ids, "ranks": self.ranks })
    }
}

/// Logits from integers: multiples of 1/4, exact in every dtype the package takes.
fn logits(rows: usize, salt: usize) -> Vec<f32> {
    (0..rows * VOCAB).map(|i| ((i * 13 + (i / VOCAB) * 7 + salt) % 29) as f32 / 4.0 - 3.5).collect()
}

/// The per-slot tables of every case: three slots, one of them greedy.
struct Table {
    temperature: Vec<f32>,
    seed: Vec<u64>,
    top_k: Vec<i32>,
    top_p: Vec<f32>,
}

fn table() -> Table {
    Table {
        temperature: vec![0.7, 1.3, 0.0],
        seed: vec![11, u64::MAX - 4, 33],
        top_k: vec![0, 5, 3],
        top_p: vec![0.9, 1.0, 0.5],
    }
}

impl Table {
    fn params(&self, filtered: bool) -> SamplingParams<'_, specdec::Host> {
        let params = SamplingParams::new(&self.temperature, &self.seed);
        if filtered {
            params.with_filters(Filters::none().with_top_k(&self.top_k).with_top_p(&self.top_p))
        } else {
            params
        }
    }

    fn json(&self) -> Value {
        // Seeds as i64: the Python package passes the u64 seed's bits in an int64 array.
        let seed: Vec<i64> = self.seed.iter().map(|&s| s as i64).collect();
        json!({ "temperature": self.temperature, "seed": seed, "top_k": self.top_k, "top_p": self.top_p })
    }
}

fn gumbel_cases(cpu: &Backend, t: &Table) -> Value {
    let rows = 6;
    let x = logits(rows, 0);
    let slots = [0, 1, 2, -1, 1, 0];
    let pos: Vec<u64> = (0..rows as u64).map(|r| 5 + r).collect();
    let mut cases = Vec::new();
    for (name, filtered) in [("plain", false), ("filtered", true)] {
        let mut tokens = vec![0i64; rows];
        let mut logprobs = LogprobBufs::new(rows);
        let call = GumbelSample::new(Logits::new(&x, rows, VOCAB), &slots, &pos, t.params(filtered));
        cpu.gumbel_sample(&call, &mut GumbelOutput::new(&mut tokens).with_logprobs(logprobs.views())).unwrap();
        cases.push(json!({
            "name": name, "filtered": filtered, "drafting": false, "sampled": tokens, "logprobs": logprobs.json(),
        }));
    }
    // Drafting: each row's logits into the cache [3 slots, 2 columns, VOCAB + 2], per-row columns.
    let (draft_slots, columns) = ([0, 1, 2, -1, 1, 0], [0, 0, 1, 0, 1, 1]);
    let shape = DraftLogitsShape::dense(3, 2, VOCAB + 2);
    let mut cache = vec![0f32; 3 * 2 * (VOCAB + 2)];
    let mut tokens = vec![0i64; rows];
    let mut logprobs = LogprobBufs::new(rows);
    let call = GumbelSample::new(Logits::new(&x, rows, VOCAB), &draft_slots, &pos, t.params(true)).drafting();
    let mut out = GumbelOutput::new(&mut tokens)
        .with_draft_logits(DraftLogitsMut::new(&mut cache, shape), Column::per_row(&columns))
        .with_logprobs(logprobs.views());
    cpu.gumbel_sample(&call, &mut out).unwrap();
    cases.push(json!({
        "name": "drafting", "filtered": true, "drafting": true, "sampled": tokens, "logprobs": logprobs.json(),
        "cache_shape": [3, 2, VOCAB + 2], "cache_col": columns, "cache": cache,
    }));
    json!({ "logits": x, "rows": rows, "idx_mapping": slots, "pos": pos, "cases": cases })
}

fn rejection_cases(cpu: &Backend, t: &Table) -> Value {
    // Three requests of 3, 1 and 3 drafts (K = 3), slots 0, 1, 2 (2 is greedy).
    let offsets = [0, 4, 6, 10];
    let rows = 10;
    let target = logits(rows, 3);
    let slots = [0, 1, 2];
    let pos: Vec<u64> = (0..rows as u64).map(|r| 100 + r).collect();
    let k = 3;
    // The draft model: the target's rows, perturbed by a quarter either way.
    let mut draft_logits = vec![-8.0f32; 3 * k * VOCAB];
    for (request, pair) in offsets.windows(2).enumerate() {
        for (column, row) in (pair[0] as usize..pair[1] as usize - 1).enumerate() {
            for v in 0..VOCAB {
                let at = (request * k + column) * VOCAB + v;
                draft_logits[at] = target[row * VOCAB + v] + ((at * 7) % 3) as f32 / 4.0 - 0.25;
            }
        }
    }
    // Drafts the target likes (each draft row's argmax), but for a third of request 0's.
    let argmax = |row: usize| {
        let r = &target[row * VOCAB..(row + 1) * VOCAB];
        (0..VOCAB).fold(0, |best, v| if r[v] > r[best] { v } else { best }) as i32
    };
    let mut drafts: Vec<i32> = (0..rows).map(argmax).collect();
    drafts[2] = (drafts[2] + 17) % VOCAB as i32;
    let shape = DraftLogitsShape::dense(3, k, VOCAB);
    let mut cases = Vec::new();
    for (name, one_hot, block, filtered) in [
        ("token", false, false, false),
        ("block", false, true, false),
        ("one_hot", true, false, false),
        ("filtered", false, false, true),
    ] {
        let mut sampled = vec![0i64; slots.len() * (k + 1)];
        let mut num_sampled = vec![0i32; slots.len()];
        let mut call = RejectionSample {
            target: Logits::new(&target, rows, VOCAB),
            offsets: &offsets,
            drafts: &drafts,
            slots: &slots,
            pos: &pos,
            params: t.params(filtered),
            max_drafts: k,
            verification: Verification::Token,
            draft_logits: None,
        };
        if block {
            call.verification = Verification::Block;
        }
        if !one_hot {
            // A filtered case's drafts were drawn with the same filters as the target's.
            let draft = DraftLogits::new(&draft_logits, shape);
            call.draft_logits = Some(if filtered {
                draft.with_filters(Filters::none().with_top_k(&t.top_k).with_top_p(&t.top_p))
            } else {
                draft
            });
        }
        let mut logprobs = LogprobBufs::new(sampled.len());
        let mut out = RejectionOutput::new(&mut sampled, &mut num_sampled).with_logprobs(logprobs.views());
        cpu.rejection_sample(&call, &mut out).unwrap();
        let sampled: Vec<&[i64]> = sampled.chunks(k + 1).collect();
        cases.push(json!({
            "name": name, "one_hot": one_hot, "block": block, "filtered": filtered,
            "sampled": sampled, "num_sampled": num_sampled, "logprobs": logprobs.json(),
        }));
    }
    json!({
        "target_logits": target, "rows": rows, "cu_num_logits": offsets, "draft_tokens": drafts,
        "idx_mapping": slots, "pos": pos, "num_speculative_steps": k,
        "draft_logits": draft_logits, "draft_logits_shape": [3, k, VOCAB], "cases": cases,
    })
}

#[test]
fn python_reference_is_the_librarys_results() {
    let cpu = Backend::cpu();
    let t = table();
    let reference = json!({
        "vocab": VOCAB,
        "num_logprobs": TOP,
        "table": t.json(),
        "gumbel_sample": gumbel_cases(&cpu, &t),
        "rejection_sample": rejection_cases(&cpu, &t),
    });
    let text = serde_json::to_string(&reference).unwrap() + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/python/tests/reference.json");
    if std::env::var_os("SPECDEC_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == text,
        "{} differs from the library's results: if the change is meant, \
         `SPECDEC_BLESS=1 cargo test --test python_reference` writes them",
        path.display()
    );
}
