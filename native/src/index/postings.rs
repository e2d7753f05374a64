//! Postings lists: `(slot, tf per field)`, sorted by slot, a single posting kept inline.

use crate::project::NUM_FIELDS;

#[derive(Clone, Copy, Debug)]
pub(super) struct Posting {
    pub(super) slot: u32,
    pub(super) tf: [u8; NUM_FIELDS],
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
