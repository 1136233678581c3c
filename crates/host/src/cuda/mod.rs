//! The CUDA backend: launches the embedded PTX on a caller's `cudarc` stream.
//!
//! The PTX is built from `crates/kernels` at compile time and embedded; the
//! driver JIT-compiles it for the GPU when the module is first loaded, once
//! per context. Calls take `cudarc` views of the caller's device buffers and a
//! reusable [`Workspace`]; a call allocates nothing and never synchronises,
//! so it can be captured in a CUDA graph.

mod gumbel;
mod launch;
mod logprobs;
mod rejection;
mod rounds;
mod workspace;

pub use workspace::Workspace;

use workspace::{MOST_CHUNKS, Messages, Split, Spread, threshold_split};

use crate::error::{Error, Result};
use crate::memory::Device;
use crate::params::Filters;
use crate::tensor::DType;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DevicePtr, SyncOnDrop};
use specdec_core::layout::FilterTables;
use specdec_core::layout::{BLOCK_THREADS, SHARED_BYTES};
use specdec_core::names::{Kernel as KernelName, Symbol};
use specdec_core::sample::FLOOR_MARGIN;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The embedded PTX.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/specdec.ptx"));
/// The architecture the PTX was built for (`SPECDEC_PTX_ARCH` at build time).
pub const PTX_ARCH: &str = env!("SPECDEC_PTX_ARCH");

/// Whether a CUDA driver library can be loaded on this machine. Probing this
/// first matters: `cudarc` panics on first use without one.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library; no driver call is made.
    #[cfg(not(feature = "candle-cuda"))]
    return unsafe { cudarc::driver::sys::is_culib_present() };
    // candle's CUDA build links libcuda: the process would not have started without it.
    #[cfg(feature = "candle-cuda")]
    true
}

/// A loaded kernel, and how many of its blocks one SM holds at once (its
/// registers and shared memory decide), which the splits plan waves with.
#[derive(Clone)]
struct Kernel {
    function: CudaFunction,
    blocks_per_sm: u32,
}

/// The loaded module of one context, and its functions.
struct Kernels {
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<Symbol, Kernel>>,
}

impl Kernels {
    /// The module for `ctx`, loaded on first use and shared afterwards.
    fn for_context(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
        /// Modules by context handle; weak, so a dropped context's module goes too.
        type Loaded = Mutex<Vec<(usize, Weak<Kernels>)>>;
        static LOADED: OnceLock<Loaded> = OnceLock::new();
        let mut loaded = LOADED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        let key = ctx.cu_ctx() as usize;
        loaded.retain(|(_, k)| k.strong_count() > 0);
        if let Some(k) = loaded.iter().find(|(c, _)| *c == key).and_then(|(_, k)| k.upgrade()) {
            return Ok(k);
        }
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(PTX))
            .map_err(|source| Error::PtxLoad { arch: PTX_ARCH, source })?;
        let kernels = Arc::new(Kernels { module, functions: Mutex::default() });
        loaded.push((key, Arc::downgrade(&kernels)));
        Ok(kernels)
    }

    fn function(&self, symbol: Symbol) -> Result<Kernel> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = functions.get(&symbol) {
            return Ok(k.clone());
        }
        let function = self
            .module
            .load_function(&symbol.to_string())
            .map_err(|source| Error::PtxLoad { arch: PTX_ARCH, source })?;
        let blocks_per_sm =
            function.occupancy_max_active_blocks_per_multiprocessor(BLOCK_THREADS, SHARED_BYTES as usize, None)?;
        let kernel = Kernel { function, blocks_per_sm: blocks_per_sm.max(1) };
        functions.insert(symbol, kernel.clone());
        Ok(kernel)
    }
}

/// The launch of a kernel over rows of `vocab` ids.
struct Launch {
    kernel: Kernel,
    split: Split,
}

/// A kernel's name and those of its variants, if it has them: `lean`, in 64
/// registers (4 blocks per SM), for grids of more than one wave
/// ([`Workspace::lean`]); `small`, reading one quad a batch, for one wave of
/// short chunks ([`Workspace::small`]).
struct Variants {
    op: KernelName,
    /// The blocks per SM its split aims for at small batch.
    spread: Spread,
    lean: Option<KernelName>,
    small: Option<KernelName>,
}

