//! `specdec info`: the backends this machine offers and how the binary was built.

use crate::error::Result;
use specdec::Cuda;

/// Show the backends, the CUDA driver and device, the PTX target and the version
///
/// The CPU backend is always available; CUDA when a driver is present and
/// device 0 opens (which also loads the embedded PTX).
#[derive(Debug, clap::Args)]
pub struct InfoArgs {}

pub fn run(_: &InfoArgs) -> Result<()> {
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!(
        "specdec {} ({profile} build, {}-{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS
    );
    println!("PTX target: {} (embedded; the driver JIT-compiles it on first use)", specdec::cuda::PTX_ARCH);
    println!("backends:");
    println!("  cpu   available (bit-identical to the GPU)");
    if !specdec::cuda::driver_present() {
        println!("  cuda  unavailable: {}", specdec::Error::NoDriver);
        return Ok(());
    }
    let driver = driver_version().map_or_else(|| "version unknown".into(), |(major, minor)| format!("{major}.{minor}"));
    match Cuda::on_device(0) {
        Ok(cuda) => {
            let device = cuda.device_name().unwrap_or_else(|e| format!("name unknown ({e})"));
            println!("  cuda  available: device 0 = {device}, CUDA driver {driver}");
        }
        Err(e) => println!("  cuda  unavailable (CUDA driver {driver}): {e}"),
    }
    Ok(())
}

/// The CUDA version the driver supports, as (major, minor). Call only when
/// `specdec::cuda::driver_present()`: without a driver `cudarc` panics.
fn driver_version() -> Option<(i32, i32)> {
    let mut version = 0;
    // SAFETY: the driver library is present (checked by the caller), and
    // cuDriverGetVersion only writes one int through a valid pointer; it needs no cuInit.
    let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some((version / 1000, version % 1000 / 10))
}
