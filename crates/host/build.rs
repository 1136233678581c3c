//! Compiles `crates/kernels` to PTX (see `specdec-ptx-builder`), with the
//! launch bounds of `specdec_core::names`, and leaves it in
//! `OUT_DIR/specdec.ptx`, which `src/cuda/mod.rs` embeds. The kernels build
//! with the toolchain the repository pins, whatever toolchain builds this
//! crate (`specdec_ptx_builder::Toolchain`).

use specdec_core::names;
use specdec_ptx_builder::{LaunchBounds, PtxBuilder};
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = manifest.join("../kernels");
    println!("cargo::rerun-if-env-changed={}", specdec_ptx_builder::ARCH_ENV);
    println!("cargo::rerun-if-env-changed={}", specdec_ptx_builder::TARGET_DIR_ENV);
    println!("cargo::rerun-if-changed={}", kernels.join("Cargo.toml").display());

    // Share one nested build between profiles: <target>/ptx, found above OUT_DIR
    // (<target>/<profile>/build/<pkg>/out), unless SPECDEC_PTX_TARGET_DIR names another.
    let target_dir = match std::env::var_os(specdec_ptx_builder::TARGET_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => out.ancestors().nth(4).map(|t| t.join("ptx")).unwrap_or_else(|| out.join("ptx")),
    };
    let bounds = names::symbols().map(|s| LaunchBounds {
        kernel: s.to_string(),
        max_threads: s.max_threads(),
        min_blocks: s.min_blocks(),
    });
    let builder = PtxBuilder::new(&kernels).target_dir(target_dir).launch_bounds(bounds);
    let arch = builder.arch.clone();
    let ptx = match builder.build() {
        Ok(ptx) => ptx,
        Err(e) => {
            // One line a user can act on (the error names its fix), not a panic's backtrace.
            eprintln!("error: building the specdec kernels to PTX failed: {e}");
            std::process::exit(1);
        }
    };
    for source in &ptx.sources {
        println!("cargo::rerun-if-changed={}", source.display());
    }
    std::fs::copy(&ptx.ptx, out.join("specdec.ptx")).expect("copy PTX into OUT_DIR");
    println!("cargo::rustc-env=SPECDEC_PTX_ARCH={arch}");
}
