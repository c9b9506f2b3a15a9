//! A backend's registry of live handles of one kind: each handle a slot of its own, checked and
//! held for the length of a driver call with one atomic on that slot, and destroyed only once
//! no call holds it.
//!
//! # Slots
//!
//! Every handle lives in a [`Slot`]: its value, its device, and one 64-bit state word,
//!
//! ```text
//!  63            32   31     30             0
//! +----------------+------+-----------------+
//! |   generation   | LIVE |    in flight    |
//! +----------------+------+-----------------+
//! ```
//!
//! A [`HandleKey`] (what a backend's handle carries) is the slot's address, the generation the
//! slot had when the handle was made, and its registry's number. The check
//! ([`LiveHandles::get`]) is one `fetch_add` of the in-flight count that also reads the
//! generation and the live bit, and the end of the hold ([`Live`]'s drop) one `fetch_sub`: no
//! table, no lock, no reference count, and nothing shared with any other handle. A check that
//! finds the handle stale takes its increment back at once.
//!
//! Slots are allocated once (`Box::leak`), aligned to 128 bytes so that two handles never share a
//! cache line (nor the adjacent line that x86 prefetches with it), and never freed: a destroyed
//! handle's slot goes to its registry's free list with its generation one higher, and a dropped
//! registry's slots to a process-wide spare list that later registries of the same value type
//! draw from. So their number is bounded by the most handles live at once. A slot whose
//! generation reached `u32::MAX` is retired rather than reused, so no generation repeats and no
//! key ever passes for a later handle (one slot in four billion handles of that slot).
//!
//! # Orderings
//!
//! Every change of a state word after its slot is made is a read-modify-write, so each release
//! operation on it heads a release sequence that every later change continues:
//!
//! - Publishing (`insert`) writes the value and the device, then sets LIVE with `Release`; a
//!   check's `fetch_add` is `Acquire`, so a check that finds its generation live sees the value.
//! - A hold ends with a `Release` `fetch_sub`; a destroy (or the sweep of a reset device's
//!   handles) reads the count with `Acquire` and takes the value only once it reads zero, so
//!   every read a call made through its [`Live`] happens before the value is dropped or moved.
//! - Turning LIVE off (destroy, reset) and moving the generation on need no ordering of their
//!   own: all changes of one word are totally ordered, so a check's `fetch_add` comes either
//!   before the change (and is counted, and waited for) or after it (and sees the handle
//!   stale). The free lists are behind locks, which order a slot's reuse after its release.
//! - A stale check's `fetch_sub` is `Relaxed`: it read nothing through the slot.
//!
//! Only destroy, reset and creation take a lock (the registry's lists, for a push or a pop);
//! no lock is held while waiting for calls in flight or while the driver runs, so a long call on
//! one handle delays only the destruction of that very handle.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::any::{Any, TypeId};
use core::cell::UnsafeCell;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::mem::{self, MaybeUninit};
use core::ops::Deref;
use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use spin::Mutex;

use crate::error::{Error, Result};
use crate::id::{DeviceId, HandleId};

/// The state's live bit: set while the handle may be used.
const LIVE: u64 = 1 << 31;
/// The state's in-flight count: the calls holding the handle (and, for an instant, stale checks
/// taking their increment back).
const IN_FLIGHT: u64 = LIVE - 1;
/// One generation, in the state's top 32 bits.
const GENERATION_ONE: u64 = 1 << 32;
/// Holds at which a check panics instead of counting (only holds leaked with `mem::forget` can
/// get there): half the count's room, so that the increments of every thread checking at once
/// stay below the live bit.
const HOLD_LIMIT: u64 = 1 << 30;

/// The generation in `state`.
const fn generation(state: u64) -> u32 {
    (state >> 32) as u32
}

/// One handle's place: its state word, its number (for [`HandleId`]s), its device and its value.
///
/// The value is initialised from publication (`insert`) until the handle's destroy, reset sweep
/// or registry drop takes it; it is read only through a [`Live`] (counted in the state while it
/// lives) or by the one thread that turned LIVE off and saw no call in flight.
#[repr(align(128))]
struct Slot<V> {
    state: AtomicU64,
    /// The slot's number in the process, fixed at allocation.
    number: u32,
    /// The handle's device: written before LIVE is set, read by a reset after seeing it.
    device: AtomicU32,
    value: UnsafeCell<MaybeUninit<V>>,
}

