//! Writes the random words of the streams (`specdec_core::rng`) to stdout as
//! raw little-endian u32s, endlessly, for a statistical battery to read:
//!
//! ```text
//! cargo run --release -p specdec-core --example rng_stream -- ORDER [ROUNDS] | dieharder -a -g 200
//! ```
//!
//! `ORDER` is the order a battery sees the words in, each a way the kernels
//! consume them:
//! - `ids`: a row's words by token id, 151,936 of them (one row of the
//!   largest benched vocabulary), then the next position's row;
//! - `positions`: one id's word at consecutive positions (the same id of
//!   consecutive rows), then the next id;
//! - `seeds`: one id's word at one position under consecutive seeds (the
//!   same id of consecutive requests), then the next id.
//!
//! `ROUNDS` (default: the streams' [`PHILOX_ROUNDS`]) picks Philox4x32 at 3
//! to 10 rounds, so the battery can be shown to fail a generator with too
//! few. benches/results/2026-12-02-philox-rounds.md records the runs.

use specdec_core::rng::{PHILOX_ROUNDS, Stream, philox4x32, random_u32};
use std::io::Write;

/// Words of one row in the `ids` order: V = 151,936.
const ROW_IDS: u32 = 151_936;
/// Positions (or seeds) an id's word is taken from before the next id, in the
/// `positions` and `seeds` orders.
const RUN: u64 = 1 << 20;
const SEED: u64 = 0x0123_4567_89AB_CDEF;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let order = args.first().map(String::as_str).unwrap_or("ids");
    let rounds = match args.get(1) {
        Some(r) => r.parse().unwrap_or_else(|_| fail(&format!("ROUNDS must be a number, not {r:?}"))),
        None => PHILOX_ROUNDS,
    };
    let draw: fn(u64, u64, u32) -> u32 = match rounds {
        3 => word::<3>,
        4 => word::<4>,
        5 => word::<5>,
        6 => word::<6>,
        7 => word::<7>,
        8 => word::<8>,
        10 => word::<10>,
        _ => fail("ROUNDS must be one of 3, 4, 5, 6, 7, 8, 10"),
    };
    // The battery must read the streams' words, not a copy's.
    for (pos, id) in [(0, 0), (7, 151_935), (1 << 40, 5)] {
        if word::<PHILOX_ROUNDS>(SEED, pos, id) != random_u32(SEED, pos, Stream::Target, id) {
            fail("word() no longer draws what random_u32 draws");
        }
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let mut emit = |w: u32| {
        if out.write_all(&w.to_le_bytes()).is_err() {
            std::process::exit(0); // the battery closed the pipe: done
        }
    };
    // Runs until the battery closes the pipe (`emit` exits).
    let mut run = 0u64;
    loop {
        match order {
            "ids" => (0..ROW_IDS).for_each(|id| emit(draw(SEED, run, id))),
            "positions" => (0..RUN).for_each(|pos| emit(draw(SEED, pos, run as u32))),
            "seeds" => (0..RUN).for_each(|s| emit(draw(SEED.wrapping_add(s), 1000, run as u32))),
            _ => fail(&format!("ORDER must be ids, positions or seeds, not {order:?}")),
        }
        run += 1;
    }
}

/// The word of token id `id` at `(seed, pos)` in the target stream, as
/// `specdec_core::rng::random_u32` draws it, at `ROUNDS` rounds.
fn word<const ROUNDS: u32>(seed: u64, pos: u64, id: u32) -> u32 {
    let ctr = [id >> 2, Stream::Target as u32, pos as u32, (pos >> 32) as u32];
    philox4x32::<ROUNDS>(ctr, [seed as u32, (seed >> 32) as u32])[(id & 3) as usize]
}

fn fail(message: &str) -> ! {
    eprintln!("rng_stream: {message}");
    std::process::exit(2)
}
