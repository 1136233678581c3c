//! `specdec._specdec`: the extension module under the Python package
//! `specdec` (`python/specdec/__init__.py`, which allocates outputs, narrows
//! integer inputs and finds the caller's stream, then calls these).
//!
//! Every function takes DLPack tensors: on the CPU it runs the CPU backend on
//! the producer's memory; on CUDA it launches on the given stream, on the
//! producer's device memory, with no copy and no host synchronisation (so a
//! call can be captured in a CUDA graph, once an earlier call on the stream
//! has made its workspace). Errors are `specdec.SpecdecError`, carrying the
//! Rust library's message.

mod args;
mod gumbel;
mod rejection;
mod stream;
mod tensor;

use pyo3::create_exception;
use pyo3::prelude::*;

create_exception!(
    _specdec,
    SpecdecError,
    pyo3::exceptions::PyValueError,
    "A call's arguments the library cannot take, or a failure of the CUDA driver: the Rust library's error."
);

/// The library's error as a Python exception, with its message.
pub(crate) fn raise(e: specdec::Error) -> PyErr {
    SpecdecError::new_err(e.to_string())
}

/// The OR of the status flags (`specdec::status`) the calls on device
/// `device`'s `stream` raised in device memory since the last call of this;
/// synchronises with the stream.
#[pyfunction]
fn take_status(py: Python<'_>, device: i32, stream: usize) -> PyResult<u32> {
    py.detach(|| stream::take_status(device, stream)).map_err(raise)
}

#[pymodule]
fn _specdec(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SpecdecError", m.py().get_type::<SpecdecError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(gumbel::gumbel_sample, m)?)?;
    m.add_function(wrap_pyfunction!(rejection::rejection_sample, m)?)?;
    m.add_function(wrap_pyfunction!(take_status, m)?)?;
    use specdec::status;
    for (name, flag) in [
        ("INVALID_SLOT", status::INVALID_SLOT),
        ("INVALID_TEMPERATURE", status::INVALID_TEMPERATURE),
        ("INVALID_COLUMN", status::INVALID_COLUMN),
        ("NAN_LOGITS", status::NAN_LOGITS),
        ("INVALID_DRAFT", status::INVALID_DRAFT),
        ("INVALID_OFFSETS", status::INVALID_OFFSETS),
        ("INVALID_FILTER", status::INVALID_FILTER),
    ] {
        m.add(name, flag)?;
    }
    Ok(())
}
