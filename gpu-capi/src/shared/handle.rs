//! Opaque handles: the values C callers hold for objects that live in Rust (the C API's memory
//! and kernels, the MLIR ABI's streams, events, modules and functions), checked on every use so
//! that a stale, foreign, double-released or earlier-session handle is a typed error, never
//! undefined behaviour and never an action on another object.
//!
//! A handle is a 64-bit value: its top byte says the kind, the rest is a serial number from one
//! process-wide counter, so no value is ever issued twice (not even by a runtime opened after
//! a shutdown) and a released handle stays invalid for good. Zero is the null handle, and every
//! other value is non-null, so the MLIR ABI hands them out as its `void *` handles.
//!
//! # Sessions
//!
//! A session is one opened process-wide runtime, from its open to its shutdown; a later call
//! opens a new one. Each session takes a [`Generation`] when it opens: the serial number the
//! counter stands at then. The serials of one session's handles are at least its generation and
//! below the next session's, so every handle carries the session that issued it: a handle below
//! the current generation is refused as one from an earlier session (its objects were released
//! by the shutdown), and can never name an object of the current session.
//!
//! # Errors
//!
//! What is wrong with a value is a [`HandleError`], this module's own: the crate's error type
//! converts it (with `?`), in the one place that also gives every handle error its status
//! code and message. So this module knows nothing of status codes.

use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What kind of object a handle names (the top byte of its value says it; errors name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandleKind {
    /// Memory: from the runtime's allocator, or the caller's host memory registered with it.
    Memory,
    /// A kernel of the backend's library loaded on one device.
    Kernel,
    /// An MLIR stream (`mgpuStreamCreate`).
    Stream,
    /// An MLIR event (`mgpuEventCreate`).
    Event,
    /// An MLIR module (`mgpuModuleLoad`).
    Module,
    /// An MLIR function of a module (`mgpuModuleGetFunction`).
    Function,
    /// A graph of device work (`gpurt_graph_begin`).
    Graph,
    /// A block of a graph's own memory (`gpurt_graph_alloc`), named in spans like memory.
    GraphBlock,
}

impl HandleKind {
    const ALL: [HandleKind; 8] = [
        HandleKind::Memory,
        HandleKind::Kernel,
        HandleKind::Stream,
        HandleKind::Event,
        HandleKind::Module,
        HandleKind::Function,
        HandleKind::Graph,
        HandleKind::GraphBlock,
    ];

    /// The kind's name in messages.
    pub const fn name(self) -> &'static str {
        match self {
            HandleKind::Memory => "memory",
            HandleKind::Kernel => "kernel",
            HandleKind::Stream => "MLIR stream",
            HandleKind::Event => "MLIR event",
            HandleKind::Module => "MLIR module",
            HandleKind::Function => "MLIR function",
            HandleKind::Graph => "graph",
            HandleKind::GraphBlock => "graph memory block",
        }
    }

    /// What a null handle of this kind is called in a null-pointer error.
    pub(crate) const fn null_name(self) -> &'static str {
        match self {
            HandleKind::Memory => "memory handle",
            HandleKind::Kernel => "kernel handle",
            HandleKind::Stream => "MLIR stream handle",
            HandleKind::Event => "MLIR event handle",
            HandleKind::Module => "MLIR module handle",
            HandleKind::Function => "MLIR function handle",
            HandleKind::Graph => "graph handle",
            HandleKind::GraphBlock => "graph memory block handle",
        }
    }

    /// The top byte of this kind's handles: values no user-space pointer starts with, so a raw
    /// address passed as a handle is recognised as foreign.
    const fn tag(self) -> u64 {
        match self {
            HandleKind::Memory => 0xB1,
            HandleKind::Kernel => 0xB2,
            HandleKind::Stream => 0xC1,
            HandleKind::Event => 0xC2,
            HandleKind::Module => 0xC3,
            HandleKind::Function => 0xC4,
            HandleKind::Graph => 0xB3,
            HandleKind::GraphBlock => 0xB4,
        }
    }

    /// The kind a handle's value says it is of (none for a value of no kind).
    pub fn of_handle(handle: u64) -> Option<HandleKind> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.tag() == handle >> TAG_SHIFT)
    }
}

