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

/// From this many vectors on, the sign-bit scan and the int8 rescoring run on two threads
/// (scoped, one spawned per pass): at a million vectors the scan reads 32 MB a query.
pub const PARALLEL_FROM: usize = 1 << 17;

/// How many candidates ahead of the one being scored are prefetched.
const PREFETCH: usize = 8;

/// Cores this process may use (read once).
fn threads() -> usize {
    use std::sync::OnceLock;
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

thread_local! {
    static HAMMING: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How vector searches run: exactly below `approx_from` vectors, else the nearest by Hamming
/// distance of the sign bits (`rescore` of them for 50 hits at 10,000 vectors, fewer for
/// fewer hits, more in larger catalogs: [`rescored`]) are scored with the int8 copy and the best `2k` of those exactly. Where the
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
    /// graph, else the [`rescored`] (or a few more: the whole last distance) nearest by
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
        let r = rescored(how.rescore, self.vectors.len(), k).max(k);
        if exact || self.vectors.len() < how.approx_from || self.vectors.len() <= r {
            return self.search_vector(q, k, allow);
        }
        if let Some(graph) = self.vectors.graph() {
            if let Some(hits) = self.search_graph(graph, q, k, allow, how) {
                return hits;
            }
        }
        let words = self.vectors.present().len();
        // The slots in halves of whole bitmap words, one per thread from `PARALLEL_FROM`
        // vectors on (and two cores), else one range.
        let parts = if self.vectors.len() >= PARALLEL_FROM && threads() >= 2 && words >= 2 {
            2
        } else {
            1
        };
        self.search_sign_bits(q, k, allow, r, parts)
    }

    /// The sign-bit search: the `r` nearest by Hamming distance (the whole last distance
    /// included), scored with int8, with `f32` vectors the best `2k` of those exactly; the
    /// slots split in `parts` ranges of whole bitmap words, each scanned on a thread of its
    /// own. Every part is deterministic and the parts are concatenated in slot order, so
    /// `parts` changes no result (a test compares 1 and 2).
    fn search_sign_bits(
        &self,
        q: &QueryVec,
        k: usize,
        allow: Option<&[u64]>,
        r: usize,
        parts: usize,
    ) -> Vec<(f32, u32)> {
        let code = self.vectors.code_of(q);
        let (q8, q8_scale) = match q {
            QueryVec::F32(v) => quantize(v),
            QueryVec::I8(v, s) => (v.clone(), *s),
        };
        let bins = self.vectors.dim() + 2;
        let words = self.vectors.present().len();
        let parts = parts.clamp(1, words.max(1));
        let mut candidates: Vec<(f32, u32)> = Vec::with_capacity(r + 64);
        HAMMING.with(|dist| {
            let mut dist = dist.borrow_mut();
            dist.clear();
            dist.resize(words * 64, u16::MAX);
            let bounds: Vec<usize> = (0..=parts).map(|i| words * i / parts).collect();
            // Pass 1: distances and their histogram (small integers), per part.
            let mut hists = vec![vec![0u32; bins]; parts];
            {
                let mut chunks: Vec<&mut [u16]> = Vec::with_capacity(parts);
                let mut rest: &mut [u16] = &mut dist;
                for i in 0..parts {
                    let (a, b) = rest.split_at_mut((bounds[i + 1] - bounds[i]) * 64);
                    chunks.push(a);
                    rest = b;
                }
                let work = |(i, (out, hist)): (usize, (&mut [u16], &mut Vec<u32>))| {
                    self.hamming_part(&code, allow, bounds[i], bounds[i + 1], out, hist)
                };
                if parts == 1 {
                    chunks
                        .into_iter()
                        .zip(hists.iter_mut())
                        .enumerate()
                        .for_each(work);
                } else {
                    std::thread::scope(|sc| {
                        let mut it = chunks.into_iter().zip(hists.iter_mut()).enumerate();
                        let first = it.next().expect("two parts");
                        let handles: Vec<_> = it.map(|job| sc.spawn(move || work(job))).collect();
                        work(first);
                        for h in handles {
                            h.join().expect("the sign-bit scan's thread");
                        }
                    });
                }
            }
            let mut hist = vec![0usize; bins];
            for h in &hists {
                for (t, &c) in hist.iter_mut().zip(h) {
                    *t += c as usize;
                }
            }
            let (mut cut, mut below) = (0usize, 0usize);
            while cut < hist.len() && below + hist[cut] < r {
                below += hist[cut];
                cut += 1;
            }
            // Pass 2: every slot up to the cut, the whole last distance included (at least
            // `r` candidates, which ones not depending on which slot a tool got), scored
            // with the int8 copy; per part, then in slot order.
            let cut = cut.min(usize::from(u16::MAX - 1)) as u16;
            let dist: &[u16] = &dist;
            let collect = |i: usize| -> Vec<(f32, u32)> {
                let (w0, w1) = (bounds[i], bounds[i + 1]);
                let mut slots: Vec<u32> = Vec::new();
                // Slots without a vector or not allowed hold u16::MAX. Eight at a time: the
                // least of eight distances (vectorized) says whether any is a candidate.
                for (c, block) in dist[w0 * 64..w1 * 64].chunks_exact(8).enumerate() {
                    if block.iter().fold(u16::MAX, |m, &d| m.min(d)) > cut {
                        continue;
                    }
                    for (j, &d) in block.iter().enumerate() {
                        if d <= cut {
                            slots.push((w0 * 64 + c * 8 + j) as u32);
                        }
                    }
                }
                // Scored a few candidates behind the prefetches (each is a cache miss).
                for &s in slots.iter().take(PREFETCH) {
                    self.vectors.prefetch(s, false);
                }
                slots
                    .iter()
                    .enumerate()
                    .map(|(j, &s)| {
                        if let Some(&ahead) = slots.get(j + PREFETCH) {
                            self.vectors.prefetch(ahead, false);
                        }
                        (self.vectors.score_i8(&q8, q8_scale, s), s)
                    })
                    .collect()
            };
            if parts == 1 {
                candidates = collect(0);
            } else {
                std::thread::scope(|sc| {
                    let handles: Vec<_> =
                        (1..parts).map(|i| sc.spawn(move || collect(i))).collect();
                    candidates = collect(0);
                    for h in handles {
                        candidates.extend(h.join().expect("the sign-bit scan's thread"));
                    }
                });
            }
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
            for &(_, s) in candidates.iter().take(PREFETCH) {
                self.vectors.prefetch(s, true);
            }
            for j in 0..candidates.len() {
                if let Some(&(_, ahead)) = candidates.get(j + PREFETCH) {
                    self.vectors.prefetch(ahead, true);
                }
                candidates[j].0 = self.vectors.score(q, candidates[j].1);
            }
        }
        self.top_k_by(candidates.into_iter(), k)
    }
}

impl Index {
    /// Pass 1 of the sign-bit search over bitmap words `w0..w1`: the Hamming distance of each
    /// slot's code to `code` into `out` (one per slot of those words; `u16::MAX` where the
    /// slot holds no vector or is not allowed) and their histogram into `hist`.
    fn hamming_part(
        &self,
        code: &[u64],
        allow: Option<&[u64]>,
        w0: usize,
        w1: usize,
        out: &mut [u16],
        hist: &mut [u32],
    ) {
        let present = self.vectors.present();
        let slots = self.vectors.slots();
        let (s0, s1) = (w0 * 64, (w1 * 64).min(slots));
        if s1 > s0 {
            self.vectors
                .hamming_range(code, s0, s1, &mut out[..s1 - s0]);
        }
        let mut lanes = vec![0u32; hist.len() * 4];
        for w in w0..w1 {
            let mut bits = match allow {
                None => present[w],
                Some(m) => present[w] & m.get(w).copied().unwrap_or(0),
            };
            let block = &mut out[(w - w0) * 64..(w - w0 + 1) * 64];
            if bits == u64::MAX {
                // Four histograms interleaved (`d * 4 + lane`): equal distances in a row do
                // not wait on each other's increment.
                for d in block.chunks_exact(4) {
                    lanes[d[0] as usize * 4] += 1;
                    lanes[d[1] as usize * 4 + 1] += 1;
                    lanes[d[2] as usize * 4 + 2] += 1;
                    lanes[d[3] as usize * 4 + 3] += 1;
                }
                continue;
            }
            // A partial word: count the kept slots, mark the others.
            let mut keep = [false; 64];
            while bits != 0 {
                keep[bits.trailing_zeros() as usize] = true;
                bits &= bits - 1;
            }
            for (d, k) in block.iter_mut().zip(keep) {
                if k {
                    hist[*d as usize] += 1;
                } else {
                    *d = u16::MAX;
                }
            }
        }
        for (h, l) in hist.iter_mut().zip(lanes.chunks_exact(4)) {
            *h += l[0] + l[1] + l[2] + l[3];
        }
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

#[cfg(test)]
mod parallel_tests {
    use super::super::super::{Index, Params, Staged};
    use super::super::{Precision, QueryVec};
    use crate::project::Field;

    /// A deterministic pseudo-random vector.
    fn vector(seed: u64, dim: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn index(n: usize, dim: usize, precision: Precision) -> Index {
        let mut staged = Staged::default();
        for i in 0..n {
            staged.begin(&format!("tool{i}"));
            staged.text(Field::Description, "a tool");
            staged
                .vector(Some(&vector(i as u64, dim)), Some(1))
                .unwrap();
        }
        let mut ix = Index::with_precision(Params::default(), precision).unwrap();
        ix.add_staged(&staged);
        ix
    }

    #[test]
    fn the_sign_bit_search_gives_the_same_hits_on_one_thread_and_on_two() {
        for precision in [Precision::F32, Precision::I8] {
            let mut ix = index(5_000, 24, precision);
            // Holes: removed tools leave slots without a vector, partial bitmap words.
            for i in (0..5_000).step_by(7) {
                ix.remove(&format!("tool{i}"));
            }
            let odd: Vec<String> = (0..5_000)
                .filter(|i| i % 3 != 0)
                .map(|i| format!("tool{i}"))
                .collect();
            let allow = ix.allow_mask(odd.iter().map(String::as_str));
            for seed in 0..40u64 {
                let q: QueryVec = ix.vectors().prepare(&vector(10_000 + seed, 24)).unwrap();
                for (k, r) in [(1, 50), (10, 300), (50, 4_999)] {
                    for mask in [None, Some(allow.as_slice())] {
                        let one = ix.search_sign_bits(&q, k, mask, r, 1);
                        let two = ix.search_sign_bits(&q, k, mask, r, 2);
                        assert_eq!(one.len(), k, "{precision:?} k {k}");
                        assert_eq!(
                            one.iter().map(|h| (h.0.to_bits(), h.1)).collect::<Vec<_>>(),
                            two.iter().map(|h| (h.0.to_bits(), h.1)).collect::<Vec<_>>(),
                            "{precision:?} k {k} r {r}"
                        );
                        for h in &one {
                            assert!(ix.vectors().key(h.1).is_some(), "a removed tool came back");
                            if let Some(m) = mask {
                                assert!(m[(h.1 / 64) as usize] & (1 << (h.1 % 64)) != 0);
                            }
                        }
                        // With every vector a candidate, nearly the exact scan's hits (the
                        // int8 pass picks which 2k are scored exactly).
                        if r >= 4_999 {
                            let exact = ix.search_vector(&q, k, mask);
                            let found = exact.iter().filter(|h| one.contains(h)).count();
                            assert!(found * 10 >= k * 9, "{precision:?} k {k}: {found}");
                        }
                    }
                }
            }
        }
    }
}
