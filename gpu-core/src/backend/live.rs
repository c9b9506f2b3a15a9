//! What a driver backend (CUDA, HIP; HSA next) keeps live, and the steps around creating and
//! destroying driver objects that are the same on every driver. Nothing here calls a driver:
//! each backend translates to its own calls.
//!
//! - [`LiveHandles`]: a backend's registry of live handles (streams, events, modules). Each
//!   handle carries a [`HandleId`], never reused in the process; a method that takes a handle
//!   looks its id up ([`LiveHandles::get`]) and holds the [`Live`] it gets for as long as its
//!   driver call runs, and destroying takes the entry out first ([`LiveHandles::destroy`]),
//!   waiting for the calls in flight on that handle. A destroyed, unloaded, reset or foreign
//!   handle is [`Error::StaleHandle`] before the driver sees it, and no handle is destroyed
//!   while a call uses it.
//! - [`LiveAllocations`] and [`LiveRegistrations`]: the addresses a backend allocated and the
//!   host ranges it registered, so that freeing or unregistering anything else is a typed
//!   error before the driver is asked.
//! - The policies the GPU backends share, each backend supplying only its driver's calls:
//!   the checks before an allocation ([`check_allocation`], [`check_stream_allocation`]), a
//!   driver code that is an answer rather than a failure ([`none_on_code`]: out of memory,
//!   unknown memory), how each memory kind is freed ([`FreeStep`]), peer access with its undo
//!   ([`enable_peer_access`]), the kernel library's functions looked up with the module
//!   unloaded on a failure ([`library_functions`]), and a launch's arguments packed for a
//!   library kernel ([`library_arguments`]).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::ffi::{CStr, c_int};
use core::fmt;
use core::ops::Deref;

use hashbrown::HashMap;
use spin::{Mutex, RwLock};

use super::DeviceInfo;
use super::library::{ArgBuffer, LIBRARY};
use crate::allocator::MemoryKind;
use crate::backend::KernelArg;
use crate::error::{ByteRange, DriverError, Error, Result};
use crate::id::DeviceId;

/// A handle's number: unique in the process, across backends too, and never reused, so a
/// handle of a destroyed object, or of another backend, never passes for a live one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandleId(u64);

/// The next [`HandleId`]. A lock, not an `AtomicU64`: the 32-bit bare-metal targets the core
/// builds for have no 64-bit atomics, and handles are made far from any hot path.
static NEXT_ID: Mutex<u64> = Mutex::new(1);

impl HandleId {
    /// A number no handle of the process has had.
    pub fn fresh() -> Self {
        let mut next = NEXT_ID.lock();
        let id = *next;
        *next += 1;
        HandleId(id)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for HandleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A backend's live handles of one kind: each handle's [`HandleId`], its device, and the value
/// the backend keeps for it (the handle itself, raw driver handle included).
///
/// [`LiveHandles::get`] costs one read of the table (a shared lock, a hash lookup) and one
/// reference count; what [`Live`] holds is the value's own count, not the table's lock, so a
/// long call on one handle (a synchronisation) delays neither the creation of others nor the
/// destruction of others, only the destruction of that very handle.
pub struct LiveHandles<V> {
    backend: &'static str,
    what: &'static str,
    entries: RwLock<HashMap<HandleId, (DeviceId, Arc<V>)>>,
}

/// A live handle's value, held for the length of a driver call: while any `Live` of a handle
/// exists, [`LiveHandles::destroy`] of that handle waits. Never hold one across a destroy of
/// the same handle on the same thread (that destroy would wait for itself).
pub struct Live<V> {
    value: Arc<V>,
}

impl<V> Deref for Live<V> {
    type Target = V;

    #[inline]
    fn deref(&self) -> &V {
        &self.value
    }
}

impl<V: fmt::Debug> fmt::Debug for Live<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Live").field(&*self.value).finish()
    }
}

