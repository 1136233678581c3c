//! A framework tensor's shape and strides (in elements) checked against what
//! a call takes, for the integrations (`specdec::candle`, the Python
//! package): one set of rules and messages, whatever the framework.

use crate::error::{Error, Result};
use crate::tensor::DraftLogitsShape;

/// A tensor argument's name, dims and strides.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    pub what: &'static str,
    pub dims: &'a [usize],
    pub strides: &'a [i64],
}

impl Strided<'_> {
    /// Elements from the first to past the last one the dims and strides
    /// reach (0 for a tensor of no elements); negative strides and extents
    /// past any memory are errors.
    pub fn extent(&self) -> Result<usize> {
        if self.dims.contains(&0) {
            return Ok(0);
        }
        let too_far = || self.layout_error("its shape and strides reach past any memory");
        let mut last = 0usize;
        for (&d, &s) in self.dims.iter().zip(self.strides) {
            if s < 0 {
                return Err(self.layout_error("negative strides are not taken"));
            }
            last = (d - 1).checked_mul(s as usize).and_then(|o| last.checked_add(o)).ok_or_else(too_far)?;
        }
        last.checked_add(1).filter(|&n| n <= isize::MAX as usize).ok_or_else(too_far)
    }

    /// A vector `[n]` with unit stride: `n`.
    pub fn vector(&self) -> Result<usize> {
        let &[n] = self.dims else { return Err(self.shape_error("a vector [n]")) };
        if n > 1 && self.strides[0] != 1 {
            return Err(self.layout_error("a vector's elements must be adjacent (stride 1)"));
        }
        Ok(n)
    }

    /// Row-major and contiguous, of any rank.
    pub fn dense(&self) -> Result<()> {
        let mut expected = 1usize;
        for (&d, &s) in self.dims.iter().zip(self.strides).rev() {
            if d > 1 && s != expected as i64 {
                return Err(self.layout_error("its elements must be contiguous, row-major"));
            }
            expected = expected.saturating_mul(d);
        }
        Ok(())
    }

    /// A `[rows, vocab]` matrix of logits with unit last stride: rows, vocab
    /// and the row stride (`vocab` for a single row, whose stride is never used).
    pub fn matrix(&self) -> Result<(usize, usize, usize)> {
        let &[rows, cols] = self.dims else { return Err(self.shape_error("a matrix [rows, vocab]")) };
        self.rows_adjacent()?;
        Ok((rows, cols, if rows > 1 { self.strides[0] as usize } else { cols }))
    }

    /// Draft logits `[slots, k, width]` with unit last stride.
    pub fn draft_logits(&self) -> Result<DraftLogitsShape> {
        let &[slots, k, width] = self.dims else { return Err(self.shape_error("[slots, k, width]")) };
        self.rows_adjacent()?;
        let (stride0, stride1) = (self.strides[0] as usize, self.strides[1] as usize);
        Ok(DraftLogitsShape { slots, k, width, stride0, stride1 })
    }

    /// A row's logits (the last dimension) are adjacent, and the whole fits memory.
    fn rows_adjacent(&self) -> Result<()> {
        let last = self.dims.len() - 1;
        if self.dims[last] > 1 && self.strides[last] != 1 {
            return Err(self.layout_error("a row's logits must be adjacent (last stride 1)"));
        }
        self.extent().map(|_| ())
    }

    pub fn shape_error(&self, expected: &'static str) -> Error {
        Error::TensorShape { what: self.what, expected, got: self.dims.to_vec() }
    }

    pub fn layout_error(&self, reason: &'static str) -> Error {
        Error::TensorLayout { what: self.what, reason, strides: self.strides.to_vec() }
    }
}
