//! Forks: one token into many branches, the first keeping the stream and the others sharing
//! one event recorded now, each branch waiting on it only when it is first used.

use alloc::vec::Vec;

use super::state::{Hold, Point};
use super::{Planner, check_fork_count};
use crate::error::{Error, Result};
use crate::token::handle::Token;

impl Planner {
    /// Forks `token` into `count` tokens, appended to `branches`. The first branch keeps the
    /// stream; the others share one event recorded now, and each waits on it only when it is
    /// first used. Forking a fork branch shares that branch's event. A count of zero or above
    /// [`MAX_FORK_BRANCHES`](super::MAX_FORK_BRANCHES) is refused ([`check_fork_count`]); on any error nothing changes
    /// and the token stays live.
    pub fn fork(&mut self, token: Token, count: usize, branches: &mut Vec<Token>) -> Result<()> {
        check_fork_count(count)?;
        self.fork_into(token, count, branches)
    }

    /// [`Planner::fork`] for a count already known to lie in `1..=MAX_FORK_BRANCHES + 1`.
    fn fork_into(&mut self, token: Token, count: usize, branches: &mut Vec<Token>) -> Result<()> {
        let slot = self.validate(token.id())?;
        if count == 1 {
            branches.push(token);
            return Ok(());
        }
        let source = self.point_of(slot);
        let held = match source.hold {
            Hold::ForkEvent(event) => self.events[event.index()].shares,
            Hold::Stream => 0,
        };
        let shares = u32::try_from(count - 1)
            .ok()
            .and_then(|extra| extra.checked_add(held))
            .ok_or_else(|| Error::LimitExceeded {
                what: "fork branches sharing one event",
                required: count.saturating_add(held as usize),
                limit: u32::MAX as usize,
                detail: Vec::new(),
            })?;
        // The source's slot is freed first, so one branch reuses it.
        self.check_room(count - 1)?;
        let out_of_memory = |_| Error::HostOutOfMemory {
            what: "fork branch tokens",
        };
        branches.try_reserve(count).map_err(out_of_memory)?;
        self.tokens.try_reserve(count).map_err(out_of_memory)?;
        let event = match source.hold {
            Hold::ForkEvent(event) => event,
            Hold::Stream => {
                let event = self.record_on(source.stream);
                let (streams, events) = (&self.streams, &mut self.events);
                events[event.index()]
                    .clock
                    .copy_from(&streams[source.stream.index()].clock);
                event
            }
        };
        // The first branch takes over what the source held; each other one gets a share.
        self.events[event.index()].shares = shares;
        self.free_slot(slot);
        branches.push(self.new_token(source));
        for _ in 1..count {
            branches.push(self.new_token(Point {
                hold: Hold::ForkEvent(event),
                ..source
            }));
        }
        Ok(())
    }

    /// Forks `token` into `count` branches that each hold a share of one event recorded now,
    /// and gives the stream back to its pool at once: unlike [`Planner::fork`], no branch keeps
    /// the stream. For layers whose handles may be abandoned without a word (MLIR's lowering
    /// never destroys the input streams of a join): a branch held by such a handle keeps an
    /// event from its pool, never a stream. Counts are limited as for [`Planner::fork`]; on
    /// error nothing changes.
    pub fn fork_detached(
        &mut self,
        token: Token,
        count: usize,
        branches: &mut Vec<Token>,
    ) -> Result<()> {
        check_fork_count(count)?;
        let first = branches.len();
        self.fork_into(token, count + 1, branches)?;
        let owner = branches.remove(first);
        self.release(owner)
    }
}
