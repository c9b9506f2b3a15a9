//! Launch footprints our runtime announces (`gpurt_footprint_*`, from its backends'
//! `note_launch_footprint`): exact ranges used for the thread's next launch of that kernel.
//!
//! A thread's announcement begins with the launch's function and stream, then gives each
//! range the kernel reads, writes or both. It applies to that thread's next launch of the same
//! function on the same stream, once the launch returned (failed or not), instead of the
//! footprint derived from the parameters, and is then forgotten. Any other stream operation of
//! the thread first (a launch of another function or on another stream, a copy, a record), or
//! a new announcement, drops it: an announcement whose launch never reached the driver does
//! not leak into a later one. Calls without a stream (context calls) leave it be.

use std::collections::HashMap;

use super::Translator;
use crate::call::{Call, Kind, Outcome};

/// How a launch uses a range, as the trace writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// `r:`
    Read,
    /// `w:`
    Write,
    /// `rw:`
    ReadWrite,
}

impl Access {
    /// The trace's prefix, before the colon.
    pub(super) fn prefix(self) -> &'static str {
        match self {
            Self::Read => "r",
            Self::Write => "w",
            Self::ReadWrite => "rw",
        }
    }
}

/// One range of a launch's footprint: its access, start and length.
pub(super) type Range = (Access, u64, u64);

/// A thread's announcement, waiting for its launch.
#[derive(Debug)]
pub(super) struct Announced {
    stream: u64,
    function: u64,
    ranges: Vec<Range>,
}

/// The announcements waiting, by thread.
pub(super) type Pending = HashMap<u64, Announced>;

/// What a `gpurt_footprint_*` call is: a begin (`None`) or a range with its access.
fn footprint_part(call: &Call) -> Option<Option<Access>> {
    let part = call.function.strip_prefix("gpurt_footprint_")?;
    Some(match part {
        "begin" => None,
        "r" => Some(Access::Read),
        "w" => Some(Access::Write),
        _ => Some(Access::ReadWrite),
    })
}

impl Translator {
    /// Keeps the announcement `call` begins or adds to, and returns true; false for any
    /// other call. A range without its begin is dropped.
    pub(super) fn announce(&mut self, call: &Call) -> bool {
        let Some(part) = footprint_part(call) else {
            return false;
        };
        let Kind::BlockAlloc {
            stream,
            address,
            bytes,
        } = call.kind
        else {
            return true;
        };
        match part {
            None => {
                let announced = Announced {
                    stream,
                    function: address,
                    ranges: Vec::new(),
                };
                self.announced.insert(call.thread, announced);
            }
            Some(access) => {
                if let Some(announced) = self.announced.get_mut(&call.thread)
                    && announced.stream == stream
                    && bytes != 0
                {
                    announced.ranges.push((access, address, bytes));
                }
            }
        }
        true
    }

    /// The announced footprint `call` uses, if it is the launch announced and has returned;
    /// drops an announcement that another stream operation of its thread passed by.
    pub(super) fn take_announced(&mut self, call: &Call) -> Option<Vec<Range>> {
        let announced = self.announced.get(&call.thread)?;
        let expected = match call.kind {
            Kind::Launch { stream, function } => {
                stream == announced.stream && function == announced.function
            }
            Kind::BlockAlloc { .. } | Kind::BlockFree { .. } | Kind::BlockUse { .. } => {
                return None;
            }
            // Without a stream (a context call): not a stream operation, nothing to drop.
            kind => {
                kind.stream()?;
                false
            }
        };
        if expected && call.outcome == Outcome::Entered {
            return None;
        }
        let announced = self.announced.remove(&call.thread)?;
        expected.then_some(announced.ranges)
    }
}
