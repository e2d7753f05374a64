//! Postings lists: `(slot, tf per field)`, sorted by slot, a single posting kept inline.

use crate::project::NUM_FIELDS;

/// One tool's occurrences of one term: its slot and, per field, the term frequency in four
/// bits: 6 bytes a posting instead of 8 (a million near-duplicate tools hold 34 million
/// postings). A frequency of [`WIDE`] or more in any field is kept exactly in the index's
/// table of wide frequencies (`Index::wide`, by term and slot), and the posting's four bits
/// of that field say [`WIDE`]: scores are those of the exact frequencies, always.
#[derive(Clone, Copy)]
#[repr(C, packed(2))]
pub(super) struct Posting {
    pub(super) slot: u32,
    tf: u16,
}

/// A field's four bits at this value: the frequencies are in the wide table.
pub(super) const WIDE: u8 = 15;

const _: () = assert!(NUM_FIELDS * 4 <= 16, "four bits a field in a u16");
const _: () = assert!(std::mem::size_of::<Posting>() == 6);

impl Posting {
    /// A posting of `slot` with these frequencies, and whether they go to the wide table
    /// (some field at [`WIDE`] or more).
    #[inline]
    pub(super) fn new(slot: u32, tf: [u8; NUM_FIELDS]) -> (Self, bool) {
        let mut packed = 0u16;
        let mut wide = false;
        for (f, &t) in tf.iter().enumerate() {
            wide |= t >= WIDE;
            packed |= u16::from(t.min(WIDE)) << (4 * f);
        }
        (Posting { slot, tf: packed }, wide)
    }

    /// Whether the frequencies are in the wide table.
    #[inline(always)]
    pub(super) fn is_wide(&self) -> bool {
        let packed = self.tf;
        (0..NUM_FIELDS).any(|f| (packed >> (4 * f)) & 0xF == u16::from(WIDE))
    }

    /// The frequencies as packed (exact unless [`Posting::is_wide`]).
    #[inline(always)]
    pub(super) fn packed_tf(&self) -> [u8; NUM_FIELDS] {
        let packed = self.tf;
        std::array::from_fn(|f| ((packed >> (4 * f)) & 0xF) as u8)
    }
}

impl std::fmt::Debug for Posting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slot = self.slot;
        write!(f, "Posting {{ slot: {slot}, tf: {:?} }}", self.packed_tf())
    }
}

/// Exact frequencies of the wide postings, by `(term, slot)`.
pub(super) type WideTf = rustc_hash::FxHashMap<(u32, u32), [u8; NUM_FIELDS]>;

/// The exact frequencies of `term`'s posting `p`.
#[inline(always)]
pub(super) fn tf_of(wide: &WideTf, term: u32, p: &Posting) -> [u8; NUM_FIELDS] {
    if p.is_wide() {
        let slot = p.slot;
        wide.get(&(term, slot))
            .copied()
            .unwrap_or_else(|| p.packed_tf())
    } else {
        p.packed_tf()
    }
}

/// A term's postings, sorted by slot. A single posting lives in the list itself: most terms of
/// a large catalog (the whole identifiers of tool names) belong to one tool, and a heap
/// block of one posting would cost four times its size. Same 24 bytes as a `Vec`.
#[derive(Clone, Debug)]
pub(super) enum PostingList {
    One(Posting),
    Many(Vec<Posting>),
}

impl Default for PostingList {
    fn default() -> Self {
        PostingList::Many(Vec::new())
    }
}

impl PostingList {
    pub(super) fn as_slice(&self) -> &[Posting] {
        match self {
            PostingList::One(p) => std::slice::from_ref(p),
            PostingList::Many(v) => v,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            PostingList::One(_) => 0,
            PostingList::Many(v) => v.capacity() * std::mem::size_of::<Posting>(),
        }
    }

