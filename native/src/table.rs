//! A compact hash set of `u32` ids whose keys live elsewhere (an arena, the documents).
//!
//! `FxHashMap<Box<str>, u32>` costs a heap allocation and 24 bytes of entry per key; at a
//! million tools and as many terms that is over 100 MB. Here the table holds only the ids
//! (4 bytes a bucket, open addressing, linear probing, load factor at most 3/4); the caller passes the key of an id to every call.

use std::hash::{BuildHasher, Hasher};

use rustc_hash::FxBuildHasher;

const EMPTY: u32 = u32::MAX;

/// The hash of a key, the same for every table.
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h = FxBuildHasher.build_hasher();
    h.write(key);
    h.write_u8(0xff);
    h.finish()
}

#[derive(Debug, Default)]
pub struct IdTable {
    buckets: Vec<u32>,
    len: usize,
}

impl IdTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * 4
    }

    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// The id whose key is `key`.
    pub fn get<'a>(&self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let mut i = hash_key(key) as usize & self.mask();
        loop {
            let id = self.buckets[i];
            if id == EMPTY {
                return None;
            }
            if key_of(id) == key {
                return Some(id);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Make room for `additional` more ids without growing on the way.
    pub fn reserve<'a>(&mut self, additional: usize, key_of: impl Fn(u32) -> &'a [u8]) {
        let needed = (self.len + additional) * 4 / 3 + 1;
        if needed > self.buckets.len() {
            self.rehash(needed.next_power_of_two().max(16), &key_of);
        }
    }

    /// Insert `id` (its key must not be present already).
    pub fn insert<'a>(&mut self, id: u32, key_of: impl Fn(u32) -> &'a [u8]) {
        debug_assert_ne!(id, EMPTY);
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            let size = (self.buckets.len() * 2).max(16);
            self.rehash(size, &key_of);
        }
        let mut i = hash_key(key_of(id)) as usize & self.mask();
        while self.buckets[i] != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.buckets[i] = id;
        self.len += 1;
    }

    /// Where `key` is: `Ok(id)` if present, else `Err(bucket)`, the bucket an insert of it
    /// would take. Make room first (`reserve`) when the bucket will be used.
    pub fn find<'a>(&self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Result<u32, usize> {
        if self.buckets.is_empty() {
            return Err(usize::MAX);
        }
        let mut i = hash_key(key) as usize & self.mask();
        loop {
            let id = self.buckets[i];
            if id == EMPTY {
                return Err(i);
            }
            if key_of(id) == key {
                return Ok(id);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Put `id` into `bucket`, as returned by `find` with no change to the table since.
    pub fn put_at(&mut self, bucket: usize, id: u32) {
        debug_assert_eq!(self.buckets[bucket], EMPTY);
        self.buckets[bucket] = id;
        self.len += 1;
    }

    /// Remove the id whose key is `key`; returns it.
    pub fn remove<'a>(&mut self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = hash_key(key) as usize & mask;
        loop {
            let id = self.buckets[i];
            if id == EMPTY {
                return None;
            }
            if key_of(id) == key {
                break;
            }
            i = (i + 1) & mask;
        }
        let removed = self.buckets[i];
        // Backward-shift deletion: move later entries of the run into the hole when their
        // home bucket allows it, so lookups never need tombstones.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let id = self.buckets[j];
            if id == EMPTY {
                break;
            }
            let home = hash_key(key_of(id)) as usize & mask;
            // `id` may move to `hole` unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.buckets[hole] = id;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
        Some(removed)
    }

    fn rehash<'a>(&mut self, size: usize, key_of: &impl Fn(u32) -> &'a [u8]) {
        let old = std::mem::replace(&mut self.buckets, vec![EMPTY; size]);
        let mask = size - 1;
        for id in old.into_iter().filter(|&id| id != EMPTY) {
            let mut i = hash_key(key_of(id)) as usize & mask;
            while self.buckets[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.buckets[i] = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_match_a_hash_map() {
        let keys: Vec<String> = (0..5000)
            .map(|i| format!("key{}", i * 7919 % 10007))
            .collect();
        let key_of = |id: u32| keys[id as usize].as_bytes();
        let mut table = IdTable::default();
        let mut live = std::collections::HashSet::new();
        for id in 0..keys.len() as u32 {
            table.insert(id, key_of);
            live.insert(id);
        }
        for id in (0..keys.len() as u32).step_by(3) {
            assert_eq!(table.remove(key_of(id), key_of), Some(id));
            assert_eq!(table.remove(key_of(id), key_of), None);
            live.remove(&id);
        }
        assert_eq!(table.len(), live.len());
        for id in 0..keys.len() as u32 {
            let expected = live.contains(&id).then_some(id);
            assert_eq!(table.get(key_of(id), key_of), expected, "id {id}");
        }
        assert_eq!(table.get(b"absent", key_of), None);
        assert_eq!(table.find(key_of(1), key_of), Ok(1));
        let bucket = table.find(key_of(0), key_of).unwrap_err();
        table.put_at(bucket, 0);
        assert_eq!(table.get(key_of(0), key_of), Some(0));
        table.remove(key_of(0), key_of);
        for id in (0..keys.len() as u32).step_by(3) {
            table.insert(id, key_of);
        }
        for id in 0..keys.len() as u32 {
            assert_eq!(table.get(key_of(id), key_of), Some(id));
        }
    }
}
