//! A compact hash set of `u32` ids whose keys live elsewhere (an arena, the documents).
//!
//! `FxHashMap<Box<str>, u32>` costs a heap allocation and 24 bytes of entry per key; at a
//! million tools and as many terms that is over 100 MB. Here the table holds only the ids
//! (8 bytes a bucket: the id and 32 bits of its key's hash; open addressing, linear
//! probing, load factor at most 3/4); the caller passes the key of an id to every call.

use std::hash::{BuildHasher, Hasher};

use rustc_hash::FxBuildHasher;

/// An empty bucket (no entry packs to it: an id is never `u32::MAX`).
const EMPTY: u64 = u64::MAX;

/// The hash of a key, the same for every table.
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h = FxBuildHasher.build_hasher();
    h.write(key);
    h.write_u8(0xff);
    h.finish()
}

/// A bucket: the id in the low half, the low 32 bits of its key's hash in the high half.
/// A probe compares the hashes first and reads a key only where they agree (about once a
/// lookup), and a rehash or a deletion finds an entry's home bucket without reading its key.
#[inline]
fn pack(id: u32, hash: u32) -> u64 {
    (u64::from(hash) << 32) | u64::from(id)
}

#[inline]
fn id_of(bucket: u64) -> u32 {
    bucket as u32
}

#[inline]
fn hash_of(bucket: u64) -> u32 {
    (bucket >> 32) as u32
}

/// Where [`IdTable::find`] found a key absent: the bucket an insert of it takes, and its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacant {
    bucket: usize,
    hash: u32,
}

#[derive(Debug, Default)]
pub struct IdTable {
    buckets: Vec<u64>,
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
        self.buckets.capacity() * std::mem::size_of::<u64>()
    }

    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// Start fetching the bucket where a probe for `key` begins (a lookup of it soon).
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        if let Some(bucket) = self
            .buckets
            .get(hash_key(key) as u32 as usize & self.mask())
        {
            crate::prefetch::prefetch(bucket);
        }
    }

    /// The id whose key is `key`.
    pub fn get<'a>(&self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        self.find(key, key_of).ok()
    }

    /// Make room for `additional` more ids without growing on the way.
    pub fn reserve(&mut self, additional: usize) {
        let needed = (self.len + additional) * 4 / 3 + 1;
        if needed > self.buckets.len() {
            self.rehash(needed.next_power_of_two().max(16));
        }
    }

    /// Insert `id` (its key must not be present already).
    pub fn insert<'a>(&mut self, id: u32, key_of: impl Fn(u32) -> &'a [u8]) {
        debug_assert_ne!(id, u32::MAX);
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            let size = (self.buckets.len() * 2).max(16);
            self.rehash(size);
        }
        let hash = hash_key(key_of(id)) as u32;
        let mut i = hash as usize & self.mask();
        while self.buckets[i] != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.buckets[i] = pack(id, hash);
        self.len += 1;
    }

    /// Where `key` is: `Ok(id)` if present, else the [`Vacant`] bucket an insert of it would
    /// take. Make room first (`reserve`) when the bucket will be used.
    pub fn find<'a>(&self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Result<u32, Vacant> {
        self.probe(key, key_of).map(|i| id_of(self.buckets[i]))
    }

    /// The bucket holding `key`, or the vacant one where it would go.
    fn probe<'a>(&self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Result<usize, Vacant> {
        let hash = hash_key(key) as u32;
        if self.buckets.is_empty() {
            return Err(Vacant {
                bucket: usize::MAX,
                hash,
            });
        }
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let bucket = self.buckets[i];
            if bucket == EMPTY {
                return Err(Vacant { bucket: i, hash });
            }
            if hash_of(bucket) == hash && key_of(id_of(bucket)) == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Put `id` where `find` found its key vacant, with no change to the table since.
    pub fn put_at(&mut self, vacant: Vacant, id: u32) {
        debug_assert_eq!(self.buckets[vacant.bucket], EMPTY);
        debug_assert_ne!(id, u32::MAX);
        self.buckets[vacant.bucket] = pack(id, vacant.hash);
        self.len += 1;
    }

    /// Remove the id whose key is `key`; returns it.
    pub fn remove<'a>(&mut self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        let mut hole = self.probe(key, key_of).ok()?;
        let removed = id_of(self.buckets[hole]);
        let mask = self.mask();
        // Backward-shift deletion: move later entries of the run into the hole when their
        // home bucket allows it, so lookups never need tombstones.
        let mut j = (hole + 1) & mask;
        loop {
            let bucket = self.buckets[j];
            if bucket == EMPTY {
                break;
            }
            let home = hash_of(bucket) as usize & mask;
            // The entry may move to `hole` unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.buckets[hole] = bucket;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
        Some(removed)
    }

    fn rehash(&mut self, size: usize) {
        debug_assert!(size.is_power_of_two() && size <= 1 << 32);
        let old = std::mem::replace(&mut self.buckets, vec![EMPTY; size]);
        let mask = size - 1;
        for bucket in old.into_iter().filter(|&b| b != EMPTY) {
            let mut i = hash_of(bucket) as usize & mask;
            while self.buckets[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.buckets[i] = bucket;
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
        assert!(table.find(key_of(0), key_of).is_ok());
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
