//! Opaque handles: the values C callers hold for objects that live in Rust (memory, kernels),
//! checked on every use so that a stale, foreign or double-released
//! handle is a typed error, never undefined behaviour.
//!
//! A handle is a 64-bit value: its top byte says the kind, the rest is a serial number from one
//! process-wide counter, so no value is ever issued twice (not even by a runtime opened after
//! a shutdown) and a released handle stays invalid for good. Zero is the null handle.

use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use gpu_runtime::error::Error;

use super::status::CapiError;

/// What kind of object a handle names (the top byte of its value says it; errors name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandleKind {
    /// Memory: from the runtime's allocator, or the caller's host memory registered with it.
    Memory,
    /// A kernel of the backend's library loaded on one device.
    Kernel,
}

impl HandleKind {
    const ALL: [HandleKind; 2] = [HandleKind::Memory, HandleKind::Kernel];

    /// The kind's name in messages.
    pub const fn name(self) -> &'static str {
        match self {
            HandleKind::Memory => "memory",
            HandleKind::Kernel => "kernel",
        }
    }

    /// What a null handle of this kind is called in a [`Error::NullPointer`].
    const fn null_name(self) -> &'static str {
        match self {
            HandleKind::Memory => "memory handle",
            HandleKind::Kernel => "kernel handle",
        }
    }

    /// The top byte of this kind's handles: values no user-space pointer starts with, so a raw
    /// address passed as a handle is recognised as foreign.
    const fn tag(self) -> u64 {
        match self {
            HandleKind::Memory => 0xB1,
            HandleKind::Kernel => 0xB2,
        }
    }

    fn of_handle(handle: u64) -> Option<HandleKind> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.tag() == handle >> TAG_SHIFT)
    }
}

const TAG_SHIFT: u32 = 56;

/// The serial number of the next handle, shared by every table of the process.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The live objects of one kind, by handle. Thread safe: one short lock per call, never held
/// while anything else runs (values handed out are clones, e.g. `Arc`s).
pub struct HandleTable<T> {
    kind: HandleKind,
    entries: Mutex<HashMap<u64, T>>,
}

