//! Where a call runs: on the host (the CPU backend), or on a CUDA device on
//! the caller's stream, with the backend and workspace this process keeps
//! for that stream.

use cudarc::driver::{CudaContext, CudaStream, sys};
use specdec::{Cuda, Error, Result, Workspace};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Where a call's tensors live, and so where it runs.
pub enum Target {
    Host,
    Cuda {
        ordinal: i32,
        stream: Arc<CudaStream>,
        /// The `stream` argument of `__dlpack__` that names the same stream.
        dlpack_stream: usize,
    },
}

impl Target {
    /// The CUDA target of device `ordinal` and the raw `CUstream` handle
    /// `stream` (0: the legacy default stream).
    pub fn cuda(ordinal: i32, stream: usize) -> Result<Target> {
        let ctx = context(ordinal)?;
        // SAFETY: the caller's stream belongs to the device's primary context (the one
        // PyTorch, CuPy and JAX use) and outlives the call; the wrapper never destroys it.
        let stream = unsafe { ctx.wrap_borrowed_stream(stream as sys::CUstream) };
        // DLPack's name for the legacy default stream is 1 (0 is ambiguous there).
        let dlpack_stream = if stream.cu_stream().is_null() { 1 } else { stream.cu_stream() as usize };
        Ok(Target::Cuda { ordinal, stream, dlpack_stream })
    }

    /// "cpu" or "cuda:N", as an error names where tensors were expected.
    pub fn describe(&self) -> String {
        match self {
            Target::Host => "cpu".into(),
            Target::Cuda { ordinal, .. } => format!("cuda:{ordinal}"),
        }
    }
}

/// Device `ordinal`'s primary context, retained once per process. cudarc's
/// event tracking is off: the tensors belong to other libraries, which order
/// their work by streams, and a call must stay capturable in a CUDA graph.
fn context(ordinal: i32) -> Result<Arc<CudaContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<i32, Arc<CudaContext>>>> = OnceLock::new();
    if !specdec::cuda::driver_present() {
        return Err(Error::NoDriver);
    }
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
    /// Workspaces outgrown since the last `take_status`, kept for their status words.
    retired: Vec<Workspace>,
}

type Engines = HashMap<(i32, usize), Engine>;

fn engines() -> MutexGuard<'static, Engines> {
    static ENGINES: OnceLock<Mutex<Engines>> = OnceLock::new();
    ENGINES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` with the engine of `target` (a CUDA one), made on first use.
pub fn with_engine<T>(target: &Target, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
    let Target::Cuda { ordinal, stream, .. } = target else { unreachable!("host calls have no engine") };
    let mut engines = engines();
    let key = (*ordinal, stream.cu_stream() as usize);
    let engine = match engines.entry(key) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => e.insert(Engine { cuda: Cuda::new(stream.clone())?, workspace: None, retired: Vec::new() }),
    };
    f(engine)
}

impl Engine {
    /// The backend and a workspace of at least `rows` rows (made anew, twice
    /// as large, when the last was too small). Making one allocates: a call
    /// captured in a CUDA graph must find it made by an earlier call.
    pub fn cuda(&mut self, rows: usize) -> Result<(&Cuda, &mut Workspace)> {
        let capacity = self.workspace.as_ref().map_or(0, |w| w.max_rows());
        if rows > capacity {
            let grown = self.cuda.workspace(rows.max(2 * capacity).max(64))?;
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
    let Some(engine) = engines.get_mut(&(ordinal, stream)) else { return Ok(0) };
    let mut flags = 0;
    for mut ws in engine.retired.drain(..) {
        flags |= ws.take_status()?;
    }
    if let Some(ws) = &mut engine.workspace {
        flags |= ws.take_status()?;
    }
    Ok(flags)
}