    /// Room for `additional` more postings, exactly (a bulk add knows how many it brings).
    pub(super) fn reserve_exact(&mut self, additional: usize) {
        match self {
            PostingList::Many(v) if !(v.is_empty() && additional == 1) => {
                v.reserve_exact(additional)
            }
            PostingList::Many(_) => {} // a single posting will live inline
            PostingList::One(p) => {
                let mut v = Vec::with_capacity(1 + additional);
                v.push(*p);
                *self = PostingList::Many(v);
            }
        }
    }

    /// The buffer of an empty list for a bulk fill of `n >= 2` postings (`fill.rs`), with
    /// room for them.
    pub(super) fn bulk_buffer(&mut self, n: usize) -> *mut Posting {
        debug_assert!(self.is_empty() && n >= 2);
        if let PostingList::One(_) = self {
            *self = PostingList::default();
        }
        let PostingList::Many(v) = self else {
            unreachable!()
        };
        v.clear();
        v.reserve_exact(n);
        v.as_mut_ptr()
    }

    /// The `n` postings a bulk fill wrote into [`PostingList::bulk_buffer`] are the list.
    ///
    /// # Safety
    /// All `n` were written, in slot order.
    pub(super) unsafe fn bulk_filled(&mut self, n: usize) {
        let PostingList::Many(v) = self else {
            unreachable!("a bulk buffer is a Vec's")
        };
        debug_assert!(v.capacity() >= n);
        // SAFETY: the caller wrote the first `n` (Posting is Copy: no drop to skip).
        unsafe { v.set_len(n) };
    }

    /// Insert a posting for a slot not in the list, keeping the slot order.
    pub(super) fn insert(&mut self, post: Posting) {
        let v = match self {
            PostingList::Many(v) if v.is_empty() && v.capacity() == 0 => {
                *self = PostingList::One(post);
                return;
            }
            PostingList::Many(v) => v,
            PostingList::One(p) => {
                let first = *p;
                *self = PostingList::Many(Vec::with_capacity(4));
                let PostingList::Many(v) = self else {
                    unreachable!()
                };
                v.push(first);
                v
            }
        };
        if v.len() == v.capacity() {
            // Grow by an eighth, not double: a one-tool add must not double the memory of
            // every large postings list it touches.
            v.reserve_exact(v.len() / 8 + 4);
        }
        match v.last() {
            Some(last) if last.slot > post.slot => {
                let at = v.partition_point(|p| p.slot < post.slot);
                v.insert(at, post);
            }
            _ => v.push(post),
        }
    }

    /// Remove the posting of `slot`, if any; an emptied list releases its memory.
    pub(super) fn remove(&mut self, slot: u32) {
        match self {
            PostingList::One(p) if p.slot == slot => *self = PostingList::default(),
            PostingList::One(_) => {}
            PostingList::Many(v) => {
                if let Ok(i) = v.binary_search_by_key(&slot, |p| p.slot) {
                    v.remove(i);
                }
                if v.is_empty() {
                    *v = Vec::new();
                }
            }
        }
    }
}

#[cfg(test)]
mod packing_tests {
    use super::*;

    #[test]
    fn a_posting_packs_each_frequency_in_four_bits_and_flags_the_wide_ones() {
        assert_eq!(std::mem::size_of::<Posting>(), 6);
        for tf in [[0, 1, 2, 3], [14, 0, 14, 1], [13, 12, 11, 10], [0, 0, 0, 0]] {
            let (p, wide) = Posting::new(u32::MAX - 1, tf);
            assert!(!wide && !p.is_wide(), "{tf:?}");
            assert_eq!((p.slot, p.packed_tf()), (u32::MAX - 1, tf));
            assert_eq!(tf_of(&WideTf::default(), 3, &p), tf);
        }
        let mut wide = WideTf::default();
        for tf in [[15, 0, 0, 0], [1, 255, 0, 2], [0, 0, 0, 40]] {
            let (p, is_wide) = Posting::new(9, tf);
            assert!(is_wide && p.is_wide(), "{tf:?}");
            wide.insert((3, 9), tf);
            assert_eq!(tf_of(&wide, 3, &p), tf, "the exact frequencies come back");
        }
    }
}
