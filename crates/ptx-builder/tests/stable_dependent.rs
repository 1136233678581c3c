//! A project on the stable toolchain that depends on `specdec` builds and runs
//! the README's first library example: the kernels build with the pinned
//! nightly whatever toolchain the dependent uses (issue 25).
//!
//! The project is made outside the repository (so no `rust-toolchain.toml`
//! above it applies), with the workspace's `Cargo.lock` (the same dependency
//! versions), and built by `rustup run stable cargo run` into
//! `target/stable-dependent` (kept, so a second run rebuilds little), its
//! kernels in the workspace's `target/ptx` (`SPECDEC_PTX_TARGET_DIR`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root")
}

/// The first ```rust block after the README's "## Using the library".
fn readme_example(readme: &str) -> String {
    let section = readme.split_once("## Using the library").expect("README: a \"Using the library\" section").1;
    let block = section.split_once("```rust\n").expect("README: a rust example in that section").1;
    block.split_once("```").expect("README: the example's closing fence").0.to_string()
}

/// An installed stable toolchain: `stable-<host>`, else a release such as
/// `1.95.0-<host>` (a machine may have its one toolchain under its version).
fn stable_toolchain() -> String {
    let list = Command::new("rustup").args(["toolchain", "list"]).output().expect("rustup toolchain list");
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    let names: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let found = names
        .iter()
        .find(|n| n.starts_with("stable-"))
        .or_else(|| names.iter().find(|n| n.starts_with(|c: char| c.is_ascii_digit())));
    found
        .unwrap_or_else(|| {
            panic!("no stable toolchain installed (`rustup toolchain install stable`); rustup lists {names:?}")
        })
        .to_string()
}

/// `rustup run <stable> TOOL ARGS` in `dir`, with nothing of the outer cargo's
/// or rustup's environment that would pick another toolchain or target.
fn stable(dir: &Path, tool: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", &stable_toolchain(), tool]).args(args).current_dir(dir);
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let leaks = (key.starts_with("CARGO") && key != "CARGO_HOME")
            || key.starts_with("RUSTC")
            || matches!(key, "RUSTUP_TOOLCHAIN" | "RUSTFLAGS" | "RUSTDOCFLAGS");
        if leaks {
            cmd.env_remove(key);
        }
    }
    cmd
}

#[test]
fn a_stable_project_builds_the_kernels_and_runs_the_readme_example() {
    let root = workspace_root();
    let dir = std::env::temp_dir().join(format!("specdec-stable-dependent-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src")).unwrap();

    let version = stable(&dir, "rustc", &["--version"]).output().expect("rustup runs the stable toolchain");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        !version.is_empty() && !version.contains("nightly"),
        "a stable toolchain is needed (`rustup toolchain install stable`); its rustc said {version:?}"
    );

    let host = root.join("crates/host");
    let manifest = format!(
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [dependencies]\nspecdec = {{ path = {:?} }}\n\n[workspace]\n",
        host.display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    std::fs::write(dir.join("src/main.rs"), readme_example(&readme)).unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();

    // The kernels' nested build is the workspace's own (`target/ptx`, which
    // building this test made): fresh, where a build of its own takes a minute.
    let out = stable(&dir, "cargo", &["run", "--quiet"])
        .env("CARGO_TARGET_DIR", root.join("target/stable-dependent"))
        .env(specdec_ptx_builder::TARGET_DIR_ENV, root.join("target/ptx"))
        .output()
        .expect("cargo run");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "a stable-toolchain dependent ({}) failed:\n{}{}",
        version.trim(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_missing_toolchain_is_one_line_with_its_install_command() {
    let dir = std::env::temp_dir().join(format!("specdec-missing-toolchain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"k\"\nversion = \"0.1.0\"\n").unwrap();
    std::fs::write(
        dir.join("rust-toolchain.toml"),
        "[toolchain]\nchannel = \"nightly-1999-01-01\"\ncomponents = [\"rust-src\", \"llvm-tools\"]\n",
    )
    .unwrap();
    let err = specdec_ptx_builder::PtxBuilder::new(&dir).build().unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    let message = err.to_string();
    assert!(matches!(err, specdec_ptx_builder::BuildError::ToolchainMissing { .. }), "{message}");
    assert!(!message.contains('\n'), "{message}");
    assert!(
        message.ends_with(
            "install it with: rustup toolchain install nightly-1999-01-01 --profile minimal --component rust-src,llvm-tools"
        ),
        "{message}"
    );
}
