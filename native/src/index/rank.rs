//! Ranking candidates: a bounded heap for the top k, equal scores ordered by the evidence of
//! [`Ties`], then by tool name.

use super::docs::doc_name;
use super::ties::Ties;
use super::Index;

impl Index {
    pub(super) fn name_of(&self, slot: u32) -> &str {
        doc_name(&self.docs, slot)
    }

    /// `a` ranks before `b`: higher score, then smaller name.
    /// `better`, equal scores ordered first by `ties` evidence (more first) when given.
    pub(super) fn better_with(&self, a: (f32, u32), b: (f32, u32), ties: Option<&Ties>) -> bool {
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

    pub(super) fn top_k(
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
