//! The vocabulary: every term's text in one arena, found through an [`IdTable`].

use crate::table::IdTable;

use super::postings::PostingList;

/// The vocabulary: every term's text in one arena, looked up through an [`IdTable`].
#[derive(Debug, Default)]
pub(super) struct Vocab {
    pub(super) text: String,
    pub(super) ends: Vec<u32>, // term id -> end of its text in `text`; it starts where the previous ends
    pub(super) table: IdTable,
}

impl Vocab {
    pub(super) fn get(&self, term: &str) -> Option<u32> {
        self.table
            .get(term.as_bytes(), |id| term_bytes(&self.text, &self.ends, id))
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 4 + self.table.heap_bytes()
    }
}

impl Vocab {
    /// Number of terms.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The text of term `id`.
    pub(super) fn term(&self, id: u32) -> &str {
        // Written from `&str`s only, at char boundaries.
        std::str::from_utf8(term_bytes(&self.text, &self.ends, id)).unwrap_or("")
    }

    /// The id of `term`, added if new (ids are given in order: 0, 1, ...).
    pub(super) fn intern(&mut self, term: &str) -> u32 {
        // One probe: where the term is absent is where it goes.
        let Vocab { text, ends, table } = self;
        table.reserve(1);
        match table.find(term.as_bytes(), |i| term_bytes(text, ends, i)) {
            Ok(id) => id,
            Err(bucket) => {
                let id = ends.len() as u32;
                text.push_str(term);
                ends.push(text.len() as u32);
                table.put_at(bucket, id);
                id
            }
        }
    }
}

/// The id of `term`, added to the vocabulary (with an empty postings list) if new.
pub(super) fn intern(vocab: &mut Vocab, postings: &mut Vec<PostingList>, term: &str) -> u32 {
    let id = vocab.intern(term);
    if id as usize == postings.len() {
        postings.push(PostingList::default());
    }
    id
}

/// The text of term `id` in the vocabulary's arena.
pub(super) fn term_bytes<'a>(text: &'a str, ends: &[u32], id: u32) -> &'a [u8] {
    let i = id as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &text.as_bytes()[start..ends[i] as usize]
}
