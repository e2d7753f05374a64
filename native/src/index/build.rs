//! Adding tools: tokenize every staged text (pass 1), then insert (pass 2).

use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::FxHashMap;

use crate::project::{Field, NUM_FIELDS};
use crate::tokenize::{is_stemmable, is_stopword, Kind, Tokenizer};

use super::docs::doc_key;
use super::postings::Posting;
use super::scoring::{scale_len, Scorer};
use super::stage::{Staged, StagedVector};
use super::vocab::intern;
use super::Index;

/// Batches of at least this many tools size every postings list they extend once, up front.
pub(super) const RESERVE_BATCH: usize = 64;
/// Parameter texts up to this many bytes are tokenized once per batch and remembered.
pub(super) const MEMO_TEXT_LEN: usize = 256;

impl Index {
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
        // Pass 2: insert. The postings' bounds (`bounds.rs`) are taken under the reference
        // statistics; a first add takes as reference the statistics it will leave.
        self.bounds.tfw.resize(self.postings.len(), 0.0);
        if self.bounds.reference.is_none() || self.by_name.is_empty() {
            let mut sum_len = self.sum_len;
            for &(_, _, lens) in &tools {
                for (total, len) in sum_len.iter_mut().zip(lens) {
                    *total += u64::from(len);
                }
            }
            let n = (self.by_name.len() + tools.len()) as f64;
            self.bounds.reference = Some(Scorer::new(&self.params, &sum_len, n).norm_b());
        }
        let reference = self
            .bounds
            .reference_scorer(&self.params)
            .expect("set above");
        let docs = &self.docs;
        self.by_name.reserve(staged.len(), |s| doc_key(docs, s));
        for (i, (tool, &(start, end, lens))) in staged.tools.iter().zip(&tools).enumerate() {
            let (from, to) = tool.key;
            let vector = staged.vectors.get(i).copied().unwrap_or(StagedVector::None);
            self.insert(
                &staged.arena[from..to],
                &all_terms[start..end],
                lens,
                vector,
                staged,
                &reference,
            );
            if (i + 1).is_multiple_of(every) {
                progress("index", i + 1);
            }
        }
        if every != usize::MAX && !tools.len().is_multiple_of(every) {
            progress("index", tools.len());
        }
        self.rebase_if_stale();
    }

    /// Recompute the pruning bounds if the statistics have moved too far from theirs.
    pub(super) fn rebase_if_stale(&mut self) {
        let scorer = self.scorer();
        if self
            .bounds
            .stale(&self.params, &scorer, self.postings.len())
        {
            self.bounds
                .rebase(&scorer, &self.postings, &self.scaled_lens);
        }
    }

    /// Add or replace a tool given its distinct term ids with per-field counts.
    fn insert(
        &mut self,
        name: &str,
        terms: &[(u32, [u8; NUM_FIELDS])],
        lens: [u32; NUM_FIELDS],
        vector: StagedVector,
        staged: &Staged,
        reference: &Scorer,
    ) {
        // One probe of the name table for a new name: where it is absent is where it goes.
        let docs = &self.docs;
        self.by_name.reserve(1, |s| doc_key(docs, s));
        let mut kept: Option<(Vec<f32>, u64)> = None;
        let bucket = match self.by_name.find(name.as_bytes(), |s| doc_key(docs, s)) {
            Ok(old) => {
                if let StagedVector::Keep(key) = vector {
                    if self.vectors.key(old) == Some(key) {
                        kept = self.vectors.to_f32(old).map(|v| (v, key));
                    }
                }
                self.remove_tool(name);
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
        let e = self.params.length_exponent;
        let scaled: [f32; NUM_FIELDS] = std::array::from_fn(|f| scale_len(lens[f], e[f]));
        for &(id, tf) in terms {
            // Postings stay sorted by slot (seeks in `search.rs`); a bulk add appends, a
            // reused slot is inserted in place.
            self.postings[id as usize].insert(Posting { slot, tf });
            let bound = &mut self.bounds.tfw[id as usize];
            *bound = bound.max(reference.tfw(&tf, &scaled));
        }
        for (total, len) in self.sum_len.iter_mut().zip(lens) {
            *total += u64::from(len);
        }
        self.scaled_lens[slot as usize] = scaled;
        let mut ids: Vec<u32> = terms.iter().map(|&(id, _)| id).collect();
        self.docs.set(slot, name, lens, &mut ids);
        self.by_name.put_at(bucket, slot);
        match vector {
            StagedVector::New(i, key) => {
                let d = staged.dim;
                self.vectors
                    .set(slot, &staged.vector_arena[i * d..(i + 1) * d], key);
            }
            StagedVector::Keep(_) => {
                if let Some((v, key)) = kept {
                    self.vectors.set(slot, &v, key);
                }
            }
            StagedVector::None => {}
        }
    }

    /// Whether `staged` can be added: its vectors have the dimension of the stored ones.
    pub fn check_staged(&self, staged: &Staged) -> Result<(), String> {
        if staged.dim != 0 {
            self.vectors.check_dim(staged.dim)?;
        }
        Ok(())
    }

    /// Remove a tool; returns whether it was present.
    pub fn remove(&mut self, name: &str) -> bool {
        let removed = self.remove_tool(name);
        if removed {
            self.rebase_if_stale();
        }
        removed
    }

    /// [`Index::remove`] without recomputing the bounds (an add does that once at its end).
    fn remove_tool(&mut self, name: &str) -> bool {
        let docs = &self.docs;
        let Some(slot) = self.by_name.remove(name.as_bytes(), |s| doc_key(docs, s)) else {
            return false;
        };
        let (lens, terms) = self
            .docs
            .take(slot)
            .expect("slot of a named tool is occupied");
        self.bounds.removed += terms.len();
        for t in terms {
            let list = &mut self.postings[t as usize];
            list.remove(slot);
            if list.is_empty() {
                self.bounds.tfw[t as usize] = 0.0;
            }
        }
        for (total, len) in self.sum_len.iter_mut().zip(lens) {
            *total -= u64::from(len);
        }
        self.scaled_lens[slot as usize] = [0.0; NUM_FIELDS];
        self.vectors.clear(slot);
        self.free_slots.push(slot);
        true
    }
}