impl<T> HandleTable<T> {
    /// An empty table of `kind` handles.
    pub fn new(kind: HandleKind) -> Self {
        Self {
            kind,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<u64, T>> {
        // A panic while the lock was held cannot leave the map half-changed: each call makes one
        // map operation.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `value` and returns its new handle. Fails (keeping nothing) only if the host has
    /// no memory for the entry.
    pub fn insert(&self, value: T) -> Result<u64, CapiError> {
        let mut entries = self.entries();
        entries.try_reserve(1).map_err(|_| Error::HostOutOfMemory {
            what: "a handle table entry",
        })?;
        let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
        let handle = (self.kind.tag() << TAG_SHIFT) | (serial & ((1 << TAG_SHIFT) - 1));
        entries.insert(handle, value);
        Ok(handle)
    }

    /// Takes the object `handle` names out of the table (a second remove of it fails).
    pub fn remove(&self, handle: u64) -> Result<T, CapiError> {
        self.remove_if(handle, |_| Ok(()))
    }

    /// Takes the object `handle` names out of the table if `check` accepts it (in the same
    /// lock, so no other thread's remove comes in between); a refusal leaves it there.
    pub fn remove_if(
        &self,
        handle: u64,
        check: impl FnOnce(&T) -> Result<(), CapiError>,
    ) -> Result<T, CapiError> {
        self.check_kind(handle)?;
        let mut entries = self.entries();
        check(entries.get(&handle).ok_or_else(|| self.stale(handle))?)?;
        entries.remove(&handle).ok_or_else(|| self.stale(handle))
    }

    /// A clone of the object `handle` names.
    pub fn get(&self, handle: u64) -> Result<T, CapiError>
    where
        T: Clone,
    {
        self.check_kind(handle)?;
        self.entries()
            .get(&handle)
            .cloned()
            .ok_or_else(|| self.stale(handle))
    }

    /// Takes every object out of the table (at shutdown).
    pub fn drain(&self) -> Vec<T> {
        self.entries().drain().map(|(_, value)| value).collect()
    }

    /// How many objects the table holds.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether the table holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check_kind(&self, handle: u64) -> Result<(), CapiError> {
        if handle == 0 {
            return Err(Error::NullPointer {
                what: self.kind.null_name(),
            }
            .into());
        }
        match HandleKind::of_handle(handle) {
            Some(kind) if kind == self.kind => Ok(()),
            found => Err(CapiError::WrongHandleKind {
                expected: self.kind,
                found,
                handle,
            }),
        }
    }

    fn stale(&self, handle: u64) -> CapiError {
        CapiError::StaleHandle {
            kind: self.kind,
            handle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::status::GpurtStatus;

    #[test]
    fn a_handle_names_its_object_until_removed_and_never_again() {
        let table = HandleTable::new(HandleKind::Memory);
        let a = table.insert("a").unwrap();
        let b = table.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(table.get(a).unwrap(), "a");
        assert_eq!(table.remove(a).unwrap(), "a");
        assert_eq!(
            table.remove(a),
            Err(CapiError::StaleHandle {
                kind: HandleKind::Memory,
                handle: a
            })
        );
        assert!(table.get(a).is_err());
        let c = table.insert("c").unwrap();
        assert!(c != a && c != b, "a released value is never issued again");
        assert_eq!(table.len(), 2);
        let mut left = table.drain();
        left.sort();
        assert_eq!(left, ["b", "c"]);
        assert!(table.is_empty());
    }

    #[test]
    fn a_refused_conditional_remove_keeps_the_object() {
        let table = HandleTable::new(HandleKind::Memory);
        let handle = table.insert(7).unwrap();
        let refused = table.remove_if(handle, |&value| {
            if value == 7 {
                Err(CapiError::NotOpen)
            } else {
                Ok(())
            }
        });
        assert_eq!(refused, Err(CapiError::NotOpen));
        assert_eq!(table.get(handle), Ok(7));
        assert_eq!(table.remove_if(handle, |_| Ok(())), Ok(7));
        assert!(table.is_empty());
    }

    #[test]
    fn null_foreign_and_wrong_kind_handles_are_typed_errors() {
        let buffers = HandleTable::new(HandleKind::Memory);
        let kernels = HandleTable::new(HandleKind::Kernel);
        let kernel = kernels.insert(1).unwrap();
        buffers.insert(2).unwrap();
        let null = buffers.get(0).unwrap_err();
        assert_eq!(null.status(), GpurtStatus::NullPointer);
        assert!(null.to_string().contains("memory handle is a null pointer"));
        assert_eq!(
            buffers.get(kernel),
            Err(CapiError::WrongHandleKind {
                expected: HandleKind::Memory,
                found: Some(HandleKind::Kernel),
                handle: kernel
            })
        );
        let pointer = 0x7fff_1234_5678_u64;
        let foreign = buffers.remove(pointer).unwrap_err();
        assert_eq!(
            foreign,
            CapiError::WrongHandleKind {
                expected: HandleKind::Memory,
                found: None,
                handle: pointer
            }
        );
        assert_eq!(foreign.status(), GpurtStatus::InvalidHandle);
        assert_eq!(buffers.len(), 1, "failed calls change nothing");
        assert_eq!(kernels.len(), 1);
    }

    /// One step of a random program over a table and its model.
    #[derive(Clone, Debug)]
    enum Step {
        Insert(u32),
        /// Removes the `n`th handle ever issued (live or released), modulo their count.
        Remove(usize),
        /// Reads the `n`th handle ever issued.
        Get(usize),
        /// Uses a value that is no handle of this table: null, a kernel handle, a pointer.
        Foreign(u64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            any::<u32>().prop_map(Step::Insert),
            any::<usize>().prop_map(Step::Remove),
            any::<usize>().prop_map(Step::Get),
            prop_oneof![
                Just(0_u64),
                (1_u64..1 << 20).prop_map(|serial| (0xB2 << 56) | serial),
                (1_u64..1 << 47),
            ]
            .prop_map(Step::Foreign),
        ]
    }

    proptest::proptest! {
        /// Random programs against a plain model (a map of the live values, and every handle
        /// ever issued): live handles give their values, released ones are stale for good,
        /// values that are no handle of the table are refused by kind, and nothing else changes.
        #[test]
        fn the_table_matches_a_plain_model(steps in proptest::collection::vec(step(), 1..200)) {
            let table = HandleTable::new(HandleKind::Memory);
            let mut live: HashMap<u64, u32> = HashMap::new();
            let mut issued: Vec<u64> = Vec::new();
            for step in steps {
                match step {
                    Step::Insert(value) => {
                        let handle = table.insert(value).unwrap();
                        proptest::prop_assert!(!issued.contains(&handle));
                        issued.push(handle);
                        live.insert(handle, value);
                    }
                    Step::Remove(n) | Step::Get(n) if issued.is_empty() => {
                        let _ = n;
                    }
                    Step::Remove(n) => {
                        let handle = issued[n % issued.len()];
                        let expected = live.remove(&handle).ok_or(CapiError::StaleHandle {
                            kind: HandleKind::Memory,
                            handle,
                        });
                        proptest::prop_assert_eq!(table.remove(handle), expected);
                    }
                    Step::Get(n) => {
                        let handle = issued[n % issued.len()];
                        let expected = live.get(&handle).copied().ok_or(CapiError::StaleHandle {
                            kind: HandleKind::Memory,
                            handle,
                        });
                        proptest::prop_assert_eq!(table.get(handle), expected);
                    }
                    Step::Foreign(value) => {
                        let status = table.get(value).unwrap_err().status();
                        let expected = if value == 0 {
                            GpurtStatus::NullPointer
                        } else {
                            GpurtStatus::InvalidHandle
                        };
                        proptest::prop_assert_eq!(status, expected);
                        proptest::prop_assert!(table.remove(value).is_err());
                    }
                }
                proptest::prop_assert_eq!(table.len(), live.len());
            }
        }
    }

    #[test]
    fn concurrent_inserts_get_distinct_handles() {
        let table = HandleTable::new(HandleKind::Kernel);
        let handles: Vec<u64> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        (0..100)
                            .map(|i| table.insert(i).unwrap())
                            .collect::<Vec<u64>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let mut unique = handles.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 400);
        assert_eq!(table.len(), 400);
    }
}
