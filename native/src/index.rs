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

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use crate::project::{Projection, NUM_FIELDS};
use crate::tokenize::Analyzer;

/// Default BM25 term-frequency saturation.
pub const DEFAULT_K1: f32 = 1.2;
/// Default BM25 length normalisation.
pub const DEFAULT_B: f32 = 0.75;
/// Default field weights: name, description, parameter names, parameter text.
pub const DEFAULT_WEIGHTS: [f32; NUM_FIELDS] = [2.5, 1.0, 1.25, 0.75];

/// Scoring parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub k1: f32,
    pub b: f32,
    pub weights: [f32; NUM_FIELDS],
}

impl Default for Params {
    fn default() -> Self {
        Params {
            k1: DEFAULT_K1,
            b: DEFAULT_B,
            weights: DEFAULT_WEIGHTS,
        }
    }
}

impl Params {
    /// Check the parameters; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(format!("k1 must be a finite number >= 0, got {}", self.k1));
        }
        if !(self.b.is_finite() && (0.0..=1.0).contains(&self.b)) {
            return Err(format!("b must be between 0 and 1, got {}", self.b));
        }
        for (w, f) in self.weights.iter().zip(crate::project::Field::ALL) {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(format!(
                    "{} weight must be a finite number >= 0, got {w}",
                    f.key()
                ));
            }
        }
        if self.weights.iter().all(|w| *w == 0.0) {
            return Err("at least one field weight must be > 0".to_owned());
        }
        Ok(())
    }
}

/// A tool after tokenization: its name, its distinct terms with per-field counts, field lengths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnalyzedTool {
    pub name: String,
    pub terms: Vec<(String, [u8; NUM_FIELDS])>,
    pub lens: [u32; NUM_FIELDS],
}

/// Tokenize every field of a projection.
pub fn analyze(name: &str, projection: &Projection, analyzer: &mut Analyzer) -> AnalyzedTool {
    let mut pos: FxHashMap<String, usize> = FxHashMap::default();
    let mut terms: Vec<(String, [u8; NUM_FIELDS])> = Vec::new();
    let mut lens = [0u32; NUM_FIELDS];
    for (f, texts) in projection.fields.iter().enumerate() {
        for text in texts {
            analyzer.for_each_token(text, |tok| {
                lens[f] = lens[f].saturating_add(1);
                let i = match pos.get(tok) {
                    Some(&i) => i,
                    None => {
                        pos.insert(tok.to_owned(), terms.len());
                        terms.push((tok.to_owned(), [0; NUM_FIELDS]));
                        terms.len() - 1
                    }
                };
                let tf = &mut terms[i].1[f];
                *tf = tf.saturating_add(1);
            });
        }
    }
    AnalyzedTool {
        name: name.to_owned(),
        terms,
        lens,
    }
}

#[derive(Clone, Copy, Debug)]
struct Posting {
    slot: u32,
    tf: [u8; NUM_FIELDS],
}

#[derive(Debug)]
struct Doc {
    name: Box<str>,
    terms: Box<[u32]>,
}

/// The index. Not internally synchronised: the binding wraps it in a `RwLock`.
#[derive(Debug, Default)]
pub struct Index {
    params: Params,
    vocab: FxHashMap<Box<str>, u32>,
    postings: Vec<Vec<Posting>>,
    docs: Vec<Option<Doc>>,
    lens: Vec<[u32; NUM_FIELDS]>,
    free_slots: Vec<u32>,
    by_name: FxHashMap<Box<str>, u32>,
    sum_len: [u64; NUM_FIELDS],
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    static QUERY_ANALYZER: RefCell<Analyzer> = RefCell::new(Analyzer::new());
}

