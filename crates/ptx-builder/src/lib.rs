//! Builds a `#![no_std]` kernels crate to PTX with rustc's own NVPTX backend.
//!
//! This plays the role `cuda_builder` plays for Rust-CUDA, without libNVVM: the
//! crate is compiled for `nvptx64-nvidia-cuda` with `-Zbuild-std=core` by a
//! nested `cargo build`, and rustc's final "link" step is handed to a small
//! script that runs the pinned toolchain's llvm-tools:
//!
//! 1. `llvm-link` the crate's LTO'd bitcode with only the needed members of the
//!    rlibs rustc passes (in practice `compiler_builtins`);
//! 2. `opt -passes=internalize,globaldce,default<O3>`, keeping only the exported
//!    kernels public;
//! 3. `llc -mtriple=nvptx64-nvidia-cuda -mcpu=<arch> --fp-contract=off`.
//!
//! Rust has no launch-bounds attribute, so the caller passes them
//! ([`PtxBuilder::launch_bounds`]) and the builder writes them into the PTX as
//! `.maxntid` and `.minnctapersm` directives, which make ptxas fit each
//! kernel's registers to the occupancy asked for (see [`LaunchBounds`]). The
//! specdec build passes the table of `specdec_core::names`.
//!
//! The nested tools run with the toolchain the `rust-toolchain.toml` above the
//! kernels crate pins, through `rustup run`, whatever toolchain runs the build
//! that asked (a dependent on stable Rust, say): see [`Toolchain`].
//!
//! Floating-point contraction stays off everywhere (rustc never emits `contract`
//! flags, and llc is told `--fp-contract=off`), so device arithmetic rounds exactly
//! like the same Rust code on the CPU. The nested cargo gets its own target
//! directory, so it never waits on the outer build's lock.
//!
//! ```no_run
//! use specdec_ptx_builder::{LaunchBounds, PtxBuilder};
//! let bounds = [LaunchBounds { kernel: "gumbel_sample_f32_f32".into(), max_threads: 256, min_blocks: 3 }];
//! let ptx = PtxBuilder::new("crates/kernels").arch("sm_90").launch_bounds(bounds).build()?;
//! println!("{}", ptx.ptx.display());
//! # Ok::<(), specdec_ptx_builder::BuildError>(())
//! ```

mod toolchain;

pub use toolchain::Toolchain;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use toolchain::Runner;

/// The architecture built when neither [`PtxBuilder::arch`] nor `SPECDEC_PTX_ARCH` says otherwise.
/// PTX for sm_80 runs on Ampere, Hopper and later through the driver's JIT.
pub const DEFAULT_ARCH: &str = "sm_80";

/// Environment variable that overrides the default architecture.
pub const ARCH_ENV: &str = "SPECDEC_PTX_ARCH";

/// Environment variable naming the nested build's target directory, for a
/// build script that honours it (the host crate's does): several target
/// directories (a dependent project's, a CI cache's) then share one build of
/// the kernels, which cargo keeps up to date.
pub const TARGET_DIR_ENV: &str = "SPECDEC_PTX_TARGET_DIR";

const TARGET: &str = "nvptx64-nvidia-cuda";

