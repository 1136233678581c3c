//! The random streams (SPEC §2): stateless, keyed, counter-based.
//!
//! The generator is Philox4x32-7 (Salmon et al., "Parallel random numbers: as
//! easy as 1, 2, 3", SC 2011: [`PHILOX_ROUNDS`] rounds of the Random123
//! definition). Every random word is a pure function of
//! `(seed, pos, stream, index)`:
//!
//! ```text
//! key     = [seed as u32, (seed >> 32) as u32]
//! counter = [index >> 2, stream, pos as u32, (pos >> 32) as u32]
//! word    = philox4x32_7(counter, key)[index & 3]
//! ```
//!
//! so one Philox call yields the words of four consecutive token ids, and
//! nothing about a batch (its order, its chunking, the grid) can change a value.
//! Streams are distinct counter words, hence independent: a draft sampled at
//! some `(seed, pos)` never shares noise with the verification at that key.

/// Which use a random word is for. Each stream is an independent sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Stream {
    /// Gumbel noise for target sampling (`gumbel_sample`), and for the
    /// resampled and bonus tokens of `rejection_sample`.
    Target = 0x5441_5247,
    /// Gumbel noise for `gumbel_sample` in drafting mode.
    Draft = 0x4452_4146,
    /// The acceptance uniforms of `rejection_sample` (index 0 of each row).
    Accept = 0x4143_4350,
}

/// Rounds of Philox4x32 in the streams. Seven is the fewest its authors found
/// to pass TestU01's BigCrush (ten, their default, adds a margin); the
/// streams pass the battery of benches/results/2026-12-02-philox-rounds.md at
/// seven, and the noise loops spend 30 % less on the generator.
pub const PHILOX_ROUNDS: u32 = 7;

// Public for the CPU backend's SIMD twin of `philox4x32` (its tests pin it to this one).
/// Philox4x32 multiplier of `ctr[0]`.
pub const M0: u32 = 0xD251_1F53;
/// Philox4x32 multiplier of `ctr[2]`.
pub const M1: u32 = 0xCD9E_8D57;
/// Philox4x32 per-round increment of `key[0]`.
pub const W0: u32 = 0x9E37_79B9;
/// Philox4x32 per-round increment of `key[1]`.
pub const W1: u32 = 0xBB67_AE85;

/// The high and low words of `a·b`, each formed on its own: from one 64-bit
/// product, LLVM's NVPTX backend kept Philox's whole state in 64-bit registers
/// (emulated 64-bit multiplies, shifts and xors: three times the instructions
/// of `mul.hi.u32` / `mul.lo.u32`).
#[inline(always)]
const fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    (((a as u64 * b as u64) >> 32) as u32, a.wrapping_mul(b))
}

/// Philox4x32 with `ROUNDS` rounds, as specified by Random123.
#[inline(always)]
pub const fn philox4x32<const ROUNDS: u32>(mut ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut k0, mut k1) = (key[0], key[1]);
    let mut round = 0;
    while round < ROUNDS {
        let (hi0, lo0) = mulhilo(M0, ctr[0]);
        let (hi1, lo1) = mulhilo(M1, ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ k0, lo1, hi0 ^ ctr[3] ^ k1, lo0];
        k0 = k0.wrapping_add(W0);
        k1 = k1.wrapping_add(W1);
        round += 1;
    }
    ctr
}

/// The four random words of token ids `4*quad .. 4*quad + 4`.
#[inline(always)]
pub const fn random_quad(seed: u64, pos: u64, stream: Stream, quad: u32) -> [u32; 4] {
    philox4x32::<PHILOX_ROUNDS>(
        [quad, stream as u32, pos as u32, (pos >> 32) as u32],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// The random word of token id (or draw index) `index`.
#[inline(always)]
pub const fn random_u32(seed: u64, pos: u64, stream: Stream, index: u32) -> u32 {
    random_quad(seed, pos, stream, index >> 2)[(index & 3) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers from Random123's `kat_vectors` for philox4x32 at 7
    /// rounds (the streams') and at 10 (the same round function, further).
    #[test]
    fn philox_known_answers() {
        const PI_CTR: [u32; 4] = [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344];
        const PI_KEY: [u32; 2] = [0xa4093822, 0x299f31d0];
        assert_eq!(PHILOX_ROUNDS, 7);
        assert_eq!(philox4x32::<7>([0; 4], [0; 2]), [0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48]);
        assert_eq!(philox4x32::<7>([u32::MAX; 4], [u32::MAX; 2]), [0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662]);
        assert_eq!(philox4x32::<7>(PI_CTR, PI_KEY), [0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a]);
        assert_eq!(philox4x32::<10>([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(philox4x32::<10>([u32::MAX; 4], [u32::MAX; 2]), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
        assert_eq!(philox4x32::<10>(PI_CTR, PI_KEY), [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]);
    }

    #[test]
    fn key_layout() {
        let seed = 0x0123_4567_89ab_cdef;
        let pos = 0xfedc_ba98_7654_3210;
        let words = philox4x32::<PHILOX_ROUNDS>(
            [2, Stream::Draft as u32, 0x7654_3210, 0xfedc_ba98],
            [0x89ab_cdef, 0x0123_4567],
        );
        for lane in 0..4 {
            assert_eq!(random_u32(seed, pos, Stream::Draft, 8 + lane), words[lane as usize]);
        }
    }

    #[test]
    fn streams_and_keys_differ() {
        let a = random_quad(7, 11, Stream::Target, 0);
        assert_ne!(a, random_quad(7, 11, Stream::Draft, 0));
        assert_ne!(a, random_quad(7, 11, Stream::Accept, 0));
        assert_ne!(a, random_quad(8, 11, Stream::Target, 0));
        assert_ne!(a, random_quad(7, 12, Stream::Target, 0));
        assert_ne!(a, random_quad(7, 11, Stream::Target, 1));
        // High halves of seed and position are part of the key.
        assert_ne!(a, random_quad(7 | 1 << 40, 11, Stream::Target, 0));
        assert_ne!(a, random_quad(7, 11 | 1 << 40, Stream::Target, 0));
    }

    /// Mean and bit balance of many words: a broken round (a swapped word, a
    /// missing key bump) shows up as bias long before it would in a chi-square.
    #[test]
    fn words_are_balanced() {
        let n = 1 << 16;
        let mut ones = [0u32; 32];
        for i in 0..n {
            let w = random_u32(42, 1000, Stream::Target, i);
            for (b, c) in ones.iter_mut().enumerate() {
                *c += (w >> b) & 1;
            }
        }
        for (b, &c) in ones.iter().enumerate() {
            let z = (c as f64 - n as f64 / 2.0) / (n as f64 / 4.0).sqrt();
            assert!(z.abs() < 6.0, "bit {b}: {c} ones of {n} (z = {z:.2})");
        }
    }
}
