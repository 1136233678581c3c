//! The log-probabilities a `sample` or `verify` file asks for (FORMAT.md):
//! read from the optional `logprobs` and `top_logprobs_raw` scalars, filled
//! by the call, written beside its tokens.

use crate::error::{Failure, Result};
use crate::files::{Output, Tensors};
use specdec::{Distribution, Host, Logprobs, MAX_TOP_LOGPROBS};

/// The outputs of a file that asks for log-probabilities, at the call's
/// positions (`sample`: its rows; `verify`: its `[R, K + 1]` token slots).
pub struct Asked {
    /// Top log-probabilities per position (`0`: ranks alone).
    n: usize,
    distribution: Distribution,
    processed: Vec<f32>,
    raw: Vec<f32>,
    top: Vec<f32>,
    ids: Vec<i32>,
    ranks: Vec<i32>,
}

impl Asked {
    /// What the file asks for at `positions` positions: nothing without a
    /// `logprobs` scalar.
    pub fn read(t: &Tensors<'_>, positions: usize) -> Result<Option<Asked>> {
        let raw_top = t.flag("top_logprobs_raw")?;
        let Some(n) = t.int_scalar("logprobs")? else {
            if raw_top {
                return Err(Failure::input("tensor `top_logprobs_raw` is given without a `logprobs` scalar"));
            }
            return Ok(None);
        };
        let n = usize::try_from(n).ok().filter(|&n| n <= MAX_TOP_LOGPROBS).ok_or_else(|| {
            Failure::input(format!(
                "tensor `logprobs`: value {n}, expected 0 ..= {MAX_TOP_LOGPROBS} (top log-probabilities per token)"
            ))
        })?;
        Ok(Some(Asked {
            n,
            distribution: if raw_top { Distribution::Raw } else { Distribution::Processed },
            processed: vec![0.0; positions],
            raw: vec![0.0; positions],
            top: vec![0.0; positions * n],
            ids: vec![0; positions * n],
            ranks: vec![0; positions],
        }))
    }

    /// The call's outputs.
    pub fn outputs(&mut self) -> Logprobs<'_, Host> {
        Logprobs::none().with_processed(&mut self.processed).with_raw(&mut self.raw).with_top(
            self.n,
            self.distribution,
            &mut self.top,
            &mut self.ids,
            &mut self.ranks,
        )
    }

    /// `output` with the log-probabilities, `dims` the positions' shape.
    pub fn write(&self, output: Output, dims: &[usize]) -> Output {
        let output = output.f32s("logprobs", dims, &self.processed).f32s("raw_logprobs", dims, &self.raw);
        let output = output.i32s("ranks", dims, &self.ranks);
        if self.n == 0 {
            return output;
        }
        let top_dims: Vec<usize> = dims.iter().copied().chain([self.n]).collect();
        output.f32s("top_logprobs", &top_dims, &self.top).i32s("top_ids", &top_dims, &self.ids)
    }
}