#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
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
        self.by_name.contains_key(name)
    }

    /// Tool names in slot order.
    pub fn names(&self) -> Vec<String> {
        self.docs
            .iter()
            .flatten()
            .map(|d| d.name.to_string())
            .collect()
    }

    /// Number of distinct terms that occur in at least one tool.
    pub fn num_terms(&self) -> usize {
        self.postings.iter().filter(|p| !p.is_empty()).count()
    }

    /// Total number of postings.
    pub fn num_postings(&self) -> usize {
        self.postings.iter().map(Vec::len).sum()
    }

    /// Heap bytes held by the index's own structures (an estimate from capacities).
    pub fn heap_bytes(&self) -> usize {
        let postings: usize = self
            .postings
            .iter()
            .map(|p| p.capacity() * std::mem::size_of::<Posting>())
            .sum::<usize>()
            + self.postings.capacity() * std::mem::size_of::<Vec<Posting>>();
        let vocab: usize = self.vocab.keys().map(|k| k.len()).sum::<usize>()
            + self.vocab.capacity() * (std::mem::size_of::<(Box<str>, u32)>() + 1);
        let docs: usize = self
            .docs
            .iter()
            .flatten()
            .map(|d| d.name.len() + d.terms.len() * 4)
            .sum::<usize>()
            + self.docs.capacity() * std::mem::size_of::<Option<Doc>>();
        let names: usize = self.by_name.keys().map(|k| k.len()).sum::<usize>()
            + self.by_name.capacity() * (std::mem::size_of::<(Box<str>, u32)>() + 1);
        postings + vocab + docs + names + self.lens.capacity() * 4 * NUM_FIELDS
    }

    /// Add or replace a tool (by name).
    pub fn insert(&mut self, tool: AnalyzedTool) {
        self.remove(&tool.name);
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.docs.push(None);
                self.lens.push([0; NUM_FIELDS]);
                (self.docs.len() - 1) as u32
            }
        };
        let mut term_ids = Vec::with_capacity(tool.terms.len());
        for (text, tf) in tool.terms {
            let id = match self.vocab.get(text.as_str()) {
                Some(&id) => id,
                None => {
                    let id = self.postings.len() as u32;
                    self.postings.push(Vec::new());
                    self.vocab.insert(text.into_boxed_str(), id);
                    id
                }
            };
            self.postings[id as usize].push(Posting { slot, tf });
            term_ids.push(id);
        }
        for (total, len) in self.sum_len.iter_mut().zip(tool.lens) {
            *total += u64::from(len);
        }
        self.lens[slot as usize] = tool.lens;
        let name: Box<str> = tool.name.into_boxed_str();
        self.by_name.insert(name.clone(), slot);
        self.docs[slot as usize] = Some(Doc {
            name,
            terms: term_ids.into_boxed_slice(),
        });
    }

    /// Remove a tool; returns whether it was present.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(slot) = self.by_name.remove(name) else {
            return false;
        };
        let doc = self.docs[slot as usize]
            .take()
            .expect("slot of a named tool is occupied");
        for &t in doc.terms.iter() {
            let list = &mut self.postings[t as usize];
            if let Some(i) = list.iter().position(|p| p.slot == slot) {
                list.swap_remove(i);
            }
            if list.is_empty() {
                *list = Vec::new(); // release the memory of a term that no tool uses any more
            }
        }
        for (total, len) in self.sum_len.iter_mut().zip(self.lens[slot as usize]) {
            *total -= u64::from(len);
        }
        self.lens[slot as usize] = [0; NUM_FIELDS];
        self.free_slots.push(slot);
        true
    }

    /// Bitset over slots of the allowed tool names (unknown names are ignored).
    pub fn allow_mask<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<u64> {
        let mut mask = vec![0u64; self.docs.len().div_ceil(64)];
        for n in names {
            if let Some(&s) = self.by_name.get(n) {
                mask[(s / 64) as usize] |= 1u64 << (s % 64);
            }
        }
        mask
    }

    /// The `k` best tools for a tokenized query, best first, as `(name, score)`.
    pub fn search_tokens(
        &self,
        tokens: &[String],
        k: usize,
        allow: Option<&[u64]>,
    ) -> Vec<(String, f32)> {
        let n_docs = self.by_name.len();
        if k == 0 || n_docs == 0 || tokens.is_empty() {
            return Vec::new();
        }
        // Distinct known query terms in first-occurrence order. A repeated query word counts
        // once (BM25's k3 = 0): in tool queries repeats are mostly argument values.
        let mut query: Vec<u32> = Vec::with_capacity(tokens.len());
        for tok in tokens {
            if let Some(&id) = self.vocab.get(tok.as_str()) {
                if !query.contains(&id) {
                    query.push(id);
                }
            }
        }
        let p = &self.params;
        let n = n_docs as f64;
        let mut norm_b = [0f32; NUM_FIELDS];
        for (nb, &total) in norm_b.iter_mut().zip(&self.sum_len) {
            if total > 0 {
                *nb = (f64::from(p.b) * n / total as f64) as f32;
            }
        }
        let one_minus_b = 1.0 - p.b;
        let k1 = p.k1;
        let w = p.weights;
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch { scores, touched } = &mut *scratch;
            if scores.len() < self.docs.len() {
                scores.resize(self.docs.len(), 0.0);
            }
            touched.clear();
            for &term in &query {
                let list = &self.postings[term as usize];
                if list.is_empty() {
                    continue;
                }
                let df = list.len() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
                for post in list {
                    let slot = post.slot as usize;
                    if let Some(mask) = allow {
                        if mask[slot / 64] & (1u64 << (slot % 64)) == 0 {
                            continue;
                        }
                    }
                    let lens = &self.lens[slot];
                    let mut tfw = 0f32;
                    for f in 0..NUM_FIELDS {
                        let tf = post.tf[f];
                        if tf != 0 {
                            tfw +=
                                w[f] * f32::from(tf) / (one_minus_b + norm_b[f] * lens[f] as f32);
                        }
                    }
                    if tfw <= 0.0 {
                        continue;
                    }
                    let s = idf * tfw * (k1 + 1.0) / (tfw + k1);
                    let cell = &mut scores[slot];
                    if *cell == 0.0 {
                        touched.push(post.slot);
                    }
                    *cell += s;
                }
            }
            let top = self.top_k(scores, touched, k);
            for &t in touched.iter() {
                scores[t as usize] = 0.0;
            }
            top
        })
    }

    fn name_of(&self, slot: u32) -> &str {
        self.docs[slot as usize]
            .as_ref()
            .map(|d| &*d.name)
            .unwrap_or("")
    }

    /// `a` ranks before `b`: higher score, then smaller name.
    fn better(&self, a: (f32, u32), b: (f32, u32)) -> bool {
        a.0 > b.0 || (a.0 == b.0 && self.name_of(a.1) < self.name_of(b.1))
    }

    fn top_k(&self, scores: &[f32], touched: &[u32], k: usize) -> Vec<(String, f32)> {
        // A min-heap (by `better`) of at most k candidates: the root is the worst kept.
        let mut heap: Vec<(f32, u32)> = Vec::with_capacity(k.min(touched.len()));
        for &slot in touched {
            let cand = (scores[slot as usize], slot);
            if heap.len() < k {
                heap.push(cand);
                let mut i = heap.len() - 1;
                while i > 0 {
                    let parent = (i - 1) / 2;
                    if self.better(heap[parent], heap[i]) {
                        heap.swap(parent, i);
                        i = parent;
                    } else {
                        break;
                    }
                }
            } else if self.better(cand, heap[0]) {
                heap[0] = cand;
                let mut i = 0;
                loop {
                    let (l, r) = (2 * i + 1, 2 * i + 2);
                    let mut worst = i;
                    if l < heap.len() && self.better(heap[worst], heap[l]) {
                        worst = l;
                    }
                    if r < heap.len() && self.better(heap[worst], heap[r]) {
                        worst = r;
                    }
                    if worst == i {
                        break;
                    }
                    heap.swap(i, worst);
                    i = worst;
                }
            }
        }
        heap.sort_by(|&a, &b| {
            if self.better(a, b) {
                std::cmp::Ordering::Less
            } else if self.better(b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        heap.into_iter()
            .map(|(s, slot)| (self.name_of(slot).to_owned(), s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::project;
    use serde_json::json;

    fn tool(name: &str, desc: &str, schema: serde_json::Value) -> AnalyzedTool {
        let p = project(name, desc, Some(&schema)).unwrap();
        analyze(name, &p, &mut Analyzer::new())
    }

    fn catalog() -> Vec<AnalyzedTool> {
        vec![
            tool(
                "get_weather",
                "Current weather for a city",
                json!({"properties": {"city": {"description": "City name"},
                       "unit": {"enum": ["celsius", "fahrenheit"]}}}),
            ),
            tool(
                "send_email",
                "Send an email message",
                json!({"properties": {"to": {}}}),
            ),
            tool(
                "list_files",
                "List files in a directory",
                json!({"properties": {"path": {}}}),
            ),
            tool("weather_alerts", "Severe weather alerts", json!({})),
        ]
    }

    fn search(ix: &Index, q: &str, k: usize) -> Vec<(String, f32)> {
        ix.search_tokens(&analyze_query(q), k, None)
    }

    #[test]
    fn ranks_by_name_and_params() {
        let mut ix = Index::new(Params::default()).unwrap();
        for t in catalog() {
            ix.insert(t);
        }
        assert_eq!(ix.len(), 4);
        let hits = search(&ix, "weather in celsius", 5);
        assert_eq!(hits[0].0, "get_weather");
        assert_eq!(hits.len(), 2);
        assert!(hits[0].1 > hits[1].1);
        assert_eq!(search(&ix, "email", 5)[0].0, "send_email");
        assert!(search(&ix, "", 5).is_empty());
        assert!(search(&ix, "the of and", 5).is_empty());
        assert!(search(&ix, "weather", 0).is_empty());
    }

    #[test]
    fn incremental_equals_fresh() {
        let mut inc = Index::new(Params::default()).unwrap();
        for t in catalog() {
            inc.insert(t);
        }
        inc.insert(tool("zzz", "temporary weather thing", json!({})));
        assert!(inc.remove("send_email"));
        assert!(!inc.remove("send_email"));
        inc.insert(tool(
            "send_email",
            "Send an email message",
            json!({"properties": {"to": {}}}),
        ));
        assert!(inc.remove("zzz"));

        let mut fresh = Index::new(Params::default()).unwrap();
        for t in catalog() {
            fresh.insert(t);
        }
        for q in [
            "weather",
            "send email to",
            "files directory",
            "celsius alerts",
        ] {
            assert_eq!(search(&inc, q, 10), search(&fresh, q, 10), "query {q}");
        }
        assert_eq!(inc.num_postings(), fresh.num_postings());
        assert_eq!(inc.sum_len, fresh.sum_len);
    }

    #[test]
    fn ties_break_by_name_and_heap_is_bounded() {
        let mut ix = Index::new(Params::default()).unwrap();
        for name in ["d_tool", "b_tool", "a_tool", "c_tool", "e_tool"] {
            ix.insert(tool(name, "shared words", json!({})));
        }
        let hits = search(&ix, "shared words", 3);
        let names: Vec<_> = hits.iter().map(|h| h.0.as_str()).collect();
        assert_eq!(names, ["a_tool", "b_tool", "c_tool"]);
        let all = search(&ix, "shared", 100);
        assert_eq!(all.len(), 5);
        assert_eq!(all[4].0, "e_tool");
    }

    #[test]
    fn allow_mask_filters() {
        let mut ix = Index::new(Params::default()).unwrap();
        for t in catalog() {
            ix.insert(t);
        }
        let mask = ix.allow_mask(["weather_alerts", "unknown"]);
        let hits = ix.search_tokens(&analyze_query("weather"), 5, Some(&mask));
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0, "weather_alerts");
        let none = ix.allow_mask(std::iter::empty());
        assert!(ix
            .search_tokens(&analyze_query("weather"), 5, Some(&none))
            .is_empty());
    }

    #[test]
    fn params_validated() {
        assert!(Index::new(Params {
            k1: -1.0,
            ..Params::default()
        })
        .is_err());
        assert!(Index::new(Params {
            b: 1.5,
            ..Params::default()
        })
        .is_err());
        assert!(Index::new(Params {
            weights: [0.0; NUM_FIELDS],
            ..Params::default()
        })
        .is_err());
        assert!(Index::new(Params {
            k1: f32::NAN,
            ..Params::default()
        })
        .is_err());
    }
}