/// Why a PTX build failed. Each message names the missing piece and how to get it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error("kernels crate not found at {0} (expected a Cargo.toml there)")]
    NoCrate(PathBuf),
    #[error("unsupported architecture {0:?}: expected sm_XY with XY >= 80")]
    BadArch(String),
    #[error("`rustc --print sysroot` failed: {0}; install the pinned toolchain with `rustup toolchain install`")]
    NoSysroot(String),
    #[error(
        "the specdec kernels build with the toolchain {channel} (pinned by {}), which is not installed; \
         install it with: {install}", file.display()
    )]
    ToolchainMissing { channel: String, file: PathBuf, install: String },
    #[error("{tool} not found at {path}; the kernels' toolchain needs the `llvm-tools` component: {fix}")]
    MissingTool { tool: &'static str, path: PathBuf, fix: String },
    #[error("could not run {what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("nested cargo build of the kernels failed:\n{stderr}")]
    Cargo { stderr: String },
    #[error("cargo finished but produced no PTX at {path}; cargo said:\n{stderr}")]
    NoArtifactProduced { path: PathBuf, stderr: String },
    #[error("{manifest}: {message}")]
    BadManifest { manifest: PathBuf, message: String },
    #[error("launch bounds {bounds:?}: {why}")]
    BadLaunchBounds { bounds: LaunchBounds, why: &'static str },
}

/// Launch bounds of the kernel (PTX entry) named `kernel`: at most
/// `max_threads` threads per block, and at least `min_blocks` blocks resident
/// per SM, which caps its registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchBounds {
    pub kernel: String,
    pub max_threads: u32,
    pub min_blocks: u32,
}

/// The result of a build.
#[derive(Debug, Clone)]
pub struct Ptx {
    /// The PTX file.
    pub ptx: PathBuf,
    /// Every source file the PTX depends on (from cargo's dep-info, and the
    /// toolchain file that pinned the build), for `rerun-if-changed`.
    pub sources: Vec<PathBuf>,
}

/// Compiles a kernels crate to PTX. See the crate docs for the pipeline.
#[derive(Debug, Clone)]
pub struct PtxBuilder {
    /// The kernels crate (a `cdylib`, `#![no_std]`). Required.
    pub crate_path: PathBuf,
    /// Target architecture, `sm_XY`. Default: `$SPECDEC_PTX_ARCH`, else [`DEFAULT_ARCH`].
    pub arch: String,
    /// Where the nested cargo puts its build. Default: `<crate>/target`.
    pub target_dir: Option<PathBuf>,
    /// Written into the PTX, at most one per kernel; each must name an entry
    /// of the PTX, else the build fails. Kernels not named get none. Default: none.
    pub launch_bounds: Vec<LaunchBounds>,
}

impl PtxBuilder {
    pub fn new(crate_path: impl Into<PathBuf>) -> Self {
        let arch = std::env::var(ARCH_ENV).unwrap_or_else(|_| DEFAULT_ARCH.to_string());
        Self { crate_path: crate_path.into(), arch, target_dir: None, launch_bounds: Vec::new() }
    }

    #[must_use]
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.arch = arch.into();
        self
    }

    #[must_use]
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Sets the `launch_bounds` field.
    #[must_use]
    pub fn launch_bounds(mut self, bounds: impl IntoIterator<Item = LaunchBounds>) -> Self {
        self.launch_bounds = bounds.into_iter().collect();
        self
    }

    /// Builds the PTX, returning its path and the sources it was built from.
    pub fn build(&self) -> Result<Ptx, BuildError> {
        let manifest = self.crate_path.join("Cargo.toml");
        if !manifest.is_file() {
            return Err(BuildError::NoCrate(self.crate_path.clone()));
        }
        let sm = sm_number(&self.arch)?;
        check_launch_bounds(&self.launch_bounds)?;
        let runner = Runner::for_crate(&self.crate_path)?;
        let tools = tool_dir(&runner)?;
        let target_dir = match &self.target_dir {
            Some(d) => d.clone(),
            None => self.crate_path.join("target"),
        };
        // One directory per architecture: builds for two archs never overwrite each other.
        let target_dir = target_dir.join(&self.arch);
        std::fs::create_dir_all(&target_dir)
            .map_err(|source| BuildError::Io { what: format!("mkdir {}", target_dir.display()), source })?;
        let linker = write_linker(&target_dir, &tools, &self.arch, ptx_isa(sm))?;

        let mut cmd = cargo_command(&runner);
        cmd.current_dir(&self.crate_path)
            .args(["build", "--release", "--lib", "--target", TARGET, "-Zbuild-std=core"])
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target_dir)
            .env("CARGO_ENCODED_RUSTFLAGS", encoded_rustflags(&self.arch, &linker));
        let out = cmd.output().map_err(|source| BuildError::Io { what: "cargo build (kernels)".into(), source })?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(BuildError::Cargo { stderr });
        }

        let lib = crate_lib_name(&manifest)?;
        let release = target_dir.join(TARGET).join("release");
        let linked = release.join(format!("{lib}.ptx"));
        if !linked.is_file() {
            return Err(BuildError::NoArtifactProduced { path: linked, stderr });
        }
        let text = std::fs::read_to_string(&linked)
            .map_err(|source| BuildError::Io { what: format!("read {}", linked.display()), source })?;
        let bounded = with_launch_bounds(&text, &self.launch_bounds)?;
        let ptx = release.join(format!("{lib}.bounded.ptx"));
        std::fs::write(&ptx, bounded)
            .map_err(|source| BuildError::Io { what: format!("write {}", ptx.display()), source })?;
        let mut sources = read_dep_info(&release.join(format!("{lib}.d")));
        if let Runner::Rustup(t) = &runner {
            sources.push(t.file.clone());
        }
        Ok(Ptx { ptx, sources })
    }
}

