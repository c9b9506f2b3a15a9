//! The lock table's plain reference model, a recording fake driver, and the harness that runs
//! one operation on table and model side by side: one model, driven by proptest and the fuzzer.
//!
//! The model is a brute-force list of entries with linear scans: obviously right, slow. Each
//! entry counts its raw and guard locks apart, and an unlock takes only a lock of its own kind.
//! The fake driver behaves like CUDA's registration calls (overlapping registrations and
//! interior unregisters fail) and can be told to fail its next call of a kind.

use alloc::vec;
use alloc::vec::Vec;

use super::{
    LockCounts, LockOutcome, LockOwner, LockStats, LockTable, Locked, PinDriver, Unlocked,
};
use crate::error::{ByteRange, DriverError, Error, Result};
use crate::id::DeviceId;

/// The kinds of driver call the fake can be told to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// [`PinDriver::pin`].
    Pin,
    /// [`PinDriver::unpin`].
    Unpin,
    /// [`PinDriver::pinned_extent`].
    Query,
}

/// How far apart the fake driver puts each device's view of a host range: 2^40 on a 64-bit
/// target, 2^20 on a 32-bit one (far beyond the test arenas either way).
const DEVICE_ADDRESS_STRIDE: usize = 1 << (usize::BITS * 5 / 8);

/// The address the fake driver gives device `device` for host address `host`.
pub fn fake_device_address(host: usize, device: usize) -> usize {
    host.wrapping_add((device + 1).wrapping_mul(DEVICE_ADDRESS_STRIDE))
}

/// Fills `device_ptrs` (one per device) with the fake driver's addresses of host address `host`.
pub fn fill_fake_device_addresses(host: usize, device_ptrs: &mut [usize]) {
    for (device, out) in device_ptrs.iter_mut().enumerate() {
        *out = fake_device_address(host, device);
    }
}

fn fake_error(call: &'static str, name: &'static str, code: i64) -> Error {
    Error::Driver(DriverError {
        backend: "fake",
        call,
        name,
        code,
    })
}

/// A pin driver that pins nothing and gives every device the host address, as the host
/// backend does: for benchmarks of the table alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostAddressPins;

impl PinDriver for HostAddressPins {
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        device_ptrs.fill(range.start);
        Ok(())
    }

    fn unpin(&mut self, _start: usize) -> Result<()> {
        Ok(())
    }

    fn pinned_extent(&mut self, _ptr: usize, _out: &mut [usize]) -> Result<Option<ByteRange>> {
        Ok(None)
    }
}

/// A driver fake with CUDA's registration rules, call counters and fault injection.
#[derive(Clone, Debug)]
pub struct FakeDriver {
    /// Ranges pinned through this driver by the table, in pin order.
    pub pinned: Vec<ByteRange>,
    /// Ranges pinned by "someone else" (another library sharing the process).
    pub pinned_elsewhere: Vec<ByteRange>,
    /// Calls made, by kind: pin, unpin, query.
    pub calls: [u64; 3],
    fail_next: Option<CallKind>,
}

impl Default for FakeDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeDriver {
    /// A driver with nothing pinned.
    pub fn new() -> Self {
        Self {
            pinned: Vec::new(),
            pinned_elsewhere: Vec::new(),
            calls: [0; 3],
            fail_next: None,
        }
    }

    /// Makes the next call of `kind` fail (once).
    pub fn fail_next(&mut self, kind: CallKind) {
        self.fail_next = Some(kind);
    }

    /// Pins `range` on behalf of someone else, unless it overlaps anything already pinned.
    /// Returns whether it did.
    pub fn pin_elsewhere(&mut self, range: ByteRange) -> bool {
        if self.all_pinned().any(|r| r.overlaps(&range)) {
            return false;
        }
        self.pinned_elsewhere.push(range);
        true
    }

    fn all_pinned(&self) -> impl Iterator<Item = &ByteRange> {
        self.pinned.iter().chain(&self.pinned_elsewhere)
    }

    fn take_failure(&mut self, kind: CallKind, call: &'static str) -> Result<()> {
        self.calls[kind as usize] += 1;
        if self.fail_next == Some(kind) {
            self.fail_next = None;
            return Err(fake_error(call, "FAKE_INJECTED_FAILURE", -1));
        }
        Ok(())
    }
}

