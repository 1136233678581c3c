//! The CUDA toolkit that GPU builds need here, where there is none: feature
//! `specdec-suite/gpu` turns on candle's CUDA backend, whose build compiles
//! candle's kernels with nvcc and links the CUDA libraries candle uses
//! (cudarc's `dynamic-linking`: libcuda, cublas, cublasLt, curand, nvrtc,
//! cudart).
//!
//! We install CUDA 13.0 from NVIDIA's PyPI wheels into `.tools/cuda-13.0`
//! (nvcc, its front end and headers, and the libraries), and link libcuda
//! against a stub of the driver functions cudarc declares (the driver itself
//! comes with the GPU machine's NVIDIA driver), and libnccl (`specdec`'s
//! feature `nccl`) against a stub of NCCL's (the GPU machine's comes with
//! its PyTorch: `cuda-libs.sh` finds it). 13.0 because it is the
//! CUDA of the H200 machines' driver (580) and libraries, and the 12.x
//! wheels carry no nvcc. The GPU machine runs the binaries against its own
//! CUDA 13 libraries (the bundles' scripts find them: `cuda-libs.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, cmd};

/// What every bundle's scripts source to find the GPU machine's CUDA 13 libraries, and its name there.
pub const LIBS_SH: (&str, &str) = ("cuda-libs.sh", include_str!("cuda-libs.sh"));

/// Where the toolkit is installed, under the repository root.
const DIR: &str = ".tools/cuda-13.0";
/// Written last: its presence means a complete install.
const MARKER: &str = ".installed";
/// The wheels, each extracted from its `nvidia/cu13/` folder into [`DIR`].
const WHEELS: [&str; 8] = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-curand==10.4.0.35",
    "nvidia-cublas==13.1.0.3",
];
/// The GPU the bundles are for (H200), unless `CUDA_COMPUTE_CAP` says otherwise.
const COMPUTE_CAP: &str = "90";

