//! NCCL's exchange of sharded calls (`specdec::shard::Nccl`, feature `nccl`,
//! `docs/VOCAB_PARALLEL.md` §5). Without an NCCL library it is a typed error,
//! not a panic (CI). With the `gpu` feature (candle links the CUDA libraries,
//! NCCL among them, so this binary needs the GPU machine's: `cuda-libs.sh`
//! finds PyTorch's), one rank of a communicator gathers its own bytes.

#[cfg(not(feature = "gpu"))]
#[test]
fn nccl_without_a_library_is_an_error() {
    let id = specdec::shard::Nccl::unique_id();
    // SAFETY: only tries to open the library.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        let note = "note: an NCCL library loads here; its absence is tested where it does not (CI)";
        // Straight to stderr: the harness captures only print!/eprint!.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{note}\n").as_bytes());
        return;
    }
    assert!(matches!(id, Err(specdec::Error::Exchange(_))), "{id:?}");
}

#[cfg(feature = "gpu")]
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
