//! A compact hash set of `u32` ids whose keys live elsewhere (an arena, the documents).
//!
//! `FxHashMap<Box<str>, u32>` costs a heap allocation and 24 bytes of entry per key; at a
//! million tools and as many terms that is over 100 MB. Here a bucket holds the id and 32 bits
//! of its key's hash (8 bytes, open addressing, linear probing, load factor at most 3/4); the
//! caller passes the key of an id to the calls that compare keys. The stored hash spares
//! nearly every key comparison of a probe (and the read of a key elsewhere in memory that it
//! costs), and a table grows without reading a single key.

use std::hash::{BuildHasher, Hasher};

use rustc_hash::FxBuildHasher;

const EMPTY: u32 = u32::MAX;

/// The hash of a key, the same for every table.
pub fn hash_key(key: &[u8]) -> u32 {
    let mut h = FxBuildHasher.build_hasher();
    h.write(key);
    h.write_u8(0xff);
    let h = h.finish();
    (h ^ (h >> 32)) as u32
}

/// One bucket: an id (`EMPTY` for none) and its key's hash.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    id: u32,
    hash: u32,
}

const VACANT: Bucket = Bucket { id: EMPTY, hash: 0 };

/// Where an absent key would go: the bucket and the key's hash (see [`IdTable::find`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacant {
    bucket: usize,
    hash: u32,
}

#[derive(Debug, Default)]
pub struct IdTable {
    buckets: Vec<Bucket>,
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
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }

    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// The bucket of `key` (hashed `hash`): `Ok(index)` where it is, `Err(index)` of the empty
    /// bucket ending its run. The table must have buckets.
    #[inline]
    fn probe<'a>(
        &self,
        key: &[u8],
        hash: u32,
        key_of: impl Fn(u32) -> &'a [u8],
    ) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let b = self.buckets[i];
            if b.id == EMPTY {
                return Err(i);
            }
            if b.hash == hash && key_of(b.id) == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The id whose key is `key`.
    pub fn get<'a>(&self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        self.probe(key, hash_key(key), key_of)
            .ok()
            .map(|i| self.buckets[i].id)
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
        debug_assert_ne!(id, EMPTY);
        self.grow_for_one();
        let hash = hash_key(key_of(id));
        let mut i = hash as usize & self.mask();
        while self.buckets[i].id != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.buckets[i] = Bucket { id, hash };
        self.len += 1;
    }

    /// Where `key` is: `Ok(id)` if present, else `Err(vacant)`, where an insert of it would
    /// go ([`IdTable::put_at`]). Makes room for one more id first, so the vacant bucket can be
    /// used as long as the table is not changed in between.
    pub fn find<'a>(
        &mut self,
        key: &[u8],
        key_of: impl Fn(u32) -> &'a [u8],
    ) -> Result<u32, Vacant> {
        self.grow_for_one();
        let hash = hash_key(key);
        match self.probe(key, hash, key_of) {
            Ok(i) => Ok(self.buckets[i].id),
            Err(bucket) => Err(Vacant { bucket, hash }),
        }
    }

    /// Put `id` where `find` found its key absent, with no change to the table since.
    pub fn put_at(&mut self, vacant: Vacant, id: u32) {
        debug_assert_ne!(id, EMPTY);
        debug_assert_eq!(self.buckets[vacant.bucket].id, EMPTY);
        self.buckets[vacant.bucket] = Bucket {
            id,
            hash: vacant.hash,
        };
        self.len += 1;
    }

    /// Remove the id whose key is `key`; returns it.
    pub fn remove<'a>(&mut self, key: &[u8], key_of: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.mask();
        let i = self.probe(key, hash_key(key), key_of).ok()?;
        let removed = self.buckets[i].id;
        // Backward-shift deletion: move later entries of the run into the hole when their
        // home bucket allows it, so lookups never need tombstones.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let b = self.buckets[j];
            if b.id == EMPTY {
                break;
            }
            let home = b.hash as usize & mask;
            // `b` may move to `hole` unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.buckets[hole] = b;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.buckets[hole] = VACANT;
        self.len -= 1;
        Some(removed)
    }

    fn grow_for_one(&mut self) {
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            let size = (self.buckets.len() * 2).max(16);
            self.rehash(size);
        }
    }

    fn rehash(&mut self, size: usize) {
        let old = std::mem::replace(&mut self.buckets, vec![VACANT; size]);
        let mask = size - 1;
        for b in old.into_iter().filter(|b| b.id != EMPTY) {
            let mut i = b.hash as usize & mask;
            while self.buckets[i].id != EMPTY {
                i = (i + 1) & mask;
            }
            self.buckets[i] = b;
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
        let vacant = table.find(key_of(0), key_of).unwrap_err();
        table.put_at(vacant, 0);
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
