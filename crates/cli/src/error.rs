//! The command's one error type and its exit codes: `2` for bad input (a
//! file, a tensor, an argument, anything the library rejects as invalid),
//! `1` for a failure while running (the GPU, writing the output, a failed
//! exactness check).

use crate::files::{DRAFT_FILTERS, FILTERS};
use crate::text::{count, float};
use std::process::ExitCode;

/// Why a command failed; its message is printed as one line after `Error: `.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The input is wrong: exit code 2.
    #[error("{0}")]
    Input(String),
    /// Something failed while running: exit code 1.
    #[error("{0}")]
    Run(String),
}

impl Failure {
    pub fn input(message: impl Into<String>) -> Self {
        Failure::Input(message.into())
    }

    pub fn run(message: impl Into<String>) -> Self {
        Failure::Run(message.into())
    }

    /// A library error, with what was being done (`"rejection_sample"`).
    /// Errors about the call's values are input errors; driver, device and
    /// workspace errors are failures while running.
    pub fn library(doing: &str, e: specdec::Error) -> Self {
        use specdec::Error as E;
        let message = format!("{doing}: {e}");
        match e {
            E::NoDriver | E::NoDevice(_) | E::PtxLoad { .. } | E::Driver(_) => Failure::Run(message),
            E::WorkspaceTooSmall { .. } | E::WorkspaceContext | E::WorkspaceStream => Failure::Run(message),
            _ => Failure::Input(message),
        }
    }

    /// A library error of the call `sample` or `verify` made on an input
    /// file's tensors (`call`: `"gumbel_sample"` or `"rejection_sample"`), as
    /// a message naming the tensor at fault by its name in the file
    /// (`draft_logits`, `draft_column`, `offsets`, `top_p`, `draft_top_k`,
    /// ...) and what it had to be.
    /// Errors the commands rule out before the call (lengths, extents,
    /// `vocab`, `max_drafts`) keep the library's wording after the call's
    /// name, as do failures while running.
    pub fn call(call: &str, e: specdec::Error) -> Self {
        use specdec::Error as E;
        let message = match e {
            E::InvalidSlot { row, slot, num_slots } => format!(
                "tensor `slots`: entry {row} is {slot}, expected -1 (padding) or a slot in 0..{num_slots} \
                 (`temperature` and `seed` have {})",
                count(num_slots as u64, "slot")
            ),
            E::InvalidTemperature { slot, value } => format!(
                "tensor `temperature`: entry {slot} is {}, expected 0 (greedy) or a positive, finite, normal value \
                 (at least {:e})",
                float(value),
                f32::MIN_POSITIVE
            ),
            E::InvalidTopK { slot, value, draft } => format!(
                "tensor `{}`: entry {slot} is {value}, expected 0 (off) or a positive count",
                filter_tensor(0, draft)
            ),
            E::InvalidTopP { slot, value, draft } => format!(
                "tensor `{}`: entry {slot} is {}, expected a value in (0, 1] (1: off)",
                filter_tensor(1, draft),
                float(value)
            ),
            E::InvalidMinP { slot, value, draft } => format!(
                "tensor `{}`: entry {slot} is {}, expected a value in [0, 1] (0: off)",
                filter_tensor(2, draft),
                float(value)
            ),
            E::InvalidOffsets { detail, .. } => format!("tensor `offsets`: {detail}"),
            E::ColumnOutOfRange { k: 0, .. } => {
                "tensor `draft_logits`: K = 0 columns per slot, expected a shape [slots, K, width] with K >= 1".into()
            }
            E::ColumnOutOfRange { row: Some(row), column, k } => format!(
                "tensor `draft_column`: entry {row} is {column}, expected a column in 0..{k} (`draft_logits` has {})",
                count(k as u64, "column")
            ),
            E::ColumnOutOfRange { row: None, column, k } => format!(
                "tensor `draft_column`: value {column}, expected a column in 0..{k} (`draft_logits` has {})",
                count(k as u64, "column")
            ),
            E::DraftLogitsTooNarrow { width, vocab } => format!(
                "tensor `draft_logits`: width {width} is narrower than the vocabulary ({vocab}), \
                 expected a shape [slots, K, width] with width >= {vocab}"
            ),
            E::DraftLogitsSlots { draft_slots, num_slots } => format!(
                "tensor `draft_logits`: {}, fewer than the {num_slots} of `temperature` and `seed`, \
                 expected a shape [slots, K, width] with slots >= {num_slots}",
                count(draft_slots as u64, "slot")
            ),
            E::DraftColumns { k, max_drafts } => format!(
                "tensor `draft_logits`: {} per slot, fewer than `max_drafts` = {max_drafts}, \
                 expected a shape [slots, K, width] with K >= {max_drafts}",
                count(k as u64, "column")
            ),
            E::InvalidDraft { row, token, vocab } => format!(
                "tensor `drafts`: entry {row} is {token}, expected -1 (placeholder) or a token id in 0..{vocab}"
            ),
            e => return Failure::library(call, e),
        };
        Failure::Input(message)
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Input(_) => ExitCode::from(2),
            Failure::Run(_) => ExitCode::from(1),
        }
    }
}

/// The file's name of filter `i` (0 `top_k`, 1 `top_p`, 2 `min_p`): the
/// target's, or with `draft` the draft logits'.
fn filter_tensor(i: usize, draft: bool) -> &'static str {
    if draft { DRAFT_FILTERS[i] } else { FILTERS[i] }
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;