impl<V> fmt::Debug for LiveHandles<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveHandles")
            .field("backend", &self.backend)
            .field("what", &self.what)
            .field("live", &self.len())
            .finish()
    }
}

impl<V> LiveHandles<V> {
    /// An empty registry of `backend`'s handles of kind `what` (`"stream"`), as errors name
    /// them.
    pub fn new(backend: &'static str, what: &'static str) -> Self {
        Self {
            backend,
            what,
            entries: RwLock::new(HashMap::new()),
        }
    }

    /// Records a handle the driver just created (or adopted) on `device`, under an id from
    /// [`HandleId::fresh`]; an entry of the same id (never, with fresh ids) is replaced.
    pub fn insert(&self, id: HandleId, device: DeviceId, value: V) {
        self.entries.write().insert(id, (device, Arc::new(value)));
    }

    /// Records a handle the driver just created (or adopted) on `device`: `make` builds it
    /// around a fresh [`HandleId`], and a copy is returned for the caller.
    pub fn register(&self, device: DeviceId, make: impl FnOnce(HandleId) -> V) -> V
    where
        V: Clone,
    {
        let id = HandleId::fresh();
        let value = make(id);
        self.insert(id, device, value.clone());
        value
    }

    /// The live handle `id`, held until the returned [`Live`] drops, or
    /// [`Error::StaleHandle`].
    #[inline]
    pub fn get(&self, id: HandleId) -> Result<Live<V>> {
        self.get_as(id, self.what)
    }

    /// As [`LiveHandles::get`], the error naming the handle as `what`: a kernel's check is its
    /// module's, and says "kernel".
    #[inline]
    pub fn get_as(&self, id: HandleId, what: &'static str) -> Result<Live<V>> {
        match self.entries.read().get(&id) {
            Some((_, value)) => Ok(Live {
                value: Arc::clone(value),
            }),
            None => Err(self.stale(id, what)),
        }
    }

    /// Whether `id` is live now.
    pub fn contains(&self, id: HandleId) -> bool {
        self.entries.read().contains_key(&id)
    }

    /// Destroys the live handle `id`: takes it out of the table (new calls with it are
    /// [`Error::StaleHandle`] from here on), waits for the calls in flight on it, calling
    /// `relax` between looks (a thread yield where there is one), then runs `destroy` (the
    /// driver's call). If that fails, the handle is put back as it was.
    pub fn destroy(
        &self,
        id: HandleId,
        relax: impl FnMut(),
        destroy: impl FnOnce(&V) -> Result<()>,
    ) -> Result<()> {
        let (device, value) = self.remove(id, relax)?;
        destroy(&value).inspect_err(|_| self.insert(id, device, value))
    }

    /// Takes the live handle `id` out of the table and returns it with its device once no
    /// call holds it any more (`relax` runs between looks); [`Error::StaleHandle`] if it is
    /// not live.
    pub fn remove(&self, id: HandleId, relax: impl FnMut()) -> Result<(DeviceId, V)> {
        let removed = self.entries.write().remove(&id);
        let (device, value) = removed.ok_or_else(|| self.stale(id, self.what))?;
        Ok((device, last_holder(value, relax)))
    }

    /// Forgets every handle of `device` (after a reset destroyed them with the device's
    /// state); calls in flight keep their [`Live`] until they return. Returns how many.
    pub fn forget_device(&self, device: DeviceId) -> usize {
        let mut entries = self.entries.write();
        let before = entries.len();
        entries.retain(|_, (of, _)| *of != device);
        before - entries.len()
    }

    /// How many handles are live.
    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    /// Whether no handle is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn stale(&self, id: HandleId, what: &'static str) -> Error {
        Error::StaleHandle {
            backend: self.backend,
            what,
            id,
        }
    }
}

/// The value of `shared` once this is its last holder (`relax` between looks).
fn last_holder<V>(mut shared: Arc<V>, mut relax: impl FnMut()) -> V {
    loop {
        match Arc::try_unwrap(shared) {
            Ok(value) => return value,
            Err(still_shared) => {
                shared = still_shared;
                relax();
            }
        }
    }
}

