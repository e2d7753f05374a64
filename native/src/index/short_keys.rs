//! A map from short byte strings (words, parts, parameter texts) to small values: pass 1's
//! caches (`pass1.rs`) and the walk's numbering of short texts (`stage.rs`). A lookup hashes
//! its key once (a miss inserts under the same hash) and compares keys inline, not through
//! a `memcmp` call: a `perf` profile of a 1M-tool build put 8% of all its samples in
//! `memcmp` called from these lookups. An entry is 16 bytes for a `u32` value (32 bits of
//! the hash, where its key is, the value) and the keys are one after the other in one
//! arena: the lookups mostly hit a few thousand keys while the walk streams through the
//! catalog's objects, and a compact table stays in cache where one heap block a key did not.

use hashbrown::HashTable;

use crate::table::hash_key;

/// Byte strings to values, each key stored once, in [`ShortKeys::keys`].
#[derive(Debug, Default)]
pub(super) struct ShortKeys<V> {
    table: HashTable<Entry<V>>,
    /// Every key, one after the other.
    keys: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Entry<V> {
    /// The low 32 bits of the key's hash (compared before the key).
    tag: u32,
    /// The key: `keys[at..at + len]`.
    at: u32,
    len: u32,
    value: V,
}

impl<V: Copy> ShortKeys<V> {
    /// The hash [`ShortKeys::get`] and [`ShortKeys::insert`] take.
    #[inline]
    pub(super) fn hash(key: &[u8]) -> u64 {
        hash_key(key)
    }

    /// The value of `key`, whose hash is `hash`.
    #[inline]
    pub(super) fn get(&self, hash: u64, key: &[u8]) -> Option<V> {
        let keys = &self.keys;
        self.table
            .find(hash, |e| {
                e.tag == hash as u32
                    && same_bytes(&keys[e.at as usize..(e.at + e.len) as usize], key)
            })
            .map(|e| e.value)
    }

    /// Add `key` (absent: a `get` just missed it) with its hash; false, and nothing added,
    /// once the keys fill 4 GiB (the map is a cache: a key not in it is worked out again).
    pub(super) fn insert(&mut self, hash: u64, key: &[u8], value: V) -> bool {
        debug_assert!(self.get(hash, key).is_none());
        let Some(end) = self
            .keys
            .len()
            .checked_add(key.len())
            .filter(|&end| end <= u32::MAX as usize)
        else {
            return false;
        };
        let at = self.keys.len() as u32;
        self.keys.extend_from_slice(key);
        let entry = Entry {
            tag: hash as u32,
            at,
            len: (end - at as usize) as u32,
            value,
        };
        let keys = &self.keys;
        self.table.insert_unique(hash, entry, |e| {
            hash_key(&keys[e.at as usize..(e.at + e.len) as usize])
        });
        true
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }
}

/// `a == b`, compared a word at a time inline (the keys are mostly shorter than 32 bytes,
/// where a call to `memcmp` costs more than the comparison).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
    if n >= 8 {
        let mut at = 0;
        while at + 8 < n {
            if word(a, at) != word(b, at) {
                return false;
            }
            at += 8;
        }
        // The last 8 bytes (overlapping the previous word when `n` is not a multiple of 8).
        return word(a, n - 8) == word(b, n - 8);
    }
    if n >= 4 {
        let half = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap());
        return half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4);
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_is_slice_equality_at_every_length() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..base.len() {
            let a = &base[..n];
            assert!(same_bytes(a, a), "{n}");
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(a, &b), "length {n}, differs at {at}");
            }
            if n > 0 {
                assert!(!same_bytes(a, &base[..n - 1]), "{n} against {}", n - 1);
            }
        }
    }

    #[test]
    fn get_finds_what_insert_put_and_nothing_else() {
        let mut map = ShortKeys::default();
        let keys: Vec<String> = (0..3000)
            .map(|i| format!("w{}", i * 7919 % 10007))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            let h = ShortKeys::<u32>::hash(k.as_bytes());
            assert_eq!(map.get(h, k.as_bytes()), None);
            map.insert(h, k.as_bytes(), i as u32);
        }
        assert_eq!(map.len(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                map.get(ShortKeys::<u32>::hash(k.as_bytes()), k.as_bytes()),
                Some(i as u32)
            );
        }
        let absent = b"w-absent";
        assert_eq!(map.get(ShortKeys::<u32>::hash(absent), absent), None);
    }
}
