//! Adding tools: tokenize every staged text (pass 1), then insert (pass 2).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::project::NUM_FIELDS;

use super::docs::doc_key;
use super::fill::Targets;
use super::pass1::Pass1;
use super::postings::{Posting, PostingList, WideTf};
use super::scoring::{scale_len, Scorer};
use super::stage::{Staged, StagedVector};
use super::vectors::Vectors;
use super::vocab::intern;
use super::Index;

/// A first add of at least this many tools inserts on two threads.
pub(super) const PARALLEL_FIRST_ADD: usize = 16_384;
#[cfg(test)]
thread_local! {
    /// Tests: insert on one thread whatever the add (to compare the two paths).
    pub(super) static ONE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn one_thread() -> bool {
    #[cfg(test)]
    return ONE_THREAD.with(|o| o.get());
    #[cfg(not(test))]
    false
}

/// Batches of at least this many tools size every postings list they extend once, up front.
pub(super) const RESERVE_BATCH: usize = 64;

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
        let mut pass1 = Pass1::new();
        pass1.tokenize(staged, every, &mut |done| progress("tokenize", done));
        if every != usize::MAX && !pass1.len().is_multiple_of(every) {
            progress("tokenize", pass1.len());
        }
        self.insert_pass1(&[staged], pass1, every, &mut |done| progress("index", done));
    }

    /// Pass 2 of an add: the terms of `pass1` (which tokenized `chunks`, in order) merged into
    /// the vocabulary, then every tool inserted, calling `progress(done)` every `every` tools
    /// and at the end.
    pub fn insert_pass1(
        &mut self,
        chunks: &[&Staged],
        mut pass1: Pass1,
        every: usize,
        progress: &mut dyn FnMut(usize),
    ) {
        // The impact prefixes were made under the statistics and postings this add changes.
        self.impacts.clear();
        // What each term's postings list gains (pass 1 counted it), by the index's term ids.
        let mut gained = pass1.tools_per_term();
        if self.vocab.len() == 0 {
            // A first add: the local ids are the ones interning would give, in order.
            self.vocab = std::mem::take(&mut pass1.vocab);
            self.postings.clear();
            self.postings
                .resize_with(self.vocab.len(), PostingList::default);
        } else {
            // Local term ids to the index's, interned in order of first appearance (what one
            // pass over the tools in order would have given).
            let global: Vec<u32> = (0..pass1.vocab.len() as u32)
                .map(|l| intern(&mut self.vocab, &mut self.postings, pass1.vocab.term(l)))
                .collect();
            drop(std::mem::take(&mut pass1.vocab));
            for (id, _) in pass1.all_terms.iter_mut() {
                *id = global[*id as usize];
            }
            let mut by_global = vec![0u32; self.postings.len()];
            for (&g, &n) in global.iter().zip(&gained) {
                by_global[g as usize] = n;
            }
            gained = by_global;
        }
        let (all_terms, tools) = (&pass1.all_terms, &pass1.tools);
        let parallel = self.docs.slots() == 0 && tools.len() >= PARALLEL_FIRST_ADD && !one_thread();
        if tools.len() >= RESERVE_BATCH && !parallel {
            // Every postings list sized once, for all it gains (the parallel first add sizes
            // them as it sets up its fill).
            for (list, &n) in self.postings.iter_mut().zip(&gained) {
                if n > 0 {
                    list.reserve_exact(n as usize);
                }
            }
        }
        // The postings' bounds (`bounds.rs`) are taken under the reference statistics; a first
        // add takes as reference the statistics it will leave.
        self.bounds.tfw.resize(self.postings.len(), 0.0);
        if self.bounds.reference.is_none() || self.by_name.is_empty() {
            let mut sum_len = self.sum_len;
            for &(_, _, lens) in tools {
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
        // Progress stays monotonic if the parallel first add has to start over.
        let mut reported = 0;
        let mut progress = |done: usize| {
            if done > reported {
                reported = done;
                progress(done);
            }
        };
        if parallel && self.insert_first(chunks, &pass1, &gained, &reference, every, &mut progress)
        {
            self.vectors.sync_graph();
            return;
        }
        self.by_name.reserve(tools.len());
        let mut i = 0;
        for staged in chunks {
            for (j, tool) in staged.tools.iter().enumerate() {
                let (start, end, lens) = tools[i];
                let (from, to) = tool.key;
                let vector = staged.vectors.get(j).copied().unwrap_or(StagedVector::None);
                self.insert(
                    &staged.arena[from..to],
                    &all_terms[start..end],
                    lens,
                    vector,
                    staged,
                    &reference,
                );
                i += 1;
                if i.is_multiple_of(every) {
                    progress(i);
                }
            }
        }
        if every != usize::MAX && !i.is_multiple_of(every) {
            progress(i);
        }
        drop(pass1);
        self.rebase_if_stale();
        self.make_long_impacts();
        self.vectors.sync_graph();
    }

    /// Pass 2 of a first add (the index has no slot yet) on three threads: two fill the
    /// postings and their bounds, each for one half of the tools (`fill.rs`; `gained`: each
    /// term's count of tools), a third the name table, the tool records and the vectors; tool
    /// `i` takes slot `i`. Returns false, the index left empty, if two tools share a name (the
    /// caller then inserts one by one: the later replaces the earlier).
    fn insert_first(
        &mut self,
        chunks: &[&Staged],
        pass1: &Pass1,
        gained: &[u32],
        reference: &Scorer,
        every: usize,
        progress: &mut dyn FnMut(usize),
    ) -> bool {
        let Index {
            params,
            postings,
            docs,
            scaled_lens,
            by_name,
            sum_len,
            vectors,
            bounds,
            wide,
            ..
        } = self;
        let (all_terms, tools) = (&pass1.all_terms, &pass1.tools);
        let shared_name = AtomicBool::new(false);
        let e = params.length_exponent;
        let dim = chunks.iter().map(|c| c.dim).max().unwrap_or(0);
        scaled_lens.reserve(tools.len());
        for &(_, _, lens) in tools {
            scaled_lens.push(std::array::from_fn(|f| scale_len(lens[f], e[f])));
            for (total, len) in sum_len.iter_mut().zip(lens) {
                *total += u64::from(len);
            }
        }
        // The tools' halves, by postings (a tool's `all_terms` start).
        let half = all_terms.len() / 2;
        let split = tools.partition_point(|&(start, _, _)| start < half);
        let n = tools.len();
        let names_len = chunks.iter().map(|c| c.names_len()).sum();
        let (targets, mut front, mut back) = Targets::new(postings, gained);
        let lens_of = &scaled_lens[..];
        let upper_done = AtomicUsize::new(0);
        let complete = std::thread::scope(|scope| {
            let records = scope.spawn(|| {
                by_name.reserve(tools.len());
                vectors.reserve(tools.len(), dim);
                docs.reserve(tools.len(), names_len, all_terms.len());
                let mut ids: Vec<u32> = Vec::new();
                let mut i = 0;
                // The name table's bucket of the name AHEAD tools on is fetched while this
                // tool's record is made (the table is far bigger than a cache).
                const AHEAD: usize = 8;
                let names = chunks
                    .iter()
                    .flat_map(|c| c.tools.iter().map(|t| c.name(t)));
                let mut ahead = names.skip(AHEAD);
                for staged in chunks {
                    for (j, tool) in staged.tools.iter().enumerate() {
                        if let Some(next) = ahead.next() {
                            by_name.prefetch(next.as_bytes());
                        }
                        let (start, end, lens) = tools[i];
                        let name = staged.name(tool);
                        let Err(bucket) = by_name.find(name.as_bytes(), |s| doc_key(docs, s))
                        else {
                            shared_name.store(true, Ordering::Relaxed);
                            return false;
                        };
                        let slot = docs.push_free_slot();
                        ids.clear();
                        ids.extend(all_terms[start..end].iter().map(|&(id, _)| id));
                        docs.set(slot, name, lens, &mut ids);
                        by_name.put_at(bucket, slot);
                        if let Some(&StagedVector::New(v, key)) = staged.vectors.get(j) {
                            let d = staged.dim;
                            vectors.set(slot, &staged.vector_arena[v * d..(v + 1) * d], key);
                        }
                        i += 1;
                    }
                }
                docs.fit();
                true
            });
            // The upper half, from the last tool down, from the back of every list.
            let upper = scope.spawn(|| {
                let mut upper_wide = WideTf::default();
                for i in (split..n).rev() {
                    let (start, end, _) = tools[i];
                    let scaled = &lens_of[i];
                    for &(id, tf) in &all_terms[start..end] {
                        let (post, is_wide) = Posting::new(i as u32, tf);
                        if is_wide {
                            upper_wide.insert((id, i as u32), tf);
                        }
                        // SAFETY: one posting a tool and term (`fill.rs`).
                        unsafe { back.put_back(id, post, reference.tfw(&tf, scaled)) };
                    }
                    let done = n - i;
                    if done.is_multiple_of(1024) {
                        upper_done.store(done, Ordering::Relaxed);
                        if shared_name.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
                (upper_wide, back)
            });
            // The lower half here, in slot order, from the front of every list; progress
            // counts both halves.
            let mut next_report = every;
            let mut report_upto = |done: usize| {
                while next_report <= done {
                    progress(next_report);
                    next_report = next_report.saturating_add(every);
                }
            };
            for (i, &(start, end, _)) in tools[..split].iter().enumerate() {
                let scaled = &lens_of[i];
                for &(id, tf) in &all_terms[start..end] {
                    let (post, is_wide) = Posting::new(i as u32, tf);
                    if is_wide {
                        wide.insert((id, i as u32), tf);
                    }
                    // SAFETY: one posting a tool and term (`fill.rs`).
                    unsafe { front.put_front(id, post, reference.tfw(&tf, scaled)) };
                }
                if (i + 1).is_multiple_of(1024) {
                    report_upto(i + 1 + upper_done.load(Ordering::Relaxed));
                    if shared_name.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            // A panic there is re-raised here, as the one-thread path would raise it.
            let (upper_wide, back) = upper
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            // One by one, as one thread would have inserted them (the table's size follows).
            for (key, tf) in upper_wide {
                wide.insert(key, tf);
            }
            let complete = records
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            if complete {
                targets.finish(postings, gained, front, back, &mut bounds.tfw);
                report_upto(n);
            }
            complete
        });
        if !complete {
            for list in postings.iter_mut() {
                *list = PostingList::default();
            }
            bounds.tfw.fill(0.0);
            wide.clear();
            scaled_lens.clear();
            *sum_len = [0; NUM_FIELDS];
            *docs = Default::default();
            *by_name = Default::default();
            let ann_from = vectors.ann_from();
            *vectors = Vectors::new(vectors.precision());
            vectors.set_ann_from(ann_from);
            return false;
        }
        if every != usize::MAX && !tools.len().is_multiple_of(every) {
            progress(tools.len());
        }
        self.rebase_if_stale();
        self.make_long_impacts();
        true
    }

    /// The impact prefixes of the long lists (`impacts.rs`), made at the end of an add so that
    /// no search pays for them.
    fn make_long_impacts(&mut self) {
        let threads = if one_thread() {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        };
        let scorer = self.scorer();
        self.impacts.make_long(
            &self.postings,
            &scorer,
            &self.wide,
            &self.scaled_lens,
            threads,
        );
    }

    /// Recompute the pruning bounds if the statistics have moved too far from theirs.
    pub(super) fn rebase_if_stale(&mut self) {
        let scorer = self.scorer();
        if self
            .bounds
            .stale(&self.params, &scorer, self.postings.len())
        {
            self.bounds
                .rebase(&scorer, &self.postings, &self.scaled_lens, &self.wide);
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
        self.by_name.reserve(1);
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
            let (post, is_wide) = Posting::new(slot, tf);
            if is_wide {
                self.wide.insert((id, slot), tf);
            }
            self.postings[id as usize].insert(post);
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
            self.vectors.sync_graph();
        }
        removed
    }

    /// [`Index::remove`] without recomputing the bounds (an add does that once at its end).
    fn remove_tool(&mut self, name: &str) -> bool {
        let docs = &self.docs;
        let Some(slot) = self.by_name.remove(name.as_bytes(), |s| doc_key(docs, s)) else {
            return false;
        };
        self.impacts.clear();
        let (lens, terms) = self
            .docs
            .take(slot)
            .expect("slot of a named tool is occupied");
        self.bounds.removed += terms.len();
        for t in terms {
            self.wide.remove(&(t, slot));
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

#[cfg(test)]
mod wide_tests {
    use super::super::scoring::Scorer;
    use super::super::{Index, Params, Staged};
    use crate::project::{Field, NUM_FIELDS};

    fn add(ix: &mut Index, tools: &[(&str, String)]) {
        let mut staged = Staged::default();
        for (name, desc) in tools {
            staged.begin(name);
            staged.text(Field::Description, desc);
        }
        ix.add_staged(&staged);
    }

    /// The score `search_query` gives `name` for `word`, and the one of the exact `tf`.
    fn scores(ix: &Index, word: &str, name: &str, tf: [u8; NUM_FIELDS]) -> (f32, f32) {
        let slot = ix.slot_of(name).unwrap();
        let hits = ix.search_query(word, 10, None);
        let got = hits.iter().find(|h| h.1 == slot).expect("a hit").0;
        let t = ix.vocab.get(word).unwrap();
        let df = ix.postings[t as usize].len() as f64;
        let n = ix.len() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
        let scorer = Scorer::new(&ix.params, &ix.sum_len, n);
        (got, scorer.score(idf, &tf, &ix.scaled_lens[slot as usize]))
    }

    #[test]
    fn frequencies_of_15_and_more_score_exactly_and_leave_with_their_tool() {
        let words = |w: &str, n: usize| vec![w; n].join(" ");
        let mut ix = Index::new(Params::default()).unwrap();
        add(
            &mut ix,
            &[
                ("many", format!("{} other", words("zebra", 40))),
                ("some", format!("{} other", words("zebra", 3))),
                ("more", words("zebra", 200)),
                ("filler", "other words here".to_owned()),
            ],
        );
        assert_eq!(ix.wide.len(), 2, "40 and 200 are wide, 3 is not");
        for (name, tf) in [("many", 40), ("some", 3), ("more", 200)] {
            let (got, want) = scores(&ix, "zebra", name, [0, tf, 0, 0]);
            assert_eq!(got.to_bits(), want.to_bits(), "{name}");
        }
        // 200 and 40 are not capped alike (a four-bit cap would give them one frequency).
        let (more, _) = scores(&ix, "zebra", "more", [0, 200, 0, 0]);
        let (capped, _) = scores(&ix, "zebra", "more", [0, 15, 0, 0]);
        assert_eq!(more, capped.max(more));
        // Removed, the wide entries go; the slot's next tool is scored by its own counts.
        assert!(ix.remove("many") && ix.remove("more"));
        assert!(ix.wide.is_empty());
        add(
            &mut ix,
            &[("again", format!("{} other", words("zebra", 16)))],
        );
        assert_eq!(ix.wide.len(), 1);
        let (got, want) = scores(&ix, "zebra", "again", [0, 16, 0, 0]);
        assert_eq!(got.to_bits(), want.to_bits());
        // Replaced by a tool of the same name with small counts: not wide any more.
        add(&mut ix, &[("again", words("zebra", 2))]);
        assert!(ix.wide.is_empty());
    }
}