/// The memory a backend allocated and has not freed: each address with its device and kind.
/// [`LiveAllocations::release`] frees only what is here, so a free of an address the backend
/// never handed out (or freed already) is refused before the driver.
#[derive(Debug, Default)]
pub struct LiveAllocations {
    entries: Mutex<HashMap<usize, (DeviceId, MemoryKind)>>,
}

impl LiveAllocations {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the address of a successful allocation (`Ok(Some)`) of `kind` on `device`, and
    /// passes the outcome on.
    pub fn record(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        allocated: Result<Option<usize>>,
    ) -> Result<Option<usize>> {
        if let Ok(Some(address)) = allocated {
            self.entries.lock().insert(address, (device, kind));
        }
        allocated
    }

    /// Frees `address` with `free` (the driver's calls) if it is live memory of `kind` on
    /// `device`: taken out of the table first, so that two frees of one address cannot both
    /// reach the driver, and put back if `free` fails. Refused, with nothing changed: a null
    /// address ([`Error::NullPointer`]); an address that is not live memory of that kind on that
    /// device ([`Error::UnknownAddress`]).
    pub fn release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        free: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if address == 0 {
            return Err(Error::NullPointer {
                what: "freed address",
            });
        }
        {
            let mut entries = self.entries.lock();
            match entries.get(&address) {
                Some(&live) if live == (device, kind) => {
                    entries.remove(&address);
                }
                _ => return Err(Error::UnknownAddress { device, address }),
            }
        }
        free().inspect_err(|_| {
            self.entries.lock().insert(address, (device, kind));
        })
    }

    /// Forgets every allocation of `device` (after a reset freed them with the device's state).
    /// Returns how many.
    pub fn forget_device(&self, device: DeviceId) -> usize {
        let mut entries = self.entries.lock();
        let before = entries.len();
        entries.retain(|_, (of, _)| *of != device);
        before - entries.len()
    }

    /// Whether `address` is live memory of `kind` on `device`.
    pub fn contains(&self, device: DeviceId, kind: MemoryKind, address: usize) -> bool {
        self.entries.lock().get(&address) == Some(&(device, kind))
    }

    /// How many allocations are live.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The host ranges a backend registered (pinned) and has not unregistered, by start.
#[derive(Debug, Default)]
pub struct LiveRegistrations {
    entries: Mutex<BTreeMap<usize, usize>>,
}

impl LiveRegistrations {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a range the driver just registered.
    pub fn record(&self, range: ByteRange) {
        self.entries.lock().insert(range.start, range.len);
    }

    /// Unregisters the range that starts at `start` with `unregister` (the driver's call):
    /// taken out of the table first and put back if `unregister` fails. Refused, with nothing
    /// changed: a pointer inside a registered range but not its start
    /// ([`Error::NotEntryStart`]), and one in no registered range ([`Error::NotLocked`]).
    pub fn release(&self, start: usize, unregister: impl FnOnce() -> Result<()>) -> Result<()> {
        let len = {
            let mut entries = self.entries.lock();
            match entries.remove(&start) {
                Some(len) => len,
                None => {
                    let containing = entries
                        .range(..start)
                        .next_back()
                        .and_then(|(&first, &len)| ByteRange::new(first, len))
                        .filter(|range| range.last() >= start);
                    return Err(match containing {
                        Some(entry) => Error::NotEntryStart { ptr: start, entry },
                        None => Error::NotLocked { ptr: start },
                    });
                }
            }
        };
        unregister().inspect_err(|_| {
            self.entries.lock().insert(start, len);
        })
    }

    /// The registered range that starts at `start`, if any.
    pub fn get(&self, start: usize) -> Option<ByteRange> {
        let len = *self.entries.lock().get(&start)?;
        ByteRange::new(start, len)
    }

