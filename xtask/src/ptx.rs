//! `cargo xtask ptx`: build the kernels to PTX per architecture, assemble each
//! PTX with ptxas, and report each kernel's registers, spills, stack and shared memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use specdec_core::names;
use specdec_ptx_builder::{LaunchBounds, PtxBuilder};

use crate::resource_usage::{self, Usage};
use crate::{Result, cmd, cubin, ptxas};

/// Overrides the kernels crate (for testing xtask against another crate).
const KERNELS_ENV: &str = "SPECDEC_KERNELS_DIR";

pub const DEFAULT_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// The architecture `--deny-spills` checks.
const SPILL_ARCH: &str = "sm_90";

#[derive(Debug, Clone)]
pub struct Options {
    pub archs: Vec<String>,
    pub deny_spills: bool,
}

impl Options {
    /// `[--arch sm_80,sm_90 | --arch=...] [--deny-spills]`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut options = Options { archs: DEFAULT_ARCHS.map(String::from).to_vec(), deny_spills: false };
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let list = if arg == "--arch" {
                iter.next().ok_or("`--arch` needs a list, e.g. `--arch sm_80,sm_90`")?.as_str()
            } else if let Some(list) = arg.strip_prefix("--arch=") {
                list
            } else if arg == "--deny-spills" {
                options.deny_spills = true;
                continue;
            } else {
                return Err(format!("`ptx` takes `--arch LIST` and `--deny-spills`, not `{arg}`"));
            };
            options.archs = list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect();
            if options.archs.is_empty() {
                return Err("`--arch` needs at least one architecture, e.g. `--arch sm_90`".into());
            }
        }
        Ok(options)
    }
}

/// One kernel (or device function) of the PTX built for `arch`, assembled for `target`.
struct Row {
    arch: String,
    target: String,
    usage: Usage,
    /// Bytes of machine code of a kernel, the device functions it calls
    /// included (ptxas gives them no sections of their own).
    code: Option<u64>,
}

impl Row {
    /// `sm_90`, or `sm_80>sm_90` for PTX assembled for a later architecture.
    fn label(&self) -> String {
        if self.arch == self.target { self.arch.clone() } else { format!("{}>{}", self.arch, self.target) }
    }
}

pub fn run(root: &Path, options: &Options) -> Result<()> {
    let kernels = kernels_dir(root);
    let target_dir = root.join("target/ptx");
    let ptxas = ptxas::ptxas(root)?;

    let mut rows = Vec::new();
    // Every arch's nested build starts at once and each PTX is assembled once
    // built, so a build (one rustc) overlaps the ptxas runs of the archs before it.
    let ptx_files = std::thread::scope(|scope| -> Result<Vec<(&String, PathBuf)>> {
        let builds: Vec<_> =
            options.archs.iter().map(|arch| (arch, scope.spawn(|| build(&kernels, arch, &target_dir)))).collect();
        let mut ptx_files = Vec::new();
        for (arch, build) in builds {
            let ptx = build.join().map_err(|_| format!("the PTX build for {arch} panicked"))??;
            let mut targets = vec![arch.as_str()];
            // The default build (sm_80) runs on Hopper through the driver's JIT,
            // which allocates registers anew: check it the same way.
            if options.deny_spills && sm(arch) < sm(SPILL_ARCH) {
                targets.push(SPILL_ARCH);
            }
            for target in targets {
                let (usage, code) = assemble(&ptxas, target, &ptx)?;
                rows.extend(usage.into_iter().map(|usage| Row {
                    arch: arch.clone(),
                    target: target.to_string(),
                    code: code.get(&usage.name).copied(),
                    usage,
                }));
            }
            ptx_files.push((arch, ptx));
        }
        Ok(ptx_files)
    })?;

    println!();
    print_table(&rows);
    println!();
    for (arch, ptx) in &ptx_files {
        println!("PTX {arch}: {}", ptx.display());
    }

    if options.deny_spills {
        deny_spills(&rows)?;
    }
    Ok(())
}