// SAFETY: the value is shared between threads only as `&V` (through `Live`, while the state
// counts the hold) and moved or dropped by one thread at a time (the one that turned LIVE off and
// saw no call in flight, or that holds the registry's lock for an orphan), so sharing a slot
// needs `V: Sync` for the shared reads and `V: Send` for the drop on another thread.
unsafe impl<V: Send + Sync> Sync for Slot<V> {}

/// The next slot's number.
static SLOT_NUMBERS: AtomicU32 = AtomicU32::new(0);
/// The next registry's number (0 is never given, so no key is of a registry by accident).
static REGISTRY_NUMBERS: AtomicU32 = AtomicU32::new(1);

/// The next number of `counter`: numbers are never reused, so running out is a panic (four
/// billion slots or registries).
fn next_number(counter: &AtomicU32, what: &str) -> u32 {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
        .unwrap_or_else(|_| panic!("live handles: no {what} number left"))
}

impl<V> Slot<V> {
    /// A new slot, never to be freed: generation 0, not live, no value.
    fn leak() -> &'static Self {
        Box::leak(Box::new(Slot {
            state: AtomicU64::new(0),
            number: next_number(&SLOT_NUMBERS, "slot"),
            device: AtomicU32::new(0),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }))
    }

    /// Moves the generation on so that no key made before passes again, once the value is gone;
    /// false when the generation is spent (the slot is then retired, never to be reused).
    ///
    /// Called by the one thread that owns the slot's not-live state (destroy, sweep, drop).
    fn next_generation(&self) -> bool {
        if generation(self.state.load(Ordering::Relaxed)) == u32::MAX {
            return false;
        }
        // Relaxed: see the module's orderings (the state is not live; the free list's lock
        // orders the slot's reuse after this).
        self.state.fetch_add(GENERATION_ONE, Ordering::Relaxed);
        true
    }

    /// Whether no call holds the handle; `Acquire`, so that every read through a hold that has
    /// ended happens before what the caller does next with the value.
    fn unheld(&self) -> bool {
        self.state.load(Ordering::Acquire) & IN_FLIGHT == 0
    }
}

/// A slot of some value type, as the spare list keeps it.
type AnySlot = &'static (dyn Any + Send + Sync);

/// Slots that dropped registries left, by value type, for later registries of the same type.
static SPARE: Mutex<Vec<(TypeId, Vec<AnySlot>)>> = Mutex::new(Vec::new());

/// A spare slot for values of type `V`, if a dropped registry left one.
fn take_spare<V: Send + Sync + 'static>() -> Option<&'static Slot<V>> {
    let mut spare = SPARE.lock();
    let (_, slots) = spare
        .iter_mut()
        .find(|(type_id, _)| *type_id == TypeId::of::<Slot<V>>())?;
    let slot: AnySlot = slots.pop()?;
    slot.downcast_ref::<Slot<V>>()
}

/// Leaves `slots` (not live, no value, generation moved on, no call in flight) to later
/// registries of value type `V`.
fn give_spare<V: Send + Sync + 'static>(slots: Vec<&'static Slot<V>>) {
    if slots.is_empty() {
        return;
    }
    let mut spare = SPARE.lock();
    let type_id = TypeId::of::<Slot<V>>();
    let index = match spare.iter().position(|(of, _)| *of == type_id) {
        Some(index) => index,
        None => {
            spare.push((type_id, Vec::new()));
            spare.len() - 1
        }
    };
    let list = &mut spare[index].1;
    list.extend(slots.into_iter().map(|slot| slot as AnySlot));
}

/// A handle's key in its registry: its slot, the slot's generation when the handle was made, and
/// the registry's number. `Copy`, 16 bytes; equal keys name the same handle.
pub struct HandleKey<V: 'static> {
    slot: &'static Slot<V>,
    generation: u32,
    registry: u32,
}

impl<V: 'static> HandleKey<V> {
    /// The handle's number as errors show it: its slot's number and generation, unique in the
    /// process and never reused.
    pub fn id(self) -> HandleId {
        HandleId::new(self.slot.number, self.generation)
    }

    /// What the state's generation and live bit are while this key's handle is live.
    #[inline]
    fn live_state(self) -> u64 {
        ((self.generation as u64) << 32) | LIVE
    }
}

impl<V: 'static> Clone for HandleKey<V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: 'static> Copy for HandleKey<V> {}

