//! Fuzzes the host validation layer: input bytes → a `gumbel_sample` or
//! `rejection_sample` call description (`arbitrary::Unstructured` answering the
//! generators' choices) → the CPU backend, unsharded or sharded on one rank,
//! every buffer guarded by canaries, checked by `specdec_suite::robust` (the
//! same generators, model of the rules and checks as
//! `tests/validation_props.rs`). Any panic is a bug: the crate panicked, wrote
//! outside a buffer, accepted an invalid call or rejected a valid one, or broke
//! an output property.
//!
//! ```text
//! cargo fuzz run validation                  # from the repository root
//! cargo fuzz run -s none validation          # without AddressSanitizer
//! ```
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use specdec_suite::robust::{Choices, GumbelCall, RejectionCall};

/// The fuzzer's bytes as choices (`0` once they run out).
struct Bytes<'a>(Unstructured<'a>);

impl Choices for Bytes<'_> {
    fn below(&mut self, n: u64) -> u64 {
        self.0.int_in_range(0..=n - 1).unwrap_or(0)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut choices = Bytes(Unstructured::new(data));
    // Each call unsharded, or sharded on one rank against the unsharded call.
    let _outcome = match choices.below(4) {
        0 => GumbelCall::generate(&mut choices).check(),
        1 => RejectionCall::generate(&mut choices).check(),
        2 => GumbelCall::generate(&mut choices).check_sharded(),
        _ => RejectionCall::generate(&mut choices).check_sharded(),
    };
});
