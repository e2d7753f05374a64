//! Exhaustive scoring: every posting of every query term, term at a time, into a per-thread
//! score array. What MaxScore (`search.rs`) must return, bit for bit: the reference of the
//! exactness tests and of `bench_million.py --check-exact`.

use std::cell::RefCell;

use super::postings::tf_of;
use super::ties::Ties;
use super::Index;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
}

impl Index {
    /// The `k` best tools with every posting of every query term scored (no pruning): what
    /// [`Index::search_slots`] must return, for tests and benchmarks.
    pub fn search_exhaustive(
        &self,
        tokens: &[String],
        k: usize,
        allow: Option<&[u64]>,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
        if k == 0 || self.by_name.is_empty() || tokens.is_empty() {
            return Vec::new();
        }
        let (terms, scorer) = self.query_terms(tokens);
        let allowed = |slot: u32| match allow {
            Some(mask) => mask[(slot / 64) as usize] & (1u64 << (slot % 64)) != 0,
            None => true,
        };
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch { scores, touched } = &mut *scratch;
            if scores.len() < self.docs.slots() {
                scores.resize(self.docs.slots(), 0.0);
            }
            touched.clear();
            // Term at a time in canonical order: each tool's score is summed in that order.
            for term in &terms {
                for p in term.list {
                    if !allowed(p.slot) {
                        continue;
                    }
                    let tf = tf_of(&self.wide, term.id, p);
                    let s = scorer.score(term.idf, &tf, &self.scaled_lens[p.slot as usize]);
                    if s <= 0.0 {
                        continue;
                    }
                    let cell = &mut scores[p.slot as usize];
                    if *cell == 0.0 {
                        touched.push(p.slot);
                    }
                    *cell += s;
                }
            }
            let top = self.top_k(scores, touched, k, ties);
            for &t in touched.iter() {
                scores[t as usize] = 0.0;
            }
            top
        })
    }
}
