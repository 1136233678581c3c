//! Property tests of the host validation layer on the CPU backend (SPEC §3–§5, §7.1).
//!
//! Random calls of `gumbel_sample` and `rejection_sample` with shapes,
//! strides (0, overlapping, overflowing), dtypes, lengths, slots, draft-logits
//! columns, offsets, draft ids, temperatures, filter values, K and
//! log-probability outputs (their lengths and top-n) that are often wrong:
//! every call returns `Ok` or a typed error exactly as the rules
//! say (a bad filter value: its own `InvalidTopK` / `InvalidTopP` /
//! `InvalidMinP`), never panics,
//! writes nothing outside the buffers it was given (canaries around every
//! buffer) and nothing at all when it fails, fills every output when it
//! succeeds, and gives the same outputs when run again. The generators, the
//! model of the rules and the checks live in `specdec_suite::robust` (the fuzz
//! target in `fuzz/` uses the same ones).
//!
//! Each property runs `PROPTEST_CASES` cases (default [`CASES`]) from a fixed
//! seed (`PROPTEST_RNG_SEED` overrides it), so a run is deterministic (SPEC §6).
//! The panics of failing cases are not printed while proptest shrinks them;
//! the shrunk case's message is.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use specdec::{Backend, DType, DraftLogitsShape};
use specdec_suite::batch::{ColumnSpec, Values};
use specdec_suite::robust::{ChoiceList, GumbelCall, LogprobLens, Outcome, RejectionCall};
use specdec_suite::{Batch, DraftLogitsSpec, Verify};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Once;

/// The seed of every property, unless `PROPTEST_RNG_SEED` is set.
const SEED: u64 = 0x5EC_DEC;
/// Cases per property, unless `PROPTEST_CASES` is set (about 0.2 s each).
const CASES: u32 = 2048;
/// The most choices one case reads (a generated call reads fewer than 220).
const MAX_CHOICES: usize = 256;

fn config() -> Config {
    let mut config = Config { failure_persistence: None, ..Config::default() };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(SEED);
    }
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = CASES;
    }
    config
}

thread_local! {
    /// Whether this thread's panics go unprinted (see [`quietly`]).
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's panic messages silenced (other threads' are
/// printed as before): proptest catches each failing case's panic and shrinks
/// the case, which would print hundreds of them.
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.get() {
                default(info);
            }
        }));
    });
    QUIET.set(true);
    let r = f();
    QUIET.set(false);
    r
}

/// Outcomes of a property's cases: `Ok`s, and errors by variant.
#[derive(Default, Debug)]
struct Tally {
    ok: usize,
    errors: BTreeMap<String, usize>,
}

