//! Every tool's record (name, field lengths, term ids) in one compacting arena.

use crate::project::NUM_FIELDS;

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn get_varint(bytes: &[u8], i: &mut usize) -> u32 {
    let (mut v, mut shift) = (0u32, 0);
    loop {
        let b = bytes[*i];
        *i += 1;
        v |= u32::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// A tool's record, read in place: its name, its field lengths and its distinct term ids
/// (ascending, as differences), each number a LEB128 varint. Searches read only the name (for
/// ties and results); `remove` reads the rest.
#[derive(Clone, Copy, Debug)]
pub(super) struct Doc<'a>(pub(super) &'a [u8]);

impl<'a> Doc<'a> {
    pub(super) fn encode(out: &mut Vec<u8>, name: &str, lens: [u32; NUM_FIELDS], ids: &mut [u32]) {
        ids.sort_unstable();
        put_varint(out, name.len() as u32);
        out.extend_from_slice(name.as_bytes());
        for len in lens {
            put_varint(out, len);
        }
        put_varint(out, ids.len() as u32);
        let mut prev = 0u32;
        for &id in ids.iter() {
            put_varint(out, id - prev);
            prev = id;
        }
    }

    pub(super) fn name(self) -> &'a str {
        let bytes = self.name_bytes();
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: written from a `&str` in `encode` (and read back at the same offsets), so
        // always valid UTF-8; checking it again on every comparison of names cost about a
        // tenth of a vector search.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    pub(super) fn name_bytes(self) -> &'a [u8] {
        let mut i = 0;
        let len = get_varint(self.0, &mut i) as usize;
        &self.0[i..i + len]
    }

    /// The field lengths, the term ids and the record's length in bytes.
    pub(super) fn decode(self) -> ([u32; NUM_FIELDS], Vec<u32>, usize) {
        let bytes = self.0;
        let mut i = 0;
        let len = get_varint(bytes, &mut i) as usize;
        i += len;
        let lens = std::array::from_fn(|_| get_varint(bytes, &mut i));
        let n = get_varint(bytes, &mut i) as usize;
        let mut prev = 0u32;
        let terms = (0..n)
            .map(|_| {
                prev += get_varint(bytes, &mut i);
                prev
            })
            .collect();
        (lens, terms, i)
    }
}

/// Every tool's record in one arena (no allocation per tool), addressed by slot. A removed or
/// replaced record stays as garbage until garbage outweighs the live records; the arena is
/// then compacted, so its size stays within twice the live records.
#[derive(Debug, Default)]
pub(super) struct Docs {
    pub(super) bytes: Vec<u8>,
    at: Vec<u64>, // slot -> offset of its record; FREE when the slot holds no tool
    garbage: usize,
}

pub(super) const FREE: u64 = u64::MAX;

impl Docs {
    pub(super) fn slots(&self) -> usize {
        self.at.len()
    }

    /// Room for `tools` more records holding `names` bytes of names and `ids` term ids in
    /// all, at two bytes an id (most differences of sorted ids are below 2^14; a 1M-tool
    /// catalog averages about one): a first add of a million tools sizes its arena once
    /// instead of copying it as it grows, and gives back what it did not use ([`Docs::fit`]).
    pub(super) fn reserve(&mut self, tools: usize, names: usize, ids: usize) {
        self.at.reserve(tools);
        self.bytes
            .reserve(names + ids * 2 + tools * (2 + 2 * NUM_FIELDS + 2));
    }

    /// Give back the arena's room beyond its records.
    pub(super) fn fit(&mut self) {
        self.bytes.shrink_to_fit();
    }

    pub(super) fn push_free_slot(&mut self) -> u32 {
        self.at.push(FREE);
        (self.at.len() - 1) as u32
    }

    pub(super) fn get(&self, slot: u32) -> Option<Doc<'_>> {
        let at = *self.at.get(slot as usize)?;
        (at != FREE).then(|| Doc(&self.bytes[at as usize..]))
    }

    pub(super) fn set(&mut self, slot: u32, name: &str, lens: [u32; NUM_FIELDS], ids: &mut [u32]) {
        debug_assert_eq!(self.at[slot as usize], FREE);
        self.at[slot as usize] = self.bytes.len() as u64;
        Doc::encode(&mut self.bytes, name, lens, ids);
    }

    /// Free `slot`; returns its field lengths and term ids.
    pub(super) fn take(&mut self, slot: u32) -> Option<([u32; NUM_FIELDS], Vec<u32>)> {
        let (lens, terms, len) = self.get(slot)?.decode();
        self.at[slot as usize] = FREE;
        self.garbage += len;
        if self.garbage > (1 << 16) && self.garbage * 2 > self.bytes.len() {
            self.compact();
        }
        Some((lens, terms))
    }

    pub(super) fn compact(&mut self) {
        let mut bytes = Vec::with_capacity(self.bytes.len() - self.garbage);
        for at in self.at.iter_mut().filter(|at| **at != FREE) {
            let start = *at as usize;
            let (_, _, len) = Doc(&self.bytes[start..]).decode();
            *at = bytes.len() as u64;
            bytes.extend_from_slice(&self.bytes[start..start + len]);
        }
        self.bytes = bytes;
        self.garbage = 0;
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, Doc<'_>)> + '_ {
        (0..self.at.len() as u32).filter_map(|slot| Some((slot, self.get(slot)?)))
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.at.capacity() * 8
    }
}

/// The name of the tool in `slot` as bytes (for the name table).
pub(super) fn doc_key(docs: &Docs, slot: u32) -> &[u8] {
    docs.get(slot).map(Doc::name_bytes).unwrap_or(b"")
}

/// The name of the tool in `slot` (an occupied slot).
pub(super) fn doc_name(docs: &Docs, slot: u32) -> &str {
    docs.get(slot).map(Doc::name).unwrap_or("")
}