    /// How many ranges are registered.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The typed refusals before a [`super::Backend::allocate`] on `device` described by `info`: a
/// kind the device does not have ([`Error::KindUnsupported`]), and a size of zero ([`Error::ZeroSize`]).
pub fn check_allocation(
    info: &DeviceInfo,
    device: DeviceId,
    kind: MemoryKind,
    bytes: usize,
) -> Result<()> {
    if !info.allocator.support(kind).available {
        return Err(Error::KindUnsupported { device, kind });
    }
    if bytes == 0 {
        return Err(Error::ZeroSize {
            what: "allocation size",
        });
    }
    Ok(())
}

/// The typed refusals before a [`super::Backend::allocate_on_stream`] on a stream of `device`:
/// anything but device memory, or device memory where the backend has no pool for it
/// (`stream_ordered` false) ([`Error::KindUnsupported`]), and a size of zero.
pub fn check_stream_allocation(
    device: DeviceId,
    kind: MemoryKind,
    stream_ordered: bool,
    bytes: usize,
) -> Result<()> {
    if kind != MemoryKind::Device || !stream_ordered {
        return Err(Error::KindUnsupported { device, kind });
    }
    if bytes == 0 {
        return Err(Error::ZeroSize {
            what: "allocation size",
        });
    }
    Ok(())
}

/// `Ok(Some(value))` for success; `Ok(None)` where the driver answered `code`, a code the trait
/// reports as a value rather than a failure (out of memory for an allocation, unknown memory
/// for a pointer query, "already enabled" for peer access); any other error as it is.
pub fn none_on_code<T>(result: Result<T>, code: i64) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::Driver(DriverError { code: answered, .. })) if answered == code => Ok(None),
        Err(other) => Err(other),
    }
}

/// How memory of one kind goes back to the driver ([`FreeStep::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeStep<S> {
    /// Device memory, in the order of this stream (CUDA's cuMemFreeAsync, HIP's hipFreeAsync).
    InStreamOrder(S),
    /// Device memory, now.
    Now,
    /// Host-visible memory (managed or pinned host), which has no stream-ordered free: the
    /// stream, if any, is synchronised first, then the memory freed.
    AfterSynchronizing {
        /// The stream whose work must finish first.
        after: Option<S>,
        /// Pinned host memory (freed by the host-allocation free) rather than managed.
        pinned: bool,
    },
}

impl<S> FreeStep<S> {
    /// The step for freeing memory of `kind` not before the work on `after` has finished.
    pub fn of(kind: MemoryKind, after: Option<S>) -> Self {
        match (kind, after) {
            (MemoryKind::Device, Some(stream)) => FreeStep::InStreamOrder(stream),
            (MemoryKind::Device, None) => FreeStep::Now,
            (kind, after) => FreeStep::AfterSynchronizing {
                after,
                pinned: kind == MemoryKind::HostPinned,
            },
        }
    }
}

/// [`super::Backend::enable_peer_access`] from its three driver steps: `enable` turns on the
/// context's (device's) access to the peer and says whether it was off before (already on, by
/// this backend or another user of the context, is no error); `grant_pool` opens the peer's
/// stream-ordered pool to the device, `None` where the backend uses no pool there; if that
/// fails, `undo` turns off the access this call turned on. `undo` cannot fail (look its entry
/// point up before calling), and a failure of the driver in it is not reported: the pool's is.
pub fn enable_peer_access(
    enable: impl FnOnce() -> Result<bool>,
    grant_pool: impl FnOnce() -> Option<Result<()>>,
    undo: impl FnOnce(),
) -> Result<()> {
    let newly_enabled = enable()?;
    match grant_pool() {
        Some(Err(error)) => {
            if newly_enabled {
                undo();
            }
            Err(error)
        }
        _ => Ok(()),
    }
}

