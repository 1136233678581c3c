//! NCCL's exchange of sharded calls (`specdec::shard::Nccl`, feature `nccl`,
//! `docs/VOCAB_PARALLEL.md` §5), with the `gpu` feature (candle links the CUDA
//! libraries, NCCL among them, so this binary needs the GPU machine's:
//! `cuda-libs.sh` finds PyTorch's): one rank of a communicator gathers its
//! own bytes, and a sharded `gumbel_sample` and `rejection_sample` over it,
//! eager and captured in a CUDA graph, are the unsharded calls; a rank on
//! every GPU of the machine (ignored: run with `--ignored` where there are
//! two or more). (Without a library, `Nccl` is a typed error:
//! `tests/sharded.rs`.)
#![cfg(feature = "gpu")]

#[test]
fn one_nccl_rank_gathers_its_own_bytes() {
    use specdec::shard::Nccl;
    use specdec_suite::sharding::{gather_rounds, message};
    let cuda = specdec_suite::cuda_device();
    let id = Nccl::unique_id().expect("an id");
    let mut nccl = Nccl::join(cuda.stream().clone(), 0, 1, id).expect("a communicator");
    let stream = nccl.stream();
    let got = gather_rounds(&mut nccl, &stream, &[1000], 2);
    for (round, recv) in got.into_iter().enumerate() {
        assert_eq!(recv.expect("the round gathered"), message(0, round, 1000), "round {round}");
    }
}

/// A sharded `gumbel_sample` of one NCCL rank (the whole row) is the
/// unsharded call, eagerly and as a CUDA graph captured once and replayed:
/// the sampling kernel, NCCL's all-gather and the combine capture together
/// (with filters, the threshold kernel, the lists' all-gather and the merge
/// before them).
#[test]
fn a_one_rank_nccl_call_is_the_unsharded_call_eager_and_captured() {
    use specdec::filter::Filter;
    use specdec_suite::FilterTable;
    for filters in [
        FilterTable::none(),
        FilterTable::per_slot(&[
            Filter::OFF,
            Filter { top_k: 40, top_p: 0.9, ..Filter::OFF },
            Filter { top_k: 3, ..Filter::OFF },
            Filter::OFF,
        ]),
    ] {
        one_rank_gumbel_sample(filters);
    }
}

/// [`a_one_rank_nccl_call_is_the_unsharded_call_eager_and_captured`] with `filters`.
fn one_rank_gumbel_sample(filters: specdec_suite::FilterTable) {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use specdec::shard::{Nccl, Shard};
    use specdec::{DType, GumbelOutput, GumbelSample, Logits, SamplingParams};
    use specdec_suite::filters::DeviceFilters;
    use specdec_suite::inputs::Rng;
    use specdec_suite::sharding::gumbel_rows;

    let cuda = specdec_suite::cuda_device();
    // SAFETY: this test's buffers are used on its one stream only (with
    // tracking on, a capture fails: each view waits on an event recorded before it).
    unsafe { cuda.stream().context().disable_event_tracking() };
    let s = cuda.stream().clone();
    let (rows, vocab) = (48, 4097);
    let mut b = gumbel_rows(vocab, rows, DType::F32, &mut Rng::new(51));
    b.filters = filters;
    let table = DeviceFilters::upload(&s, &b.filters).expect("upload");
    let want = b.clone().run_device(&cuda, &mut cuda.workspace(rows).expect("a workspace")).expect("unsharded");
    let logits = s.clone_htod(&b.logits.f32s(0..rows * vocab)).expect("upload");
    let (slots, pos) = (s.clone_htod(&b.slots).expect("upload"), s.clone_htod(&b.pos).expect("upload"));
    let temperature = s.clone_htod(&b.temperature).expect("upload");
    let seed = s.clone_htod(&b.seed).expect("upload");
    let mut tokens = s.alloc_zeros::<i64>(rows).expect("upload");
    let mut status = s.alloc_zeros::<u32>(rows).expect("upload");
    let mut nccl = Nccl::join(s.clone(), 0, 1, Nccl::unique_id().expect("an id")).expect("a communicator");
    let mut ws = cuda.sharded_workspace(rows, 1).expect("a workspace");
    let mut call = |tokens: &mut _, status: &mut _| {
        let params = SamplingParams::new(&temperature, &seed).with_filters(table.view());
        let args = GumbelSample::new(Logits::new(&logits, rows, vocab), &slots, &pos, params);
        let mut out = GumbelOutput::new(tokens).with_row_status(status);
        cuda.sharded_gumbel_sample(&mut ws, Shard { offset: 0, vocab }, &mut nccl, &args, &mut out)
    };
    let read = |tokens: &mut cudarc::driver::CudaSlice<i64>, status: &mut cudarc::driver::CudaSlice<u32>| {
        s.synchronize().expect("synchronize");
        let got = specdec_suite::batch::Sampled {
            tokens: s.clone_dtoh(tokens).expect("tokens"),
            row_status: s.clone_dtoh(status).expect("statuses"),
        };
        // Poison the outputs for the next run.
        s.memcpy_htod(&vec![i64::MIN; rows], tokens).expect("poison");
        s.memcpy_htod(&vec![u32::MAX; rows], status).expect("poison");
        got
    };
    call(&mut tokens, &mut status).expect("the eager call");
    assert_eq!(read(&mut tokens, &mut status), want, "eager");
    s.synchronize().expect("synchronize");
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).expect("begin_capture");
    let launched = call(&mut tokens, &mut status);
    let graph = s.end_capture(CUgraphInstantiate_flags(0));
    launched.expect("the call during capture");
    let graph = graph.expect("end_capture (a synchronising call inside the capture invalidates it)").expect("a graph");
    for replay in 0..3 {
        graph.launch().expect("graph launch");
        assert_eq!(read(&mut tokens, &mut status), want, "replay {replay}");
    }
}

