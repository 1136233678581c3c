//! Exchanges of sharded calls on device memory (`docs/VOCAB_PARALLEL.md` §5):
//! ranks in one process on one GPU or several ([`InProcessCuda`]), and
//! NCCL ([`Nccl`], feature `nccl`). Each enqueues on its rank's stream, which
//! must be the stream the call runs on; neither synchronises a stream.

use super::Exchange;
use crate::error::{Error, Result};
use crate::memory::Device;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DriverError};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

/// `P` ranks in one process, one thread each, each enqueueing on its own
/// stream (of one GPU or several): the device twin of [`super::InProcess`],
/// for tests and for a sharded call without a collective library.
///
/// An all-gather records an event after the work its stream has enqueued
/// (the send buffer's writes), meets the other ranks at a barrier, makes its
/// stream wait for theirs and copies their send buffers into its receive
/// buffer on it (`cuMemcpyAsync`: peer copies between GPUs too); its stream
/// then waits until every rank's copies are done, so that later work on it
/// may overwrite its send buffer. The threads meet three times a call; no
/// stream is synchronised, and nothing is allocated on the device.
pub struct InProcessCuda {
    rank: usize,
    stream: Arc<CudaStream>,
    shared: Arc<Shared>,
}

/// What a rank has posted in the current all-gather.
#[derive(Default)]
struct Posted {
    /// Its send buffer's address and length.
    send: (u64, usize),
    /// Recorded after the work that wrote its send buffer.
    written: Option<Arc<CudaEvent>>,
    /// Recorded after its copies of every rank's buffer.
    copied: Option<Arc<CudaEvent>>,
}

struct Shared {
    ranks: usize,
    barrier: Barrier,
    posted: Mutex<Vec<Posted>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Vec<Posted>> {
        self.posted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl InProcessCuda {
    /// The members of one group, rank `r` enqueueing on `streams[r]`: give
    /// each to its own thread, and run rank `r`'s call on `streams[r]`.
    pub fn group(streams: Vec<Arc<CudaStream>>) -> Vec<InProcessCuda> {
        let ranks = streams.len();
        let posted = Mutex::new((0..ranks).map(|_| Posted::default()).collect());
        let shared = Arc::new(Shared { ranks, barrier: Barrier::new(ranks), posted });
        streams
            .into_iter()
            .enumerate()
            .map(|(rank, stream)| InProcessCuda { rank, stream, shared: shared.clone() })
            .collect()
    }

    /// The stream this rank's all-gathers are enqueued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// An event recorded on this rank's stream now.
    fn event(&self) -> std::result::Result<Arc<CudaEvent>, DriverError> {
        self.stream.record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).map(Arc::new)
    }

    /// Step 2 of an all-gather: every rank's send buffer into `recv` (at
    /// `dst`), in rank order, each after its writes.
    fn copy_all(&self, posted: &[Posted], (dst, recv_len): (u64, usize)) -> Result<()> {
        let len = posted[self.rank].send.1;
        if let Some((rank, p)) = posted.iter().enumerate().find(|(_, p)| p.send.1 != len) {
            return Err(Error::Exchange(format!("rank {rank} sent {} bytes, rank {} {len}", p.send.1, self.rank)));
        }
        if recv_len != self.shared.ranks * len {
            let ranks = self.shared.ranks;
            return Err(Error::Exchange(format!(
                "rank {} gave {recv_len} bytes to receive {ranks} × {len}",
                self.rank
            )));
        }
        self.stream.context().bind_to_thread()?;
        for (q, p) in posted.iter().enumerate() {
            let written = p.written.as_ref().ok_or(Error::PeerFailed { rank: q })?;
            self.stream.wait(written)?;
            // SAFETY: `p.send` is rank q's send view, alive until every rank
            // has passed this all-gather's last barrier, and its writes are
            // ordered before the copy (the wait above); the destination is
            // `len` bytes of this rank's receive view at `q · len`, inside it
            // (its length checked above).
            unsafe {
                cudarc::driver::sys::cuMemcpyAsync(dst + (q * len) as u64, p.send.0, len, self.stream.cu_stream())
                    .result()?;
            }
        }
        Ok(())
    }
}

impl Exchange<Device> for InProcessCuda {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.shared.ranks
    }

