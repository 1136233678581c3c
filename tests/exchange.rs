//! The in-process exchange of sharded calls on device memory
//! (`specdec::shard::InProcessCuda`, `docs/VOCAB_PARALLEL.md` §5), with the
//! `gpu` feature: ranks on device 0, one stream and thread each, gather every
//! rank's bytes in rank order, round after round, and fail alike on unequal
//! lengths. (NCCL's: `tests/nccl.rs`.)
#![cfg(feature = "gpu")]

use specdec::Error;
use specdec::shard::InProcessCuda;
use specdec_suite::sharding::{gather_rounds, message};

#[test]
fn in_process_ranks_on_one_gpu_gather_in_rank_order() {
    let cuda = specdec_suite::cuda_device();
    let ctx = cuda.stream().context().clone();
    for ranks in [1, 2, 3, 8] {
        let streams: Vec<_> = (0..ranks).map(|_| ctx.new_stream().expect("a stream")).collect();
        let len = 4099;
        let got = std::thread::scope(|s| {
            let handles: Vec<_> = InProcessCuda::group(streams.clone())
                .into_iter()
                .map(|mut x| {
                    let stream = x.stream().clone();
                    s.spawn(move || gather_rounds(&mut x, &stream, &vec![len; ranks], 3))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a rank")).collect::<Vec<_>>()
        });
        for (r, rounds) in got.into_iter().enumerate() {
            for (round, recv) in rounds.into_iter().enumerate() {
                let want: Vec<u8> = (0..ranks).flat_map(|q| message(q, round, len)).collect();
                assert_eq!(recv.expect("the round gathered"), want, "P {ranks}, rank {r}, round {round}");
            }
        }
    }
    // Unequal lengths: an error on every rank, and none waits forever.
    let streams: Vec<_> = (0..3).map(|_| ctx.new_stream().expect("a stream")).collect();
    let got = std::thread::scope(|s| {
        let handles: Vec<_> = InProcessCuda::group(streams)
            .into_iter()
            .map(|mut x| {
                let stream = x.stream().clone();
                s.spawn(move || gather_rounds(&mut x, &stream, &[8, 9, 8], 1))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank")).collect::<Vec<_>>()
    });
    for rounds in got {
        assert!(matches!(rounds[0], Err(Error::Exchange(_))), "{:?}", rounds[0]);
    }
}