impl PinDriver for FakeDriver {
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        self.take_failure(CallKind::Pin, "pin")?;
        if self.all_pinned().any(|r| r.overlaps(&range)) {
            return Err(fake_error("pin", "ALREADY_REGISTERED", 712));
        }
        self.pinned.push(range);
        fill_fake_device_addresses(range.start, device_ptrs);
        Ok(())
    }

    fn unpin(&mut self, start: usize) -> Result<()> {
        self.take_failure(CallKind::Unpin, "unpin")?;
        match self.pinned.iter().position(|r| r.start == start) {
            Some(at) => {
                self.pinned.remove(at);
                Ok(())
            }
            None if self
                .all_pinned()
                .any(|r| r.contains(&ByteRange { start, len: 1 })) =>
            {
                Err(fake_error("unpin", "INVALID_VALUE", 1))
            }
            None => Err(fake_error("unpin", "NOT_REGISTERED", 713)),
        }
    }

    fn pinned_extent(
        &mut self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        self.take_failure(CallKind::Query, "pinned_extent")?;
        let probe = ByteRange { start: ptr, len: 1 };
        let found = self.all_pinned().find(|r| r.contains(&probe)).copied();
        if let Some(extent) = found {
            fill_fake_device_addresses(extent.start, device_ptrs);
        }
        Ok(found)
    }
}

/// One entry of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    /// The pinned range.
    pub range: ByteRange,
    /// Outstanding locks, by owner.
    pub locks: LockCounts,
    /// Pinned by someone else.
    pub external: bool,
    /// Each device's address for the range start.
    pub device_ptrs: Vec<usize>,
}

/// The brute-force reference model: the spec's rules as linear scans over a list.
#[derive(Clone, Debug)]
pub struct ModelTable {
    /// Entries, in no particular order.
    pub entries: Vec<ModelEntry>,
    device_count: usize,
    /// Successful locks that lay inside an entry.
    nested_locks: u64,
}

impl ModelTable {
    /// An empty model for `device_count` devices.
    pub fn new(device_count: usize) -> Self {
        Self {
            entries: Vec::new(),
            device_count,
            nested_locks: 0,
        }
    }

    fn check_range(ptr: usize, len: usize) -> Result<ByteRange> {
        if len == 0 {
            return Err(Error::ZeroSize {
                what: "range length",
            });
        }
        if ptr.checked_add(len - 1).is_none() {
            return Err(Error::AddressOverflow { ptr, len });
        }
        Ok(ByteRange { start: ptr, len })
    }

    fn lowest_overlap(&self, range: ByteRange) -> Option<&ModelEntry> {
        self.entries
            .iter()
            .filter(|e| e.range.overlaps(&range))
            .min_by_key(|e| e.range.start)
    }

    fn overlap_error(&self, requested: ByteRange, candidate: ByteRange) -> Result<()> {
        match self.lowest_overlap(candidate) {
            Some(e) => Err(Error::LockOverlap {
                requested,
                conflicting: e.range,
                external: e.external,
            }),
            None => Ok(()),
        }
    }

    /// The model's lock, by `owner`.
    pub fn lock(
        &mut self,
        driver: &mut FakeDriver,
        ptr: usize,
        len: usize,
        owner: LockOwner,
    ) -> Result<Locked> {
        if ptr == 0 {
            return Err(Error::NullPointer {
                what: "start of the range to lock",
            });
        }
        let range = Self::check_range(ptr, len)?;
        if let Some(e) = self.entries.iter_mut().find(|e| e.range.contains(&range)) {
            match owner {
                LockOwner::Raw => e.locks.raw += 1,
                LockOwner::Guard => e.locks.guards += 1,
            }
            self.nested_locks += 1;
            return Ok(Locked {
                entry: e.range,
                outcome: LockOutcome::Nested,
                locks: e.locks,
            });
        }
        self.overlap_error(range, range)?;
        let mut device_ptrs = vec![0; self.device_count];
        let (extent, external) = match driver.pinned_extent(ptr, &mut device_ptrs)? {
            Some(extent) => {
                if !extent.contains(&range) {
                    return Err(Error::ExternalPinTooSmall {
                        requested: range,
                        pinned: extent,
                    });
                }
                self.overlap_error(range, extent)?;
                (extent, true)
            }
            None => {
                driver.pin(range, &mut device_ptrs)?;
                (range, false)
            }
        };
        let locks = match owner {
            LockOwner::Raw => LockCounts { raw: 1, guards: 0 },
            LockOwner::Guard => LockCounts { raw: 0, guards: 1 },
        };
        self.entries.push(ModelEntry {
            range: extent,
            locks,
            external,
            device_ptrs,
        });
        let outcome = if external {
            LockOutcome::External
        } else {
            LockOutcome::Pinned
        };
        Ok(Locked {
            entry: extent,
            outcome,
            locks,
        })
    }

