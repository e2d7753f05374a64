//! A map from short byte strings (words, parts, parameter texts) to small values: pass 1's
//! caches (`pass1.rs`). A lookup hashes its key once (a miss inserts under the same hash)
//! and compares keys inline, not through a `memcmp` call: a `perf` profile of a 1M-tool
//! build put 8% of all its samples in `memcmp` called from these lookups.

use hashbrown::HashTable;

use crate::table::hash_key;

/// Byte strings to values, each key stored once with its hash.
#[derive(Debug, Default)]
pub(super) struct ShortKeys<V> {
    table: HashTable<(u64, Box<[u8]>, V)>,
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
        self.table
            .find(hash, |(h, k, _)| *h == hash && same_bytes(k, key))
            .map(|&(_, _, v)| v)
    }

    /// Add `key` (absent: a `get` just missed it) with its hash.
    pub(super) fn insert(&mut self, hash: u64, key: &[u8], value: V) {
        debug_assert!(self.get(hash, key).is_none());
        self.table
            .insert_unique(hash, (hash, key.into(), value), |&(h, _, _)| h);
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
