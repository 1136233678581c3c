//! `--backend auto|cpu|cuda`: which `specdec::Backend` runs the calls.

use crate::error::{Failure, Result};
use specdec::{Backend, Cuda};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// CUDA device 0 when a driver and a device are usable, else the CPU.
    Auto,
    /// The CPU backend (bit-identical to the GPU).
    Cpu,
    /// CUDA device 0; an error when it cannot be used.
    Cuda,
}

#[derive(Clone, Copy, Debug, clap::Args)]
pub struct BackendArg {
    /// Where the kernels run.
    #[arg(long, value_enum, default_value_t = Kind::Auto)]
    pub backend: Kind,
}

/// An open backend, and why the GPU was not used when `auto` fell back.
pub struct Chosen {
    pub backend: Backend,
    pub gpu_unused: Option<String>,
}

impl BackendArg {
    pub fn open(&self) -> Result<Chosen> {
        match self.backend {
            Kind::Cpu => Ok(Chosen { backend: Backend::cpu(), gpu_unused: None }),
            Kind::Cuda => match Cuda::on_device(0) {
                Ok(cuda) => Ok(Chosen { backend: Backend::Cuda(cuda), gpu_unused: None }),
                Err(e) => Err(Failure::library("--backend cuda", e)),
            },
            Kind::Auto => {
                let (backend, why) = Backend::auto();
                Ok(Chosen { backend, gpu_unused: why.map(|e| e.to_string()) })
            }
        }
    }
}