const TAG_SHIFT: u32 = 56;

/// Why a value names no object of a [`HandleMap`] or [`HandleTable`], or why no handle could
/// be issued. Converted into the crate's error with `?` (which gives it its status code and
/// message); nothing here decides either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandleError {
    /// The null handle (zero) where a handle of `kind` is needed.
    Null {
        /// The kind the call expects.
        kind: HandleKind,
    },
    /// A handle of one kind given where another is expected, or a value of no kind at all (a
    /// raw pointer, say).
    WrongKind {
        /// The kind the call expects.
        expected: HandleKind,
        /// The kind of the handle given, if it names a kind at all.
        found: Option<HandleKind>,
        /// The handle's value.
        handle: u64,
    },
    /// A handle of `kind` of this session that names no live object: already released (or
    /// never issued).
    Stale {
        /// The kind the call expects.
        kind: HandleKind,
        /// The handle's value.
        handle: u64,
    },
    /// A handle of `kind` issued by an earlier session of the library: the runtime it belonged
    /// to was shut down, which released its object.
    EarlierSession {
        /// The kind the call expects.
        kind: HandleKind,
        /// The handle's value.
        handle: u64,
    },
    /// The process has used up its serial numbers (2^56 of them: never, in practice).
    SerialsExhausted {
        /// What needed a serial number.
        what: &'static str,
        /// The serial number the counter gave.
        serial: u64,
        /// The last serial number a handle has room for.
        limit: u64,
    },
    /// The host had no memory for a table entry.
    HostOutOfMemory,
}

/// The serial numbers a handle has room for, below its tag.
const SERIAL_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// The serial number of a handle (its value without the kind's tag).
pub const fn serial(handle: u64) -> u64 {
    handle & SERIAL_MASK
}

/// The serial number of the next handle, shared by every table of the process and every
/// session.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// Takes the next serial number, refusing once the serials are used up (2^56 of them: never,
/// in practice; a wrapped serial could repeat a handle, so the counter never wraps).
fn next_serial(what: &'static str) -> Result<u64, HandleError> {
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
    if serial > SERIAL_MASK {
        return Err(HandleError::SerialsExhausted {
            what,
            serial,
            limit: SERIAL_MASK,
        });
    }
    Ok(serial)
}

/// The session a handle belongs to: the serial number the process-wide counter stood at when
/// the session opened. Later sessions have greater generations, and a session's handles have
/// serials from its generation up to (not including) the next session's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(u64);

impl Generation {
    /// A new session's generation: above every handle issued so far (it takes a serial number
    /// of its own, so two sessions never share one). Fails only when the serials are used up.
    pub fn next() -> Result<Self, HandleError> {
        next_serial("sessions and handles of this process").map(Generation)
    }

    /// The generation's value (never zero).
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Whether `handle` was issued before this session opened.
    const fn predates(self, handle: u64) -> bool {
        serial(handle) < self.0
    }
}

/// The live objects of one kind in one session, by handle, without a lock of its own (the MLIR
/// ABI keeps several in one lock; [`HandleTable`] is one behind a lock). Issues handles, and
/// says what is wrong with a value that names none of its objects.
pub struct HandleMap<T> {
    kind: HandleKind,
    generation: Generation,
    entries: HashMap<u64, T>,
}

impl<T> HandleMap<T> {
    /// An empty map of `kind` handles of the session of `generation`.
    pub fn new(kind: HandleKind, generation: Generation) -> Self {
        Self {
            kind,
            generation,
            entries: HashMap::new(),
        }
    }

