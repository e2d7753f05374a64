//! Search: MaxScore over the postings, then a bounded heap for the top k.

use std::cell::RefCell;

use super::docs::doc_name;
use super::scoring::Scorer;
use super::ties::Ties;
use super::Index;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[cfg(test)]
thread_local! {
    /// Searches that skipped postings (MaxScore phase 2), to check the tests exercise it.
    pub(super) static PRUNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
    kth: Vec<f32>,
}

impl Index {
    /// The `k` best tools for a tokenized query, best first, as `(name, score)`.
    pub fn search_tokens(
        &self,
        tokens: &[String],
        k: usize,
        allow: Option<&[u64]>,
    ) -> Vec<(String, f32)> {
        self.named(self.search_slots(tokens, k, allow, None))
    }

    /// The `k` best tools for a query text, best first; equal scores ordered by the evidence
    /// of [`Ties`], then by name.
    pub fn search_query(&self, query: &str, k: usize, allow: Option<&[u64]>) -> Vec<(f32, u32)> {
        let tokens = super::analyze_query(query);
        self.search_slots(&tokens, k, allow, Some(&Ties::new(query)))
    }

    /// `(score, slot)` hits as `(name, score)`.
    pub fn named(&self, hits: Vec<(f32, u32)>) -> Vec<(String, f32)> {
        hits.into_iter()
            .map(|(s, slot)| (self.name_of(slot).to_owned(), s))
            .collect()
    }

    /// [`Index::search_tokens`] as `(score, slot)`.
    pub fn search_slots(
        &self,
        tokens: &[String],
        k: usize,
        allow: Option<&[u64]>,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
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
                let top = self.top_k(scores, &candidates, k, ties);
                for &t in touched.iter() {
                    scores[t as usize] = 0.0;
                }
                return top;
            }
            let top = self.top_k(scores, touched, k, ties);
            for &t in touched.iter() {
                scores[t as usize] = 0.0;
            }
            top
        })
    }

    pub(super) fn name_of(&self, slot: u32) -> &str {
        doc_name(&self.docs, slot)
    }

    /// `a` ranks before `b`: higher score, then smaller name.
    /// `better`, equal scores ordered first by `ties` evidence (more first) when given.
    fn better_with(&self, a: (f32, u32), b: (f32, u32), ties: Option<&Ties>) -> bool {
        if a.0 != b.0 {
            return a.0 > b.0;
        }
        if let Some(t) = ties {
            let (ea, eb) = (t.evidence(self.name_of(a.1)), t.evidence(self.name_of(b.1)));
            if ea != eb {
                return ea > eb;
            }
        }
        self.name_of(a.1) < self.name_of(b.1)
    }

    fn top_k(
        &self,
        scores: &[f32],
        touched: &[u32],
        k: usize,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
        self.top_k_with(
            touched.iter().map(|&slot| (scores[slot as usize], slot)),
            k,
            ties,
        )
    }

    /// The `k` best of `(score, slot)` candidates, best first (ties by name).
    pub(super) fn top_k_by(
        &self,
        candidates: impl Iterator<Item = (f32, u32)>,
        k: usize,
    ) -> Vec<(f32, u32)> {
        self.top_k_with(candidates, k, None)
    }

    /// The `k` best candidates, best first: ties by `ties` evidence, then by name.
    pub(super) fn top_k_with(
        &self,
        candidates: impl Iterator<Item = (f32, u32)>,
        k: usize,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
        let better = |a, b| self.better_with(a, b, ties);
        // A min-heap (by `better`) of at most k candidates: the root is the worst kept.
        let mut heap: Vec<(f32, u32)> = Vec::with_capacity(k.min(1024));
        if k == 0 {
            return heap;
        }
        for cand in candidates {
            if heap.len() < k {
                heap.push(cand);
                let mut i = heap.len() - 1;
                while i > 0 {
                    let parent = (i - 1) / 2;
                    if better(heap[parent], heap[i]) {
                        heap.swap(parent, i);
                        i = parent;
                    } else {
                        break;
                    }
                }
            } else if better(cand, heap[0]) {
                heap[0] = cand;
                let mut i = 0;
                loop {
                    let (l, r) = (2 * i + 1, 2 * i + 2);
                    let mut worst = i;
                    if l < heap.len() && better(heap[worst], heap[l]) {
                        worst = l;
                    }
                    if r < heap.len() && better(heap[worst], heap[r]) {
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
            if better(a, b) {
                std::cmp::Ordering::Less
            } else if better(b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        heap
    }
}
