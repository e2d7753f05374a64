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

use crate::table::IdTable;

use rust_stemmers::{Algorithm, Stemmer};

use crate::project::{Field, NUM_FIELDS};
use crate::tokenize::{is_stemmable, is_stopword, Analyzer, Kind, Tokenizer};

/// Batches of at least this many tools size every postings list they extend once, up front.
const RESERVE_BATCH: usize = 64;
/// Parameter texts up to this many bytes are tokenized once per batch and remembered.
const MEMO_TEXT_LEN: usize = 256;

/// Default BM25 term-frequency saturation.
pub const DEFAULT_K1: f32 = 1.2;
/// Default BM25 length normalisation per field: name, description, parameter names,
/// parameter text.
pub const DEFAULT_B: [f32; NUM_FIELDS] = [0.75, 1.0, 0.3, 0.3];
/// Default exponent of a field's relative length in its normalisation: the description's
/// length counts sublinearly, so a long (merged) description is not buried.
pub const DEFAULT_LENGTH_EXPONENT: [f32; NUM_FIELDS] = [1.0, 0.6, 1.0, 1.0];
/// Default field weights: name, description, parameter names, parameter text.
pub const DEFAULT_WEIGHTS: [f32; NUM_FIELDS] = [2.5, 1.0, 1.25, 0.75];

/// Scoring parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub k1: f32,
    pub b: [f32; NUM_FIELDS],
    pub length_exponent: [f32; NUM_FIELDS],
    pub weights: [f32; NUM_FIELDS],
}

