//! Code shared, bit for bit, by the specdec kernels (compiled to PTX) and the
//! host's CPU backend. One definition compiled twice is what makes the two
//! backends agree exactly: the random streams ([`rng`]), the Gumbel transform
//! and its IEEE-only logarithm ([`gumbel`]), the argmax combine rule
//! ([`argmax`]), the logit dtypes ([`dtype`]) and the status flags ([`status`]).
//!
//! Everything here uses only IEEE-rounded `+ - * /` and integer operations, so
//! the CPU and the GPU round identically (the PTX builder disables contraction).
//!
//! # Where the SPEC's steps live
//!
//! - §2 randomness: [`rng`] (Philox4x32-7 streams), [`gumbel`] (a word's noise).
//! - §3 sampling: [`sample`]'s `Sampler` (the per-quad Gumbel-max fold and its
//!   bounds), [`argmax`] (the tie rule, floors).
//! - §4 verification: the row statistics' log-sum-exps in [`logspace`]
//!   (`Lse`, the GPU's float sums) and [`exp_sum`] (the order-free sum the
//!   CPU adds, REFERENCE §2.6), **the accept rule** `sample::accepts`, **the residual**
//!   `logspace::ln_residual` folded by `Sampler::fold_resample_logits`;
//!   block verification's rule in [`block_verification`].
//! - §5 flags: [`status`]; parameter blocks of the kernels: [`layout`];
//!   the records they keep in scratch: [`scratch`]; the message a rank of a
//!   sharded call sends: [`shard`]; dtypes: [`dtype`];
//!   the kernels' symbols and launch bounds: [`names`].
//! - §7 filters: [`filter`] (the kept set's threshold from a row's tie
//!   groups, fixed-point masses, the exact top-p comparison).
//!
//! The kernels that run these steps are in `specdec-kernels` (its
//! `rejection/` files are named by step), the CPU twin in the host crate's
//! `cpu` module.
#![no_std]

pub mod argmax;
pub mod block_verification;
pub mod dtype;
pub mod exp_sum;
pub mod filter;
pub mod gumbel;
pub mod layout;
pub mod logspace;
pub mod names;
pub mod rng;
pub mod sample;
pub mod scratch;
pub mod shard;
pub mod status;

/// A xorshift64 generator of test inputs from `seed` (non-zero).
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
