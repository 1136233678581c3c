//! Where a call runs: on the host (the CPU backend), or on a CUDA device on
//! the caller's stream, with the backend and workspace this process keeps
//! for that stream.

use cudarc::driver::{CudaContext, CudaStream, sys};
use specdec::{Cuda, Error, Result, Workspace};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

/// Where a call's tensors live, and so where it runs.
pub enum Target {
    Host,
    Cuda {
        ordinal: i32,
        stream: Arc<CudaStream>,
        /// The `stream` argument of `__dlpack__` that names the same stream.
        dlpack_stream: usize,
        /// The thread's current context before the call, current again when the call is done.
        _restore: RestoreContext,
    },
}

impl Target {
    /// The CUDA target of device `ordinal` and the raw `CUstream` handle
    /// `stream` (0: the legacy default stream).
    pub fn cuda(ordinal: i32, stream: usize) -> Result<Target> {
        static DRIVER: OnceLock<bool> = OnceLock::new();
        if !*DRIVER.get_or_init(specdec::cuda::driver_present) {
            return Err(Error::NoDriver);
        }
        // Before `context`, which may make the device's context current.
        let restore = RestoreContext::save()?;
        let ctx = context(ordinal)?;
        // SAFETY: the caller's stream belongs to the device's primary context (the one
        // PyTorch, CuPy and JAX use) and outlives the call; the wrapper never destroys it.
        let stream = unsafe { ctx.wrap_borrowed_stream(stream as sys::CUstream) };
        // DLPack's name for the legacy default stream is 1 (0 is ambiguous there).
        let dlpack_stream = if stream.cu_stream().is_null() { 1 } else { stream.cu_stream() as usize };
        Ok(Target::Cuda { ordinal, stream, dlpack_stream, _restore: restore })
    }

    /// "cpu" or "cuda:N", as an error names where tensors were expected.
    pub fn describe(&self) -> String {
        match self {
            Target::Host => "cpu".into(),
            Target::Cuda { ordinal, .. } => format!("cuda:{ordinal}"),
        }
    }
}

/// The thread's current CUDA context, made current again on drop. cudarc
/// makes its context current for every launch; PyTorch and CuPy read the
/// current context as their current device, so a call must leave it as it found it.
/// (The handle is kept as an address: the value is restored on the thread that drops it.)
pub struct RestoreContext(usize);

impl RestoreContext {
    fn save() -> Result<Self> {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writes one handle; the caller checked that the driver is present.
        unsafe { sys::cuCtxGetCurrent(&mut ctx) }.result()?;
        Ok(RestoreContext(ctx as usize))
    }
}

impl Drop for RestoreContext {
    fn drop(&mut self) {
        // SAFETY: the handle was current on this thread when saved (null: none was).
        // A failure leaves cudarc's context current, which is all it could do.
        let _ = unsafe { sys::cuCtxSetCurrent(self.0 as sys::CUcontext) };
    }
}

/// Device `ordinal`'s primary context, retained once per process. cudarc's
/// event tracking is off: the tensors belong to other libraries, which order
/// their work by streams, and a call must stay capturable in a CUDA graph.
fn context(ordinal: i32) -> Result<Arc<CudaContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<i32, Arc<CudaContext>>>> = OnceLock::new();
    let mut contexts = CONTEXTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ctx) = contexts.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal.max(0) as usize).map_err(|e| Error::NoDevice(e.to_string()))?;
    // SAFETY: no cudarc stream or slice of this context exists yet to rely on the events.
    unsafe { ctx.disable_event_tracking() };
    contexts.insert(ordinal, ctx.clone());
    Ok(ctx)
}

/// The backend of one (device, stream) and its workspace, grown on demand.
pub struct Engine {
    cuda: Cuda,
    workspace: Option<Workspace>,
    /// Workspaces outgrown, kept for their status words and because a CUDA
    /// graph captured while one was current still uses it.
    retired: Vec<Workspace>,
}

/// An engine's key: the device, the raw stream handle, and for the
/// per-thread default stream (handle 2, a different stream on every thread) the thread.
type Key = (i32, usize, Option<ThreadId>);

fn key(ordinal: i32, stream: usize) -> Key {
    const PER_THREAD: usize = 2;
    (ordinal, stream, (stream == PER_THREAD).then(|| std::thread::current().id()))
}

type Engines = HashMap<Key, Engine>;

fn engines() -> MutexGuard<'static, Engines> {
    static ENGINES: OnceLock<Mutex<Engines>> = OnceLock::new();
    ENGINES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// [`Error::CaptureAllocation`] while `stream` is being captured into a CUDA
/// graph, where making or growing a workspace would allocate.
fn refuse_in_capture(stream: &CudaStream) -> Result<()> {
    use sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if stream.capture_status()? == CU_STREAM_CAPTURE_STATUS_NONE { Ok(()) } else { Err(Error::CaptureAllocation) }
}

/// Runs `f` with the engine of `target` (a CUDA one), made on first use
/// (not while the stream is being captured: making one allocates).
pub fn with_engine<T>(target: &Target, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
    let Target::Cuda { ordinal, stream, .. } = target else { unreachable!("host calls have no engine") };
    let mut engines = engines();
    let engine = match engines.entry(key(*ordinal, stream.cu_stream() as usize)) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            refuse_in_capture(stream)?;
            e.insert(Engine { cuda: Cuda::new(stream.clone())?, workspace: None, retired: Vec::new() })
        }
    };
    f(engine)
}

impl Engine {
    /// The backend and a workspace of at least `rows` rows (made anew, twice
    /// as large, when the last was too small; not while the stream is being captured).
    pub fn cuda(&mut self, rows: usize) -> Result<(&Cuda, &mut Workspace)> {
        let capacity = self.workspace.as_ref().map_or(0, |w| w.max_rows());
        if rows > capacity {
            refuse_in_capture(self.cuda.stream())?;
            let grown = self.cuda.workspace(rows.max(capacity.saturating_mul(2)).max(64))?;
            self.retired.extend(self.workspace.replace(grown));
        }
        Ok((&self.cuda, self.workspace.as_mut().expect("made above")))
    }
}

/// The OR of the status flags raised in device memory by the calls on
/// device `ordinal`'s `stream` since the last `take_status` (0 if none ran).
/// Synchronises with the stream.
pub fn take_status(ordinal: i32, stream: usize) -> Result<u32> {
    let mut engines = engines();
    let Some(engine) = engines.get_mut(&key(ordinal, stream)) else { return Ok(0) };
    let _restore = RestoreContext::save()?;
    let mut flags = 0;
    for ws in engine.retired.iter_mut().chain(engine.workspace.as_mut()) {
        flags |= ws.take_status()?;
    }
    Ok(flags)
}
