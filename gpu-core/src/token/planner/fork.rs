//! Forks: one token into many branches, the first keeping the stream and the others sharing
//! one event, recorded only when needed, each branch waiting on it only when it is first used.

use alloc::vec::Vec;

use super::state::{Hold, Point};
use super::{Planner, check_fork_count};
use crate::error::{Error, Result};
use crate::token::handle::Token;

impl Planner {
    /// Forks `token` into `count` tokens, appended to `branches`. The first branch keeps the
    /// stream; the others share one event, and each waits on it only when it is first used on
    /// a stream not already ordered after the fork. The event's record is deferred until
    /// something needs it: a wait on a branch, a host wait, or the stream moving on (it is
    /// recorded just before, so it stands for exactly the fork's point). A fork whose branches
    /// are all used on its stream before it moves on records nothing. Forking a fork branch
    /// shares that branch's event, as does forking again at the same point. A count of zero or above
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
        // The event the branches share: the source's own, or one already due at the source
        // stream's tail (an earlier fork at this very point), if any.
        let shared = match source.hold {
            Hold::ForkEvent(event) => Some(event),
            Hold::Stream => self.streams[source.stream.index()].due,
        };
        let held = shared.map_or(0, |event| self.events[event.index()].shares);
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
        let event = match shared {
            Some(event) => event,
            None => self.defer_record(source.stream),
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

    /// Forks `token` into `count` branches that each hold a share of one event (its record
    /// deferred as for [`Planner::fork`]), and gives the stream back to its pool at once: unlike [`Planner::fork`], no branch keeps
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