    /// Stores `value` and returns its new handle. Fails (keeping nothing) only if the host has
    /// no memory for the entry.
    pub fn insert(&mut self, value: T) -> Result<u64, HandleError> {
        self.entries
            .try_reserve(1)
            .map_err(|_| HandleError::HostOutOfMemory)?;
        let handle = (self.kind.tag() << TAG_SHIFT) | next_serial("handles of this process")?;
        self.entries.insert(handle, value);
        Ok(handle)
    }

    /// The object `handle` names.
    pub fn get(&self, handle: u64) -> Result<&T, HandleError> {
        self.check_kind(handle)?;
        self.entries
            .get(&handle)
            .ok_or_else(|| self.missing(handle))
    }

    /// The object `handle` names, to change.
    pub fn get_mut(&mut self, handle: u64) -> Result<&mut T, HandleError> {
        self.check_kind(handle)?;
        let (kind, generation) = (self.kind, self.generation);
        self.entries
            .get_mut(&handle)
            .ok_or_else(|| missing(kind, generation, handle))
    }

    /// Takes the object `handle` names out of the map (a second remove of it fails).
    pub fn remove(&mut self, handle: u64) -> Result<T, HandleError> {
        self.check_kind(handle)?;
        self.entries
            .remove(&handle)
            .ok_or_else(|| self.missing(handle))
    }

    /// Takes every object out of the map (at shutdown).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.entries.drain().map(|(_, value)| value)
    }

    /// Every live handle and its object, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.entries.iter().map(|(&handle, value)| (handle, value))
    }

    /// How many objects the map holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map holds no object.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Refuses the null handle and handles of another kind (or of none: a raw pointer, say).
    fn check_kind(&self, handle: u64) -> Result<(), HandleError> {
        // The tag is never zero: a handle that carries this kind's is not null.
        if handle >> TAG_SHIFT == self.kind.tag() {
            return Ok(());
        }
        if handle == 0 {
            return Err(HandleError::Null { kind: self.kind });
        }
        Err(HandleError::WrongKind {
            expected: self.kind,
            found: HandleKind::of_handle(handle),
            handle,
        })
    }

    /// Why a handle of the right kind names no object here.
    fn missing(&self, handle: u64) -> HandleError {
        missing(self.kind, self.generation, handle)
    }
}

/// Why a handle of `kind` names no object of the session of `generation`: it is from an
/// earlier session, or it was released (or never issued).
fn missing(kind: HandleKind, generation: Generation, handle: u64) -> HandleError {
    if generation.predates(handle) {
        HandleError::EarlierSession { kind, handle }
    } else {
        HandleError::Stale { kind, handle }
    }
}

/// The live objects of one kind in one session, by handle, behind a lock. Thread safe: one
/// short lock per call, never held while anything else runs (values handed out are clones, e.g.
/// `Arc`s; [`HandleTable::insert_with`] makes its value outside the lock).
///
/// An entry is `None` while [`HandleTable::insert_with`] makes its value: its handle is known to
/// no caller yet, and it counts as no object.
pub struct HandleTable<T> {
    map: Mutex<HandleMap<Option<T>>>,
}

impl<T> HandleTable<T> {
    /// An empty table of `kind` handles of the session of `generation`.
    pub fn new(kind: HandleKind, generation: Generation) -> Self {
        Self {
            map: Mutex::new(HandleMap::new(kind, generation)),
        }
    }

    fn map(&self) -> MutexGuard<'_, HandleMap<Option<T>>> {
        // A panic while the lock was held cannot leave the map half-changed: each call makes one
        // map operation.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `value` and returns its new handle. Fails (keeping nothing) only if the host has
    /// no memory for the entry.
    pub fn insert(&self, value: T) -> Result<u64, HandleError> {
        self.map().insert(Some(value))
    }