impl Cuda {
    /// `v.op`'s kernel for `dtypes` and its split over `rows` rows of `vocab`
    /// ids; or its lean variant and the split for that, or its small variant
    /// with the same split, where the workspace's rules say so.
    fn launch_for(
        &self,
        ws: &Workspace,
        v: Variants,
        (logits, draft): (DType, DType),
        (rows, vocab): (usize, usize),
    ) -> Result<Launch> {
        let kernel = self.kernels.function(v.op.symbol(logits, draft))?;
        let split = ws.split(rows, vocab, kernel.blocks_per_sm, v.spread)?;
        match (v.lean, v.small) {
            (Some(lean), _) if ws.lean(rows, split, kernel.blocks_per_sm) => {
                let kernel = self.kernels.function(lean.symbol(logits, draft))?;
                let split = ws.split(rows, vocab, kernel.blocks_per_sm, v.spread)?;
                Ok(Launch { kernel, split })
            }
            (_, Some(small)) if ws.small(rows, split, kernel.blocks_per_sm) => {
                Ok(Launch { kernel: self.kernels.function(small.symbol(logits, draft))?, split })
            }
            _ => Ok(Launch { kernel, split }),
        }
    }
}

/// The CUDA backend, bound to one stream.
#[derive(Clone)]
pub struct Cuda {
    stream: Arc<CudaStream>,
    kernels: Arc<Kernels>,
    sm_count: u32,
    /// `RejectionParams::floor_margin`.
    floor_margin: f32,
}

impl std::fmt::Debug for Cuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cuda").field("ordinal", &self.stream.context().ordinal()).finish()
    }
}

impl Cuda {
    /// The backend on a caller's stream (an engine's own `cudarc` stream).
    ///
    /// # Errors
    /// [`Error::PtxLoad`] if the driver cannot JIT the PTX for this GPU.
    pub fn new(stream: Arc<CudaStream>) -> Result<Self> {
        let ctx = stream.context().clone();
        let kernels = Kernels::for_context(&ctx)?;
        let sm_count = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        Ok(Cuda { stream, kernels, sm_count, floor_margin: FLOOR_MARGIN })
    }

    /// This backend with the resample's floors seeded `margin` below each
    /// candidate's log-mass rather than [`FLOOR_MARGIN`]. For tests of the
    /// refold that follows a floor no score reached: `f32::NEG_INFINITY`
    /// seeds them at `+inf`, so that every resample with a finite target
    /// log-sum-exp refolds. The tokens are the same at every margin.
    #[doc(hidden)]
    pub fn with_floor_margin(mut self, margin: f32) -> Self {
        self.floor_margin = margin;
        self
    }

    /// The backend on a new stream of device `ordinal`.
    ///
    /// # Errors
    /// [`Error::NoDriver`] without a driver, [`Error::NoDevice`] without that device.
    pub fn on_device(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(Error::NoDriver);
        }
        let count = CudaContext::device_count().map_err(|e| Error::NoDevice(e.to_string()))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::NoDevice(format!("device {ordinal} requested, {count} present")));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::NoDevice(e.to_string()))?;
        Self::new(ctx.new_stream()?)
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// "NVIDIA H200 (sm_90)".
    pub fn device_name(&self) -> Result<String> {
        let ctx = self.stream.context();
        let (major, minor) = ctx.compute_capability()?;
        Ok(format!("{} (sm_{major}{minor})", ctx.name()?))
    }

    /// A workspace for calls of up to `max_rows` rows on this backend's
    /// stream (and its clones'): one per stream.
    pub fn workspace(&self, max_rows: usize) -> Result<Workspace> {
        Workspace::new(&self.stream, self.sm_count, max_rows, 0)
    }

    /// A workspace for sharded calls ([`Cuda::sharded_gumbel_sample`],
    /// [`Cuda::sharded_rejection_sample`]) of up to `max_rows` rows (and
    /// (request, row) pairs) over up to `ranks` ranks, and for unsharded
    /// calls: [`Cuda::workspace`]'s, plus a rank's message and every rank's
    /// (`(1 + ranks) · (32 + 160 · max_rows)` bytes).
    pub fn sharded_workspace(&self, max_rows: usize, ranks: usize) -> Result<Workspace> {
        Workspace::new(&self.stream, self.sm_count, max_rows, ranks.max(1))
    }
}

/// The device addresses of `filters`' tables (0 for each absent one), and
/// the guards that record cudarc's events for them after the launch.
fn filter_tables<'s>(
    filters: &'s Filters<'_, Device>,
    stream: &'s CudaStream,
) -> (FilterTables, [Option<SyncOnDrop<'s>>; 3]) {
    let (top_k, g1) = filters.top_k.as_ref().map(|t| t.device_ptr(stream)).unzip();
    let (top_p, g2) = filters.top_p.as_ref().map(|t| t.device_ptr(stream)).unzip();
    let (min_p, g3) = filters.min_p.as_ref().map(|t| t.device_ptr(stream)).unzip();
    (FilterTables { top_k: top_k.unwrap_or(0), top_p: top_p.unwrap_or(0), min_p: min_p.unwrap_or(0) }, [g1, g2, g3])
}
