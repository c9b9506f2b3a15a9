//! Small `Copy` values every pure module and the error type share: device, stream, event,
//! token and handle ids, the memory kinds the allocator serves, and who holds a lock.
//!
//! Raw driver handles never appear here; backends map these ids to their own objects. The
//! modules that use these values re-export them (`allocator::MemoryKind`, `token::TokenId`,
//! `lock_table::{LockOwner, LockCounts}`, `backend::live::HandleId`), so this module imports
//! from none of them.

use core::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into per-object tables.
            #[inline]
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A device of one backend, numbered from 0 in the backend's enumeration order.
    DeviceId,
    "device "
);
id_type!(
    /// An in-order queue of work on one device.
    StreamId,
    "stream "
);
id_type!(
    /// A completion marker recorded on a stream and waited on by other streams.
    EventId,
    "event "
);

/// What kind of memory a request wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device-only memory (`cuMemAlloc`, `hipMalloc`, an HSA pool on a GPU agent).
    Device,
    /// One pointer valid on the host and every device, migrated by the driver
    /// (`cuMemAllocManaged` with `ATTACH_GLOBAL`, `hipMallocManaged`).
    Managed,
    /// Page-locked host memory the device can DMA from and map (`cuMemHostAlloc` with
    /// `PORTABLE | DEVICEMAP`).
    HostPinned,
}

impl MemoryKind {
    /// Every kind, in the order of the per-kind caches.
    pub const CACHED: [MemoryKind; 3] = [
        MemoryKind::Device,
        MemoryKind::Managed,
        MemoryKind::HostPinned,
    ];

    /// Position among [`MemoryKind::CACHED`].
    #[inline]
    pub(crate) const fn cache_index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryKind::Device => "device",
            MemoryKind::Managed => "managed",
            MemoryKind::HostPinned => "host-pinned",
        })
    }
}

/// The raw, copyable identity of a [`Token`](crate::token::Token), packed in 64 bits: the
/// issuing planner's id (16 bits), the token's slot in that planner's table (24 bits) and how
/// many tokens the slot held before (24 bits, wrapping).
///
/// Layers that carry tokens through raw ids (an FFI boundary, a serialised program) use this;
/// the planner detects every misuse of such ids (consumed, unknown, foreign) as a typed error.
/// Detection is exact within the packing's limits: planner ids repeat after 65,536 planners,
/// and a slot's count wraps after 16,777,216 uses of that one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenId(u64);

const FIELD_MASK: u64 = (1 << 24) - 1;

impl TokenId {
    /// How many token slots one planner has (live tokens at once).
    pub const SLOT_LIMIT: usize = 1 << 24;

    /// The id of slot `slot`'s token number `generation` of planner `planner`; `slot` and
    /// `generation` are taken modulo 2^24.
    pub const fn new(planner: u16, slot: u32, generation: u32) -> Self {
        TokenId(
            ((planner as u64) << 48)
                | ((slot as u64 & FIELD_MASK) << 24)
                | (generation as u64 & FIELD_MASK),
        )
    }

    /// The id packed in `raw` (as [`raw`](TokenId::raw) gave it).
    pub const fn from_raw(raw: u64) -> Self {
        TokenId(raw)
    }

    /// The packed 64-bit form.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The id of the planner that issued the token.
    pub const fn planner(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// The token's slot in its planner's table.
    pub const fn slot(self) -> u32 {
        ((self.0 >> 24) & FIELD_MASK) as u32
    }

    /// How many tokens the slot held before this one (modulo 2^24).
    pub const fn generation(self) -> u32 {
        (self.0 & FIELD_MASK) as u32
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "token {}.{} of planner {}",
            self.slot(),
            self.generation(),
            self.planner()
        )
    }
}

/// Who holds a lock, and so who may release it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockOwner {
    /// A plain counted lock ([`LockTable::lock`](crate::lock_table::LockTable::lock); the
    /// runtime's `lock_range`, C's `gpurt_lock`): any raw unlock of the entry releases one.
    Raw,
    /// A lock a guard object holds (the runtime's `LockedHost`, C's `gpurt_host_register`):
    /// released only through [`LockTable::unlock_as`](crate::lock_table::LockTable::unlock_as)
    /// with this owner, which only the guard calls, never by a raw unlock; the pin lasts as
    /// long as the guard.
    Guard,
}

impl LockOwner {
    /// The owner's name in messages: `"raw"` or `"guard"`.
    pub const fn name(self) -> &'static str {
        match self {
            LockOwner::Raw => "raw",
            LockOwner::Guard => "guard",
        }
    }
}

/// Outstanding locks by owner: of one entry, or of the whole table
/// ([`LockStats::held`](crate::lock_table::LockStats::held)).
///
/// The table refuses a lock that would take its total past `usize::MAX`, so no sum overflows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockCounts {
    /// Raw locks ([`LockOwner::Raw`]).
    pub raw: usize,
    /// Locks guards hold ([`LockOwner::Guard`]).
    pub guards: usize,
}

impl LockCounts {
    /// One lock of `owner`.
    pub const fn one(owner: LockOwner) -> Self {
        match owner {
            LockOwner::Raw => Self { raw: 1, guards: 0 },
            LockOwner::Guard => Self { raw: 0, guards: 1 },
        }
    }

    /// Locks of every owner.
    pub const fn total(&self) -> usize {
        self.raw + self.guards
    }

    /// Locks of `owner`.
    pub const fn of(&self, owner: LockOwner) -> usize {
        match owner {
            LockOwner::Raw => self.raw,
            LockOwner::Guard => self.guards,
        }
    }

    /// The counter of `owner`'s locks.
    pub(crate) fn of_mut(&mut self, owner: LockOwner) -> &mut usize {
        match owner {
            LockOwner::Raw => &mut self.raw,
            LockOwner::Guard => &mut self.guards,
        }
    }
}

/// A handle's number, as errors show it: the number of the slot the handle lives in and the
/// slot's generation when it was made (`backend::live`'s registry). Unique in the process,
/// across backends too, and never reused: slots are numbered once and a slot's generation only
/// grows (a slot whose generation is spent is retired).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandleId(u64);

impl HandleId {
    /// The number of the handle in slot `slot` at generation `generation`.
    pub const fn new(slot: u32, generation: u32) -> Self {
        HandleId(((slot as u64) << 32) | generation as u64)
    }

    /// The number of the handle's slot.
    pub const fn slot(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// How many handles the slot held before this one.
    pub const fn generation(self) -> u32 {
        self.0 as u32
    }

    /// The packed number: the slot's in the top 32 bits, the generation in the low ones.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for HandleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.slot(), self.generation())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_id_packs_its_slot_and_generation() {
        let id = HandleId::new(7, u32::MAX);
        assert_eq!((id.slot(), id.generation()), (7, u32::MAX));
        assert_eq!(id.get(), (7 << 32) | u32::MAX as u64);
        assert!(HandleId::new(7, 1) < HandleId::new(8, 0));
        assert_eq!(alloc::string::ToString::to_string(&id), "#7.4294967295");
    }
}