    /// Makes a value with `make` (outside the table's lock) and stores it under a handle taken
    /// before: so once `make` has succeeded nothing can fail, and a call whose `make` changes
    /// state (consumes tokens, say) never has to undo it because the table had no room. A
    /// failure of either leaves the table as it was. Returns the handle and what `make` gave
    /// besides the value.
    pub fn insert_with<R, E: From<HandleError>>(
        &self,
        make: impl FnOnce() -> Result<(T, R), E>,
    ) -> Result<(u64, R), E> {
        let handle = self.map().insert(None)?;
        match make() {
            Ok((value, extra)) => {
                if let Ok(entry) = self.map().get_mut(handle) {
                    *entry = Some(value);
                }
                Ok((handle, extra))
            }
            Err(error) => {
                let _ = self.map().remove(handle);
                Err(error)
            }
        }
    }

    /// Takes the object `handle` names out of the table (a second remove of it fails).
    pub fn remove(&self, handle: u64) -> Result<T, HandleError> {
        self.remove_if(handle, |_| Ok(()))
    }

    /// Takes the object `handle` names out of the table if `check` accepts it (in the same
    /// lock, so no other thread's remove comes in between); a refusal leaves it there.
    pub fn remove_if<E: From<HandleError>>(
        &self,
        handle: u64,
        check: impl FnOnce(&T) -> Result<(), E>,
    ) -> Result<T, E> {
        let mut map = self.map();
        let value = map
            .get(handle)?
            .as_ref()
            .ok_or_else(|| map.missing(handle))?;
        check(value)?;
        Ok(map.remove(handle)?.ok_or_else(|| map.missing(handle))?)
    }

    /// A clone of the object `handle` names.
    pub fn get(&self, handle: u64) -> Result<T, HandleError>
    where
        T: Clone,
    {
        let map = self.map();
        map.get(handle)?.clone().ok_or_else(|| map.missing(handle))
    }

    /// Takes every object out of the table (at shutdown).
    pub fn drain(&self) -> Vec<T> {
        self.map().drain().flatten().collect()
    }

