//! What the checker remembers of each object: its device and life (alive, a default stream,
//! or destroyed at a position), by id, and the ring of recent destroys of each kind.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use hashbrown::HashMap;

use crate::id::DeviceId;

#[derive(Clone, Copy, Debug)]
pub(super) enum Life {
    Alive {
        created_at: usize,
    },
    /// A default stream: alive from its declaration on, never leaked, never destroyed.
    Default {
        declared_at: usize,
    },
    Destroyed {
        destroyed_at: usize,
    },
}

#[derive(Clone, Copy, Debug)]
pub(super) struct ObjectState {
    pub(super) device: DeviceId,
    pub(super) life: Life,
    /// Events only: recorded since the last creation.
    pub(super) recorded: bool,
}

/// Object states by id: in a vector for ids below [`States::DENSE`] (the ids a text reader
/// hands out, reused as names are released, stay there: a lookup is an index), in a map above.
#[derive(Debug, Default)]
pub(super) struct States {
    /// Grows to the highest id below `DENSE` seen (at most 2 MiB).
    dense: Vec<Option<ObjectState>>,
    sparse: HashMap<u32, ObjectState>,
    dense_len: usize,
}

impl States {
    const DENSE: u32 = 1 << 16;

    pub(super) fn get(&self, id: u32) -> Option<&ObjectState> {
        if id < Self::DENSE {
            self.dense.get(id as usize)?.as_ref()
        } else {
            self.sparse.get(&id)
        }
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut ObjectState> {
        if id < Self::DENSE {
            self.dense.get_mut(id as usize)?.as_mut()
        } else {
            self.sparse.get_mut(&id)
        }
    }

    pub(super) fn insert(&mut self, id: u32, state: ObjectState) {
        if id < Self::DENSE {
            let index = id as usize;
            if self.dense.len() <= index {
                self.dense.resize(index + 1, None);
            }
            if self.dense[index].replace(state).is_none() {
                self.dense_len += 1;
            }
        } else {
            self.sparse.insert(id, state);
        }
    }

    pub(super) fn remove(&mut self, id: u32) {
        if id < Self::DENSE {
            if let Some(slot) = self.dense.get_mut(id as usize)
                && slot.take().is_some()
            {
                self.dense_len -= 1;
            }
        } else {
            self.sparse.remove(&id);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.dense_len + self.sparse.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &ObjectState)> {
        let dense = (0..)
            .zip(&self.dense)
            .filter_map(|(id, state)| Some((id, state.as_ref()?)));
        dense.chain(self.sparse.iter().map(|(&id, state)| (id, state)))
    }
}

/// The objects of one kind the checker tracks: those alive, and the most recently destroyed.
#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) states: States,
    /// Destroys in order, oldest first: (id, position). An entry whose object was created
    /// (and maybe destroyed) again since is stale and skipped when it leaves the ring.
    pub(super) tombstones: VecDeque<(u32, usize)>,
    /// Whether a destroyed object was ever forgotten (a use of an unknown id is then not
    /// necessarily of one never created).
    pub(super) forgot_any: bool,
}
