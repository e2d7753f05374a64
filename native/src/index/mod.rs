//! The BM25F inverted index over tools (pure Rust; the Python binding lives in `lib.rs`).
//!
//! * Documents (tools) get compact `u32` slots; a removed tool's slot is reused.
//! * One postings list per term: `(slot, term frequency per field)`, 8 bytes per posting.
//! * Scoring is BM25F (Robertson, Zaragoza & Taylor 2004): per document and term,
//!   `tf~ = sum_f w_f * tf_f / (1 - b + b * len_f / avglen_f)` and
//!   `score += idf * tf~ * (k1 + 1) / (tf~ + k1)` with `idf = ln(1 + (N - df + 0.5) / (df + 0.5))`.
//! * Statistics (`N`, `df`, per-field total length) are integers updated on every add and remove,
//!   so an index built incrementally scores bit-for-bit like one built from scratch.
//! * Top-k goes through a bounded heap; equal scores are ordered by tool name.

mod bounds;
mod build;
mod docs;
pub mod fusion;
pub mod pass1;
mod postings;
mod scoring;
mod search;
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
use postings::PostingList;
pub use scoring::{Params, DEFAULT_B, DEFAULT_K1, DEFAULT_LENGTH_EXPONENT, DEFAULT_WEIGHTS};
pub use stage::{split_name, Staged, StagedVector};
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
}

thread_local! {
    static HAMMING: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
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

/// How vector searches run: exactly below `approx_from` vectors, else the nearest by Hamming
/// distance of the sign bits (`rescore` of them at 10,000 vectors, more in larger catalogs:
/// [`vectors::rescored`]) are scored with the int8 copy and the best `2k` of those exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorSearch {
    pub approx_from: usize,
    pub rescore: usize,
}

impl Default for VectorSearch {
    fn default() -> Self {
        VectorSearch {
            approx_from: vectors::DEFAULT_APPROX_FROM,
            rescore: vectors::DEFAULT_RESCORE,
        }
    }
}

impl Index {
    /// The `k` tools whose vectors are nearest the query (cosine), best first; ties by name.
    /// Exact below `how.approx_from` vectors; above, the `how.rescore` candidates nearest by
    /// Hamming distance of the sign bits (ties by slot) are scored exactly (`exact` forces the
    /// full scan).
    pub fn search_vector_with(
        &self,
        q: &vectors::QueryVec,
        k: usize,
        allow: Option<&[u64]>,
        how: VectorSearch,
        exact: bool,
    ) -> Vec<(f32, u32)> {
        if k == 0 || self.vectors.is_empty() {
            return Vec::new();
        }
        let r = vectors::rescored(how.rescore, self.vectors.len()).max(k);
        if exact || self.vectors.len() < how.approx_from || self.vectors.len() <= r {
            return self.search_vector(q, k, allow);
        }
        let code = self.vectors.code_of(q);
        let (q8, q8_scale) = match q {
            vectors::QueryVec::F32(v) => vectors::quantize(v),
            vectors::QueryVec::I8(v, s) => (v.clone(), *s),
        };
        let bits = self.vectors.dim() + 1;
        // Distances are small integers: a histogram finds the cut, then one pass collects
        // the candidates in slot order (ties at the cut: the lower slots).
        let mut hist = vec![0usize; bits + 1];
        let mut candidates: Vec<(f32, u32)> = Vec::with_capacity(r);
        HAMMING.with(|dist| {
            let mut dist = dist.borrow_mut();
            self.vectors.hamming_all(&code, &mut dist);
            // The slots to consider, 64 at a time: holding a vector, and allowed.
            let present = self.vectors.present();
            let word = |w: usize| match allow {
                None => present[w],
                Some(m) => present[w] & m.get(w).copied().unwrap_or(0),
            };
            let each = |f: &mut dyn FnMut(usize)| {
                for w in 0..present.len() {
                    let mut bits = word(w);
                    while bits != 0 {
                        f(w * 64 + bits.trailing_zeros() as usize);
                        bits &= bits - 1;
                    }
                }
            };
            each(&mut |s| hist[dist[s] as usize] += 1);
            let (mut cut, mut below) = (0usize, 0usize);
            while cut < hist.len() && below + hist[cut] < r {
                below += hist[cut];
                cut += 1;
            }
            let room_at_cut = r - below;
            let mut at_cut: Vec<u32> = Vec::new();
            each(&mut |s| {
                let d = dist[s] as usize;
                if d < cut {
                    candidates.push((self.vectors.score_i8(&q8, q8_scale, s as u32), s as u32));
                } else if d == cut {
                    at_cut.push(s as u32);
                }
            });
            // At the cut, by name: the candidates do not depend on which slot a tool got.
            if at_cut.len() > room_at_cut {
                if room_at_cut > 0 {
                    at_cut.select_nth_unstable_by(room_at_cut - 1, |&a, &b| {
                        self.name_of(a).cmp(self.name_of(b))
                    });
                }
                at_cut.truncate(room_at_cut);
            }
            for s in at_cut {
                candidates.push((self.vectors.score_i8(&q8, q8_scale, s), s));
            }
        });
        // Rescored with int8 (a quarter of the bytes to read); with f32 vectors the best 4k of
        // those are scored again exactly.
        if let vectors::QueryVec::F32(_) = q {
            let m = (2 * k).min(candidates.len());
            if m < candidates.len() {
                // A total order (score, then name), so the cut is deterministic.
                candidates.select_nth_unstable_by(m, |a, b| {
                    b.0.total_cmp(&a.0)
                        .then_with(|| self.name_of(a.1).cmp(self.name_of(b.1)))
                });
                candidates.truncate(m);
            }
            for c in candidates.iter_mut() {
                c.0 = self.vectors.score(q, c.1);
            }
        }
        self.top_k_by(candidates.into_iter(), k)
    }
}

impl Index {
    /// The `k` tools whose vectors are nearest the query (cosine), best first; ties by name.
    pub fn search_vector(
        &self,
        q: &vectors::QueryVec,
        k: usize,
        allow: Option<&[u64]>,
    ) -> Vec<(f32, u32)> {
        if k == 0 || self.vectors.is_empty() {
            return Vec::new();
        }
        let mut hits: Vec<(f32, u32)> = Vec::new();
        let mut heap_floor = f32::NEG_INFINITY;
        // A cheap pre-filter ahead of the exact heap: keep candidates in a buffer and cut it
        // to the best k whenever it grows past 4k (the k-th score then bounds what can enter).
        self.vectors.scan(q, allow, |s, slot| {
            if s >= heap_floor {
                hits.push((s, slot));
                if hits.len() >= 4 * k.max(16) {
                    hits = self.top_k_by(hits.drain(..), k);
                    if hits.len() == k {
                        heap_floor = hits[k - 1].0;
                    }
                }
            }
        });
        self.top_k_by(hits.into_iter(), k)
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
        ]
    }
}