/// Every function of the kernel library ([`LIBRARY`], in table order) from `module`, just
/// loaded: `function` looks one up by symbol. If a lookup fails, the module is unloaded
/// (`unload`, which cannot fail: look its entry point up before loading) and the lookup's error
/// returned.
pub fn library_functions<M: Copy, F>(
    module: M,
    mut function: impl FnMut(M, &CStr) -> Result<F>,
    unload: impl FnOnce(M),
) -> Result<Vec<F>> {
    let mut functions = Vec::with_capacity(LIBRARY.len());
    for entry in LIBRARY {
        match function(module, entry.symbol) {
            Ok(found) => functions.push(found),
            Err(error) => {
                unload(module);
                return Err(error);
            }
        }
    }
    Ok(functions)
}

/// What errors call a kernel of a program's own module ([`super::Backend::module_kernel`]),
/// whose name the backend does not keep.
pub const MODULE_KERNEL: &str = "(a kernel of a loaded module)";

/// A kernel's name for errors: the library's name at `library_index`, or [`MODULE_KERNEL`].
pub fn kernel_name(library_index: Option<usize>) -> &'static str {
    library_index.map_or(MODULE_KERNEL, |index| LIBRARY[index].name)
}

/// The argument values of a [`super::Backend::launch`] of the library kernel at
/// `library_index`, checked against its parameters ([`Error::KernelArgumentMismatch`]); a
/// module's kernel (`None`) has no table to check against and is refused the same way, naming
/// [`super::Backend::launch_packed`].
pub fn library_arguments(library_index: Option<usize>, args: &[KernelArg]) -> Result<ArgBuffer> {
    let Some(index) = library_index else {
        return Err(Error::KernelArgumentMismatch {
            kernel: MODULE_KERNEL,
            expected: "the module's own parameter array (launch_packed)",
        });
    };
    ArgBuffer::pack(&LIBRARY[index], args)
}

