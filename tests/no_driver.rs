//! Without a CUDA driver, `Cuda::on_device` is `Error::NoDriver` and
//! `Backend::auto()` falls back to the CPU with that reason (no panic: cudarc
//! would panic on first use without a driver). Built with or without the
//! `gpu` feature. Where a driver exists the path cannot be provoked: the test
//! says so on stderr (past the test harness's capture) and checks only that
//! `auto()` gives a reason exactly when it picks the CPU.

use specdec::{Backend, Cuda, DType, Error};
use specdec_suite::Batch;
use specdec_suite::batch::Values;
use std::io::Write;

#[test]
fn without_a_driver_auto_falls_back_to_the_cpu() {
    let (backend, reason) = Backend::auto();
    if specdec::cuda::driver_present() {
        let note = "note: a CUDA driver is present, so the no-driver path (Error::NoDriver, Backend::auto() \
                    falling back to the CPU) is not tested here; it is on machines without one (CI)";
        // Straight to stderr: the harness captures only print!/eprint!.
        let _ = writeln!(std::io::stderr(), "{note}");
        match &backend {
            Backend::Cpu(_) => assert!(reason.is_some(), "auto() chose the CPU without saying why"),
            Backend::Cuda(_) => assert!(reason.is_none(), "auto() chose CUDA yet gave a reason: {reason:?}"),
        }
        return;
    }
    let direct = Cuda::on_device(0);
    assert!(matches!(direct, Err(Error::NoDriver)), "Cuda::on_device(0) without a driver: {direct:?}");
    assert!(matches!(backend, Backend::Cpu(_)), "auto() without a driver chose {}", backend.describe());
    assert!(matches!(reason, Some(Error::NoDriver)), "auto() without a driver gave the reason {reason:?}");
    assert_eq!(backend.describe(), "cpu");
    // The fallback samples: greedy rows give their argmax.
    let logits = [0.5f32, 2.0, -1.0, 3.0, 1.0, 0.0];
    let mut batch = Batch::new(Values::from_f32(DType::F32, &logits), 2, 3, 0.0, 7);
    let out = batch.run(&backend).expect("gumbel_sample on the fallback backend");
    assert_eq!(out.tokens, [1, 0]);
}