impl<V: 'static> PartialEq for HandleKey<V> {
    fn eq(&self, other: &Self) -> bool {
        ptr::eq(self.slot, other.slot)
            && self.generation == other.generation
            && self.registry == other.registry
    }
}

impl<V: 'static> Eq for HandleKey<V> {}

impl<V: 'static> Hash for HandleKey<V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        ptr::hash(self.slot, state);
        self.generation.hash(state);
        self.registry.hash(state);
    }
}

impl<V: 'static> fmt::Debug for HandleKey<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HandleKey({} of registry {})", self.id(), self.registry)
    }
}

/// A backend's live handles of one kind: each handle's slot, device, and the value the backend
/// keeps for it (the handle itself, raw driver handle included).
///
/// [`LiveHandles::get`] costs one atomic add on the handle's own slot, and the end of the hold
/// one subtraction (see the module's documentation); a long call on one handle (a
/// synchronisation) delays neither the creation of others nor the destruction of others, only
/// the destruction of that very handle.
pub struct LiveHandles<V: Send + Sync + 'static> {
    backend: &'static str,
    what: &'static str,
    /// The registry's number in the process, which its keys carry.
    number: u32,
    slots: Mutex<Slots<V>>,
}

/// A registry's slots: every one it has, those free for the next handle, and those a reset took
/// out of use while calls still held them.
struct Slots<V: 'static> {
    all: Vec<&'static Slot<V>>,
    free: Vec<&'static Slot<V>>,
    /// Not live, value still there: taken (dropped, the slot freed) once no call holds it.
    orphans: Vec<&'static Slot<V>>,
}

impl<V: 'static> Slots<V> {
    /// Drops the value of every orphan no call holds any more and frees its slot.
    fn sweep(&mut self) {
        let mut index = 0;
        while index < self.orphans.len() {
            let slot = self.orphans[index];
            if slot.unheld() {
                self.orphans.swap_remove(index);
                // SAFETY: an orphan's value is initialised (the reset turned LIVE off without
                // taking it); no call holds it (`unheld`, whose Acquire orders every hold's reads
                // before this drop) and none can start (LIVE is off, and only publication, of a
                // slot from the free list, sets it); and only the holder of this lock touches
                // orphans.
                unsafe { (*slot.value.get()).assume_init_drop() };
                if slot.next_generation() {
                    self.free.push(slot);
                }
            } else {
                index += 1;
            }
        }
    }
}

/// A live handle's value, held for the length of a driver call: while any `Live` of a handle
/// exists, [`LiveHandles::destroy`] of that handle waits. Never hold one across a destroy of
/// the same handle on the same thread (that destroy would wait for itself).
pub struct Live<'a, V> {
    slot: &'a Slot<V>,
}

impl<V> Deref for Live<'_, V> {
    type Target = V;

    #[inline]
    fn deref(&self) -> &V {
        // SAFETY: this hold is counted in the slot's state (the check's Acquire `fetch_add`
        // found the handle live, which synchronises with the publication that wrote the value),
        // and nothing moves or drops the value while the count is above zero.
        unsafe { (*self.slot.value.get()).assume_init_ref() }
    }
}

impl<V> Drop for Live<'_, V> {
    #[inline]
    fn drop(&mut self) {
        // Release: every read through this hold happens before the value is taken.
        self.slot.state.fetch_sub(1, Ordering::Release);
    }
}

impl<V: fmt::Debug> fmt::Debug for Live<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Live").field(&**self).finish()
    }
}

impl<V: Send + Sync + 'static> fmt::Debug for LiveHandles<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveHandles")
            .field("backend", &self.backend)
            .field("what", &self.what)
            .field("live", &self.len())
            .finish()
    }
}

/// Where a slot goes if the code between taking it and settling it unwinds.
enum Unwind {
    /// Back to the free list: reserved, no value written yet.
    Free,
    /// To the orphans: not live, value still there (a destroy whose driver call panicked).
    Orphan,
}

/// A slot taken out of the registry's lists, put back by [`Unwind`] if a panic passes.
struct Taken<'a, V: Send + Sync + 'static> {
    registry: &'a LiveHandles<V>,
    slot: &'static Slot<V>,
    unwind: Unwind,
}

impl<V: Send + Sync + 'static> Taken<'_, V> {
    /// The slot, no longer to be put back.
    fn settle(self) -> &'static Slot<V> {
        let slot = self.slot;
        mem::forget(self);
        slot
    }
}

