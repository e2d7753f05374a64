//! The BM25F inverted index over tools (pure Rust; the Python binding lives in `lib.rs`).
//!
//! * Documents (tools) get compact `u32` slots; a removed tool's slot is reused.
//! * One postings list per term: `(slot, term frequency per field in four bits)`, 6 bytes per
//!   posting; frequencies of 15 or more exact in a side table (`postings.rs`).
//! * Scoring is BM25F (Robertson, Zaragoza & Taylor 2004): per document and term,
//!   `tf~ = sum_f w_f * tf_f / (1 - b + b * len_f / avglen_f)` and
//!   `score += idf * tf~ * (k1 + 1) / (tf~ + k1)` with `idf = ln(1 + (N - df + 0.5) / (df + 0.5))`.
//! * Statistics (`N`, `df`, per-field total length) are integers updated on every add and remove,
//!   so an index built incrementally scores bit-for-bit like one built from scratch.
//! * Top-k goes through a bounded heap; equal scores are ordered by tool name.

mod bounds;
mod build;
mod cursor;
mod docs;
mod exhaustive;
mod fill;
pub mod fusion;
pub mod intents;
pub mod pass1;
mod postings;
mod rank;
mod scoring;
mod search;
mod short_keys;
mod stage;
#[cfg(test)]
mod tests;
pub mod ties;
pub mod vectors;
mod vocab;

use crate::table::IdTable;

use crate::project::NUM_FIELDS;
use crate::tokenize::Analyzer;

use bounds::Bounds;
use docs::{doc_key, Docs};
pub use pass1::Pass1;
use postings::{PostingList, WideTf};
pub use scoring::{Params, DEFAULT_B, DEFAULT_K1, DEFAULT_LENGTH_EXPONENT, DEFAULT_WEIGHTS};
pub use stage::{split_name, Staged, StagedVector};
pub use vectors::VectorSearch;
use vectors::{Precision, Vectors};
use vocab::Vocab;

/// The index. Not internally synchronised: the binding wraps it in a `RwLock`.
#[derive(Debug, Default)]
pub struct Index {
    params: Params,
    vocab: Vocab,
    postings: Vec<PostingList>,
    docs: Docs,
    /// Per slot and field, `len ^ length_exponent` (what scoring reads).
    scaled_lens: Vec<[f32; NUM_FIELDS]>,
    free_slots: Vec<u32>,
    /// Slots of the tools, keyed by their names in `docs`.
    by_name: IdTable,
    sum_len: [u64; NUM_FIELDS],
    /// The tools' embeddings, by slot.
    vectors: Vectors,
    /// Per term, an upper bound of its contribution (dynamic pruning).
    bounds: Bounds,
    /// Exact frequencies of the postings with one of 15 or more (`postings.rs`).
    wide: WideTf,
}

thread_local! {
    static QUERY_ANALYZER: std::cell::RefCell<Analyzer> = std::cell::RefCell::new(Analyzer::new());
}

/// Tokenize a query with this thread's analyzer.
pub fn analyze_query(query: &str) -> Vec<String> {
    QUERY_ANALYZER.with(|a| a.borrow_mut().tokenize(query))
}

impl Index {
    pub fn new(params: Params) -> Result<Self, String> {
        params.validate()?;
        Ok(Index {
            params,
            ..Default::default()
        })
    }

    /// An empty index whose vectors are stored with `precision`.
    pub fn with_precision(params: Params, precision: Precision) -> Result<Self, String> {
        let mut ix = Index::new(params)?;
        ix.vectors = Vectors::new(precision);
        Ok(ix)
    }

    /// From `n` vectors on, vector searches go through an HNSW graph (0: never).
    pub fn set_ann_from(&mut self, n: usize) {
        self.vectors.set_ann_from(n);
    }

    pub fn vectors(&self) -> &Vectors {
        &self.vectors
    }

    /// The slot of the tool called `name`.
    pub fn slot_of(&self, name: &str) -> Option<u32> {
        self.by_name
            .get(name.as_bytes(), |s| doc_key(&self.docs, s))
    }

    /// The key of the vector stored for `name` (what its text was), if it has one.
    pub fn vector_key(&self, name: &str) -> Option<u64> {
        self.vectors.key(self.slot_of(name)?)
    }

    pub fn params(&self) -> Params {
        self.params
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name
            .get(name.as_bytes(), |s| doc_key(&self.docs, s))
            .is_some()
    }

    /// Tool names in slot order.
    pub fn names(&self) -> Vec<String> {
        self.docs.iter().map(|(_, d)| d.name().to_owned()).collect()
    }

    /// Number of distinct terms that occur in at least one tool.
    pub fn num_terms(&self) -> usize {
        self.postings.iter().filter(|p| !p.is_empty()).count()
    }

    /// Total number of postings.
    pub fn num_postings(&self) -> usize {
        self.postings.iter().map(PostingList::len).sum()
    }

    /// Heap bytes held by the index's own structures (an estimate from capacities).
    pub fn heap_bytes(&self) -> usize {
        let postings: usize = self
            .postings
            .iter()
            .map(PostingList::heap_bytes)
            .sum::<usize>()
            + self.postings.capacity() * std::mem::size_of::<PostingList>();
        let vocab = self.vocab.heap_bytes();
        let docs = self.docs.heap_bytes();
        let names = self.by_name.heap_bytes();
        postings
            + vocab
            + docs
            + names
            + self.scaled_lens.capacity() * std::mem::size_of::<[f32; NUM_FIELDS]>()
            + self.vectors.heap_bytes()
            + self.bounds.heap_bytes()
            + self.wide.capacity() * (std::mem::size_of::<((u32, u32), [u8; NUM_FIELDS])>() + 1)
    }

    /// The scorer of the current statistics.
    fn scorer(&self) -> scoring::Scorer {
        scoring::Scorer::new(&self.params, &self.sum_len, self.by_name.len() as f64)
    }

    /// Bitset over slots of the allowed tool names (unknown names are ignored).
    pub fn allow_mask<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<u64> {
        let mut mask = vec![0u64; self.docs.slots().div_ceil(64)];
        for n in names {
            if let Some(s) = self.by_name.get(n.as_bytes(), |s| doc_key(&self.docs, s)) {
                mask[(s / 64) as usize] |= 1u64 << (s % 64);
            }
        }
        mask
    }
}

impl Index {
    /// The heap estimate by part, in bytes (diagnostics, for `examples/harness.rs`).
    pub fn heap_parts(&self) -> Vec<(&'static str, usize)> {
        let postings: usize = self
            .postings
            .iter()
            .map(PostingList::heap_bytes)
            .sum::<usize>();
        vec![
            ("postings data", postings),
            (
                "postings lists",
                self.postings.capacity() * std::mem::size_of::<PostingList>(),
            ),
            ("num postings*8", self.num_postings() * 8),
            ("vocab", self.vocab.heap_bytes()),
            ("docs", self.docs.heap_bytes()),
            ("names", self.by_name.heap_bytes()),
            ("scaled", self.scaled_lens.capacity() * 16),
            ("bounds", self.bounds.heap_bytes()),
            ("wide", self.wide.capacity() * 17),
        ]
    }
}
