//! Finding ptxas, and installing it from PyPI when it is missing.
//!
//! ptxas assembles PTX into a cubin without a GPU and reports registers and
//! spills. It ships in NVIDIA's `nvidia-cuda-nvcc-cu12` wheel as
//! `nvidia/cuda_nvcc/bin/ptxas`; we download that wheel with pip (no CUDA
//! toolkit needed) and extract only ptxas into `<root>/.tools/ptxas/bin`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, cmd};

/// Overrides the ptxas to use.
pub const PTXAS_ENV: &str = "SPECDEC_PTXAS";

/// The wheel ptxas comes from. CUDA 12.9 ptxas knows sm_80 and sm_90 (and PTX ISA up to 8.8).
pub const WHEEL: &str = "nvidia-cuda-nvcc-cu12";
pub const WHEEL_VERSION: &str = "12.9.86";

/// The path of the wheel's ptxas inside the zip.
const MEMBER_SUFFIX: &str = "nvidia/cuda_nvcc/bin/ptxas";

/// Extracts the one zip member ending in argv[3] from the wheel argv[1] to argv[2].
const EXTRACT_PY: &str = "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
m = [n for n in z.namelist() if n.endswith(sys.argv[3])]; \
len(m) == 1 or sys.exit('expected one %s in %s, found %r' % (sys.argv[3], sys.argv[1], m)); \
open(sys.argv[2], 'wb').write(z.read(m[0]))";

/// The ptxas to run: `$SPECDEC_PTXAS`, else `<root>/.tools/ptxas/bin/ptxas`
/// (installed first if missing). Checked to run (`ptxas --version`).
pub fn ptxas(root: &Path) -> Result<PathBuf> {
    let path = match std::env::var_os(PTXAS_ENV) {
        Some(path) => {
            println!("using ptxas from ${PTXAS_ENV}: {}", Path::new(&path).display());
            PathBuf::from(path)
        }
        None => {
            let path = root.join(".tools/ptxas/bin/ptxas");
            if !path.is_file() {
                install(root, &path)?;
            }
            path
        }
    };
    check_runs(&path)?;
    Ok(path)
}

fn install(root: &Path, dest: &Path) -> Result<()> {
    println!("ptxas not found at {}: installing it from the PyPI wheel {WHEEL}=={WHEEL_VERSION}", dest.display());
    let wheels = root.join(".tools/wheels");
    let mut download = Command::new("python3");
    download
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest"])
        .arg(&wheels)
        .arg(format!("{WHEEL}=={WHEEL_VERSION}"));
    cmd::run_ok(&mut download).map_err(|e| {
        format!("{e}\ncould not download ptxas; check network access to PyPI, or set {PTXAS_ENV} to a ptxas binary")
    })?;
    let wheel = find_wheel(&wheels)?;

    let bin = dest.parent().expect("ptxas path has a parent");
    std::fs::create_dir_all(bin).map_err(|e| format!("mkdir {}: {e}", bin.display()))?;
    // Extract to a temporary name and rename, so an interrupted install leaves no half-written ptxas.
    let partial = dest.with_extension("partial");
    let mut extract = Command::new("python3");
    extract.args(["-c", EXTRACT_PY]).arg(&wheel).arg(&partial).arg(MEMBER_SUFFIX);
    cmd::run_ok(&mut extract)?;
    println!("chmod +x {}", partial.display());
    cmd::make_executable(&partial)?;
    println!("mv {} {}", partial.display(), dest.display());
    std::fs::rename(&partial, dest).map_err(|e| format!("mv {} {}: {e}", partial.display(), dest.display()))?;
    println!("installed ptxas at {}", dest.display());
    Ok(())
}

/// The downloaded wheel file: `nvidia_cuda_nvcc_cu12-<version>-*.whl`.
fn find_wheel(dir: &Path) -> Result<PathBuf> {
    let prefix = format!("{}-{WHEEL_VERSION}-", WHEEL.replace('-', "_"));
    let entries = std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("read {}: {e}", dir.display()))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(path);
        }
    }
    Err(format!("pip finished but no {prefix}*.whl is in {}", dir.display()))
}

/// Runs `ptxas --version` and prints its last line (the release).
fn check_runs(ptxas: &Path) -> Result<()> {
    let out = cmd::output(Command::new(ptxas).arg("--version"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "`{} --version` failed ({}):\n{stdout}{}",
            ptxas.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let release = stdout.lines().find(|l| l.contains("release")).or(stdout.lines().last());
    println!("{}", release.unwrap_or("(ptxas printed no version)"));
    Ok(())
}