fn sm_number(arch: &str) -> Result<u32, BuildError> {
    arch.strip_prefix("sm_")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|&n| n >= 80)
        .ok_or_else(|| BuildError::BadArch(arch.to_string()))
}

/// The lowest PTX ISA version that knows the architecture.
fn ptx_isa(sm: u32) -> u32 {
    match sm {
        90.. => 78,
        89 => 78,
        86..=88 => 71,
        _ => 70,
    }
}

/// `CARGO_ENCODED_RUSTFLAGS` wins over every other RUSTFLAGS source, so the
/// outer build's flags never leak into the device build.
fn encoded_rustflags(arch: &str, linker: &Path) -> OsString {
    let mut flags = OsString::from(format!("-Ctarget-cpu={arch}\x1f-Clinker="));
    flags.push(linker);
    flags
}

/// A `cargo` command of the kernels' toolchain with the variables an outer
/// cargo (a build script's or xtask's) sets removed, so the nested build is a
/// plain build of the kernels crate.
fn cargo_command(runner: &Runner) -> Command {
    let mut cmd = runner.command("cargo");
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let leaks = (key.starts_with("CARGO_") && key != "CARGO_HOME")
            || matches!(key, "RUSTFLAGS" | "RUSTC" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "RUSTDOCFLAGS")
            || key == "TARGET"
            || key == "HOST"
            || key == "OUT_DIR"
            || key == "PROFILE"
            || key == "OPT_LEVEL"
            || key == "DEBUG"
            || key == "NUM_JOBS";
        if leaks {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The llvm-tools directory of the kernels' toolchain.
fn tool_dir(runner: &Runner) -> Result<PathBuf, BuildError> {
    let out = runner
        .command("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| BuildError::NoSysroot(e.to_string()))?;
    if !out.status.success() {
        return Err(BuildError::NoSysroot(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let host = host_triple();
    let dir = sysroot.join("lib/rustlib").join(host).join("bin");
    for tool in ["llvm-link", "opt", "llc", "llvm-ar"] {
        let path = dir.join(tool);
        if !path.is_file() {
            return Err(BuildError::MissingTool { tool, path, fix: runner.llvm_tools_fix() });
        }
    }
    Ok(dir)
}

pub(crate) fn host_triple() -> &'static str {
    // The tools we need ship for the host; the only host these scripts target is Linux.
    if cfg!(target_arch = "aarch64") { "aarch64-unknown-linux-gnu" } else { "x86_64-unknown-linux-gnu" }
}

/// Writes the link script rustc calls as its "linker". rustc passes
/// `--export-symbol NAME` per kernel, the LTO'd bitcode object, the rlibs,
/// `--target-cpu`, `-o OUT`, and flags we ignore.
fn write_linker(dir: &Path, tools: &Path, arch: &str, isa: u32) -> Result<PathBuf, BuildError> {
    let script = format!(
        r#"#!/usr/bin/env bash
# Written by specdec-ptx-builder: links rustc's NVPTX bitcode into PTX.
set -euo pipefail
T={tools}
exports=(); objs=(); rlibs=(); out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --export-symbol) exports+=("$2"); shift 2;;
    -o) out="$2"; shift 2;;
    -L|--target|--target-cpu) shift 2;;
    *.rlib) rlibs+=("$1"); shift;;
    *.o) objs+=("$1"); shift;;
    *) shift;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
members=()
for r in "${{rlibs[@]}}"; do
  d="$tmp/$(basename "$r")"; mkdir -p "$d"; (cd "$d" && "$T/llvm-ar" x "$r")
  for m in "$d"/*.o; do [ -e "$m" ] && members+=("$m"); done
done
"$T/llvm-link" "${{objs[@]}}" ${{members[@]:+--only-needed "${{members[@]}}"}} -o "$tmp/linked.bc"
list=$(IFS=,; echo "${{exports[*]}}")
"$T/opt" -passes='internalize,globaldce,default<O3>' -internalize-public-api-list="$list" "$tmp/linked.bc" -o "$tmp/opt.bc"
"$T/llc" -mtriple=nvptx64-nvidia-cuda -mcpu={arch} -mattr=+ptx{isa} -O3 --fp-contract=off "$tmp/opt.bc" -o "$out"
"#,
        tools = shell_quote(tools),
    );
    let path = dir.join("specdec-ptx-link.sh");
    let io = |source| BuildError::Io { what: format!("write {}", path.display()), source };
    std::fs::write(&path, script).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
    }
    Ok(path)
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// The library's file stem: `[lib] name`, else the package name with `-` → `_`.
fn crate_lib_name(manifest: &Path) -> Result<String, BuildError> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|source| BuildError::Io { what: format!("read {}", manifest.display()), source })?;
    let mut section = "";
    let (mut package, mut lib) = (None, None);
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if let Some(v) = line.strip_prefix("name").map(str::trim_start).and_then(|l| l.strip_prefix('=')) {
            let v = v.trim().trim_matches('"').to_string();
            match section {
                "[package]" => package = Some(v),
                "[lib]" => lib = Some(v),
                _ => {}
            }
        }
    }
    lib.or(package.map(|p| p.replace('-', "_"))).ok_or_else(|| BuildError::NoCrate(manifest.to_path_buf()))
}

/// Each bound names a kernel, once, with both numbers positive.
fn check_launch_bounds(bounds: &[LaunchBounds]) -> Result<(), BuildError> {
    for (i, b) in bounds.iter().enumerate() {
        let why = if b.kernel.is_empty() || b.max_threads == 0 || b.min_blocks == 0 {
            "the kernel must be named and both numbers positive"
        } else if bounds[..i].iter().any(|o| o.kernel == b.kernel) {
            "the kernel has launch bounds already"
        } else {
            continue;
        };
        return Err(BuildError::BadLaunchBounds { bounds: b.clone(), why });
    }
    Ok(())
}

/// The PTX with `.maxntid` / `.minnctapersm` after the parameter list of each
/// `.entry` that `bounds` names; an error for a bound that names no entry.
fn with_launch_bounds(ptx: &str, bounds: &[LaunchBounds]) -> Result<String, BuildError> {
    let mut out = String::with_capacity(ptx.len() + 64 * bounds.len());
    let mut used = vec![false; bounds.len()];
    // The bounds of the entry whose parameter list is being copied.
    let mut pending: Option<&LaunchBounds> = None;
    for line in ptx.split_inclusive('\n') {
        if let Some(rest) = line.split_once(".entry ").map(|(_, r)| r) {
            let name = rest.split(['(', ' ', '\n']).next().unwrap_or("");
            pending = bounds.iter().position(|b| b.kernel == name).map(|i| {
                used[i] = true;
                &bounds[i]
            });
        }
        if pending.is_some() && line.trim_end() == "{" {
            let b = pending.take().expect("checked above");
            out.push_str(&format!(".maxntid {}, 1, 1\n.minnctapersm {}\n", b.max_threads, b.min_blocks));
        }
        out.push_str(line);
    }
    match used.iter().position(|u| !u) {
        Some(i) => {
            Err(BuildError::BadLaunchBounds { bounds: bounds[i].clone(), why: "no entry of the PTX has that name" })
        }
        None => Ok(out),
    }
}

/// Cargo's `.d` file: `target: dep dep ...` with spaces in paths escaped as `\ `.
fn read_dep_info(path: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Some((_, deps)) = text.split_once(": ") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                cur.push(' ');
                chars.next();
            }
            ' ' | '\n' => {
                if !cur.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut cur)));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(PathBuf::from(cur));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parsing() {
        assert_eq!(sm_number("sm_80").unwrap(), 80);
        assert_eq!(sm_number("sm_90").unwrap(), 90);
        assert!(matches!(sm_number("sm_60"), Err(BuildError::BadArch(_))));
        assert!(matches!(sm_number("sm_75"), Err(BuildError::BadArch(_))));
        assert!(matches!(sm_number("compute_90"), Err(BuildError::BadArch(_))));
        assert_eq!(ptx_isa(80), 70);
        assert_eq!(ptx_isa(90), 78);
    }

    #[test]
    fn dep_info_with_escaped_spaces() {
        let dir = std::env::temp_dir().join(format!("specdec-dep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k.d");
        std::fs::write(&f, "/t/k.ptx: /a/b.rs /c\\ d/e.rs\n").unwrap();
        assert_eq!(read_dep_info(&f), vec![PathBuf::from("/a/b.rs"), PathBuf::from("/c d/e.rs")]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn bounds(kernel: &str, max_threads: u32, min_blocks: u32) -> LaunchBounds {
        LaunchBounds { kernel: kernel.into(), max_threads, min_blocks }
    }

    #[test]
    fn launch_bounds_follow_the_parameter_list() {
        let ptx = ".visible .entry gumbel_sample_f32_f32(\n\t.param .b64 p\n)  // @x\n{\n\tret;\n}\n\
                   .visible .entry other(\n\t.param .b64 p\n)\n{\n\tret;\n}\n";
        let out = with_launch_bounds(ptx, &[bounds("gumbel_sample_f32_f32", 256, 3)]).unwrap();
        assert_eq!(out.matches(".maxntid 256, 1, 1\n.minnctapersm 3\n{").count(), 1, "{out}");
        assert!(out.starts_with(".visible .entry gumbel_sample_f32_f32(\n\t.param .b64 p\n)  // @x\n.maxntid"));
        assert!(out.ends_with(".visible .entry other(\n\t.param .b64 p\n)\n{\n\tret;\n}\n"));
        assert_eq!(with_launch_bounds(ptx, &[]).unwrap(), ptx);
        // Names are exact: a prefix names nothing.
        let err = with_launch_bounds(ptx, &[bounds("gumbel_sample", 256, 3)]).unwrap_err();
        assert!(matches!(err, BuildError::BadLaunchBounds { .. }), "{err}");
    }

    #[test]
    fn launch_bounds_are_checked() {
        assert!(check_launch_bounds(&[bounds("a", 256, 2), bounds("b", 256, 4)]).is_ok());
        for bad in [
            vec![bounds("a", 0, 2)],
            vec![bounds("a", 256, 0)],
            vec![bounds("", 256, 2)],
            vec![bounds("a", 256, 2), bounds("a", 256, 3)],
        ] {
            let err = check_launch_bounds(&bad).unwrap_err();
            assert!(matches!(err, BuildError::BadLaunchBounds { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn missing_crate_is_reported() {
        let err = PtxBuilder::new("/nonexistent/kernels").build().unwrap_err();
        assert!(matches!(err, BuildError::NoCrate(_)), "{err}");
    }
}
