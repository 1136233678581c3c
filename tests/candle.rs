//! `specdec::candle` (feature `candle`) against the core API on the same
//! memory: candle tensors viewing one flat buffer through offsets, strides and
//! transposes give the tokens, statuses, log-probabilities and draft logits
//! that the core call gives on that buffer, bit for bit, on each backend.
//! Bad tensors are typed errors; specdec and candle build one `cudarc`.

use candle_core::{DType as CDType, Device, Tensor};
use half::bf16;
use specdec::candle::{
    DraftColumn, Filters as TensorFilters, GumbelCall, LogprobsRequest, Params, RejectionCall, Sampler,
};
use specdec::{
    Backend, Column, Distribution, DraftLogits, DraftLogitsMut, DraftLogitsShape, Error, Filters, GumbelOutput,
    GumbelSample, Logits, Logprobs, RejectionOutput, RejectionSample, SamplingParams, Verification, status,
};
use specdec_suite::inputs::{Rng, TEMPERATURES};
use specdec_suite::{candle_device, test_device};

/// A flat buffer of `values` on `device`, converted to `dtype` (the core call
/// reads its host copy, [`HostValues::of`], rounded alike).
fn flat(values: &[f32], dtype: CDType, device: &Device) -> Tensor {
    Tensor::new(values, device).unwrap().to_dtype(dtype).unwrap()
}

/// The host copy of a flat tensor's elements, widened for comparisons.
enum HostValues {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
}

impl HostValues {
    fn of(t: &Tensor) -> Self {
        match t.dtype() {
            CDType::F32 => HostValues::F32(t.to_vec1().unwrap()),
            CDType::BF16 => HostValues::BF16(t.to_vec1().unwrap()),
            other => panic!("no host copy of {other:?}"),
        }
    }

    fn logits(&self, offset: usize, rows: usize, vocab: usize, row_stride: usize) -> Logits<'_, specdec::Host> {
        match self {
            HostValues::F32(v) => Logits::new(&v[offset..], rows, vocab).with_row_stride(row_stride),
            HostValues::BF16(v) => Logits::new(&v[offset..], rows, vocab).with_row_stride(row_stride),
        }
    }

    fn draft_logits(&self, offset: usize, shape: DraftLogitsShape) -> DraftLogits<'_, specdec::Host> {
        match self {
            HostValues::F32(v) => DraftLogits::new(&v[offset..], shape),
            HostValues::BF16(v) => DraftLogits::new(&v[offset..], shape),
        }
    }

    fn draft_logits_mut(&mut self, offset: usize, shape: DraftLogitsShape) -> DraftLogitsMut<'_, specdec::Host> {
        match self {
            HostValues::F32(v) => DraftLogitsMut::new(&mut v[offset..], shape),
            HostValues::BF16(v) => DraftLogitsMut::new(&mut v[offset..], shape),
        }
    }

    fn bits(&self) -> Vec<u32> {
        match self {
            HostValues::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
            HostValues::BF16(v) => v.iter().map(|x| u32::from(x.to_bits())).collect(),
        }
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
}

fn flat_bits(t: &Tensor) -> Vec<u32> {
    bits(&t.flatten_all().unwrap())
}

fn i64s(xs: &[u64], device: &Device) -> Tensor {
    Tensor::new(xs.iter().map(|&x| x as i64).collect::<Vec<_>>(), device).unwrap()
}

/// The draft logits `[slots, k, width]` as a transposed, padded view of a flat
/// `[k, slots, width + 2]` buffer: strides `(width + 2, slots·(width + 2), 1)`.
fn transposed_cache(flat: &Tensor, slots: usize, k: usize, width: usize) -> (Tensor, DraftLogitsShape) {
    let padded = width + 2;
    let view = flat.reshape((k, slots, padded)).unwrap().transpose(0, 1).unwrap().narrow(2, 0, width).unwrap();
    let shape = DraftLogitsShape { slots, k, width, stride0: padded, stride1: slots * padded };
    assert_eq!(view.stride(), [padded, slots * padded, 1]);
    (view, shape)
}

