//! The command's one error type and its exit codes: `2` for bad input (a
//! file, a tensor, an argument, anything the library rejects as invalid),
//! `1` for a failure while running (the GPU, writing the output, a failed
//! exactness check).

use std::process::ExitCode;

/// Why a command failed; its message is printed as one line after `Error: `.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The input is wrong: exit code 2.
    #[error("{0}")]
    Input(String),
    /// Something failed while running: exit code 1.
    #[error("{0}")]
    Run(String),
}

impl Failure {
    pub fn input(message: impl Into<String>) -> Self {
        Failure::Input(message.into())
    }

    pub fn run(message: impl Into<String>) -> Self {
        Failure::Run(message.into())
    }

    /// A library error, with what was being done (`"rejection_sample"`).
    /// Errors about the call's values are input errors; driver, device and
    /// workspace errors are failures while running.
    pub fn library(doing: &str, e: specdec::Error) -> Self {
        use specdec::Error as E;
        let message = format!("{doing}: {e}");
        match e {
            E::NoDriver | E::NoDevice(_) | E::PtxLoad { .. } | E::Driver(_) => Failure::Run(message),
            E::WorkspaceTooSmall { .. } | E::WorkspaceContext | E::WorkspaceStream => Failure::Run(message),
            _ => Failure::Input(message),
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Input(_) => ExitCode::from(2),
            Failure::Run(_) => ExitCode::from(1),
        }
    }
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;