/// Extracts every `nvidia/cu13/` member of the wheels argv[2..] into argv[1],
/// keeping each file's mode.
const EXTRACT_PY: &str = "import os, sys, zipfile
dest, prefix = sys.argv[1], 'nvidia/cu13/'
for wheel in sys.argv[2:]:
    z = zipfile.ZipFile(wheel)
    for info in z.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        out = os.path.join(dest, info.filename[len(prefix):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, 'wb') as f:
            f.write(z.read(info))
        os.chmod(out, (info.external_attr >> 16) & 0o777 or 0o644)";

/// Sets up `cargo` to build candle's CUDA backend with the toolkit (installed first if missing).
pub fn configure(root: &Path, cargo: &mut Command) -> Result<()> {
    let toolkit = install(root)?;
    for stub in STUBS {
        stub.build(root, &toolkit.join("lib/stubs"))?;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![toolkit.join("bin")];
    paths.extend(std::env::split_paths(&path));
    let path = std::env::join_paths(paths).map_err(|e| format!("PATH: {e}"))?;
    cargo.env("PATH", path).env("CUDA_HOME", &toolkit).env("CUDA_PATH", &toolkit);
    if std::env::var_os("CUDA_COMPUTE_CAP").is_none() {
        cargo.env("CUDA_COMPUTE_CAP", COMPUTE_CAP);
    }
    Ok(())
}

fn install(root: &Path) -> Result<PathBuf> {
    let toolkit = root.join(DIR);
    if toolkit.join(MARKER).is_file() {
        return Ok(toolkit);
    }
    println!("CUDA 13.0 toolkit not found at {}: installing it from NVIDIA's PyPI wheels", toolkit.display());
    let wheels = root.join(".tools/wheels/cuda-13.0");
    let mut download = Command::new("python3");
    download.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest"]).arg(&wheels).args(WHEELS);
    cmd::run_ok(&mut download).map_err(|e| format!("{e}\ncould not download the CUDA wheels; check access to PyPI"))?;
    let files = std::fs::read_dir(&wheels)
        .map_err(|e| format!("read {}: {e}", wheels.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"));
    if toolkit.exists() {
        std::fs::remove_dir_all(&toolkit).map_err(|e| format!("rm -r {}: {e}", toolkit.display()))?;
    }
    let mut extract = Command::new("python3");
    extract.args(["-c", EXTRACT_PY]).arg(&toolkit).args(files);
    cmd::run_ok(&mut extract)?;
    link_unversioned(&toolkit.join("lib"))?;
    std::fs::write(toolkit.join(MARKER), WHEELS.join("\n")).map_err(|e| format!("write marker: {e}"))?;
    println!("installed the CUDA 13.0 toolkit at {}", toolkit.display());
    Ok(toolkit)
}

/// `libX.so → libX.so.N` for each library, the names the linker looks for.
fn link_unversioned(lib: &Path) -> Result<()> {
    let entries = std::fs::read_dir(lib).map_err(|e| format!("read {}: {e}", lib.display()))?;
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some((stem, _)) = name.split_once(".so.") {
            let link = lib.join(format!("{stem}.so"));
            if !link.exists() {
                std::os::unix::fs::symlink(&name, &link)
                    .map_err(|e| format!("ln -s {name} {}: {e}", link.display()))?;
            }
        }
    }
    Ok(())
}

/// A library to link against where the GPU machine has the real one: a
/// stub that defines every function of its `cudarc` bindings.
struct Stub {
    /// The bindings, in cudarc's source folder.
    sys: &'static str,
    /// The prefix of the functions' names.
    prefix: &'static str,
    /// The library's file name and soname.
    file: &'static str,
    soname: &'static str,
}

const STUBS: [Stub; 2] = [
    Stub { sys: "src/driver/sys/mod.rs", prefix: "cu", file: "libcuda.so", soname: "libcuda.so.1" },
    Stub { sys: "src/nccl/sys/mod.rs", prefix: "nccl", file: "libnccl.so", soname: "libnccl.so.2" },
];

impl Stub {
    /// Builds the stub into `dir`, unless it is there.
    fn build(&self, root: &Path, dir: &Path) -> Result<()> {
        if dir.join(self.file).is_file() {
            return Ok(());
        }
        let sys = cudarc_dir(root)?.join(self.sys);
        let source = std::fs::read_to_string(&sys).map_err(|e| format!("read {}: {e}", sys.display()))?;
        let mut names: Vec<&str> = source
            .lines()
            .filter_map(|l| l.strip_prefix("pub unsafe fn "))
            .filter_map(|l| l.split_once('(').map(|(name, _)| name))
            .filter(|name| name.starts_with(self.prefix))
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return Err(format!("no functions found in {}", sys.display()));
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let c = dir.join(format!("{}_stub.c", self.file.trim_end_matches(".so")));
        let body: String = names.iter().map(|n| format!("void {n}(void) {{}}\n")).collect();
        std::fs::write(&c, body).map_err(|e| format!("write {}: {e}", c.display()))?;
        let mut cc = Command::new("cc");
        cc.args(["-shared", "-fPIC", &format!("-Wl,-soname,{}", self.soname), "-o"]).arg(dir.join(self.file)).arg(&c);
        cmd::run_ok(&mut cc)
    }
}

/// The source folder of the cudarc the workspace builds (`cargo metadata`).
fn cudarc_dir(root: &Path) -> Result<PathBuf> {
    let mut metadata = cmd::cargo();
    metadata.current_dir(root).args(["metadata", "--format-version", "1"]);
    let out = cmd::output(&mut metadata)?;
    if !out.status.success() {
        return Err(format!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata's output: {e}"))?;
    let manifest = json["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "cudarc")
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or("cargo metadata lists no cudarc")?;
    Ok(Path::new(manifest).parent().expect("a manifest has a folder").to_path_buf())
}
