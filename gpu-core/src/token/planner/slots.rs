//! Token slots: checking a token id (live, consumed, unknown or foreign) before anything
//! changes, issuing a live token at a point, and freeing its slot for the next one.

use alloc::vec::Vec;

use super::Planner;
use super::state::{Point, TokenSlot, sort_latest_first, validate_in};
use crate::error::{Error, Result};
use crate::id::TokenId;
use crate::token::handle::Token;

/// Generations count modulo 2^24 (the width [`TokenId`] packs).
const GENERATION_MASK: u32 = (1 << 24) - 1;

impl Planner {
    /// Whether `more` tokens can be live on top of the live ones.
    pub(super) fn check_room(&self, more: usize) -> Result<()> {
        let room = self.free_slots.len() + (TokenId::SLOT_LIMIT - self.tokens.len());
        if more > room {
            return Err(Error::LimitExceeded {
                what: "live tokens of one planner",
                // `more` can be near `usize::MAX` (a huge fork count on a 32-bit target).
                required: (self.tokens.len() - self.free_slots.len()).saturating_add(more),
                limit: TokenId::SLOT_LIMIT,
                detail: Vec::new(),
            });
        }
        Ok(())
    }

    pub(super) fn validate(&self, id: TokenId) -> Result<u32> {
        validate_in(self.id, &self.tokens, id)
    }

    /// Validates every dependency (and that none is given twice) into the scratch list,
    /// latest point first.
    pub(super) fn validate_all(&mut self, deps: &[Token]) -> Result<()> {
        let (planner, tokens, scratch) = (self.id, &self.tokens, &mut self.scratch);
        scratch.call += 1;
        scratch.deps.clear();
        if scratch.seen.len() < tokens.len() {
            scratch.seen.resize(tokens.len(), 0);
        }
        for (index, token) in deps.iter().enumerate() {
            let slot = validate_in(planner, tokens, token.id())?;
            let seen = &mut scratch.seen[slot as usize];
            if *seen == scratch.call {
                return Err(Error::TokenConsumed { token: token.id() });
            }
            *seen = scratch.call;
            scratch.deps.push((
                tokens[slot as usize].time,
                ((index as u64) << 32) | slot as u64,
            ));
        }
        sort_latest_first(&mut scratch.deps);
        Ok(())
    }

    /// A live token at `point`.
    #[inline]
    pub(super) fn new_token(&mut self, point: Point) -> Token {
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.tokens.push(TokenSlot {
                    generation: 0,
                    live: false,
                    hold: point.hold,
                    stream: point.stream,
                    position: point.position,
                    time: point.time,
                    producer: point.producer,
                });
                (self.tokens.len() - 1) as u32
            }
        };
        // Field by field, as `point_of` reads them back (often at once).
        let state = &mut self.tokens[slot as usize];
        state.live = true;
        state.hold = point.hold;
        state.stream = point.stream;
        state.position = point.position;
        state.time = point.time;
        state.producer = point.producer;
        Token(TokenId::new(self.id, slot, state.generation))
    }

    /// A live token's point, read field by field (see `new_token`).
    #[inline]
    pub(super) fn point_of(&self, slot: u32) -> Point {
        let state = &self.tokens[slot as usize];
        Point {
            hold: state.hold,
            stream: state.stream,
            position: state.position,
            time: state.time,
            producer: state.producer,
        }
    }

    pub(super) fn free_slot(&mut self, slot: u32) {
        let state = &mut self.tokens[slot as usize];
        state.live = false;
        state.generation = state.generation.wrapping_add(1) & GENERATION_MASK;
        self.free_slots.push(slot);
    }
}
