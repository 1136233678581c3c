//! The Python package (`crates/python`): its wheel, built by maturin, and its
//! tests, run by pytest, in a virtual environment of our own
//! (`.tools/python`, from `crates/python/requirements-test.txt`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, cmd};

const PACKAGE: &str = "crates/python";
const REQUIREMENTS: &str = "crates/python/requirements-test.txt";
/// pytest for the GPU machine, which has torch, NumPy and SciPy but no pytest (nor a network).
const PYTEST: &str = "pytest==9.2.0";

/// The virtual environment's python, made (and given the requirements) when
/// they changed since it was last made.
fn venv(root: &Path) -> Result<PathBuf> {
    let dir = root.join(".tools/python");
    let python = dir.join("bin/python");
    let requirements = root.join(REQUIREMENTS);
    let wanted = std::fs::read_to_string(&requirements).map_err(|e| format!("read {}: {e}", requirements.display()))?;
    let stamp = dir.join("requirements.installed");
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|had| had == wanted) {
        return Ok(python);
    }
    cmd::run_ok(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&dir))
        .map_err(|e| format!("{e}\nthe Python package's tests need python3 (3.11 or later) with venv"))?;
    cmd::run_ok(Command::new(&python).args(["-m", "pip", "install", "--quiet", "-r"]).arg(&requirements))?;
    std::fs::write(&stamp, wanted).map_err(|e| format!("write {}: {e}", stamp.display()))?;
    Ok(python)
}

/// Builds the package's wheel into `out` (emptied first) and returns its path.
fn wheel(root: &Path, python: &Path, out: &Path) -> Result<PathBuf> {
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("rm -r {}: {e}", out.display()))?;
    }
    let maturin = python.with_file_name("maturin");
    cmd::run_ok(
        Command::new(maturin)
            .current_dir(root)
            .args(["build", "--release", "--manifest-path"])
            .arg(root.join(PACKAGE).join("Cargo.toml"))
            .arg("--out")
            .arg(out)
            .arg("--interpreter")
            .arg(python),
    )?;
    let entries = std::fs::read_dir(out).map_err(|e| format!("read {}: {e}", out.display()))?;
    let wheels: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [wheel] => Ok(wheel.clone()),
        _ => Err(format!("maturin finished, but {} holds {} wheels, expected one", out.display(), wheels.len())),
    }
}

/// CI: builds the wheel, installs it as a user would (`pip install`), and
/// runs the package's CPU tests (`crates/python/tests`, not `gpu/`).
pub fn test(root: &Path) -> Result<()> {
    let python = venv(root)?;
    let wheel = wheel(root, &python, &root.join("target/python-wheel"))?;
    cmd::run_ok(
        Command::new(&python).args(["-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps"]).arg(&wheel),
    )?;
    let tests = root.join(PACKAGE).join("tests");
    cmd::run_ok(Command::new(&python).current_dir(&tests).args([
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--ignore=gpu",
        ".",
    ]))
}

/// For a GPU bundle: `DIR/python/wheels` (the package's wheel, and pytest's
/// with its dependencies), `DIR/python/tests` (the package's tests) and the
/// README (whose example they run), and
/// `DIR/bin/python-package`, which `run.sh` runs as it runs a test binary.
pub fn bundle(root: &Path, dir: &Path) -> Result<()> {
    let python = venv(root)?;
    let wheels = dir.join("python/wheels");
    wheel(root, &python, &wheels)?;
    cmd::run_ok(
        Command::new(&python)
            .args(["-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest"])
            .arg(&wheels)
            .arg(PYTEST),
    )?;
    let tests = dir.join("python/tests");
    copy_dir(&root.join(PACKAGE).join("tests"), &tests)?;
    // tests/gpu runs the README's example.
    let readme = dir.join("python/README.md");
    std::fs::copy(root.join("README.md"), &readme).map_err(|e| format!("cp README.md {}: {e}", readme.display()))?;
    let runner = dir.join("bin/python-package");
    std::fs::write(&runner, RUNNER).map_err(|e| format!("write {}: {e}", runner.display()))?;
    cmd::make_executable(&runner)
}

/// What `run.sh` runs for the package: it passes `--test-threads=1` and a
/// test filter, as to every binary; the filter becomes pytest's `-k`.
const RUNNER: &str = r#"#!/usr/bin/env bash
# The Python package's tests (tests/ and tests/gpu/) on this GPU machine's torch.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../python" && pwd)"
filter=()
for arg in "$@"; do
  case "$arg" in --test-threads=*) ;; -*) ;; *) filter=(-k "$arg") ;; esac
done
exec "$here/tests/gpu/run.sh" "$here/wheels" ${filter[@]+"${filter[@]}"}
"#;

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| format!("mkdir {}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("read {}: {e}", from.display()))? {
        let path = entry.map_err(|e| format!("read {}: {e}", from.display()))?.path();
        let dest = to.join(path.file_name().expect("a directory entry has a name"));
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                copy_dir(&path, &dest)?;
            }
        } else {
            std::fs::copy(&path, &dest).map_err(|e| format!("cp {} {}: {e}", path.display(), dest.display()))?;
        }
    }
    Ok(())
}
