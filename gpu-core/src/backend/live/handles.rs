//! A backend's registry of live handles of one kind: each handle's id, device and value, held
//! by a call for as long as its driver call runs, and destroyed only once no call holds it.

use alloc::sync::Arc;
use core::fmt;
use core::ops::Deref;

use hashbrown::HashMap;
use spin::RwLock;

use crate::error::{Error, Result};
use crate::id::DeviceId;

use crate::id::HandleId;

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