impl<V: Send + Sync + 'static> Drop for Taken<'_, V> {
    fn drop(&mut self) {
        let mut slots = self.registry.slots.lock();
        match self.unwind {
            Unwind::Free => slots.free.push(self.slot),
            Unwind::Orphan => slots.orphans.push(self.slot),
        }
    }
}

impl<V: Send + Sync + 'static> LiveHandles<V> {
    /// An empty registry of `backend`'s handles of kind `what` (`"stream"`), as errors name
    /// them.
    pub fn new(backend: &'static str, what: &'static str) -> Self {
        Self {
            backend,
            what,
            number: next_number(&REGISTRY_NUMBERS, "registry"),
            slots: Mutex::new(Slots {
                all: Vec::new(),
                free: Vec::new(),
                orphans: Vec::new(),
            }),
        }
    }

    /// A slot for a new handle: a free one (after sweeping the orphans no call holds any
    /// more), a dropped registry's spare, or a new one.
    fn reserve(&self) -> Taken<'_, V> {
        let mut slots = self.slots.lock();
        slots.sweep();
        let slot = match slots.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = take_spare::<V>().unwrap_or_else(Slot::leak);
                slots.all.push(slot);
                slot
            }
        };
        Taken {
            registry: self,
            slot,
            unwind: Unwind::Free,
        }
    }

    /// The key that `slot`'s next handle will have.
    fn key(&self, slot: &'static Slot<V>) -> HandleKey<V> {
        HandleKey {
            slot,
            // Relaxed: the generation changes only while the slot is out of every list, and the
            // lists' lock ordered that change before this thread took it.
            generation: generation(slot.state.load(Ordering::Relaxed)),
            registry: self.number,
        }
    }

    /// Writes `value` and `device` into the reserved slot and makes it live.
    fn publish(&self, reserved: Taken<'_, V>, device: DeviceId, value: V) {
        let slot = reserved.settle();
        // SAFETY: a reserved slot (from the free list, a spare or new) holds no value and is not
        // live, so no `Live` reads it and no other thread writes it.
        unsafe { (*slot.value.get()).write(value) };
        slot.device.store(device.0, Ordering::Relaxed);
        // Release: the value and the device are written before a check can find the handle live.
        slot.state.fetch_or(LIVE, Ordering::Release);
    }

    /// Records a handle the driver just created (or adopted) on `device` and returns its key.
    pub fn insert(&self, device: DeviceId, value: V) -> HandleKey<V> {
        let reserved = self.reserve();
        let key = self.key(reserved.slot);
        self.publish(reserved, device, value);
        key
    }

    /// Records a handle the driver just created (or adopted) on `device`: `make` builds it
    /// around its [`HandleKey`], and a copy is returned for the caller.
    pub fn register(&self, device: DeviceId, make: impl FnOnce(HandleKey<V>) -> V) -> V
    where
        V: Clone,
    {
        let reserved = self.reserve();
        let value = make(self.key(reserved.slot));
        let copy = value.clone();
        self.publish(reserved, device, value);
        copy
    }

    /// The live handle `key`, held until the returned [`Live`] drops, or
    /// [`Error::StaleHandle`].
    #[inline]
    pub fn get(&self, key: HandleKey<V>) -> Result<Live<'_, V>> {
        self.get_as(key, self.what)
    }

    /// As [`LiveHandles::get`], the error naming the handle as `what`: a kernel's check is its
    /// module's, and says "kernel".
    #[inline]
    pub fn get_as(&self, key: HandleKey<V>, what: &'static str) -> Result<Live<'_, V>> {
        if key.registry == self.number {
            // Acquire: pairs with the publication's Release (the value is written).
            let before = key.slot.state.fetch_add(1, Ordering::Acquire);
            if before & !IN_FLIGHT == key.live_state() && before & IN_FLIGHT < HOLD_LIMIT {
                return Ok(Live { slot: key.slot });
            }
            key.slot.state.fetch_sub(1, Ordering::Relaxed);
            if before & !IN_FLIGHT == key.live_state() {
                too_many_holds();
            }
        }
        Err(self.stale(key, what))
    }

    /// Whether `key`'s handle is live now.
    pub fn contains(&self, key: HandleKey<V>) -> bool {
        key.registry == self.number
            && key.slot.state.load(Ordering::Relaxed) & !IN_FLIGHT == key.live_state()
    }

    /// Makes `key`'s handle not live (new checks refuse it from here on) and waits until no
    /// call holds it, calling `relax` between looks; [`Error::StaleHandle`] if it is not live.
    /// The caller then owns the slot's value: it settles it (frees it, or makes it live again),
    /// or the returned guard orphans it if a panic passes.
    fn retire(&self, key: HandleKey<V>, mut relax: impl FnMut()) -> Result<Taken<'_, V>> {
        let stale = || self.stale(key, self.what);
        if key.registry != self.number {
            return Err(stale());
        }
        let slot = key.slot;
        let mut state = slot.state.load(Ordering::Relaxed);
        loop {
            if state & !IN_FLIGHT != key.live_state() {
                return Err(stale());
            }
            // Relaxed: see the module's orderings; what matters is this change's place among
            // the checks' `fetch_add`s, and `unheld`'s Acquire below.
            match slot.state.compare_exchange_weak(
                state,
                state & !LIVE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        while !slot.unheld() {
            relax();
        }
        Ok(Taken {
            registry: self,
            slot,
            unwind: Unwind::Orphan,
        })
    }

    /// Frees a settled slot whose value is gone: generation moved on, back on the free list.
    fn free(&self, slot: &'static Slot<V>) {
        if slot.next_generation() {
            self.slots.lock().free.push(slot);
        }
    }

    /// Destroys the live handle `key`: makes it stale (new calls with it are
    /// [`Error::StaleHandle`] from here on), waits for the calls in flight on it, calling
    /// `relax` between looks (a thread yield where there is one), then runs `destroy` (the
    /// driver's call). If that fails, the handle is live again, under the same key.
    pub fn destroy(
        &self,
        key: HandleKey<V>,
        relax: impl FnMut(),
        destroy: impl FnOnce(&V) -> Result<()>,
    ) -> Result<()> {
        let retired = self.retire(key, relax)?;
        let slot = retired.slot;
        // SAFETY: retired: the value is initialised, no call holds it and none can start, and
        // only this thread touches it until it settles the slot.
        let value = unsafe { (*slot.value.get()).assume_init_ref() };
        match destroy(value) {
            Ok(()) => {
                // Settled first: should the value's drop panic, the slot is lost, not dropped
                // twice.
                retired.settle();
                // SAFETY: as above; the value is not used again (the slot is freed next).
                unsafe { (*slot.value.get()).assume_init_drop() };
                self.free(slot);
                Ok(())
            }
            Err(error) => {
                retired.settle();
                // Release: as a publication (the value was only read, but a check that finds it
                // live again must see it as it is).
                slot.state.fetch_or(LIVE, Ordering::Release);
                Err(error)
            }
        }
    }

    /// Takes the live handle `key` out of the registry and returns it with its device once no
    /// call holds it any more (`relax` runs between looks); [`Error::StaleHandle`] if it is
    /// not live.
    pub fn remove(&self, key: HandleKey<V>, relax: impl FnMut()) -> Result<(DeviceId, V)> {
        let retired = self.retire(key, relax)?;
        let slot = retired.slot;
        let device = DeviceId(slot.device.load(Ordering::Relaxed));
        // SAFETY: retired: the value is initialised, no call holds it and none can start, and
        // only this thread touches it; it is moved out once, and the slot freed without it.
        let value = unsafe { (*slot.value.get()).assume_init_read() };
        self.free(retired.settle());
        Ok((device, value))
    }

    /// Forgets every handle of `device` (after a reset destroyed them with the device's
    /// state): each is stale from here on. Calls in flight keep their [`Live`] until they
    /// return; a forgotten handle's value is dropped, and its slot reused, once none holds it.
    /// Returns how many.
    pub fn forget_device(&self, device: DeviceId) -> usize {
        let mut slots = self.slots.lock();
        let mut forgotten = 0;
        for index in 0..slots.all.len() {
            let slot = slots.all[index];
            // Acquire: if the handle is live, its device was written before.
            let mut state = slot.state.load(Ordering::Acquire);
            while state & LIVE != 0 && slot.device.load(Ordering::Relaxed) == device.0 {
                // Relaxed: as a destroy's (the sweep's `unheld` orders the value's drop).
                match slot.state.compare_exchange_weak(
                    state,
                    state & !LIVE,
                    Ordering::Relaxed,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        slots.orphans.push(slot);
                        forgotten += 1;
                        break;
                    }
                    Err(now) => state = now,
                }
            }
        }
        slots.sweep();
        forgotten
    }

    /// How many handles are live.
    pub fn len(&self) -> usize {
        let slots = self.slots.lock();
        slots
            .all
            .iter()
            .filter(|slot| slot.state.load(Ordering::Relaxed) & LIVE != 0)
            .count()
    }

    /// Whether no handle is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn stale(&self, key: HandleKey<V>, what: &'static str) -> Error {
        Error::StaleHandle {
            backend: self.backend,
            what,
            id: key.id(),
        }
    }
}

