//! The toolchain the kernels build with, whatever toolchain runs the build
//! that asked for them.
//!
//! The device build needs a pinned nightly (`-Zbuild-std`, `abi_ptx`, and the
//! llvm-tools of that exact LLVM), named by the `rust-toolchain.toml` nearest
//! above the kernels crate. A project that depends on `specdec` builds with its
//! own toolchain, often stable: its build script must still reach the pinned
//! one. So when rustup is installed, every nested tool runs as
//! `rustup run <channel> <tool>`; without rustup (a toolchain managed some other
//! way) the tools of the calling build are used as they are.

use crate::BuildError;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned toolchain, as a `rust-toolchain.toml` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// `[toolchain] channel`, e.g. `nightly-2026-05-20`.
    pub channel: String,
    /// `[toolchain] components`.
    pub components: Vec<String>,
    /// The file it was read from.
    pub file: PathBuf,
}

impl Toolchain {
    /// The `rust-toolchain.toml` nearest above `dir` (`dir` itself first), as
    /// rustup finds it from there; `None` if there is none.
    pub fn find(dir: &Path) -> Result<Option<Toolchain>, BuildError> {
        let Some(file) = dir.ancestors().map(|d| d.join("rust-toolchain.toml")).find(|f| f.is_file()) else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(&file)
            .map_err(|source| BuildError::Io { what: format!("read {}", file.display()), source })?;
        Self::parse(&text, file).map(Some)
    }

    fn parse(text: &str, file: PathBuf) -> Result<Toolchain, BuildError> {
        #[derive(serde::Deserialize)]
        struct File {
            toolchain: Section,
        }
        #[derive(serde::Deserialize)]
        struct Section {
            channel: String,
            #[serde(default)]
            components: Vec<String>,
        }
        let parsed: File = toml::from_str(text)
            .map_err(|e| BuildError::BadManifest { manifest: file.clone(), message: e.to_string() })?;
        let Section { channel, components } = parsed.toolchain;
        Ok(Toolchain { channel, components, file })
    }

    /// The command that installs this toolchain with its components.
    pub fn install_command(&self) -> String {
        let mut cmd = format!("rustup toolchain install {} --profile minimal", self.channel);
        if !self.components.is_empty() {
            cmd.push_str(&format!(" --component {}", self.components.join(",")));
        }
        cmd
    }
}

/// How the nested `cargo` and `rustc` run.
#[derive(Debug, Clone)]
pub(crate) enum Runner {
    /// `rustup run <channel> TOOL`.
    Rustup(Toolchain),
    /// The calling build's tools (`$CARGO`, `$RUSTC`, else from `PATH`).
    Ambient,
}

impl Runner {
    /// Rustup with the pinned toolchain when both exist, after checking the
    /// toolchain is installed; else the calling build's tools.
    pub(crate) fn for_crate(crate_path: &Path) -> Result<Runner, BuildError> {
        let Some(toolchain) = Toolchain::find(crate_path)? else {
            return Ok(Runner::Ambient);
        };
        let Ok(list) = Command::new("rustup").args(["toolchain", "list"]).output() else {
            return Ok(Runner::Ambient); // no rustup
        };
        let listed = String::from_utf8_lossy(&list.stdout);
        if !list.status.success() || !installed(&listed, &toolchain.channel) {
            return Err(BuildError::ToolchainMissing {
                channel: toolchain.channel.clone(),
                file: toolchain.file.clone(),
                install: toolchain.install_command(),
            });
        }
        Ok(Runner::Rustup(toolchain))
    }

    /// A command running `tool` (`cargo` or `rustc`) of the kernels' toolchain.
    pub(crate) fn command(&self, tool: &str) -> Command {
        match self {
            Runner::Rustup(t) => {
                let mut cmd = Command::new("rustup");
                cmd.args(["run", &t.channel, tool]).env_remove("RUSTUP_TOOLCHAIN");
                cmd
            }
            Runner::Ambient => {
                let var = if tool == "cargo" { "CARGO" } else { "RUSTC" };
                Command::new(std::env::var_os(var).unwrap_or_else(|| tool.into()))
            }
        }
    }

    /// What to do when the toolchain lacks `llvm-tools`.
    pub(crate) fn llvm_tools_fix(&self) -> String {
        match self {
            Runner::Rustup(t) => format!("rustup component add llvm-tools --toolchain {}", t.channel),
            Runner::Ambient => "add the llvm-tools component to the toolchain that builds the kernels".into(),
        }
    }
}

/// Whether `rustup toolchain list` output names `channel` (listed with its
/// host triple, e.g. `nightly-2026-05-20-x86_64-unknown-linux-gnu (active)`).
fn installed(list: &str, channel: &str) -> bool {
    let host = format!("-{}", crate::host_triple());
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .any(|name| name == channel || name.strip_prefix(channel) == Some(host.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_names_channel_and_components() {
        let text = "[toolchain]\nchannel = \"nightly-2026-05-20\"\ncomponents = [\"rust-src\", \"llvm-tools\"]\n";
        let t = Toolchain::parse(text, "rust-toolchain.toml".into()).unwrap();
        assert_eq!(t.channel, "nightly-2026-05-20");
        assert_eq!(
            t.install_command(),
            "rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src,llvm-tools"
        );
        assert!(matches!(Toolchain::parse("[toolchain]\n", "f".into()), Err(BuildError::BadManifest { .. })));
    }

    #[test]
    fn the_repository_pins_the_kernels_toolchain() {
        let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        let t = Toolchain::find(&kernels).unwrap().expect("the repository's rust-toolchain.toml");
        assert!(t.channel.starts_with("nightly-"), "{t:?}");
        assert!(
            t.components.iter().any(|c| c == "llvm-tools") && t.components.iter().any(|c| c == "rust-src"),
            "{t:?}"
        );
    }

    #[test]
    fn installed_toolchains_are_matched_by_channel() {
        let list = "stable-x86_64-unknown-linux-gnu (default)\nnightly-2026-05-20-x86_64-unknown-linux-gnu (active)\n";
        assert!(installed(list, "nightly-2026-05-20"));
        assert!(installed(list, "stable"));
        assert!(!installed(list, "nightly-2026-05-2"));
        assert!(!installed(list, "nightly"));
        assert!(!installed("", "stable"));
    }
}