    /// The model's unlock of one of `owner`'s locks (`exact`: the pointer must be an entry's
    /// start).
    pub fn unlock(
        &mut self,
        driver: &mut FakeDriver,
        ptr: usize,
        exact: bool,
        owner: LockOwner,
    ) -> Result<Unlocked> {
        let probe = ByteRange { start: ptr, len: 1 };
        let at = self
            .entries
            .iter()
            .position(|e| e.range.contains(&probe))
            .ok_or(Error::NotLocked { ptr })?;
        let entry = self.entries[at].range;
        if exact && entry.start != ptr {
            return Err(Error::NotEntryStart { ptr, entry });
        }
        let (held, external) = (self.entries[at].locks, self.entries[at].external);
        let mine = match owner {
            LockOwner::Raw => held.raw,
            LockOwner::Guard => held.guards,
        };
        if mine == 0 {
            return Err(Error::PinOwned {
                ptr,
                entry,
                releaser: owner,
                held,
            });
        }
        if held.raw + held.guards == 1 && !external {
            driver.unpin(entry.start)?;
        }
        let mut remaining = held;
        match owner {
            LockOwner::Raw => remaining.raw -= 1,
            LockOwner::Guard => remaining.guards -= 1,
        }
        self.entries[at].locks = remaining;
        if remaining.raw + remaining.guards == 0 {
            self.entries.remove(at);
        }
        Ok(Unlocked {
            entry,
            remaining,
            external,
        })
    }

    /// The model's lookup.
    pub fn lookup(&self, ptr: usize, len: usize, device: DeviceId) -> Result<Option<usize>> {
        let range = Self::check_range(ptr, len)?;
        if device.index() >= self.device_count {
            return Err(Error::UnknownDevice {
                device,
                device_count: self.device_count,
            });
        }
        Ok(self
            .entries
            .iter()
            .find(|e| e.range.contains(&range))
            .map(|e| e.device_ptrs[device.index()].wrapping_add(ptr - e.range.start)))
    }

    /// Entries sorted by start.
    pub fn sorted(&self) -> Vec<ModelEntry> {
        let mut entries = self.entries.clone();
        entries.sort_by_key(|e| e.range.start);
        entries
    }
}

/// One operation of a random program over the table.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Lock `[ptr, ptr + len)` for `owner`.
    Lock {
        /// Start.
        ptr: usize,
        /// Length.
        len: usize,
        /// Who takes the lock.
        owner: LockOwner,
    },
    /// Unlock the entry containing `ptr`, the way `by` says.
    Unlock {
        /// Any pointer inside the entry (its start for [`UnlockBy::RawExact`]).
        ptr: usize,
        /// Which call releases which kind of lock.
        by: UnlockBy,
    },
    /// Look up `[ptr, ptr + len)` for `device`.
    Lookup {
        /// Start.
        ptr: usize,
        /// Length.
        len: usize,
        /// Device index (may be out of range on purpose).
        device: u32,
    },
    /// Make the next driver call of `kind` fail.
    FailNext(CallKind),
    /// Someone else pins `[ptr, ptr + len)` (skipped if it overlaps any pin).
    PinElsewhere {
        /// Start.
        ptr: usize,
        /// Length.
        len: usize,
    },
}

/// The table's three unlock calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnlockBy {
    /// [`LockTable::unlock`]: a raw lock, through any pointer inside the entry.
    Raw,
    /// [`LockTable::unlock_exact`]: a raw lock, through the entry's start only.
    RawExact,
    /// [`LockTable::unlock_as`] with [`LockOwner::Guard`]: a guard's lock.
    Guard,
}

