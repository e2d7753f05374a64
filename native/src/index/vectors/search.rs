//! Vector search over the index's tools: the exact scan below `approx_from` vectors, and above
//! it the candidates nearest by Hamming distance of the sign bits, rescored with the int8 copy
//! (and with `f32` vectors the best `2k` of those again exactly).

use super::super::Index;
use super::graph::Graph;
use super::{
    quantize, rescored, QueryVec, DEFAULT_APPROX_FROM, DEFAULT_EXPANSION, DEFAULT_RESCORE,
};

#[cfg(test)]
thread_local! {
    /// Vector searches the graph answered (tests check it is exercised).
    pub(in crate::index) static GRAPH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

thread_local! {
    static HAMMING: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How vector searches run: exactly below `approx_from` vectors, else the nearest by Hamming
/// distance of the sign bits (`rescore` of them at 10,000 vectors, more in larger catalogs:
/// [`rescored`]) are scored with the int8 copy and the best `2k` of those exactly. Where the
/// vectors have an HNSW graph (`graph.rs`), it proposes `expansion` candidates instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorSearch {
    pub approx_from: usize,
    pub rescore: usize,
    pub expansion: usize,
}

impl Default for VectorSearch {
    fn default() -> Self {
        VectorSearch {
            approx_from: DEFAULT_APPROX_FROM,
            rescore: DEFAULT_RESCORE,
            expansion: DEFAULT_EXPANSION,
        }
    }
}

impl Index {
    /// The `k` tools whose vectors are nearest the query (cosine), best first; ties by name.
    /// Exact below `how.approx_from` vectors; above, the graph's candidates where there is a
    /// graph, else the `how.rescore` (or a few more: the whole last distance) nearest by
    /// Hamming distance of the sign bits, scored with int8 and the best `2k` exactly (`exact`
    /// forces the full scan).
    pub fn search_vector_with(
        &self,
        q: &QueryVec,
        k: usize,
        allow: Option<&[u64]>,
        how: VectorSearch,
        exact: bool,
    ) -> Vec<(f32, u32)> {
        if k == 0 || self.vectors.is_empty() {
            return Vec::new();
        }
        let r = rescored(how.rescore, self.vectors.len()).max(k);
        if exact || self.vectors.len() < how.approx_from || self.vectors.len() <= r {
            return self.search_vector(q, k, allow);
        }
        if let Some(graph) = self.vectors.graph() {
            if let Some(hits) = self.search_graph(graph, q, k, allow, how) {
                return hits;
            }
        }
        let code = self.vectors.code_of(q);
        let (q8, q8_scale) = match q {
            QueryVec::F32(v) => quantize(v),
            QueryVec::I8(v, s) => (v.clone(), *s),
        };
        let bits = self.vectors.dim() + 1;
        // Distances are small integers: a histogram finds the cut, then one pass collects
        // the candidates in slot order.
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
            // Every slot up to the cut, the whole last distance included (at least `r`
            // candidates): which ones does not depend on which slot a tool got.
            each(&mut |s| {
                if (dist[s] as usize) <= cut {
                    candidates.push((self.vectors.score_i8(&q8, q8_scale, s as u32), s as u32));
                }
            });
        });
        // Rescored with int8 (a quarter of the bytes to read); with f32 vectors the best 4k of
        // those are scored again exactly.
        if let QueryVec::F32(_) = q {
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
    pub fn search_vector(&self, q: &QueryVec, k: usize, allow: Option<&[u64]>) -> Vec<(f32, u32)> {
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
    /// The graph's candidates (`how.expansion` of them, at least `2k`), each scored exactly,
    /// the best `k` first. `None` where the sign-bit search should answer: an allow-list that
    /// keeps under half the vectors (the graph's walk would find too few of them), or fewer
    /// hits than there are allowed vectors up to `k`.
    fn search_graph(
        &self,
        graph: &Graph,
        q: &QueryVec,
        k: usize,
        allow: Option<&[u64]>,
        how: VectorSearch,
    ) -> Option<Vec<(f32, u32)>> {
        let present = self.vectors.present();
        let allowed = |slot: u32| -> bool {
            let (w, b) = ((slot / 64) as usize, slot % 64);
            let m = match allow {
                None => u64::MAX,
                Some(m) => m.get(w).copied().unwrap_or(0),
            };
            present.get(w).is_some_and(|p| p & m & (1u64 << b) != 0)
        };
        let n_allowed = match allow {
            None => self.vectors.len(),
            Some(m) => present
                .iter()
                .zip(m)
                .map(|(p, a)| (p & a).count_ones() as usize)
                .sum(),
        };
        if n_allowed * 2 < self.vectors.len() {
            return None;
        }
        let unit: Vec<f32> = match q {
            QueryVec::F32(v) => v.clone(),
            QueryVec::I8(v, s) => v.iter().map(|&x| f32::from(x) * s).collect(),
        };
        let found = graph.search(&unit, how.expansion.max(2 * k), allowed);
        // Checked again here: what the graph returns is only ever a proposal.
        let hits: Vec<(f32, u32)> = found
            .into_iter()
            .filter(|&s| allowed(s))
            .map(|s| (self.vectors.score(q, s), s))
            .collect();
        if hits.len() < k.min(n_allowed) {
            return None;
        }
        #[cfg(test)]
        GRAPH.with(|g| g.set(g.get() + 1));
        Some(self.top_k_by(hits.into_iter(), k))
    }
}