    /// How many objects the table holds (counting those calls in flight are storing).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether the table holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation() -> Generation {
        Generation::next().unwrap()
    }

    #[test]
    fn a_handle_of_an_earlier_session_is_refused_as_such_and_names_nothing_now() {
        let first = HandleTable::new(HandleKind::Memory, generation());
        let old = first.insert("first session").unwrap();
        // The next session: its table starts empty, its handles are new values.
        let second = HandleTable::new(HandleKind::Memory, generation());
        let new = second.insert("second session").unwrap();
        assert_ne!(old, new);
        assert!(serial(new) > serial(old));
        let refused = second.remove(old).unwrap_err();
        assert_eq!(
            refused,
            HandleError::EarlierSession {
                kind: HandleKind::Memory,
                handle: old
            }
        );
        assert_eq!(second.get(new), Ok("second session"), "untouched");
        // A released handle of this session is stale, not of an earlier session.
        second.remove(new).unwrap();
        assert_eq!(
            second.get(new),
            Err(HandleError::Stale {
                kind: HandleKind::Memory,
                handle: new
            })
        );
    }

    #[test]
    fn insert_with_stores_nothing_when_its_value_cannot_be_made() {
        let table = HandleTable::new(HandleKind::Kernel, generation());
        let refused = table.insert_with(|| Err::<(u32, ()), _>(HandleError::HostOutOfMemory));
        assert_eq!(refused, Err(HandleError::HostOutOfMemory));
        assert!(table.is_empty());
        let (handle, extra) = table
            .insert_with(|| {
                assert_eq!(
                    table.len(),
                    1,
                    "the entry is taken before the value is made"
                );
                Ok::<_, HandleError>((5, "extra"))
            })
            .unwrap();
        assert_eq!((table.get(handle), extra), (Ok(5), "extra"));
        assert_eq!(table.drain(), vec![5]);
    }

    #[test]
    fn a_map_hands_out_references_and_refuses_like_a_table() {
        let mut map = HandleMap::new(HandleKind::Stream, generation());
        let stream = map.insert(1_u32).unwrap();
        *map.get_mut(stream).unwrap() += 1;
        assert_eq!(map.get(stream), Ok(&2));
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![(stream, &2)]);
        let event = HandleMap::<u32>::new(HandleKind::Event, generation())
            .insert(0)
            .unwrap();
        assert_eq!(
            map.get(event),
            Err(HandleError::WrongKind {
                expected: HandleKind::Stream,
                found: Some(HandleKind::Event),
                handle: event
            })
        );
        assert_eq!(
            map.get(0),
            Err(HandleError::Null {
                kind: HandleKind::Stream
            })
        );
        assert_eq!(map.remove(stream), Ok(2));
        assert!(map.is_empty());
    }

    #[test]
    fn a_handle_names_its_object_until_removed_and_never_again() {
        let table = HandleTable::new(HandleKind::Memory, generation());
        let a = table.insert("a").unwrap();
        let b = table.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(table.get(a).unwrap(), "a");
        assert_eq!(table.remove(a).unwrap(), "a");
        assert_eq!(
            table.remove(a),
            Err(HandleError::Stale {
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
        let table = HandleTable::new(HandleKind::Memory, generation());
        let handle = table.insert(7).unwrap();
        let refused = table.remove_if(handle, |&value| {
            if value == 7 {
                Err(HandleError::HostOutOfMemory)
            } else {
                Ok(())
            }
        });
        assert_eq!(refused, Err(HandleError::HostOutOfMemory));
        assert_eq!(table.get(handle), Ok(7));
        assert_eq!(table.remove_if(handle, |_| Ok::<_, HandleError>(())), Ok(7));
        assert!(table.is_empty());
    }

    #[test]
    fn null_foreign_and_wrong_kind_handles_are_typed_errors() {
        let buffers = HandleTable::new(HandleKind::Memory, generation());
        let kernels = HandleTable::new(HandleKind::Kernel, generation());
        let kernel = kernels.insert(1).unwrap();
        buffers.insert(2).unwrap();
        assert_eq!(
            buffers.get(0),
            Err(HandleError::Null {
                kind: HandleKind::Memory
            })
        );
        assert_eq!(
            buffers.get(kernel),
            Err(HandleError::WrongKind {
                expected: HandleKind::Memory,
                found: Some(HandleKind::Kernel),
                handle: kernel
            })
        );
        let pointer = 0x7fff_1234_5678_u64;
        let foreign = buffers.remove(pointer).unwrap_err();
        assert_eq!(
            foreign,
            HandleError::WrongKind {
                expected: HandleKind::Memory,
                found: None,
                handle: pointer
            }
        );
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
            let table = HandleTable::new(HandleKind::Memory, generation());
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
                        let expected = live.remove(&handle).ok_or(HandleError::Stale {
                            kind: HandleKind::Memory,
                            handle,
                        });
                        proptest::prop_assert_eq!(table.remove(handle), expected);
                    }
                    Step::Get(n) => {
                        let handle = issued[n % issued.len()];
                        let expected = live.get(&handle).copied().ok_or(HandleError::Stale {
                            kind: HandleKind::Memory,
                            handle,
                        });
                        proptest::prop_assert_eq!(table.get(handle), expected);
                    }
                    Step::Foreign(value) => {
                        // Null is refused as null; anything else by kind (a kernel handle
                        // names another kind, a pointer none).
                        let refused = table.get(value).unwrap_err();
                        let by_kind = matches!(
                            refused,
                            HandleError::WrongKind { expected: HandleKind::Memory, .. }
                        );
                        let expected = if value == 0 {
                            refused == HandleError::Null { kind: HandleKind::Memory }
                        } else {
                            by_kind
                        };
                        proptest::prop_assert!(expected, "{:?} refused as {:?}", value, refused);
                        proptest::prop_assert!(table.remove(value).is_err());
                    }
                }
                proptest::prop_assert_eq!(table.len(), live.len());
            }
        }
    }

    #[test]
    fn concurrent_inserts_get_distinct_handles() {
        let table = HandleTable::new(HandleKind::Kernel, generation());
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