/// What one operation did, for counting how often a program hit each case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Case {
    /// A new entry was pinned.
    Pinned,
    /// A new entry was pinned right after or before an existing one (sharing a boundary).
    PinnedAdjacent,
    /// A lock inside an entry.
    Nested,
    /// A lock inside an entry that leaves it held by raw locks and guards both.
    NestedMixedOwners,
    /// A lock recorded memory pinned elsewhere.
    External,
    /// A lock refused: the new range swallows an entry whole.
    OverlapSwallows,
    /// A lock refused: an entry starts inside the new range (and ends after it).
    OverlapEntryStartsInside,
    /// A lock refused: the new range starts inside an entry and runs past its end.
    OverlapRunsPastEnd,
    /// A lock refused: memory pinned elsewhere covers only part of the range.
    ExternalTooSmall,
    /// A bad argument (zero, null, overflow, unknown device).
    BadArgument,
    /// An injected driver failure surfaced.
    DriverFailure,
    /// An unlock that left the entry locked.
    UnlockNested,
    /// An unlock that removed the entry.
    UnlockLast,
    /// An unlock of memory not in the table, or not at an entry's start in exact mode.
    UnlockUnknown,
    /// An unlock refused because the entry holds no lock of its kind (a raw unlock of an
    /// entry only guards hold, or the other way round).
    UnlockOwnedByOthers,
    /// A lookup hit.
    LookupHit,
    /// A lookup miss.
    LookupMiss,
    /// A failure injection or foreign pin was armed.
    Setup,
}

/// The table and the model side by side, each with its own fake driver.
pub struct Harness {
    /// The table under test.
    pub table: LockTable,
    /// Its driver.
    pub table_driver: FakeDriver,
    /// The reference model.
    pub model: ModelTable,
    /// Its driver.
    pub model_driver: FakeDriver,
}

impl Harness {
    /// Empty table and model for `device_count` devices.
    pub fn new(device_count: usize) -> Self {
        Self {
            table: LockTable::new(device_count).expect("device_count > 0"),
            table_driver: FakeDriver::new(),
            model: ModelTable::new(device_count),
            model_driver: FakeDriver::new(),
        }
    }

    /// Runs `op` on both sides and checks they agree (result, entries, driver pins, stats).
    ///
    /// # Panics
    /// When the table and the model disagree: that is the failure this harness exists to find.
    pub fn apply(&mut self, op: Op) -> Case {
        let case = match op {
            Op::Lock { ptr, len, owner } => {
                let got = if owner == LockOwner::Raw {
                    self.table.lock(&mut self.table_driver, ptr, len)
                } else {
                    self.table.lock_as(&mut self.table_driver, ptr, len, owner)
                };
                let want = self.model.lock(&mut self.model_driver, ptr, len, owner);
                assert_eq!(got, want, "lock({ptr:#x}, {len}, {owner:?})");
                self.lock_case(&got)
            }
            Op::Unlock { ptr, by } => {
                let driver = &mut self.table_driver;
                let (got, exact, owner) = match by {
                    UnlockBy::Raw => (self.table.unlock(driver, ptr), false, LockOwner::Raw),
                    UnlockBy::RawExact => {
                        (self.table.unlock_exact(driver, ptr), true, LockOwner::Raw)
                    }
                    UnlockBy::Guard => (
                        self.table.unlock_as(driver, ptr, LockOwner::Guard),
                        false,
                        LockOwner::Guard,
                    ),
                };
                let want = self.model.unlock(&mut self.model_driver, ptr, exact, owner);
                assert_eq!(got, want, "unlock({ptr:#x}, {by:?})");
                match got {
                    Ok(Unlocked { remaining, .. }) if remaining.total() == 0 => Case::UnlockLast,
                    Ok(_) => Case::UnlockNested,
                    Err(Error::Driver(_)) => Case::DriverFailure,
                    Err(Error::PinOwned { .. }) => Case::UnlockOwnedByOthers,
                    Err(_) => Case::UnlockUnknown,
                }
            }
            Op::Lookup { ptr, len, device } => {
                let got = self.table.lookup(ptr, len, DeviceId(device));
                let want = self.model.lookup(ptr, len, DeviceId(device));
                assert_eq!(got, want, "lookup({ptr:#x}, {len}, device {device})");
                let found = self.table.find(ptr, len).ok().flatten().map(|e| e.range);
                let expected = ByteRange::new(ptr, len).and_then(|r| {
                    self.model
                        .entries
                        .iter()
                        .find(|e| e.range.contains(&r))
                        .map(|e| e.range)
                });
                assert_eq!(found, expected, "find({ptr:#x}, {len})");
                match got {
                    Ok(Some(_)) => Case::LookupHit,
                    Ok(None) => Case::LookupMiss,
                    Err(_) => Case::BadArgument,
                }
            }
            Op::FailNext(kind) => {
                self.table_driver.fail_next(kind);
                self.model_driver.fail_next(kind);
                Case::Setup
            }
            Op::PinElsewhere { ptr, len } => {
                if let Some(range) = ByteRange::new(ptr, len).filter(|_| ptr != 0) {
                    let a = self.table_driver.pin_elsewhere(range);
                    let b = self.model_driver.pin_elsewhere(range);
                    assert_eq!(a, b, "the two fake drivers diverged");
                }
                Case::Setup
            }
        };
        self.check_agreement();
        case
    }