/// A check that found more holds than [`HOLD_LIMIT`] (leaked ones): its increment is taken back.
#[cold]
#[inline(never)]
fn too_many_holds() -> ! {
    panic!("live handles: over 2^30 holds of one handle (leaked with mem::forget?)")
}

impl<V: Send + Sync + 'static> Drop for LiveHandles<V> {
    /// Drops every value still here and leaves the slots to later registries of the same value
    /// type. No [`Live`] of this registry exists (each borrows it), and no key of it reaches its
    /// slots through another registry (the number check comes first).
    fn drop(&mut self) {
        let slots = self.slots.get_mut();
        let mut spare = mem::take(&mut slots.free);
        let orphans = mem::take(&mut slots.orphans);
        let live = slots
            .all
            .iter()
            .copied()
            .filter(|slot| slot.state.load(Ordering::Acquire) & LIVE != 0);
        for slot in orphans.iter().copied().chain(live) {
            slot.state.fetch_and(!LIVE, Ordering::Relaxed);
            // A hold leaked with `mem::forget` counts forever: such a slot is left, value and
            // all, rather than reused by a registry whose destroys would wait for it.
            if !slot.unheld() {
                continue;
            }
            // SAFETY: a live slot's or an orphan's value is initialised; no call holds it (none
            // can exist: each `Live` borrows the registry, which is being dropped; `unheld`'s
            // Acquire orders those that were before this), and this thread has the registry to
            // itself.
            unsafe { (*slot.value.get()).assume_init_drop() };
            if slot.next_generation() {
                spare.push(slot);
            }
        }
        give_spare(spare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_whose_generation_is_spent_is_retired_and_its_last_key_stays_stale() {
        let streams = LiveHandles::new("test", "stream");
        let key = streams.insert(DeviceId(0), 1u8);
        // Skip to the last generation, as four billion destroys of this slot would.
        let state = key.slot.state.load(Ordering::Relaxed);
        let last = (state & (LIVE | IN_FLIGHT)) | ((u32::MAX as u64) << 32);
        key.slot.state.store(last, Ordering::Relaxed);
        let last_key = HandleKey {
            generation: u32::MAX,
            ..key
        };
        assert!(streams.get(key).is_err());
        assert_eq!(*streams.get(last_key).unwrap(), 1);
        streams.destroy(last_key, || {}, |_| Ok(())).unwrap();
        let next = streams.insert(DeviceId(0), 2u8);
        assert!(
            !ptr::eq(next.slot, last_key.slot),
            "the spent slot is reused"
        );
        assert!(streams.get(last_key).is_err());
        assert_eq!(*streams.get(next).unwrap(), 2);
        assert_eq!(streams.len(), 1);
    }

    #[test]
    fn a_dropped_registrys_slots_serve_the_next_one_and_its_keys_stay_stale() {
        #[derive(Debug)]
        struct Only(u32);
        let first = LiveHandles::new("test", "event");
        let keys: Vec<_> = (0..3).map(|n| first.insert(DeviceId(0), Only(n))).collect();
        first.destroy(keys[2], || {}, |_| Ok(())).unwrap();
        let slots: Vec<_> = keys.iter().map(|key| key.slot as *const _).collect();
        drop(first);
        let second = LiveHandles::new("test", "event");
        let again: Vec<_> = (0..3)
            .map(|n| second.insert(DeviceId(0), Only(n)))
            .collect();
        for key in &again {
            assert!(slots.contains(&(key.slot as *const _)), "a new slot");
        }
        for &key in &keys {
            assert!(second.get(key).is_err() && !second.contains(key));
        }
        assert_eq!(second.len(), 3);
        assert_eq!(second.get(again[1]).unwrap().0, 1);
    }
}