/// The ranks of the multi-GPU tests: every GPU of the machine, two at least.
fn gpu_ranks() -> usize {
    let gpus = cudarc::driver::CudaContext::device_count().expect("the GPU count") as usize;
    assert!(gpus >= 2, "this test needs two GPUs or more, and the machine has {gpus}");
    gpus
}

/// `rank(r, backend, nccl)` for ranks `0 .. ranks`, rank `r` on GPU `r` and
/// a thread of its own, all joined in one NCCL communicator; the results in
/// rank order.
fn on_gpus<R: Send>(
    ranks: usize,
    rank: impl Fn(usize, &specdec::Cuda, &mut specdec::shard::Nccl) -> R + Sync,
) -> Vec<R> {
    use specdec::shard::Nccl;
    let (id, rank) = (Nccl::unique_id().expect("an id"), &rank);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                s.spawn(move || {
                    let backend = specdec::Cuda::on_device(r).unwrap_or_else(|e| panic!("GPU {r}: {e}"));
                    let mut nccl = Nccl::join(backend.stream().clone(), r, ranks, id).expect("a communicator");
                    rank(r, &backend, &mut nccl)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank")).collect()
    })
}

/// `P` NCCL ranks (every GPU of the machine), a GPU and a thread each,
/// sample exactly as the unsharded call on GPU 0 (VOCAB_PARALLEL §6 step 6).
#[test]
#[ignore = "needs two GPUs or more: run with --ignored on a machine of several"]
fn nccl_ranks_on_every_gpu_are_the_unsharded_call() {
    use specdec::DType;
    use specdec_suite::inputs::Rng;
    use specdec_suite::sharding::{gumbel_rows, ids, rank_batch, shards};

    let (cuda, ranks) = (specdec_suite::cuda_device(), gpu_ranks());
    let mut rng = Rng::new(52);
    for (vocab, rows) in [(151_936, 64), (4097, 21)] {
        let b = gumbel_rows(vocab, rows, DType::BF16, &mut rng);
        let want = b.clone().run_device(&cuda, &mut cuda.workspace(rows).expect("a workspace")).expect("unsharded");
        let shards = shards(vocab, ranks, &mut rng);
        let got = on_gpus(ranks, |r, rank, nccl| {
            let mut ws = rank.sharded_workspace(rows, ranks).expect("a workspace");
            let mut mine = rank_batch(&b, ids(&shards, r));
            mine.run_device_with(rank, |call, out| rank.sharded_gumbel_sample(&mut ws, shards[r], nccl, call, out))
        });
        for (r, result) in got.into_iter().enumerate() {
            assert_eq!(result.unwrap_or_else(|e| panic!("V {vocab} rank {r}: {e}")), want, "V {vocab} rank {r}");
        }
    }
}