    fn lock_case(&self, result: &Result<Locked>) -> Case {
        match result {
            Ok(Locked {
                outcome: LockOutcome::Nested,
                locks,
                ..
            }) => {
                if locks.raw > 0 && locks.guards > 0 {
                    Case::NestedMixedOwners
                } else {
                    Case::Nested
                }
            }
            Ok(Locked {
                outcome: LockOutcome::External,
                ..
            }) => Case::External,
            Ok(Locked { entry, .. }) => {
                let touches = self.model.entries.iter().any(|e| {
                    e.range != *entry
                        && (e.range.last().checked_add(1) == Some(entry.start)
                            || entry.last().checked_add(1) == Some(e.range.start))
                });
                if touches {
                    Case::PinnedAdjacent
                } else {
                    Case::Pinned
                }
            }
            Err(Error::LockOverlap {
                requested,
                conflicting,
                ..
            }) => {
                if requested.contains(conflicting) {
                    Case::OverlapSwallows
                } else if conflicting.start > requested.start {
                    Case::OverlapEntryStartsInside
                } else {
                    Case::OverlapRunsPastEnd
                }
            }
            Err(Error::ExternalPinTooSmall { .. }) => Case::ExternalTooSmall,
            Err(Error::Driver(_)) => Case::DriverFailure,
            Err(_) => Case::BadArgument,
        }
    }

    /// Checks entries, driver state and stats of the two sides, and that the table's driver
    /// holds exactly the table's own (non-external) entries.
    pub fn check_agreement(&self) {
        let model = self.model.sorted();
        let table: Vec<ModelEntry> = self
            .table
            .entries()
            .map(|e| ModelEntry {
                range: e.range,
                locks: e.locks,
                external: e.external,
                device_ptrs: e.device_ptrs.to_vec(),
            })
            .collect();
        assert_eq!(table, model, "entries differ");

        let mut pinned = self.table_driver.pinned.clone();
        pinned.sort_by_key(|r| r.start);
        let owned: Vec<ByteRange> = model
            .iter()
            .filter(|e| !e.external)
            .map(|e| e.range)
            .collect();
        assert_eq!(
            pinned, owned,
            "driver pins differ from the table's own entries"
        );
        assert_eq!(
            self.table_driver.calls, self.model_driver.calls,
            "driver calls differ"
        );

        let stats = self.table.stats();
        let expected = LockStats {
            entries: model.len(),
            external_entries: model.iter().filter(|e| e.external).count(),
            bytes_locked: model.iter().map(|e| e.range.len).sum(),
            held: LockCounts {
                raw: model.iter().map(|e| e.locks.raw).sum(),
                guards: model.iter().map(|e| e.locks.guards).sum(),
            },
            nested_locks: self.model.nested_locks,
            driver_pins: self.table_driver.calls[CallKind::Pin as usize],
            driver_unpins: self.table_driver.calls[CallKind::Unpin as usize],
            driver_queries: self.table_driver.calls[CallKind::Query as usize],
        };
        assert_eq!(
            stats, expected,
            "stats disagree with the entries and driver calls"
        );
    }
}
