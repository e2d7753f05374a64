//! An HNSW graph over the stored vectors (the `usearch` crate, Unum's, Apache-2.0), kept from
//! `ann_from` vectors on (opt-in): a search then reads a few thousand vectors, not every one, so it stays
//! in milliseconds at a million tools (the sign-bit scan of `scan.rs` reads all of them).
//!
//! The graph holds an int8 copy of each vector (usearch's own, cosine metric) and is keyed by
//! slot. It only proposes candidates: [`super::Vectors`] rescores every one exactly and drops
//! any whose slot no longer holds a vector or is not allowed, so a removed tool never comes
//! back and an allow-list always holds, whatever the graph returns. A removed vector is
//! removed from the graph (usearch marks it and no search returns it); a replaced one is
//! removed and added again.
//!
//! The graph depends on the order vectors were added in and, for a bulk build on several
//! threads, on their timing: unlike the exact and sign-bit searches, the candidates of two
//! indexes holding the same tools may differ at the margin (recall against the exact scan is
//! measured in `bench/RESULTS.md`).

use usearch::{Index as Hnsw, IndexOptions, MetricKind, ScalarKind};

/// Default: no graph (0). From `ann_from` vectors on, vector searches go through the graph;
/// it is opt-in because building it takes minutes at a million vectors (above 25 CPU minutes
/// on this project's machine: `bench/RESULTS.md`), against seconds for the rest of the index.
pub const DEFAULT_ANN_FROM: usize = 0;
/// Neighbours per node (HNSW's `M`).
const CONNECTIVITY: usize = 16;
/// Candidates kept while a vector is inserted (`ef_construction`).
const EXPANSION_ADD: usize = 128;
/// Candidates kept while searching (`ef`); a search for more takes that many.
pub const DEFAULT_EXPANSION: usize = 256;

/// The graph and its settings.
pub struct Graph {
    hnsw: Hnsw,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("size", &self.hnsw.size())
            .finish()
    }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("vector graph: {e}")
}

impl Graph {
    /// A graph of the `(slot, unit vector)` pairs, built on up to `threads` threads.
    pub fn build(dim: usize, vectors: &[(u32, &[f32])], threads: usize) -> Result<Self, String> {
        let options = IndexOptions {
            dimensions: dim,
            metric: MetricKind::Cos,
            quantization: ScalarKind::I8,
            connectivity: CONNECTIVITY,
            expansion_add: EXPANSION_ADD,
            // A search asks for its own count (`expansion`), which usearch takes when larger.
            expansion_search: 16,
            multi: false,
        };
        let hnsw = Hnsw::new(&options).map_err(err)?;
        let threads = threads.clamp(1, 64);
        hnsw.reserve_capacity_and_threads(vectors.len().max(1024), threads.max(2))
            .map_err(err)?;
        let graph = Graph { hnsw };
        if threads == 1 || vectors.len() < 4096 {
            for &(slot, v) in vectors {
                graph.hnsw.add(u64::from(slot), v).map_err(err)?;
            }
            return Ok(graph);
        }
        // Vectors in turn, one at a time per thread (usearch's add is thread-safe).
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(slot, v)) = vectors.get(i) else {
                        break;
                    };
                    if let Err(e) = graph.hnsw.add(u64::from(slot), v) {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(err(e));
                        break;
                    }
                });
            }
        });
        match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(graph),
        }
    }

    /// Store `v` for `slot` (replacing what the slot had).
    pub fn put(&self, slot: u32, v: &[f32]) -> Result<(), String> {
        let key = u64::from(slot);
        if self.hnsw.contains(key) {
            self.hnsw.remove(key).map_err(err)?;
        }
        if self.hnsw.size() + 1 >= self.hnsw.capacity() {
            let grow = (self.hnsw.capacity() * 2).max(1024);
            self.hnsw.reserve(grow).map_err(err)?;
        }
        self.hnsw.add(key, v).map_err(err)
    }

    /// Drop the vector of `slot`.
    pub fn remove(&self, slot: u32) {
        let key = u64::from(slot);
        if self.hnsw.contains(key) {
            // A key the graph holds is always removable; the caller's filter is the guard.
            let _ = self.hnsw.remove(key);
        }
    }

    /// Up to `count` slots near `q`, nearest first, among those `keep` accepts.
    pub fn search(&self, q: &[f32], count: usize, keep: impl Fn(u32) -> bool) -> Vec<u32> {
        let found = self
            .hnsw
            .filtered_search(q, count, |key: u64| keep(key as u32));
        match found {
            Ok(m) => m.keys.iter().map(|&k| k as u32).collect(),
            Err(_) => Vec::new(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.hnsw.memory_usage()
    }
}