/// Random logits in `[-6, 6]` with 1 in 50 `-inf`.
fn random_logits(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| if rng.below(50) == 0 { f32::NEG_INFINITY } else { rng.uniform(-6.0, 6.0) }).collect()
}

test_device!(gumbel_sample_is_the_core_call, |backend, _scale| {
    let device = candle_device(&backend);
    let mut sampler = Sampler::new(&device).unwrap();
    let mut rng = Rng::new(0xCA4D1E);
    for (case, dtype) in [CDType::F32, CDType::BF16, CDType::F32, CDType::BF16].into_iter().enumerate() {
        let (rows, vocab, k) = (37, 1031 + case, 3);
        let row_stride = vocab + 3;
        let num_slots = rows + 2;
        // Logits: rows 1..=rows of a [rows + 1, row_stride] buffer, ids 0..vocab.
        let logits_flat = flat(&random_logits(&mut rng, (rows + 1) * row_stride), dtype, &device);
        let logits = logits_flat.reshape((rows + 1, row_stride)).unwrap().narrow(0, 1, rows).unwrap();
        let logits = logits.narrow(1, 0, vocab).unwrap();
        let mut perm: Vec<i32> = (0..num_slots as i32).collect();
        rng.shuffle(&mut perm);
        let slots: Vec<i32> = (0..rows).map(|r| if rng.below(6) == 0 { -1 } else { perm[r] }).collect();
        let pos: Vec<u64> = (0..rows).map(|_| rng.next_u64()).collect();
        let temperature: Vec<f32> = (0..num_slots).map(|_| rng.pick(&TEMPERATURES)).collect();
        let seed: Vec<u64> = (0..num_slots).map(|_| rng.next_u64()).collect();
        let top_k: Vec<i32> = (0..num_slots).map(|_| rng.pick(&[0, 1, 5, 50])).collect();
        let columns: Vec<i32> = (0..rows).map(|_| rng.below(k) as i32).collect();
        let filtered = case % 2 == 1;
        let cache_flat = flat(&vec![-7.25; k * num_slots * (vocab + 2)], dtype, &device);
        let (cache, shape) = transposed_cache(&cache_flat, num_slots, k, vocab);

        // Integer inputs as i32, or (odd cases) as i64, which the call narrows.
        let ints = |xs: &[i32]| match case % 2 {
            0 => Tensor::new(xs, &device).unwrap(),
            _ => Tensor::new(xs.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), &device).unwrap(),
        };
        let (t_slots, t_pos) = (ints(&slots), i64s(&pos, &device));
        let (t_temp, t_seed) = (Tensor::new(temperature.as_slice(), &device).unwrap(), i64s(&seed, &device));
        let (t_top_k, t_columns) = (ints(&top_k), ints(&columns));
        let mut params = Params::new(&t_temp, &t_seed);
        if filtered {
            params = params.with_filters(TensorFilters { top_k: Some(&t_top_k), ..Default::default() });
        }
        let request = LogprobsRequest { processed: true, raw: true, top: Some((5, Distribution::Processed)) };
        let got = sampler
            .gumbel_sample(
                &GumbelCall::new(&logits, &t_slots, &t_pos, params)
                    .drafting(&cache, DraftColumn::PerRow(&t_columns))
                    .with_logprobs(request),
            )
            .unwrap();

        // The core call on host copies of the same buffers.
        let host_logits = HostValues::of(&logits_flat);
        let mut host_cache = HostValues::of(&flat(&vec![-7.25; k * num_slots * (vocab + 2)], dtype, &device));
        let (mut tokens, mut status) = (vec![0i64; rows], vec![0u32; rows]);
        let (mut processed, mut raw) = (vec![0f32; rows], vec![0f32; rows]);
        let (mut top, mut ids, mut ranks) = (vec![0f32; rows * 5], vec![0i32; rows * 5], vec![0i32; rows]);
        let mut filters = Filters::none();
        if filtered {
            filters = filters.with_top_k(&top_k);
        }
        let args = GumbelSample::new(
            host_logits.logits(row_stride, rows, vocab, row_stride),
            &slots,
            &pos,
            SamplingParams::new(&temperature, &seed).with_filters(filters),
        )
        .drafting();
        let mut out = GumbelOutput::new(&mut tokens)
            .with_row_status(&mut status)
            .with_draft_logits(host_cache.draft_logits_mut(0, shape), Column::per_row(&columns))
            .with_logprobs(Logprobs::none().with_processed(&mut processed).with_raw(&mut raw).with_top(
                5,
                Distribution::Processed,
                &mut top,
                &mut ids,
                &mut ranks,
            ));
        backend.gumbel_sample(&args, &mut out).unwrap();

        let ctx = format!("case {case} ({dtype:?}, filtered {filtered})");
        assert_eq!(got.tokens.to_vec1::<i64>().unwrap(), tokens, "{ctx}: tokens");
        assert!(tokens.iter().any(|&t| t >= 0), "{ctx}: some row sampled");
        assert_eq!(got.row_status.to_vec1::<u32>().unwrap(), status, "{ctx}: row status");
        let lp = &got.logprobs;
        assert_eq!(bits(lp.processed.as_ref().unwrap()), processed.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        assert_eq!(bits(lp.raw.as_ref().unwrap()), raw.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        let (top_lp, top_ids, top_ranks) = lp.top.as_ref().unwrap();
        assert_eq!(top_lp.dims(), [rows, 5]);
        assert_eq!(flat_bits(top_lp), top.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{ctx}: top");
        assert_eq!(top_ids.flatten_all().unwrap().to_vec1::<i32>().unwrap(), ids, "{ctx}: top ids");
        assert_eq!(top_ranks.to_vec1::<i32>().unwrap(), ranks, "{ctx}: ranks");
        // The draft logits were written in place, through the view, where the core call writes.
        assert_eq!(HostValues::of(&cache_flat).bits(), host_cache.bits(), "{ctx}: draft logits");
        assert_ne!(HostValues::of(&cache_flat).bits(), HostValues::of(&flat(&[-7.25], dtype, &device)).bits());
    }
});

test_device!(rejection_sample_is_the_core_call, |backend, _scale| {
    let device = candle_device(&backend);
    let mut sampler = Sampler::new(&device).unwrap();
    let mut rng = Rng::new(0x5EC0DE);
    let cases = [
        (CDType::F32, Some(CDType::BF16), Verification::Token),
        (CDType::BF16, Some(CDType::F32), Verification::Block),
        (CDType::F32, None, Verification::Token),
        (CDType::F32, Some(CDType::F32), Verification::Block),
    ];
    for (case, (target_dtype, draft_dtype, verification)) in cases.into_iter().enumerate() {
        let (requests, k, vocab) = (19, 4, 999);
        let row_stride = vocab + 1;
        let n: Vec<usize> = (0..requests).map(|_| rng.below(k + 1)).collect();
        let mut offsets = vec![0i32];
        for &n_r in &n {
            offsets.push(offsets.last().unwrap() + n_r as i32 + 1);
        }
        let rows = *offsets.last().unwrap() as usize;
        let num_slots = requests + 1;
        let target_values = random_logits(&mut rng, rows * row_stride);
        let slots: Vec<i32> = (0..requests).map(|r| if r % 7 == 3 { -1 } else { r as i32 }).collect();
        // Draft logits near the target's rows, so that drafts are accepted and rejected.
        let padded = vocab + 2;
        let mut cache_values = vec![0.0f32; k * num_slots * padded];
        let mut drafts = vec![-1i32; rows];
        for r in 0..requests {
            for i in 0..n[r] {
                let j = offsets[r] as usize + i;
                let row = &target_values[j * row_stride..j * row_stride + vocab];
                let s = slots[r].max(0) as usize;
                for (x, &t) in row.iter().enumerate() {
                    cache_values[i * num_slots * padded + s * padded + x] = t + rng.uniform(-0.5, 0.5);
                }
                let best = (0..vocab).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
                drafts[j] = if rng.below(3) == 0 { rng.below(vocab) as i32 } else { best as i32 };
            }
        }
        let pos: Vec<u64> = (0..rows).map(|_| rng.next_u64()).collect();
        let temperature: Vec<f32> = (0..num_slots).map(|_| rng.pick(&TEMPERATURES)).collect();
        let seed: Vec<u64> = (0..num_slots).map(|_| rng.next_u64()).collect();

        let target_flat = flat(&target_values, target_dtype, &device);
        let target = target_flat.reshape((rows, row_stride)).unwrap().narrow(1, 0, vocab).unwrap();
        let cache_flat = draft_dtype.map(|d| flat(&cache_values, d, &device));
        let cache = cache_flat.as_ref().map(|f| transposed_cache(f, num_slots, k, vocab));
        // Integer inputs as i32, or (odd cases) as i64, which the call narrows.
        let ints = |xs: &[i32]| match case % 2 {
            0 => Tensor::new(xs, &device).unwrap(),
            _ => Tensor::new(xs.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), &device).unwrap(),
        };
        let (t_drafts, t_offsets) = (ints(&drafts), ints(&offsets));
        let (t_slots, t_pos) = (ints(&slots), i64s(&pos, &device));
        let (t_temp, t_seed) = (Tensor::new(temperature.as_slice(), &device).unwrap(), i64s(&seed, &device));
        let mut call =
            RejectionCall::new(&target, &t_offsets, &t_drafts, &t_slots, &t_pos, Params::new(&t_temp, &t_seed), k)
                .with_verification(verification)
                .with_logprobs(LogprobsRequest { processed: true, raw: false, top: Some((3, Distribution::Raw)) });
        if let Some((view, _)) = &cache {
            call = call.with_draft_logits(view, TensorFilters::default());
        }
        let got = sampler.rejection_sample(&call).unwrap();

        let host_target = HostValues::of(&target_flat);
        let host_cache = cache_flat.as_ref().map(HostValues::of);
        let positions = requests * (k + 1);
        let (mut tokens, mut num_emitted, mut accepted) =
            (vec![0i64; positions], vec![0i32; requests], vec![0; requests]);
        let mut status = vec![0u32; rows];
        let mut processed = vec![0f32; positions];
        let (mut top, mut ids, mut ranks) = (vec![0f32; positions * 3], vec![0i32; positions * 3], vec![0; positions]);
        let args = RejectionSample {
            target: host_target.logits(0, rows, vocab, row_stride),
            offsets: &offsets,
            drafts: &drafts,
            slots: &slots,
            pos: &pos,
            params: SamplingParams::new(&temperature, &seed),
            max_drafts: k,
            verification,
            draft_logits: host_cache.as_ref().zip(cache.as_ref()).map(|(h, (_, shape))| h.draft_logits(0, *shape)),
        };
        let mut out = RejectionOutput::new(&mut tokens, &mut num_emitted)
            .with_accepted(&mut accepted)
            .with_row_status(&mut status)
            .with_logprobs(Logprobs::none().with_processed(&mut processed).with_top(
                3,
                Distribution::Raw,
                &mut top,
                &mut ids,
                &mut ranks,
            ));
        backend.rejection_sample(&args, &mut out).unwrap();

        let ctx = format!("case {case} ({target_dtype:?} / {draft_dtype:?}, {verification:?})");
        assert_eq!(got.tokens.dims(), [requests, k + 1]);
        assert_eq!(got.tokens.flatten_all().unwrap().to_vec1::<i64>().unwrap(), tokens, "{ctx}: tokens");
        assert_eq!(got.num_emitted.to_vec1::<i32>().unwrap(), num_emitted, "{ctx}: num_emitted");
        assert_eq!(got.accepted.to_vec1::<i32>().unwrap(), accepted, "{ctx}: accepted");
        assert!(accepted.iter().any(|&a| a > 0) && accepted.iter().zip(&n).any(|(&a, &n)| (a as usize) < n), "{ctx}");
        assert_eq!(got.row_status.to_vec1::<u32>().unwrap(), status, "{ctx}: row status");
        let lp = &got.logprobs;
        assert_eq!(bits(lp.processed.as_ref().unwrap()), processed.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        assert!(lp.raw.is_none());
        let (top_lp, top_ids, top_ranks) = lp.top.as_ref().unwrap();
        assert_eq!(flat_bits(top_lp), top.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{ctx}: top");
        assert_eq!(top_ids.flatten_all().unwrap().to_vec1::<i32>().unwrap(), ids, "{ctx}: top ids");
        assert_eq!(top_ranks.to_vec1::<i32>().unwrap(), ranks, "{ctx}: ranks");
    }
});

test_device!(bad_tensors_are_typed_errors, |backend, _scale| {
    let device = candle_device(&backend);
    let mut sampler = Sampler::new(&device).unwrap();
    let logits = Tensor::new(&[[0.5f32, 2.0, -1.0], [0.0, 3.0, 1.0]], &device).unwrap();
    let slots = Tensor::new(&[0i32, -1], &device).unwrap();
    let pos = Tensor::new(&[17i64, 4], &device).unwrap();
    let (temperature, seed) = (Tensor::new(&[0.8f32], &device).unwrap(), Tensor::new(&[7i64], &device).unwrap());
    let params = Params::new(&temperature, &seed);
    let mut call = |logits: &Tensor, slots: &Tensor, pos: &Tensor| {
        sampler.gumbel_sample(&GumbelCall::new(logits, slots, pos, params)).map(|out| out.tokens)
    };
    assert_eq!(call(&logits, &slots, &pos).unwrap().to_vec1::<i64>().unwrap()[1], 1);
    // i64 slots are narrowed: the same tokens.
    let slots_i64 = Tensor::new(&[0i64, -1], &device).unwrap();
    assert_eq!(call(&logits, &slots_i64, &pos).unwrap().to_vec1::<i64>().unwrap()[1], 1);
    // The wrong dtype, rank, or a row whose logits are not adjacent.
    let slots_f32 = Tensor::new(&[0f32, -1.0], &device).unwrap();
    assert!(matches!(call(&logits, &slots_f32, &pos), Err(Error::TensorDType { what: "slots", .. })));
    let pos_u32 = Tensor::new(&[17u32, 4], &device).unwrap();
    assert!(matches!(call(&logits, &slots, &pos_u32), Err(Error::TensorDType { what: "positions", .. })));
    let flat_logits = logits.flatten_all().unwrap();
    assert!(matches!(call(&flat_logits, &slots, &pos), Err(Error::TensorShape { what: "logits", .. })));
    let transposed = Tensor::new(&[[0.5f32, 0.0], [2.0, 3.0], [-1.0, 1.0]], &device).unwrap().t().unwrap();
    assert!(matches!(call(&transposed, &slots, &pos), Err(Error::TensorLayout { what: "logits", .. })));
    let strided_slots =
        Tensor::new(&[[0i32, 5], [-1, 5]], &device).unwrap().narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
    assert!(matches!(call(&logits, &strided_slots, &pos), Err(Error::TensorLayout { what: "slots", .. })));
    // A slot out of range: a typed error where the host sees it (CPU), a
    // flagged row where it lives in device memory (CUDA), as in the core API.
    let bad_slots = Tensor::new(&[0i32, 3], &device).unwrap();
    let bad = sampler.gumbel_sample(&GumbelCall::new(&logits, &bad_slots, &pos, params));
    match &backend {
        Backend::Cpu(_) => assert!(matches!(bad, Err(Error::InvalidSlot { row: 1, slot: 3, .. })), "{bad:?}"),
        Backend::Cuda(_) => {
            let bad = bad.unwrap();
            assert_eq!(bad.tokens.to_vec1::<i64>().unwrap()[1], -1);
            assert_eq!(bad.row_status.to_vec1::<u32>().unwrap()[1] & status::INVALID_SLOT, status::INVALID_SLOT);
            assert_eq!(sampler.take_status().unwrap() & status::INVALID_SLOT, status::INVALID_SLOT);
        }
    }
    // An i64 draft past the i32 range is not read as its low word (5): it is
    // out of range, a typed error on the host, a flagged request on CUDA.
    let target = Tensor::new(&[[0.0f32, 0.0, 0.0, 0.0, 0.0, 9.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]], &device).unwrap();
    let drafts = Tensor::new(&[(1i64 << 40) + 5, -1], &device).unwrap();
    let (offsets, one_slot) = (Tensor::new(&[0i64, 2], &device).unwrap(), Tensor::new(&[0i32], &device).unwrap());
    let out = sampler.rejection_sample(&RejectionCall::new(&target, &offsets, &drafts, &one_slot, &pos, params, 1));
    match &backend {
        Backend::Cpu(_) => {
            assert!(matches!(out, Err(Error::InvalidDraft { row: 0, .. })), "{out:?}");
            assert_eq!(sampler.take_status().unwrap(), 0);
        }
        Backend::Cuda(_) => {
            // An invalid request: no tokens, its flags in the status word (its rows' status untouched).
            let out = out.unwrap();
            assert_eq!(out.num_emitted.to_vec1::<i32>().unwrap(), [0]);
            assert_eq!(out.tokens.flatten_all().unwrap().to_vec1::<i64>().unwrap(), [-1, -1]);
            assert_eq!(sampler.take_status().unwrap() & status::INVALID_DRAFT, status::INVALID_DRAFT);
        }
    }
    // Draft logits that share memory with an input the call reads.
    let shared = Tensor::zeros(12, CDType::F32, &device).unwrap();
    let logits_view = shared.narrow(0, 0, 6).unwrap().reshape((2, 3)).unwrap();
    let cache_view = shared.narrow(0, 6, 6).unwrap().reshape((2, 1, 3)).unwrap();
    let aliased = sampler
        .gumbel_sample(&GumbelCall::new(&logits_view, &slots, &pos, params).drafting(&cache_view, DraftColumn::All(0)));
    assert!(matches!(aliased, Err(Error::TensorAliased { other: "logits", .. })), "{aliased:?}");
    // A tensor on another device than the sampler's.
    if device.is_cuda() {
        let on_cpu = pos.to_device(&Device::Cpu).unwrap();
        let err = sampler.gumbel_sample(&GumbelCall::new(&logits, &slots, &on_cpu, params));
        assert!(matches!(err, Err(Error::TensorDevice { what: "positions", .. })), "{err:?}");
    }
});

/// candle's tensors hold `cudarc` slices: specdec must build against the same
/// `cudarc`, or its CUDA path would not compile against candle's (and two
/// copies of the driver bindings would be linked). Needs cargo, so not in the
/// GPU bundles (their machines have none); CI runs it. Not `--offline`: a
/// fresh machine's build of the tests leaves out the crates only
/// `candle-cuda` uses, which `cargo tree` must read (`--locked`: as pinned).
#[cfg(not(feature = "gpu"))]
#[test]
fn specdec_and_candle_share_one_cudarc() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--locked", "-p", "specdec", "--features", "candle-cuda", "-e", "normal", "-i", "cudarc"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // With two versions, `cargo tree -i cudarc` fails, naming them.
    assert!(out.status.success(), "cargo tree -i cudarc failed (two cudarc versions?):\n{stderr}");
    let versions: std::collections::BTreeSet<&str> =
        stdout.lines().filter(|l| l.starts_with("cudarc ")).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(versions.len(), 1, "cudarc versions in the tree: {versions:?}\n{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("candle-core ")), "candle-core depends on that cudarc:\n{stdout}");
}
