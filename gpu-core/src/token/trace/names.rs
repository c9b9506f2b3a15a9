//! The names of a text trace: each stream or event name mapped to a small id, and ids of
//! released names handed to new ones, so a reader holds as many names as objects tracked.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// Names of one kind of object to small ids. A released name's id is given to the next new
/// name, so a reader that releases the names of objects it no longer tracks keeps as many
/// names as objects tracked.
#[derive(Default)]
pub(in crate::token) struct Names {
    /// Ids, found by the hash of their name.
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// Names by id; a released id's name is empty.
    names: Vec<Box<str>>,
    released: Vec<u32>,
}

impl Names {
    /// The id of `name`, given a fresh one if it has none. Fails, saying what was expected,
    /// for a new name that is not UTF-8 or when 2^32 names are held.
    pub(super) fn id(&mut self, name: &[u8]) -> core::result::Result<u32, &'static str> {
        let hash = self.hasher.hash_one(name);
        let names = &self.names;
        if let Some(&id) = self
            .table
            .find(hash, |&id| same_bytes(names[id as usize].as_bytes(), name))
        {
            return Ok(id);
        }
        let text = core::str::from_utf8(name).map_err(|_| "a name in UTF-8")?;
        let id = match self.released.pop() {
            Some(id) => {
                self.names[id as usize] = text.into();
                id
            }
            None => {
                let id = u32::try_from(self.names.len())
                    .map_err(|_| "fewer than 2^32 names of one kind")?;
                self.names.push(text.into());
                id
            }
        };
        let (names, hasher) = (&self.names, &self.hasher);
        self.table.insert_unique(hash, id, |&id| {
            hasher.hash_one(names[id as usize].as_bytes())
        });
        Ok(id)
    }

    /// Forgets `id`'s name (nothing if it has none).
    pub(in crate::token) fn release(&mut self, id: u32) {
        let Some(name) = self.names.get_mut(id as usize) else {
            return;
        };
        let hash = self.hasher.hash_one(name.as_bytes());
        if let Ok(entry) = self.table.find_entry(hash, |&held| held == id) {
            entry.remove();
            *name = Box::default();
            self.released.push(id);
        }
    }

    /// The name of `id`, if it has one.
    pub(in crate::token) fn name(&self, id: u32) -> Option<&str> {
        self.names
            .get(id as usize)
            .filter(|name| !name.is_empty())
            .map(|name| &**name)
    }

    /// How many names are held.
    pub(in crate::token) fn len(&self) -> usize {
        self.table.len()
    }

    /// The names by id (released ones empty).
    pub(super) fn into_names(self) -> Vec<String> {
        self.names.into_iter().map(String::from).collect()
    }
}

/// Whether `a` and `b` hold the same bytes; names of 8 to 16 bytes (handle values) compare as
/// two overlapping words, without a call.
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if !(8..=16).contains(&n) {
        return a == b;
    }
    let word = |bytes: &[u8], at: usize| {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(word)
    };
    word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
}