/// A sharded `rejection_sample` of one NCCL rank (the whole row) is the
/// unsharded call, eagerly and as a CUDA graph captured once and replayed:
/// pass 1, both all-gathers, the decision, pass 2 and the combine capture
/// together (no host synchronisation inside the call); with processed and
/// raw log-probabilities, their kernels and all-gather too.
#[test]
fn a_one_rank_nccl_verify_is_the_unsharded_call_eager_and_captured() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use specdec::DType;
    use specdec::shard::{Nccl, Shard};
    use specdec_suite::drafting::{RandomSpec, random_verify};
    use specdec_suite::inputs::Rng;
    use specdec_suite::sharding::add_specials;
    use specdec_suite::verify::Asked;

    let cuda = specdec_suite::cuda_device();
    // SAFETY: as in the `gumbel_sample` test above.
    unsafe { cuda.stream().context().disable_event_tracking() };
    let mut rng = Rng::new(53);
    let mut v = random_verify(&mut rng, RandomSpec::new(4097, 12, 4, DType::F32, Some(DType::BF16)));
    add_specials(&mut v, &mut rng);
    let rows = v.requests() * (v.max_drafts + 1);
    let s = cuda.stream().clone();
    let mut nccl = Nccl::join(s.clone(), 0, 1, Nccl::unique_id().expect("an id")).expect("a communicator");
    let mut ws = cuda.sharded_workspace(rows, 1).expect("a workspace");
    let mut unsharded_ws = cuda.workspace(rows).expect("a workspace");
    let shard = Shard { offset: 0, vocab: v.vocab };
    for asked in [None, Some(Asked { processed: true, raw: true, top: None })] {
        let want = v
            .run_device_logprobs_with(&cuda, asked, |call, out| cuda.rejection_sample(&mut unsharded_ws, call, out))
            .expect("unsharded");
        let eager = v.run_device_logprobs_with(&cuda, asked, |call, out| {
            cuda.sharded_rejection_sample(&mut ws, shard, &mut nccl, call, out)
        });
        assert_eq!(eager.expect("the eager call"), want, "eager, {asked:?}");
        let captured = v.run_device_logprobs_with(&cuda, asked, |call, out| {
            s.synchronize()?;
            s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            let launched = cuda.sharded_rejection_sample(&mut ws, shard, &mut nccl, call, out);
            let graph = s.end_capture(CUgraphInstantiate_flags(0));
            launched?;
            let graph = graph?.expect("end_capture gives a graph (a synchronising call inside invalidates it)");
            for _ in 0..3 {
                graph.launch()?;
            }
            Ok(())
        });
        assert_eq!(captured.expect("the captured call"), want, "captured and replayed, {asked:?}");
    }
}

/// `P` NCCL ranks (every GPU of the machine), a GPU and a thread each,
/// verify exactly as the unsharded call on GPU 0 (VOCAB_PARALLEL §6 step 6).
#[test]
#[ignore = "needs two GPUs or more: run with --ignored on a machine of several"]
fn nccl_ranks_on_every_gpu_verify_as_the_unsharded_call() {
    use specdec::DType;
    use specdec_suite::drafting::{RandomSpec, random_verify};
    use specdec_suite::inputs::Rng;
    use specdec_suite::sharding::{add_specials, ids, rank_verify, run_shards};

    let (cuda, ranks) = (specdec_suite::cuda_device(), gpu_ranks());
    let mut rng = Rng::new(54);
    for (vocab, requests, draft) in
        [(151_936, 16, Some(DType::BF16)), (151_936, 16, None), (4097, 24, Some(DType::F32))]
    {
        let mut v = random_verify(&mut rng, RandomSpec::new(vocab, requests, 7, DType::BF16, draft));
        add_specials(&mut v, &mut rng);
        let rows = v.requests() * (v.max_drafts + 1);
        let want = v.run_device(&cuda, &mut cuda.workspace(rows).expect("a workspace")).expect("unsharded");
        let shards = run_shards(vocab, ranks, &mut rng);
        let got = on_gpus(ranks, |r, rank, nccl| {
            let mut ws = rank.sharded_workspace(rows, ranks).expect("a workspace");
            rank_verify(&v, ids(&shards, r)).run_device_sharded(rank, &mut ws, shards[r], nccl)
        });
        for (r, result) in got.into_iter().enumerate() {
            let ctx = format!("V {vocab}, draft {draft:?}, rank {r} of {ranks}");
            assert_eq!(result.unwrap_or_else(|e| panic!("{ctx}: {e}")), want, "{ctx}");
        }
    }
}
