//! The driver streams behind the planner's stream ids, in a table of their own under its own
//! lock: the state creates, adopts and destroys them ([`StreamWriter`]); the allocator's driver
//! only reads them.
//!
//! The lock is a leaf: nothing else is locked and no driver call is made while it is held, so
//! it is taken under the state's lock or a device's memory lock in either order. A spin
//! reader-writer lock: writes (a stream created, adopted, destroyed or forgotten) are rare and
//! short, and a read is one atomic add and one subtract. The state, the only writer, reads its
//! own copy instead (it looks a stream up at every step of a plan), with no atomic at all.

use alloc::sync::Arc;
use alloc::vec::Vec;

use gpu_core::error::{Error, Result};
use gpu_core::id::{DeviceId, StreamId};

/// A stream the runtime knows: its device and, once created (or adopted), its driver handle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamSlot<S> {
    pub(crate) device: DeviceId,
    pub(crate) handle: Option<S>,
    /// Adopted from another program ([`super::Runtime::alloc_on_foreign_stream`]): used, never
    /// destroyed.
    pub(crate) adopted: bool,
}

/// The driver streams of the planner's stream ids (the slab index is the id).
pub(crate) struct StreamTable<S> {
    slots: spin::RwLock<Vec<StreamSlot<S>>>,
}

impl<S: Copy> StreamTable<S> {
    pub(crate) fn new() -> Self {
        Self {
            slots: spin::RwLock::new(Vec::new()),
        }
    }

    /// The device and driver handle of `stream`, which must exist by now.
    #[inline]
    pub(crate) fn get(&self, stream: StreamId) -> Result<(DeviceId, S)> {
        get_in(&self.slots.read(), stream)
    }

    /// A live stream of the runtime's own on `device`, if there is one.
    pub(crate) fn any_on(&self, device: DeviceId) -> Option<S> {
        self.slots
            .read()
            .iter()
            .find(|slot| slot.device == device && !slot.adopted)
            .and_then(|slot| slot.handle)
    }

    /// The ids of `device`'s streams, adopted ones included.
    pub(crate) fn of_device(&self, device: DeviceId) -> Vec<StreamId> {
        let slots = self.slots.read();
        (0..slots.len())
            .filter(|&index| slots[index].device == device)
            .map(|index| StreamId(index as u32))
            .collect()
    }
}

/// The table as its only writer, the runtime's state, holds it: each write goes to the shared
/// table and to the writer's copy, from which the writer reads without the table's lock.
pub(crate) struct StreamWriter<S> {
    shared: Arc<StreamTable<S>>,
    copy: Vec<StreamSlot<S>>,
}

impl<S: Copy> StreamWriter<S> {
    /// The writer of `shared`, which must be empty (so the copy starts equal).
    pub(crate) fn new(shared: Arc<StreamTable<S>>) -> Self {
        let copy = shared.slots.read().clone();
        Self { shared, copy }
    }

    /// The shared table, for readers under other locks (the allocator's driver).
    pub(crate) fn shared(&self) -> &StreamTable<S> {
        &self.shared
    }

    /// The device and driver handle of `stream`, which must exist by now.
    #[inline]
    pub(crate) fn get(&self, stream: StreamId) -> Result<(DeviceId, S)> {
        get_in(&self.copy, stream)
    }

    /// The driver handle of `stream` if it has one.
    #[inline]
    pub(crate) fn handle(&self, stream: StreamId) -> Option<S> {
        self.copy.get(stream.index())?.handle
    }

    /// Sets the slot of `stream`, making room for it (slots between: of `slot.device`, no
    /// handle yet).
    pub(crate) fn set(&mut self, stream: StreamId, slot: StreamSlot<S>) {
        self.write(|slots| {
            let index = stream.index();
            if slots.len() <= index {
                slots.resize(
                    index + 1,
                    StreamSlot {
                        device: slot.device,
                        handle: None,
                        adopted: false,
                    },
                );
            }
            slots[index] = slot;
        });
    }

    /// Takes the handle of the runtime's own stream at `index` out of the table (to destroy
    /// it), with its device; adopted streams and streams without a handle give `None`.
    pub(crate) fn take_own(&mut self, index: usize) -> Option<(DeviceId, S)> {
        let slot = self.copy.get(index).filter(|slot| !slot.adopted)?;
        let taken = (slot.device, slot.handle?);
        self.write(|slots| slots[index].handle = None);
        Some(taken)
    }

    /// Puts back a handle [`StreamWriter::take_own`] took (its destroy failed).
    pub(crate) fn put_back(&mut self, index: usize, handle: S) {
        self.write(|slots| {
            if let Some(slot) = slots.get_mut(index) {
                slot.handle = Some(handle);
            }
        });
    }

    /// Forgets the handles of `device`'s streams, which a reset destroyed (adopted ones too:
    /// the reset destroyed the other program's streams of the device as well): the runtime's
    /// own are made afresh at their next use; an adopted one is adopted again under a new id.
    pub(crate) fn forget_device(&mut self, device: DeviceId) {
        self.write(|slots| {
            for slot in slots.iter_mut().filter(|slot| slot.device == device) {
                slot.handle = None;
            }
        });
    }

    /// Stream ids named so far (some may have no handle).
    pub(crate) fn len(&self) -> usize {
        self.copy.len()
    }

    /// The runtime's own streams that still have a handle.
    pub(crate) fn own_live(&self) -> usize {
        self.copy
            .iter()
            .filter(|slot| slot.handle.is_some() && !slot.adopted)
            .count()
    }

    /// Makes one change to the shared table, under its lock, and the same to the copy.
    fn write(&mut self, change: impl Fn(&mut Vec<StreamSlot<S>>)) {
        change(&mut self.shared.slots.write());
        change(&mut self.copy);
    }
}

/// The device and driver handle of `stream` in `slots`.
#[inline]
fn get_in<S: Copy>(slots: &[StreamSlot<S>], stream: StreamId) -> Result<(DeviceId, S)> {
    slots
        .get(stream.index())
        .and_then(|slot| Some((slot.device, slot.handle?)))
        .ok_or_else(|| Error::UnknownStream { stream })
}