/// Runs `check` on calls generated from proptest's lists of choices; fails
/// with the (shrunk) call if a case fails. Also fails if the valid or the
/// invalid calls are too rare for the property to mean much.
fn property(name: &str, check: impl Fn(&mut ChoiceList) -> Outcome) {
    let config = config();
    let cases = config.cases as usize;
    let tally = RefCell::new(Tally::default());
    let mut runner = TestRunner::new(config);
    let result = quietly(|| {
        runner.run(&vec(any::<u64>(), 0..=MAX_CHOICES), |choices| {
            let outcome = check(&mut ChoiceList::new(&choices));
            let mut tally = tally.borrow_mut();
            match outcome {
                Ok(()) => tally.ok += 1,
                Err(variant) => *tally.errors.entry(variant).or_default() += 1,
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let tally = tally.into_inner();
    let failed: usize = tally.errors.values().sum();
    println!("{name}: {} cases, {} Ok, {failed} errors {:?}", tally.ok + failed, tally.ok, tally.errors);
    assert!(tally.ok >= cases / 5, "{name}: too few valid calls: {tally:?}");
    assert!(failed >= cases / 5, "{name}: too few invalid calls: {tally:?}");
}

#[test]
fn gumbel_sample_validates_every_call() {
    property("gumbel_sample", |c| GumbelCall::generate(c).check());
}

#[test]
fn rejection_sample_validates_every_call() {
    property("rejection_sample", |c| RejectionCall::generate(c).check());
}

/// `Cpu::sharded_gumbel_sample` on one rank holding every id, on the same
/// calls: the unsharded call's outputs and errors, never a panic or a write
/// outside its buffers (`GumbelCall::check_sharded`).
#[test]
fn sharded_gumbel_sample_validates_every_call() {
    property("sharded gumbel_sample", |c| GumbelCall::generate(c).check_sharded());
}

/// `Cpu::sharded_rejection_sample` on one rank holding every id, on the same
/// calls: the unsharded call's outputs and errors, never a panic or a write
/// outside its buffers (`RejectionCall::check_sharded`).
#[test]
fn sharded_rejection_sample_validates_every_call() {
    property("sharded rejection_sample", |c| RejectionCall::generate(c).check_sharded());
}

/// The plainest choices (all zeros, as shrinking makes them) give a valid
/// call, so a shrunk failure shows only what it needs.
#[test]
fn the_plainest_calls_are_valid() {
    for choices in [&[][..], &[0; 64][..]] {
        let g = GumbelCall::generate(&mut ChoiceList::new(choices));
        assert!(g.valid(), "{g:#?}");
        assert_eq!(g.check(), Ok(()));
        let r = RejectionCall::generate(&mut ChoiceList::new(choices));
        assert!(r.valid(), "{r:#?}");
        assert_eq!(r.check(), Ok(()));
    }
}

// --- Regressions ------------------------------------------------------------------

/// Found by `rejection_sample_validates_every_call`: with draft logits, a
/// request whose drafts are all accepted samples its bonus row (no draft
/// there), yet the CPU backend slices draft column `n_r` of its slot, which is
/// past the buffer when `n_r = K = k` and the slot is the draft logits' last. The
/// valid call panicked (`crates/host/src/cpu/rejection.rs`, `Request::resample`:
/// `rejected.and(self.draft_row(i))` evaluates `draft_row(i)` even when
/// nothing was rejected).
#[test]
fn a_bonus_row_reads_no_draft_column() {
    let row = [0.5f32, 1.0, -1.0, 2.0];
    let mut verify = Verify::new(Values::from_f32(DType::F32, &row.repeat(2)), 4, &[1], 1, 1.0);
    verify.drafts = vec![3, -1];
    // q = p, so the draft is accepted (u < p/q = 1); one slot, one column.
    let shape = DraftLogitsShape::dense(1, 1, 4);
    verify.draft = Some((Values::from_f32(DType::F32, &row), shape));
    let call = RejectionCall {
        verify,
        tokens_len: 2,
        num_emitted_len: 1,
        accepted_len: Some(1),
        row_status_len: Some(2),
        logprobs: LogprobLens::default(),
    };
    assert_eq!(call.check(), Ok(()));
    assert_eq!(call.run(&Backend::cpu(), false).num_emitted, [2], "the draft is accepted, then a bonus token");
}

/// Found by the fuzz target (regression): SPEC §3 gives the draft logits
/// arbitrary strides, and these rows never share an element (`[2 slots, 3
/// columns, width 1]` with strides `(3, 2)`: rows at 0, 2, 4 and 3, 5, 7), yet
/// the call failed with `DraftLogitsOverlap` (then `CacheOverlap`): the
/// overlap check (`DraftLogitsShape::overlaps`) accepted only nested layouts. It now lists and sorts the rows of other layouts.
#[test]
fn interleaved_draft_rows_are_not_an_overlap() {
    let logits = [1.5f32, -0.5];
    let mut batch = Batch::new(Values::from_f32(DType::F32, &logits), 2, 1, 0.0, 0);
    batch.slots = vec![0, 1];
    batch.temperature = vec![0.0, 0.5];
    batch.seed = vec![1, 2];
    batch.draft_logits = Some(DraftLogitsSpec::strided(DType::F32, 2, 3, 1, 3, 2, ColumnSpec::All(1)));
    let call = GumbelCall { batch, tokens_len: 2, row_status_len: Some(2), logprobs: LogprobLens::default() };
    let run = call.run(&Backend::cpu(), false);
    assert_eq!(run.result, Ok(()), "an interleaved but disjoint draft-logits layout");
    assert_eq!(call.check(), Ok(()));
}