/// `bytes` of dynamic workgroup memory as the drivers' attribute value (a C `int`), or
/// [`Error::LimitExceeded`] naming the kernel where it does not fit.
pub fn workgroup_bytes_attribute(bytes: u32, library_index: Option<usize>) -> Result<c_int> {
    c_int::try_from(bytes).map_err(|_| Error::LimitExceeded {
        what: "dynamic workgroup memory per workgroup",
        required: bytes as usize,
        limit: c_int::MAX as usize,
        detail: vec![format!("kernel {}", kernel_name(library_index))],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{AllocatorCapabilities, KindSupport};
    use crate::workgroup::WorkgroupLimits;
    use core::cell::Cell;

    const D0: DeviceId = DeviceId(0);
    const D1: DeviceId = DeviceId(1);

    fn stale(what: &'static str, id: HandleId) -> Error {
        Error::StaleHandle {
            backend: "test",
            what,
            id,
        }
    }

    #[test]
    fn ids_are_never_reused() {
        let ids: Vec<HandleId> = (0..100).map(|_| HandleId::fresh()).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(alloc::string::ToString::to_string(&HandleId(7)), "#7");
    }

    #[test]
    fn a_live_handle_is_found_and_a_destroyed_or_unknown_one_is_stale() {
        let streams = LiveHandles::new("test", "stream");
        let (a, b) = (HandleId::fresh(), HandleId::fresh());
        streams.insert(a, D0, 10u32);
        streams.insert(b, D1, 20u32);
        assert_eq!(*streams.get(a).unwrap(), 10);
        assert_eq!(*streams.get(b).unwrap(), 20);
        let destroyed = Cell::new(None);
        streams
            .destroy(
                a,
                || {},
                |&raw| {
                    destroyed.set(Some(raw));
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(destroyed.get(), Some(10));
        assert_eq!(streams.get(a).unwrap_err(), stale("stream", a));
        assert_eq!(
            streams.destroy(a, || {}, |_| unreachable!()),
            Err(stale("stream", a)),
            "destroyed twice"
        );
        let never = HandleId::fresh();
        assert_eq!(streams.get(never).unwrap_err(), stale("stream", never));
        assert_eq!(
            streams.get_as(never, "kernel").unwrap_err(),
            stale("kernel", never)
        );
        assert_eq!(streams.len(), 1);
    }

    #[test]
    fn a_registered_handle_gets_a_fresh_id() {
        let streams = LiveHandles::new("test", "stream");
        let (one, two) = (streams.register(D0, |id| id), streams.register(D1, |id| id));
        assert!(one < two);
        assert_eq!(
            (*streams.get(one).unwrap(), *streams.get(two).unwrap()),
            (one, two)
        );
        assert_eq!(streams.forget_device(D1), 1);
    }

    #[test]
    fn a_failed_destroy_puts_the_handle_back() {
        let events = LiveHandles::new("test", "event");
        let id = HandleId::fresh();
        events.insert(id, D0, 'e');
        let failure = Error::NullPointer { what: "driver" };
        assert_eq!(
            events.destroy(id, || {}, |_| Err(failure.clone())),
            Err(failure)
        );
        assert_eq!(*events.get(id).unwrap(), 'e');
    }

    #[test]
    fn destroy_waits_for_the_calls_holding_the_handle() {
        let streams = LiveHandles::new("test", "stream");
        let id = HandleId::fresh();
        streams.insert(id, D0, 1u8);
        let held = Cell::new(Some(streams.get(id).unwrap()));
        let looks = Cell::new(0);
        // The "call in flight" ends at the third look.
        let relax = || {
            looks.set(looks.get() + 1);
            if looks.get() == 3 {
                held.take();
            }
        };
        assert_eq!(streams.remove(id, relax), Ok((D0, 1)));
        assert_eq!(looks.get(), 3);
        assert!(!streams.contains(id));
    }

    #[test]
    fn a_reset_forgets_the_devices_handles_only() {
        let modules = LiveHandles::new("test", "module");
        let ids: Vec<HandleId> = (0..4).map(|_| HandleId::fresh()).collect();
        for (index, &id) in ids.iter().enumerate() {
            modules.insert(id, DeviceId(index as u32 % 2), index);
        }
        let in_flight = modules.get(ids[0]).unwrap();
        assert_eq!(modules.forget_device(D0), 2);
        assert_eq!(*in_flight, 0, "a call in flight keeps its value");
        assert!(modules.get(ids[0]).is_err() && modules.get(ids[2]).is_err());
        assert!(modules.get(ids[1]).is_ok() && modules.get(ids[3]).is_ok());
    }

    #[test]
    fn only_live_allocations_of_the_kind_and_device_are_freed() {
        let allocations = LiveAllocations::new();
        let kind = MemoryKind::Device;
        assert_eq!(
            allocations.record(D0, kind, Ok(Some(0x1000))),
            Ok(Some(0x1000))
        );
        assert_eq!(allocations.record(D0, kind, Ok(None)), Ok(None));
        let failed = Err(Error::NullPointer { what: "x" });
        assert_eq!(allocations.record(D0, kind, failed.clone()), failed);
        assert_eq!(allocations.len(), 1);
        let never = |_| -> Result<()> { panic!("the driver was asked") };
        let unknown = |device, address| Err(Error::UnknownAddress { device, address });
        assert_eq!(
            allocations.release(D0, kind, 0x2000, || never(())),
            unknown(D0, 0x2000)
        );
        assert_eq!(
            allocations.release(D1, kind, 0x1000, || never(())),
            unknown(D1, 0x1000)
        );
        assert_eq!(
            allocations.release(D0, MemoryKind::HostPinned, 0x1000, || never(())),
            unknown(D0, 0x1000)
        );
        assert_eq!(
            allocations.release(D0, kind, 0, || never(())),
            Err(Error::NullPointer {
                what: "freed address"
            })
        );
        // A failed free leaves the memory live; a good one frees it once.
        let failure = Error::ZeroSize { what: "driver" };
        assert_eq!(
            allocations.release(D0, kind, 0x1000, || Err(failure.clone())),
            Err(failure)
        );
        assert!(allocations.contains(D0, kind, 0x1000));
        assert_eq!(allocations.release(D0, kind, 0x1000, || Ok(())), Ok(()));
        assert_eq!(
            allocations.release(D0, kind, 0x1000, || never(())),
            unknown(D0, 0x1000)
        );
        assert!(allocations.is_empty());
        for (device, address) in [(D0, 0x10), (D1, 0x20), (D0, 0x30)] {
            allocations.record(device, kind, Ok(Some(address))).unwrap();
        }
        assert_eq!(allocations.forget_device(D0), 2);
        assert!(allocations.contains(D1, kind, 0x20));
    }

    #[test]
    fn only_registered_starts_are_unregistered() {
        let registrations = LiveRegistrations::new();
        let range = ByteRange::new(0x1000, 0x100).unwrap();
        registrations.record(range);
        let never = || -> Result<()> { panic!("the driver was asked") };
        assert_eq!(
            registrations.release(0x1080, never),
            Err(Error::NotEntryStart {
                ptr: 0x1080,
                entry: range
            })
        );
        assert_eq!(
            registrations.release(0x1100, never),
            Err(Error::NotLocked { ptr: 0x1100 })
        );
        assert_eq!(
            registrations.release(0x800, never),
            Err(Error::NotLocked { ptr: 0x800 })
        );
        let failure = Error::ZeroSize { what: "driver" };
        assert_eq!(
            registrations.release(0x1000, || Err(failure.clone())),
            Err(failure)
        );
        assert_eq!(registrations.get(0x1000), Some(range));
        assert_eq!(registrations.release(0x1000, || Ok(())), Ok(()));
        assert_eq!(
            registrations.release(0x1000, never),
            Err(Error::NotLocked { ptr: 0x1000 })
        );
        assert!(registrations.is_empty());
    }

    fn device_info() -> DeviceInfo {
        DeviceInfo {
            name: "test".into(),
            total_memory: 1 << 30,
            allocator: AllocatorCapabilities {
                device: KindSupport::SYNCHRONOUS,
                managed: KindSupport::NONE,
                host_pinned: KindSupport::SYNCHRONOUS,
                host_register: true,
            },
            workgroup: WorkgroupLimits {
                default_per_block: 48 << 10,
                max_per_block_opt_in: 48 << 10,
                per_multiprocessor: 64 << 10,
                reserved_per_block: 0,
            },
            unified_addressing: true,
            pageable_memory_access: false,
        }
    }

    #[test]
    fn allocations_of_missing_kinds_or_no_bytes_are_refused() {
        let info = device_info();
        assert_eq!(check_allocation(&info, D0, MemoryKind::Device, 64), Ok(()));
        assert_eq!(
            check_allocation(&info, D0, MemoryKind::Managed, 64),
            Err(Error::KindUnsupported {
                device: D0,
                kind: MemoryKind::Managed
            })
        );
        let zero = Err(Error::ZeroSize {
            what: "allocation size",
        });
        assert_eq!(check_allocation(&info, D0, MemoryKind::HostPinned, 0), zero);
        assert_eq!(
            check_stream_allocation(D1, MemoryKind::Device, true, 64),
            Ok(())
        );
        assert_eq!(
            check_stream_allocation(D1, MemoryKind::Device, true, 0),
            zero
        );
        for (kind, pool) in [(MemoryKind::Device, false), (MemoryKind::Managed, true)] {
            assert_eq!(
                check_stream_allocation(D1, kind, pool, 64),
                Err(Error::KindUnsupported { device: D1, kind })
            );
        }
    }

    fn driver_error(code: i64) -> Error {
        Error::Driver(DriverError {
            backend: "test",
            call: "alloc",
            name: "CODE",
            code,
        })
    }

    #[test]
    fn the_answering_code_is_none_and_others_stay_errors() {
        assert_eq!(none_on_code(Ok(5), 2), Ok(Some(5)));
        assert_eq!(none_on_code::<u8>(Err(driver_error(2)), 2), Ok(None));
        assert_eq!(
            none_on_code::<u8>(Err(driver_error(1)), 2),
            Err(driver_error(1))
        );
        let other = Error::ZeroSize { what: "x" };
        assert_eq!(none_on_code::<u8>(Err(other.clone()), 2), Err(other));
    }

    #[test]
    fn each_kind_is_freed_its_way() {
        use MemoryKind::*;
        assert_eq!(FreeStep::of(Device, Some(7)), FreeStep::InStreamOrder(7));
        assert_eq!(FreeStep::<u8>::of(Device, None), FreeStep::Now);
        assert_eq!(
            FreeStep::of(HostPinned, Some(7)),
            FreeStep::AfterSynchronizing {
                after: Some(7),
                pinned: true
            }
        );
        assert_eq!(
            FreeStep::<u8>::of(Managed, None),
            FreeStep::AfterSynchronizing {
                after: None,
                pinned: false
            }
        );
    }

    #[test]
    fn peer_access_is_undone_only_where_this_call_enabled_it_and_the_pool_refused() {
        let undone = Cell::new(0);
        let undo = || undone.set(undone.get() + 1);
        let refused = || Some(Err(driver_error(1)));
        assert_eq!(enable_peer_access(|| Ok(true), || None, undo), Ok(()));
        assert_eq!(
            enable_peer_access(|| Ok(false), || Some(Ok(())), undo),
            Ok(())
        );
        assert_eq!(
            enable_peer_access(|| Ok(false), refused, undo),
            Err(driver_error(1))
        );
        assert_eq!(undone.get(), 0, "already enabled by someone else: left on");
        assert_eq!(
            enable_peer_access(|| Ok(true), refused, undo),
            Err(driver_error(1))
        );
        assert_eq!(undone.get(), 1);
        assert_eq!(
            enable_peer_access(|| Err(driver_error(3)), || unreachable!(), undo),
            Err(driver_error(3))
        );
        assert_eq!(undone.get(), 1);
    }

    #[test]
    fn a_missing_library_function_unloads_the_module() {
        let unloaded = Cell::new(None);
        let all = library_functions(
            7u8,
            |_, symbol| Ok(symbol.to_bytes().len()),
            |m| unloaded.set(Some(m)),
        );
        assert_eq!(all.unwrap().len(), LIBRARY.len());
        assert_eq!(unloaded.get(), None);
        let missing = LIBRARY[1].symbol;
        let found = library_functions(
            7u8,
            |_, symbol| {
                if symbol == missing {
                    Err(driver_error(500))
                } else {
                    Ok(())
                }
            },
            |m| unloaded.set(Some(m)),
        );
        assert_eq!(found, Err(driver_error(500)));
        assert_eq!(unloaded.get(), Some(7));
    }

    #[test]
    fn launch_arguments_are_checked_against_the_library_and_refused_for_modules() {
        let args = [KernelArg::Ptr(0x1000), KernelArg::U32(1), KernelArg::U64(1)];
        let fill = crate::backend::library::find_for("test", "fill_u32").unwrap();
        assert!(library_arguments(Some(fill), &args).is_ok());
        assert!(matches!(
            library_arguments(Some(fill), &args[..2]),
            Err(Error::KernelArgumentMismatch {
                kernel: "fill_u32",
                ..
            })
        ));
        assert!(matches!(
            library_arguments(None, &args),
            Err(Error::KernelArgumentMismatch {
                kernel: MODULE_KERNEL,
                expected: "the module's own parameter array (launch_packed)"
            })
        ));
        assert_eq!(kernel_name(Some(fill)), "fill_u32");
        assert_eq!(workgroup_bytes_attribute(4096, None), Ok(4096));
        assert_eq!(
            workgroup_bytes_attribute(u32::MAX, Some(fill)),
            Err(Error::LimitExceeded {
                what: "dynamic workgroup memory per workgroup",
                required: u32::MAX as usize,
                limit: c_int::MAX as usize,
                detail: vec!["kernel fill_u32".into()],
            })
        );
    }
}