    /// Every rank passes every barrier whatever fails, so that none waits
    /// forever; a length that differs between ranks is an error on all of them.
    fn all_gather(&mut self, send: CudaView<'_, u8>, mut recv: CudaViewMut<'_, u8>) -> Result<()> {
        let stream = self.stream.clone();
        let recv_len = recv.len();
        let (src, _read) = send.device_ptr(&stream);
        let (dst, _write) = recv.device_ptr_mut(&stream);
        // 1. Post the send buffer and an event after its writes.
        let written = self.event();
        self.shared.lock()[self.rank] =
            Posted { send: (src, send.len()), written: written.as_ref().ok().cloned(), copied: None };
        self.shared.barrier.wait();
        // 2. Copy every rank's buffer; post an event after the copies.
        let copied = {
            let posted = self.shared.lock();
            self.copy_all(&posted, (dst, recv_len))
        };
        let done = self.event();
        self.shared.lock()[self.rank].copied = done.as_ref().ok().cloned();
        self.shared.barrier.wait();
        // 3. Nothing after this on the stream runs before every rank has copied this rank's buffer.
        let waited: Result<()> = {
            let posted = self.shared.lock();
            posted.iter().enumerate().filter(|(q, _)| *q != self.rank).try_for_each(|(q, p)| {
                let copied = p.copied.as_ref().ok_or(Error::PeerFailed { rank: q })?;
                Ok(stream.wait(copied)?)
            })
        };
        // Nobody posts the next all-gather's buffers before everyone has read these.
        self.shared.barrier.wait();
        written?;
        copied?;
        done?;
        waited
    }
}

/// A rank of an NCCL communicator (feature `nccl`): `ncclAllGather` on the
/// communicator's stream, which the call must run on. Capturable in a CUDA
/// graph, as NCCL collectives are; no host synchronisation.
#[cfg(feature = "nccl")]
pub struct Nccl {
    comm: cudarc::nccl::Comm,
}

#[cfg(feature = "nccl")]
impl Nccl {
    /// Rank `rank` of `ranks`, joining the communicator of `id` (made once by
    /// [`Nccl::unique_id`] and sent to every rank), enqueueing on `stream`.
    ///
    /// # Errors
    /// [`Error::Exchange`] where no NCCL library can be loaded or NCCL fails.
    pub fn join(stream: Arc<CudaStream>, rank: usize, ranks: usize, id: cudarc::nccl::Id) -> Result<Nccl> {
        nccl_present()?;
        let comm = cudarc::nccl::Comm::from_rank(stream, rank, ranks, id).map_err(nccl_error)?;
        Ok(Nccl { comm })
    }

    /// A new communicator's id, for rank 0 to make and send to the others.
    ///
    /// # Errors
    /// [`Error::Exchange`] where no NCCL library can be loaded or NCCL fails.
    pub fn unique_id() -> Result<cudarc::nccl::Id> {
        nccl_present()?;
        cudarc::nccl::Id::new().map_err(nccl_error)
    }

    /// The stream the communicator enqueues on.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.comm.stream()
    }
}

/// `Ok` where an NCCL library can be loaded (`cudarc` would panic on first
/// use without one).
#[cfg(feature = "nccl")]
fn nccl_present() -> Result<()> {
    // candle's CUDA build links the CUDA libraries, NCCL with them: the process would not have started without it.
    #[cfg(feature = "candle-cuda")]
    let present = true;
    // SAFETY: only tries to open the library; no NCCL call is made.
    #[cfg(not(feature = "candle-cuda"))]
    let present = unsafe { cudarc::nccl::sys::is_culib_present() };
    if present { Ok(()) } else { Err(Error::Exchange("no NCCL library (libnccl.so) can be loaded".into())) }
}

#[cfg(feature = "nccl")]
fn nccl_error(e: cudarc::nccl::result::NcclError) -> Error {
    Error::Exchange(format!("NCCL: {e:?}"))
}

#[cfg(feature = "nccl")]
impl Exchange<Device> for Nccl {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn ranks(&self) -> usize {
        self.comm.world_size()
    }

    /// NCCL cannot see that the ranks' lengths differ: every rank must pass
    /// the same (a sharded call sizes its messages from what every rank
    /// passes alike).
    fn all_gather(&mut self, send: CudaView<'_, u8>, mut recv: CudaViewMut<'_, u8>) -> Result<()> {
        let ranks = self.ranks();
        if recv.len() != ranks * send.len() {
            let detail = format!("rank {} gave {} bytes to receive {ranks} × {}", self.rank(), recv.len(), send.len());
            return Err(Error::Exchange(detail));
        }
        self.comm.all_gather(&send, &mut recv).map_err(nccl_error)?;
        Ok(())
    }
}
