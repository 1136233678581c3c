//! The exchanges of a sharded call on the GPU (REFERENCE §9): its rounds'
//! message lengths, the rank's header and where the messages lie in the
//! workspace, and how many rounds have run, so that a call that fails part
//! way still sends every round (each rank then waits for none). An exchange
//! that fails ends the rank's exchanges: exchanges fail on every rank alike
//! (messages of different lengths, a peer that failed), and ranks whose
//! calls differ in their number of rounds would otherwise wait for each
//! other forever: such calls differ in the length of a round all of them
//! run (filter arrays on some ranks only: the first; log-probability asks:
//! the last of the call's own, `shard::last_round_bytes`).

use super::{Messages, Workspace};
use crate::error::{Error, Result};
use crate::memory::Device;
use crate::shard::Exchange;
use crate::shard::Shard;
use specdec_core::layout::RUN;
use specdec_core::shard;

/// A sharded call's `lens.len()` exchanges, in order.
pub(super) struct Rounds<'e> {
    pub exchange: &'e mut dyn Exchange<Device>,
    pub messages: Messages,
    /// Each round's message length, in bytes: the call's own rounds', the
    /// last of them padded for the log-probability rounds after it
    /// (`shard::last_round_bytes`), then those.
    pub lens: &'e [usize],
    /// How many of `lens` are log-probability rounds.
    pub logprob_rounds: u32,
    done: usize,
    /// Whether an exchange failed: no more are run.
    failed: bool,
    /// The rank's header (valid once its checks passed).
    pub header: shard::Header,
    /// The rank's message and every rank's (`Workspace::message_addresses`).
    pub at: (u64, u64),
}

impl<'e> Rounds<'e> {
    /// The rounds of lengths `lens` (the longest fits `messages.slot`), the
    /// last `logprob_rounds` of them the log-probabilities'.
    pub fn new(
        exchange: &'e mut dyn Exchange<Device>,
        messages: Messages,
        lens: &'e [usize],
        logprob_rounds: u32,
    ) -> Self {
        let header = shard::Header::default();
        Rounds { exchange, messages, lens, logprob_rounds, done: 0, failed: false, header, at: (0, 0) }
    }

    /// The next round: the rank's message (zeroed first where `failed`)
    /// into every rank's receive buffer.
    pub fn next(&mut self, ws: &mut Workspace, failed: bool) -> Result<()> {
        let len = self.lens.get(self.done).copied().unwrap_or(0);
        self.done += 1;
        let exchange = &mut *self.exchange;
        let result = ws.exchange_messages(self.messages, len, failed, |s, r| exchange.all_gather(s, r));
        self.failed |= result.is_err();
        result
    }

    /// The rounds not run yet, each with a failed message, so that no rank
    /// waits for this one (none after an exchange failed).
    pub fn finish(&mut self, ws: &mut Workspace) -> Result<()> {
        while self.done < self.lens.len() && !self.failed {
            self.next(ws, true)?;
        }
        Ok(())
    }
}

/// That a shard of `ids` ids starts and ends on runs of [`RUN`] ids (the
/// row's end excepted): the order-free sums' terms (REFERENCE §2.6).
pub(super) fn check_runs(shard: Shard, ids: usize) -> Result<()> {
    let (run, end) = (RUN as usize, shard.offset + ids);
    if !shard.offset.is_multiple_of(run) || (end != shard.vocab && !end.is_multiple_of(run)) {
        let detail = format!("ids {} .. {end} do not start and end on runs of {run} ids", shard.offset);
        return Err(Error::InvalidShard { detail });
    }
    Ok(())
}