/// The number of `sm_XY` (0 for a name that is not one; the builder rejects those).
fn sm(arch: &str) -> u32 {
    arch.strip_prefix("sm_").and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The kernels crate: `$SPECDEC_KERNELS_DIR`, else `<root>/crates/kernels`.
fn kernels_dir(root: &Path) -> PathBuf {
    match std::env::var_os(KERNELS_ENV) {
        Some(dir) => {
            println!("using kernels crate from ${KERNELS_ENV}: {}", Path::new(&dir).display());
            PathBuf::from(dir)
        }
        None => root.join("crates/kernels"),
    }
}

fn build(kernels: &Path, arch: &str, target_dir: &Path) -> Result<PathBuf> {
    // The builder runs a nested `cargo build` (see crates/ptx-builder); show the call.
    println!(
        "building PTX: specdec_ptx_builder::PtxBuilder::new({:?}).arch({arch:?}).target_dir({:?})\
         .launch_bounds(<specdec_core::names>).build()",
        kernels.display().to_string(),
        target_dir.display().to_string()
    );
    let bounds = names::symbols().map(|s| LaunchBounds {
        kernel: s.to_string(),
        max_threads: s.max_threads(),
        min_blocks: s.min_blocks(),
    });
    let ptx = PtxBuilder::new(kernels)
        .arch(arch)
        .target_dir(target_dir)
        .launch_bounds(bounds)
        .build()
        .map_err(|e| format!("building the PTX for {arch} failed: {e}"))?;
    Ok(ptx.ptx)
}

/// `ptxas -arch=ARCH -v -O3 --split-compile 0` into a temporary cubin;
/// returns what `-v` reported and each kernel's code size in the cubin.
/// `--split-compile 0` assembles the kernels on every core (the same cubin
/// and report as one thread, in about half the time on CI's two cores).
fn assemble(ptxas: &Path, arch: &str, ptx: &Path) -> Result<(Vec<Usage>, HashMap<String, u64>)> {
    let cubin = std::env::temp_dir().join(format!("specdec-xtask-{}-{arch}.cubin", std::process::id()));
    let mut command = Command::new(ptxas);
    command.arg(format!("-arch={arch}")).args(["-v", "-O3", "--split-compile", "0", "-o"]).arg(&cubin).arg(ptx);
    let out = cmd::output(&mut command);
    let code = std::fs::read(&cubin);
    let _ = std::fs::remove_file(&cubin);
    let out = out?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("ptxas rejected {} for {arch} ({}):\n{text}", ptx.display(), out.status));
    }
    for line in text.lines().filter(|l| l.contains("warning")) {
        println!("{line}");
    }
    let usage = resource_usage::parse(&text);
    if !usage.iter().any(|u| u.kernel) {
        return Err(format!(
            "ptxas found no kernels in {} for {arch}; does the kernels crate export any \
             `#[unsafe(no_mangle)] extern \"ptx-kernel\" fn`?\nptxas said:\n{text}",
            ptx.display()
        ));
    }
    let code = code.map_err(|e| format!("read the cubin ptxas wrote, {}: {e}", cubin.display()))?;
    let code = cubin::code_sizes(&code).map_err(|e| format!("{}: {e}", cubin.display()))?;
    Ok((usage, code))
}

fn print_table(rows: &[Row]) {
    let label = |u: &Usage| if u.kernel { u.name.clone() } else { format!("{} (device fn)", u.name) };
    let name_width = rows.iter().map(|r| label(&r.usage).len()).chain(["kernel".len()]).max().unwrap_or(0);
    println!(
        "{:<11}  {:<name_width$}  {:>9}  {:>16}  {:>15}  {:>15}  {:>15}  {:>9}",
        "arch",
        "kernel",
        "registers",
        "spill stores (B)",
        "spill loads (B)",
        "stack frame (B)",
        "static smem (B)",
        "code (B)"
    );
    for row in rows {
        let usage = &row.usage;
        let registers = usage.registers.map_or("-".to_string(), |r| r.to_string());
        let code = row.code.map_or("-".to_string(), |c| c.to_string());
        println!(
            "{:<11}  {:<name_width$}  {registers:>9}  {:>16}  {:>15}  {:>15}  {:>15}  {code:>9}",
            row.label(),
            label(usage),
            usage.spill_stores,
            usage.spill_loads,
            usage.stack_frame,
            usage.shared
        );
    }
}

fn deny_spills(rows: &[Row]) -> Result<()> {
    if !rows.iter().any(|r| r.target == SPILL_ARCH) {
        println!("note: --deny-spills checks {SPILL_ARCH}, which this run did not assemble for");
        return Ok(());
    }
    let spilling: Vec<String> = rows
        .iter()
        .filter(|r| r.target == SPILL_ARCH && r.usage.spills())
        .map(|r| {
            format!(
                "{} {} ({} B stores, {} B loads)",
                r.label(),
                r.usage.name,
                r.usage.spill_stores,
                r.usage.spill_loads
            )
        })
        .collect();
    if spilling.is_empty() {
        println!("no register spills at {SPILL_ARCH} (its own PTX, and that of earlier architectures)");
        Ok(())
    } else {
        Err(format!("register spills at {SPILL_ARCH} (--deny-spills): {}", spilling.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options() {
        let o = Options::parse(&[]).unwrap();
        assert_eq!(o.archs, ["sm_80", "sm_90"]);
        assert!(!o.deny_spills);
        let o = Options::parse(&args(&["--arch", "sm_90", "--deny-spills"])).unwrap();
        assert_eq!(o.archs, ["sm_90"]);
        assert!(o.deny_spills);
        assert_eq!(Options::parse(&args(&["--arch=sm_80,sm_90"])).unwrap().archs, ["sm_80", "sm_90"]);
        assert!(Options::parse(&args(&["--arch"])).is_err());
        assert!(Options::parse(&args(&["--arch="])).is_err());
        assert!(Options::parse(&args(&["--bogus"])).is_err());
    }

    #[test]
    fn architecture_numbers() {
        assert!(sm("sm_80") < sm(SPILL_ARCH));
        assert_eq!(sm("sm_90"), 90);
        assert_eq!(sm("compute_90"), 0);
    }
}