impl Default for Params {
    fn default() -> Self {
        Params {
            k1: DEFAULT_K1,
            b: DEFAULT_B,
            length_exponent: DEFAULT_LENGTH_EXPONENT,
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
        for (b, f) in self.b.iter().zip(Field::ALL) {
            if !(b.is_finite() && (0.0..=1.0).contains(b)) {
                return Err(format!("{} b must be between 0 and 1, got {b}", f.key()));
            }
        }
        for (e, f) in self.length_exponent.iter().zip(Field::ALL) {
            if !(e.is_finite() && (0.0..=1.0).contains(e)) {
                return Err(format!(
                    "{} length exponent must be between 0 and 1, got {e}",
                    f.key()
                ));
            }
        }
        for (w, f) in self.weights.iter().zip(Field::ALL) {
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

/// Tools staged for insertion: every text in one arena, tagged with its field. Building the
/// stage can fail (a bad schema); inserting a stage cannot, which makes `add` all or nothing.
#[derive(Debug, Default)]
pub struct Staged {
    arena: String,
    texts: Vec<(usize, usize, Field)>,
    tools: Vec<StagedTool>,
}

#[derive(Debug)]
struct StagedTool {
    key: (usize, usize),   // the name in the arena
    texts: (usize, usize), // its texts: first and end
}

impl Staged {
    /// Start a tool. Its name is its key; the name's last segment is its [`Field::Name`]
    /// text and any namespace before it a [`Field::ParamText`] text (see [`split_name`]).
    pub fn begin(&mut self, name: &str) {
        let start = self.arena.len();
        self.arena.push_str(name);
        let at = self.texts.len();
        self.tools.push(StagedTool {
            key: (start, self.arena.len()),
            texts: (at, at),
        });
        let (namespace, last) = split_name(name);
        let last_at = start + name.len() - last.len(); // `last` is a suffix of `name`
        self.push(last_at, last_at + last.len(), Field::Name);
        if let Some(ns) = namespace {
            self.push(start, start + ns.len(), Field::ParamText);
        }
    }

    fn push(&mut self, from: usize, to: usize, field: Field) {
        self.texts.push((from, to, field));
        if let Some(last) = self.tools.last_mut() {
            last.texts.1 = self.texts.len();
        }
    }

    /// A text of the tool begun last.
    pub fn text(&mut self, field: Field, text: &str) {
        let start = self.arena.len();
        self.arena.push_str(text);
        self.push(start, self.arena.len(), field);
    }

    /// Every staged text with its field, in order.
    pub fn texts(&self) -> impl Iterator<Item = (Field, &str)> {
        self.texts
            .iter()
            .map(|&(from, to, f)| (f, &self.arena[from..to]))
    }

    /// Number of tools staged.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[derive(Clone, Copy, Debug)]
struct Posting {
    slot: u32,
    tf: [u8; NUM_FIELDS],
}

/// A term's postings, sorted by slot. A single posting lives in the list itself: most terms of
/// a large catalog (the whole identifiers of tool names) belong to one tool, and a heap
/// block of one posting would cost four times its size. Same 24 bytes as a `Vec`.
#[derive(Clone, Debug)]
enum PostingList {
    One(Posting),
    Many(Vec<Posting>),
}

impl Default for PostingList {
    fn default() -> Self {
        PostingList::Many(Vec::new())
    }
}

impl PostingList {
    fn as_slice(&self) -> &[Posting] {
        match self {
            PostingList::One(p) => std::slice::from_ref(p),
            PostingList::Many(v) => v,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Heap bytes held.
    fn heap_bytes(&self) -> usize {
        match self {
            PostingList::One(_) => 0,
            PostingList::Many(v) => v.capacity() * std::mem::size_of::<Posting>(),
        }
    }

    /// Room for `additional` more postings, exactly (a bulk add knows how many it brings).
    fn reserve_exact(&mut self, additional: usize) {
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
    fn insert(&mut self, post: Posting) {
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
    fn remove(&mut self, slot: u32) {
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

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], i: &mut usize) -> u32 {
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
struct Doc<'a>(&'a [u8]);

impl<'a> Doc<'a> {
    fn encode(out: &mut Vec<u8>, name: &str, lens: [u32; NUM_FIELDS], ids: &mut [u32]) {
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

    fn name(self) -> &'a str {
        // Written from a `&str` in `encode`, so always valid UTF-8.
        std::str::from_utf8(self.name_bytes()).unwrap_or("")
    }

    fn name_bytes(self) -> &'a [u8] {
        let mut i = 0;
        let len = get_varint(self.0, &mut i) as usize;
        &self.0[i..i + len]
    }

    /// The field lengths, the term ids and the record's length in bytes.
    fn decode(self) -> ([u32; NUM_FIELDS], Vec<u32>, usize) {
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
struct Docs {
    bytes: Vec<u8>,
    at: Vec<u64>, // slot -> offset of its record; FREE when the slot holds no tool
    garbage: usize,
}

const FREE: u64 = u64::MAX;

impl Docs {
    fn slots(&self) -> usize {
        self.at.len()
    }

    fn push_free_slot(&mut self) -> u32 {
        self.at.push(FREE);
        (self.at.len() - 1) as u32
    }

    fn get(&self, slot: u32) -> Option<Doc<'_>> {
        let at = *self.at.get(slot as usize)?;
        (at != FREE).then(|| Doc(&self.bytes[at as usize..]))
    }

    fn set(&mut self, slot: u32, name: &str, lens: [u32; NUM_FIELDS], ids: &mut [u32]) {
        debug_assert_eq!(self.at[slot as usize], FREE);
        self.at[slot as usize] = self.bytes.len() as u64;
        Doc::encode(&mut self.bytes, name, lens, ids);
    }

    /// Free `slot`; returns its field lengths and term ids.
    fn take(&mut self, slot: u32) -> Option<([u32; NUM_FIELDS], Vec<u32>)> {
        let (lens, terms, len) = self.get(slot)?.decode();
        self.at[slot as usize] = FREE;
        self.garbage += len;
        if self.garbage > (1 << 16) && self.garbage * 2 > self.bytes.len() {
            self.compact();
        }
        Some((lens, terms))
    }

    fn compact(&mut self) {
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

    fn iter(&self) -> impl Iterator<Item = (u32, Doc<'_>)> + '_ {
        (0..self.at.len() as u32).filter_map(|slot| Some((slot, self.get(slot)?)))
    }

    fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.at.capacity() * 8
    }
}

/// The vocabulary: every term's text in one arena, looked up through an [`IdTable`].
#[derive(Debug, Default)]
struct Vocab {
    text: String,
    ends: Vec<u32>, // term id -> end of its text in `text`; it starts where the previous ends
    table: IdTable,
}

impl Vocab {
    fn get(&self, term: &str) -> Option<u32> {
        self.table
            .get(term.as_bytes(), |id| term_bytes(&self.text, &self.ends, id))
    }

    fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 4 + self.table.heap_bytes()
    }
}

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
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    static QUERY_ANALYZER: RefCell<Analyzer> = RefCell::new(Analyzer::new());
}

#[cfg(test)]
thread_local! {
    /// Searches that skipped postings (MaxScore phase 2), to check the tests exercise it.
    static PRUNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
    kth: Vec<f32>,
}

/// BM25F scoring of one posting, with the per-search constants.
/// The field normalisation is `1 - b + b * (len / avglen) ^ e`, computed as
/// `one_minus_b + norm_b * len ^ e` with `norm_b = b / avglen ^ e` and `len ^ e` stored per tool.
struct Scorer {
    weights: [f32; NUM_FIELDS],
    norm_b: [f32; NUM_FIELDS],
    one_minus_b: [f32; NUM_FIELDS],
    k1: f32,
}

/// `len ^ e` as stored per tool and field.
fn scale_len(len: u32, e: f32) -> f32 {
    if e == 1.0 {
        len as f32
    } else {
        (f64::from(len).powf(f64::from(e))) as f32
    }
}

impl Scorer {
    fn new(p: &Params, sum_len: &[u64; NUM_FIELDS], n: f64) -> Self {
        let mut norm_b = [0f32; NUM_FIELDS];
        for (f, &total) in sum_len.iter().enumerate() {
            if total > 0 {
                let avg = total as f64 / n;
                norm_b[f] = (f64::from(p.b[f]) / avg.powf(f64::from(p.length_exponent[f]))) as f32;
            }
        }
        Scorer {
            weights: p.weights,
            norm_b,
            one_minus_b: p.b.map(|b| 1.0 - b),
            k1: p.k1,
        }
    }

    #[inline]
    fn score(&self, idf: f32, post: &Posting, lens: &[f32; NUM_FIELDS]) -> f32 {
        let mut tfw = 0f32;
        let fields = post
            .tf
            .iter()
            .zip(&self.weights)
            .zip(&self.one_minus_b)
            .zip(&self.norm_b)
            .zip(lens);
        for ((((&tf, &w), &one_minus_b), &norm_b), &len) in fields {
            if tf != 0 {
                tfw += w * f32::from(tf) / (one_minus_b + norm_b * len);
            }
        }
        if tfw <= 0.0 {
            return 0.0;
        }
        idf * tfw * (self.k1 + 1.0) / (tfw + self.k1)
    }
}

/// The id of `term`, added to the vocabulary (with an empty postings list) if new.
fn intern(vocab: &mut Vocab, postings: &mut Vec<PostingList>, term: &str) -> u32 {
    if let Some(id) = vocab.get(term) {
        return id;
    }
    let id = postings.len() as u32;
    postings.push(PostingList::default());
    vocab.text.push_str(term);
    vocab.ends.push(vocab.text.len() as u32);
    let Vocab { text, ends, table } = vocab;
    table.insert(id, |i| term_bytes(text, ends, i));
    id
}

/// The text of term `id` in the vocabulary's arena.
fn term_bytes<'a>(text: &'a str, ends: &[u32], id: u32) -> &'a [u8] {
    let i = id as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &text.as_bytes()[start..ends[i] as usize]
}

/// The name of the tool in `slot` as bytes (for the name table).
fn doc_key(docs: &Docs, slot: u32) -> &[u8] {
    docs.get(slot).map(Doc::name_bytes).unwrap_or(b"")
}

/// The name of the tool in `slot` (an occupied slot).
fn doc_name(docs: &Docs, slot: u32) -> &str {
    docs.get(slot).map(Doc::name).unwrap_or("")
}

/// A tool name as `(namespace, last segment)`: split at the last `.`, `/` or `:` that has
/// a letter or digit on both sides somewhere (`math.factorial` -> `math` + `factorial`,
/// `huggingface.org/model-name` -> `huggingface.org` + `model-name`). A name without such a
/// separator is all last segment. The last segment is what the tool is; the namespace says
/// where it lives, which many tools share.
pub fn split_name(name: &str) -> (Option<&str>, &str) {
    let has_word = |s: &str| s.chars().any(char::is_alphanumeric);
    for (i, c) in name.char_indices().rev() {
        if matches!(c, '.' | '/' | ':') {
            let (ns, last) = (&name[..i], &name[i + 1..]);
            if has_word(last) {
                return if has_word(ns) {
                    (Some(ns), last)
                } else {
                    (None, name)
                };
            }
        }
    }
    (None, name)
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
    }

    /// Add or replace (by name) every staged tool, in order.
    pub fn add_staged(&mut self, staged: &Staged) {
        self.add_staged_with(staged, usize::MAX, &mut |_, _| {});
    }

    /// `add_staged`, calling `progress(phase, done)` every `every` tools and at the end of
    /// each phase: `"tokenize"` (pass 1), then `"index"` (pass 2).
    pub fn add_staged_with(
        &mut self,
        staged: &Staged,
        every: usize,
        progress: &mut dyn FnMut(&str, usize),
    ) {
        const STOP: u32 = u32::MAX;
        let mut tokenizer = Tokenizer::default();
        let stemmer = Stemmer::create(Algorithm::English);
        // Part as written -> id of its stem (STOP for a stopword): one hash lookup per repeated
        // part. Short parameter texts (names, enum values, stock descriptions) repeat across a
        // catalog: their term ids are remembered per text. Both live for this batch only.
        let mut part_ids: FxHashMap<Box<str>, u32> = FxHashMap::default();
        let mut text_ids: FxHashMap<&str, (u32, u32)> = FxHashMap::default();
        let mut memo: Vec<u32> = Vec::new();
        let mut ids: Vec<u32> = Vec::new();
        let mut occurrences: Vec<(u32, u8)> = Vec::new();
        let mut owner: Vec<u32> = Vec::new();
        let mut at: Vec<u32> = Vec::new();
        // Pass 1: every tool's distinct terms, in one buffer, and how many postings each term
        // gains, so that pass 2 sizes every postings list once.
        let mut all_terms: Vec<(u32, [u8; NUM_FIELDS])> = Vec::new();
        let mut tools: Vec<(usize, usize, [u32; NUM_FIELDS])> = Vec::with_capacity(staged.len());
        for tool in &staged.tools {
            let (first, end) = tool.texts;
            occurrences.clear();
            let mut lens = [0u32; NUM_FIELDS];
            for &(from, to, field) in &staged.texts[first..end] {
                let text = &staged.arena[from..to];
                let remembered = matches!(field, Field::ParamNames | Field::ParamText)
                    && text.len() <= MEMO_TEXT_LEN;
                if let Some(&(at, n)) = remembered.then(|| text_ids.get(text)).flatten() {
                    ids.clear();
                    ids.extend_from_slice(&memo[at as usize..(at + n) as usize]);
                } else {
                    ids.clear();
                    let Index {
                        vocab, postings, ..
                    } = self;
                    tokenizer.for_each(text, |tok, kind| {
                        let id = match kind {
                            Kind::Whole => intern(vocab, postings, tok),
                            Kind::Part => match part_ids.get(tok) {
                                Some(&id) => id,
                                None => {
                                    let id = if is_stopword(tok) {
                                        STOP
                                    } else if is_stemmable(tok) {
                                        intern(vocab, postings, &stemmer.stem(tok))
                                    } else {
                                        intern(vocab, postings, tok)
                                    };
                                    part_ids.insert(tok.into(), id);
                                    id
                                }
                            },
                        };
                        if id != STOP {
                            ids.push(id);
                        }
                    });
                    if remembered {
                        text_ids.insert(text, (memo.len() as u32, ids.len() as u32));
                        memo.extend_from_slice(&ids);
                    }
                }
                let f = field as usize;
                lens[f] = lens[f].saturating_add(ids.len() as u32);
                occurrences.extend(ids.iter().map(|&id| (id, f as u8)));
            }
            // Aggregate per term without sorting: `at[id]` is the term's entry in this tool's
            // slice of `all_terms` while `owner[id]` says the entry belongs to this tool.
            let start = all_terms.len();
            let tool_no = tools.len() as u32 + 1;
            for &(id, f) in &occurrences {
                let i = id as usize;
                if i >= owner.len() {
                    owner.resize(self.postings.len().max(i + 1), 0);
                    at.resize(owner.len(), 0);
                }
                if owner[i] == tool_no {
                    let tf = &mut all_terms[at[i] as usize].1[f as usize];
                    *tf = tf.saturating_add(1);
                } else {
                    owner[i] = tool_no;
                    at[i] = all_terms.len() as u32;
                    let mut tf = [0u8; NUM_FIELDS];
                    tf[f as usize] = 1;
                    all_terms.push((id, tf));
                }
            }
            tools.push((start, all_terms.len(), lens));
            if tools.len().is_multiple_of(every) {
                progress("tokenize", tools.len());
            }
        }
        if every != usize::MAX && !tools.len().is_multiple_of(every) {
            progress("tokenize", tools.len());
        }
        if staged.len() >= RESERVE_BATCH {
            let mut gained = vec![0u32; self.postings.len()];
            for &(id, _) in &all_terms {
                gained[id as usize] += 1;
            }
            for (list, &n) in self.postings.iter_mut().zip(&gained) {
                if n > 0 {
                    list.reserve_exact(n as usize);
                }
            }
        }
        // Pass 2: insert.
        let docs = &self.docs;
        self.by_name.reserve(staged.len(), |s| doc_key(docs, s));
        for (i, (tool, &(start, end, lens))) in staged.tools.iter().zip(&tools).enumerate() {
            let (from, to) = tool.key;
            self.insert(&staged.arena[from..to], &all_terms[start..end], lens);
            if (i + 1).is_multiple_of(every) {
                progress("index", i + 1);
            }
        }
        if every != usize::MAX && !tools.len().is_multiple_of(every) {
            progress("index", tools.len());
        }
    }

    /// Add or replace a tool given its distinct term ids with per-field counts.
    fn insert(&mut self, name: &str, terms: &[(u32, [u8; NUM_FIELDS])], lens: [u32; NUM_FIELDS]) {
        // One probe of the name table for a new name: where it is absent is where it goes.
        let docs = &self.docs;
        self.by_name.reserve(1, |s| doc_key(docs, s));
        let bucket = match self.by_name.find(name.as_bytes(), |s| doc_key(docs, s)) {
            Ok(_) => {
                self.remove(name);
                let docs = &self.docs;
                self.by_name
                    .find(name.as_bytes(), |s| doc_key(docs, s))
                    .expect_err("a removed name is absent")
            }
            Err(bucket) => bucket,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.scaled_lens.push([0.0; NUM_FIELDS]);
                self.docs.push_free_slot()
            }
        };
        for &(id, tf) in terms {
            // Postings stay sorted by slot (binary search in `search_tokens`); a bulk add
            // appends, a reused slot is inserted in place.
            self.postings[id as usize].insert(Posting { slot, tf });
        }
        for (total, len) in self.sum_len.iter_mut().zip(lens) {
            *total += u64::from(len);
        }
        let e = self.params.length_exponent;
        self.scaled_lens[slot as usize] = std::array::from_fn(|f| scale_len(lens[f], e[f]));
        let mut ids: Vec<u32> = terms.iter().map(|&(id, _)| id).collect();
        self.docs.set(slot, name, lens, &mut ids);
        self.by_name.put_at(bucket, slot);
    }

    /// Remove a tool; returns whether it was present.
    pub fn remove(&mut self, name: &str) -> bool {
        let docs = &self.docs;
        let Some(slot) = self.by_name.remove(name.as_bytes(), |s| doc_key(docs, s)) else {
            return false;
        };
        let (lens, terms) = self
            .docs
            .take(slot)
            .expect("slot of a named tool is occupied");
        for t in terms {
            self.postings[t as usize].remove(slot);
        }
        for (total, len) in self.sum_len.iter_mut().zip(lens) {
            *total -= u64::from(len);
        }
        self.scaled_lens[slot as usize] = [0.0; NUM_FIELDS];
        self.free_slots.push(slot);
        true
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
            if let Some(id) = self.vocab.get(tok.as_str()) {
                if !query.contains(&id) {
                    query.push(id);
                }
            }
        }
        let p = &self.params;
        let n = n_docs as f64;
        let scorer = Scorer::new(p, &self.sum_len, n);
        // Terms by decreasing upper bound of their contribution (idf * (k1 + 1)): MaxScore
        // (Turtle & Flood 1995). Ties keep query order, so the order is deterministic.
        let mut terms: Vec<(u32, f32, f32)> = query
            .iter()
            .filter(|&&t| !self.postings[t as usize].is_empty())
            .map(|&t| {
                let df = self.postings[t as usize].len() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
                // The bound has a margin for rounding: it must never be below a real score.
                (t, idf, idf * (p.k1 + 1.0) * 1.001)
            })
            .collect();
        terms.sort_by(|a, b| b.2.total_cmp(&a.2));
        // rest[i]: the most the terms from i on can add to any score.
        let mut rest = vec![0f32; terms.len() + 1];
        for i in (0..terms.len()).rev() {
            rest[i] = rest[i + 1] + terms[i].2;
        }
        let allowed = |slot: u32| match allow {
            Some(mask) => mask[(slot / 64) as usize] & (1u64 << (slot % 64)) != 0,
            None => true,
        };
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch {
                scores,
                touched,
                kth,
            } = &mut *scratch;
            if scores.len() < self.docs.slots() {
                scores.resize(self.docs.slots(), 0.0);
            }
            touched.clear();
            // Phase 1: accumulate whole postings lists while a tool that no term has matched
            // yet could still reach the top k.
            let mut i = 0;
            while i < terms.len() {
                if i > 0 && touched.len() >= k {
                    kth.clear();
                    kth.extend(touched.iter().map(|&t| scores[t as usize]));
                    let (_, &mut threshold, _) =
                        kth.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
                    if rest[i] < threshold {
                        break;
                    }
                }
                let (term, idf, _) = terms[i];
                for post in self.postings[term as usize].as_slice() {
                    if !allowed(post.slot) {
                        continue;
                    }
                    let s = scorer.score(idf, post, &self.scaled_lens[post.slot as usize]);
                    if s <= 0.0 {
                        continue;
                    }
                    let cell = &mut scores[post.slot as usize];
                    if *cell == 0.0 {
                        touched.push(post.slot);
                    }
                    *cell += s;
                }
                i += 1;
            }
            // Phase 2: only tools already matched can still reach the top k; the remaining
            // terms are looked up for them (postings are sorted by slot). Every tool that can
            // make the top k gets every term, in the same order as without pruning, so scores
            // are exactly those of a full evaluation.
            if i < terms.len() {
                #[cfg(test)]
                PRUNED.with(|p| p.set(p.get() + 1));
                kth.clear();
                kth.extend(touched.iter().map(|&t| scores[t as usize]));
                let (_, &mut threshold, _) =
                    kth.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
                let bound = rest[i];
                let mut candidates: Vec<u32> = touched
                    .iter()
                    .copied()
                    .filter(|&t| scores[t as usize] + bound >= threshold)
                    .collect();
                candidates.sort_unstable();
                for &(term, idf, _) in &terms[i..] {
                    let list = self.postings[term as usize].as_slice();
                    let mut lo = 0;
                    for &slot in &candidates {
                        match list[lo..].binary_search_by_key(&slot, |p| p.slot) {
                            Ok(j) => {
                                let post = &list[lo + j];
                                scores[slot as usize] +=
                                    scorer.score(idf, post, &self.scaled_lens[slot as usize]);
                                lo += j + 1;
                            }
                            Err(j) => lo += j,
                        }
                        if lo >= list.len() {
                            break;
                        }
                    }
                }
                let top = self.top_k(scores, &candidates, k);
                for &t in touched.iter() {
                    scores[t as usize] = 0.0;
                }
                return top;
            }
            let top = self.top_k(scores, touched, k);
            for &t in touched.iter() {
                scores[t as usize] = 0.0;
            }
            top
        })
    }

    fn name_of(&self, slot: u32) -> &str {
        doc_name(&self.docs, slot)
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
    use crate::project::project_schema;
    use serde_json::json;

    type Tool = (&'static str, &'static str, serde_json::Value);

    fn tool(name: &'static str, desc: &'static str, schema: serde_json::Value) -> Tool {
        (name, desc, schema)
    }

    fn stage(tools: impl IntoIterator<Item = Tool>) -> Staged {
        let mut staged = Staged::default();
        for (name, desc, schema) in tools {
            staged.begin(name);
            staged.text(Field::Description, desc);
            project_schema(Some(&&schema), &mut |f, t| staged.text(f, t)).unwrap();
        }
        staged
    }

    fn add(ix: &mut Index, tools: impl IntoIterator<Item = Tool>) {
        ix.add_staged(&stage(tools));
    }

    fn catalog() -> Vec<Tool> {
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
        add(&mut ix, catalog());
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
            add(&mut inc, [t]);
        }
        add(
            &mut inc,
            [tool("zzz", "temporary weather thing", json!({}))],
        );
        assert!(inc.remove("send_email"));
        assert!(!inc.remove("send_email"));
        add(
            &mut inc,
            [tool(
                "send_email",
                "Send an email message",
                json!({"properties": {"to": {}}}),
            )],
        );
        assert!(inc.remove("zzz"));

        let mut fresh = Index::new(Params::default()).unwrap();
        add(&mut fresh, catalog());
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
            add(&mut ix, [tool(name, "shared words", json!({}))]);
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
        add(&mut ix, catalog());
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
    fn posting_lists_keep_slot_order_inline_or_not() {
        assert_eq!(
            std::mem::size_of::<PostingList>(),
            std::mem::size_of::<Vec<Posting>>()
        );
        let post = |slot| Posting {
            slot,
            tf: [1, 0, 0, 0],
        };
        let slots = |l: &PostingList| l.as_slice().iter().map(|p| p.slot).collect::<Vec<_>>();
        let mut list = PostingList::default();
        list.insert(post(7));
        assert!(matches!(list, PostingList::One(_)) && list.heap_bytes() == 0);
        for s in [3, 9, 1, 8] {
            list.insert(post(s));
        }
        assert_eq!(slots(&list), [1, 3, 7, 8, 9]);
        for s in [3, 42, 9, 1, 8] {
            list.remove(s);
        }
        assert_eq!(slots(&list), [7]);
        list.remove(7);
        assert!(list.is_empty() && list.heap_bytes() == 0);
        let mut one = PostingList::default();
        one.reserve_exact(1);
        one.insert(post(5));
        assert!(matches!(one, PostingList::One(_)));
        one.reserve_exact(3);
        assert!(one.heap_bytes() >= 4 * std::mem::size_of::<Posting>());
        for s in [6, 7, 8] {
            one.insert(post(s));
        }
        assert_eq!(slots(&one), [5, 6, 7, 8]);
    }

    #[test]
    fn records_round_trip_and_compact() {
        let mut docs = Docs::default();
        let mut ids = vec![5, 0, 127, 128, 16_384, 70_000, u32::MAX - 1, 3];
        let a = docs.push_free_slot();
        docs.set(a, "caf\u{e9}.tool", [3, 0, 300, u32::MAX], &mut ids.clone());
        ids.sort_unstable();
        assert_eq!(docs.get(a).unwrap().name(), "caf\u{e9}.tool");
        let (_, _, len) = docs.get(a).unwrap().decode();
        assert!(len < "caf\u{e9}.tool".len() + 4 * 5 + ids.len() * 4);
        // Many replaced records: the arena compacts and every live record survives.
        let slots: Vec<u32> = (0..100).map(|_| docs.push_free_slot()).collect();
        for round in 0..50u32 {
            for &slot in &slots {
                if round > 0 {
                    docs.take(slot).unwrap();
                }
                let name = format!("tool{slot}-{round}");
                docs.set(slot, &name, [round, 1, 2, 3], &mut [slot, round + 1000]);
            }
        }
        assert!(docs.bytes.len() <= 2 * 100 * 40 + (1 << 16) + 100);
        for &slot in &slots {
            let doc = docs.get(slot).unwrap();
            assert_eq!(doc.name(), format!("tool{slot}-49"));
            let (lens, terms, _) = doc.decode();
            assert_eq!(lens, [49, 1, 2, 3]);
            assert_eq!(terms, vec![slot, 1049]);
        }
        let (lens, terms) = docs.take(a).unwrap();
        assert_eq!((lens, terms), ([3, 0, 300, u32::MAX], ids));
        assert!(docs.get(a).is_none() && docs.take(a).is_none());
        assert_eq!(docs.iter().count(), 100);
    }

    #[test]
    fn names_split_into_namespace_and_last_segment() {
        assert_eq!(split_name("math.factorial"), (Some("math"), "factorial"));
        assert_eq!(split_name("get_weather"), (None, "get_weather"));
        assert_eq!(split_name("org/model-name"), (Some("org"), "model-name"));
        assert_eq!(
            split_name("hub.org/model:v2"),
            (Some("hub.org/model"), "v2")
        );
        assert_eq!(split_name("trailing."), (None, "trailing."));
        assert_eq!(split_name(".hidden"), (None, ".hidden"));
        assert_eq!(split_name("a..b"), (Some("a."), "b"));
        let staged = stage([tool("math.factorial", "n!", json!({}))]);
        let texts: Vec<_> = staged.texts().collect();
        assert_eq!(
            texts,
            [
                (Field::Name, "factorial"),
                (Field::ParamText, "math"),
                (Field::Description, "n!")
            ]
        );
        let mut ix = Index::new(Params::default()).unwrap();
        ix.add_staged(&staged);
        assert!(ix.contains("math.factorial"));
        assert_eq!(search(&ix, "math", 1)[0].0, "math.factorial");
    }

    #[test]
    fn long_descriptions_count_sublinearly() {
        // Same matches, one description 30 times longer: with the default exponent 0.6 the
        // long one keeps more of its score than plain BM25 (exponent 1) leaves it.
        let long = "image classification ".to_owned() + &"filler ".repeat(300);
        let ratio = |e: f32| {
            let mut ix = Index::new(Params {
                length_exponent: [1.0, e, 1.0, 1.0],
                ..Params::default()
            })
            .unwrap();
            let mut staged = Staged::default();
            staged.begin("long_tool");
            staged.text(Field::Description, &long);
            staged.begin("short_tool");
            staged.text(Field::Description, "image classification model");
            for i in 0..8 {
                staged.begin(&format!("other{i}"));
                staged.text(Field::Description, "something else entirely here");
            }
            ix.add_staged(&staged);
            let hits = search(&ix, "image classification", 2);
            assert_eq!(hits[0].0, "short_tool");
            hits[1].1 / hits[0].1
        };
        assert!(
            ratio(0.6) > ratio(1.0) * 2.0,
            "{} {}",
            ratio(0.6),
            ratio(1.0)
        );
    }

    #[test]
    fn params_validated() {
        assert!(Index::new(Params {
            k1: -1.0,
            ..Params::default()
        })
        .is_err());
        assert!(Index::new(Params {
            b: [0.5, 1.5, 0.5, 0.5],
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
        assert!(Index::new(Params {
            length_exponent: [1.0, 1.5, 1.0, 1.0],
            ..Params::default()
        })
        .is_err());
    }

    /// Every tool's full score, by brute force over all tools and terms (no pruning), in the
    /// same term order as `search_tokens`, ranked the same way.
    fn brute_force(ix: &Index, q: &str, k: usize) -> Vec<(String, f32)> {
        let n = ix.len() as f64;
        let scorer = Scorer::new(&ix.params, &ix.sum_len, n);
        let mut terms: Vec<(u32, f32, f32)> = Vec::new();
        for tok in analyze_query(q) {
            if let Some(t) = ix.vocab.get(tok.as_str()) {
                let df = ix.postings[t as usize].len() as f64;
                if df == 0.0 || terms.iter().any(|x| x.0 == t) {
                    continue;
                }
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
                terms.push((t, idf, idf * (ix.params.k1 + 1.0) * 1.001));
            }
        }
        terms.sort_by(|a, b| b.2.total_cmp(&a.2));
        let mut all: Vec<(String, f32)> = Vec::new();
        for (slot, doc) in ix.docs.iter() {
            let slot = slot as usize;
            let mut score = 0f32;
            for &(t, idf, _) in &terms {
                if let Some(p) = ix.postings[t as usize]
                    .as_slice()
                    .iter()
                    .find(|p| p.slot as usize == slot)
                {
                    score += scorer.score(idf, p, &ix.scaled_lens[slot]);
                }
            }
            if score > 0.0 {
                all.push((doc.name().to_owned(), score));
            }
        }
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    #[test]
    fn pruned_search_equals_brute_force() {
        // A deterministic pseudo-random catalog with skewed word frequencies.
        let words = [
            "get",
            "list",
            "create",
            "issue",
            "repo",
            "github",
            "slack",
            "message",
            "open",
            "closed",
            "user",
            "team",
            "invoice",
            "stripe",
            "payment",
            "refund",
            "file",
            "drive",
            "share",
            "folder",
            "weather",
            "city",
            "forecast",
            "alert",
            "metric",
            "dashboard",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |m: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as usize
        };
        let mut staged = Staged::default();
        for i in 0..600 {
            let pick = |next: &mut dyn FnMut(usize) -> usize| {
                // Square the draw: low-index words are much more frequent.
                let r = next(words.len() * words.len());
                words[(r as f64).sqrt() as usize]
            };
            let name = format!("{}_{}_{i}", pick(&mut next), pick(&mut next));
            staged.begin(&name);
            let desc: Vec<&str> = (0..next(12)).map(|_| pick(&mut next)).collect();
            staged.text(Field::Description, &desc.join(" "));
            for _ in 0..next(4) {
                staged.text(Field::ParamNames, pick(&mut next));
                staged.text(
                    Field::ParamText,
                    &format!("{} {}", pick(&mut next), pick(&mut next)),
                );
            }
        }
        let mut ix = Index::new(Params::default()).unwrap();
        ix.add_staged(&staged);
        let mut pruned_some = 0;
        for _ in 0..400 {
            let q: Vec<&str> = (0..1 + next(6)).map(|_| words[next(words.len())]).collect();
            let q = q.join(" ");
            for k in [1, 3, 5, 20] {
                let got = ix.search_tokens(&analyze_query(&q), k, None);
                assert_eq!(got, brute_force(&ix, &q, k), "query {q:?} k {k}");
                pruned_some += usize::from(got.len() == k);
            }
        }
        assert!(pruned_some > 100);
        assert!(
            PRUNED.with(|p| p.get()) > 100,
            "pruning was never exercised"
        );
    }
}
