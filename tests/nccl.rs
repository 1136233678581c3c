//! NCCL's exchange of sharded calls (`specdec::shard::Nccl`, feature `nccl`,
//! `docs/VOCAB_PARALLEL.md` §5), with the `gpu` feature (candle links the CUDA
//! libraries, NCCL among them, so this binary needs the GPU machine's:
//! `cuda-libs.sh` finds PyTorch's): one rank of a communicator gathers its
//! own bytes. (Without a library, `Nccl` is a typed error: `tests/sharded.rs`.)
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
