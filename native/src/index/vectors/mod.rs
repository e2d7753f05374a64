//! Tool embeddings stored next to the postings, by slot: unit vectors as `f32`, or as `i8`
//! with one scale per vector, and the exact scan over them.
//!
//! Every vector is normalised to unit length when stored, so a dot product is the cosine.
//! The dot-product kernels sum in one fixed order (16 lanes, then the lanes in order) on every
//! machine, with or without AVX2: the same vectors give the same scores bit for bit.

/// How vectors are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// 4 bytes a dimension, exact.
    #[default]
    F32,
    /// 1 byte a dimension plus one `f32` scale per vector (symmetric, `max |x| -> 127`); the
    /// query is quantized the same way and the dot product is an integer one.
    I8,
}

impl Precision {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "int8" => Ok(Precision::I8),
            _ => Err(format!(
                "vector_precision must be \"f32\" or \"int8\", got {s:?}"
            )),
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::I8 => "int8",
        }
    }
}

/// A vector as stored for one slot (borrowed).
#[derive(Clone, Copy, Debug)]
pub enum Stored<'a> {
    F32(&'a [f32]),
    I8(&'a [i8], f32),
}

/// A query vector prepared for the storage's precision.
#[derive(Clone, Debug)]
pub enum QueryVec {
    F32(Vec<f32>),
    I8(Vec<i8>, f32),
}

/// The vectors of an index, by slot.
#[derive(Debug)]
pub struct Vectors {
    precision: Precision,
    dim: usize,
    f32s: Vec<f32>,
    i8s: Vec<i8>,
    scales: Vec<f32>,
    /// Per slot: the caller's key of the text the vector was computed from (meaningful where
    /// `present` says the slot holds a vector).
    keys: Vec<u64>,
    count: usize,
    /// Per slot, the sign bits of its vector (`words()` u64s): the approximate index.
    codes: Vec<u64>,
    /// One bit per slot: it holds a vector (what `keys` says, 128 times smaller to scan).
    present: Vec<u64>,
    /// From this many vectors on, an HNSW graph of them proposes the candidates (`graph.rs`).
    ann_from: usize,
    graph: Option<Graph>,
}

impl Default for Vectors {
    fn default() -> Self {
        Vectors::new(Precision::F32)
    }
}

mod graph;
mod kernels;
mod scan;
mod search;

use graph::Graph;
pub use graph::{DEFAULT_ANN_FROM, DEFAULT_EXPANSION};

pub use kernels::{dot_f32, dot_i8, hamming};
pub use search::VectorSearch;
#[cfg(test)]
pub(super) use search::GRAPH;

/// Default: from this many vectors on, searches go through the binary codes.
pub const DEFAULT_APPROX_FROM: usize = 8192;
/// Default: candidates by Hamming distance that are rescored for 50 hits at 10,000 vectors
/// (fewer for fewer hits, more in larger catalogs: [`rescored`]).
pub const DEFAULT_RESCORE: usize = 1250;

/// How many candidates by Hamming distance are rescored for the best `k` among `n` vectors
/// when `rescore` is the figure for 50 hits at 10,000 vectors:
/// `rescore * (k + 10) / 60 * (n / 10,000) ^ 0.3` (a catalog under 10,000 counts as 10,000).
/// The sign-bit ranking of the nearest tools grows noisier with the catalog, and the
/// top `k` needs about 25 candidates a hit (a few more for small `k`): with WordLlama's
/// vectors this keeps recall@k against the exact scan of the f32 vectors at 0.98 or above
/// from 10k to 1M tools, int8 storage included (at 10k: 1,250 candidates for k = 50, 625 for
/// the fusion's depth 20; 4,977 for k = 50 at 1M; with 1,000, int8 storage's recall@20 at
/// 10k was 0.978: `bench/RESULTS.md`).
pub fn rescored(rescore: usize, n: usize, k: usize) -> usize {
    let scale = (n as f64 / 10_000.0).max(1.0).powf(0.3);
    (rescore as f64 * (k as f64 + 10.0) / 60.0 * scale).ceil() as usize
}

/// `x` scaled to unit length (a zero vector stays zero); an error names what is wrong.
pub fn unit(x: &[f32]) -> Result<Vec<f32>, String> {
    if x.is_empty() {
        return Err("a vector must have at least one dimension".into());
    }
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(format!(
            "vector component {i} is not a finite number ({})",
            x[i]
        ));
    }
    let norm = x
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    Ok(if norm > 0.0 {
        x.iter().map(|&v| (f64::from(v) / norm) as f32).collect()
    } else {
        x.to_vec()
    })
}

/// Symmetric int8 quantization of a unit vector: `(values, scale)`, `x ~ values * scale`.
pub fn quantize(x: &[f32]) -> (Vec<i8>, f32) {
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 {
        return (vec![0; x.len()], 0.0);
    }
    let scale = max / 127.0;
    let q = x
        .iter()
        .map(|&v| (v / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (q, scale)
}

impl Vectors {
    pub fn new(precision: Precision) -> Self {
        Vectors {
            precision,
            dim: 0,
            f32s: Vec::new(),
            i8s: Vec::new(),
            scales: Vec::new(),
            keys: Vec::new(),
            count: 0,
            codes: Vec::new(),
            present: Vec::new(),
            ann_from: DEFAULT_ANN_FROM,
            graph: None,
        }
    }

    /// From `n` vectors on, searches go through an HNSW graph (`graph.rs`); 0: never.
    pub fn set_ann_from(&mut self, n: usize) {
        self.ann_from = n;
        self.sync_graph();
    }

    pub fn ann_from(&self) -> usize {
        self.ann_from
    }

    /// The graph, when searches should use it.
    pub(super) fn graph(&self) -> Option<&Graph> {
        self.graph
            .as_ref()
            .filter(|_| self.ann_from > 0 && self.count >= self.ann_from)
    }

    /// Build the graph once there are `ann_from` vectors (on every core), and drop it when
    /// fewer than half that remain. Adds and removes keep a built graph up to date.
    pub fn sync_graph(&mut self) {
        let wanted = self.ann_from > 0 && self.count >= self.ann_from;
        if self.graph.is_some() {
            if self.ann_from == 0 || self.count < self.ann_from / 2 {
                self.graph = None;
            }
            return;
        }
        if !wanted {
            return;
        }
        let d = self.dim;
        let mut dequantized: Vec<f32> = Vec::new();
        if self.precision == Precision::I8 {
            dequantized.reserve_exact(self.count * d);
        }
        let slots: Vec<u32> = (0..self.keys.len() as u32)
            .filter(|&s| self.has(s as usize))
            .collect();
        if self.precision == Precision::I8 {
            for &s in &slots {
                let (s, scale) = (s as usize, self.scales[s as usize]);
                dequantized.extend(
                    self.i8s[s * d..(s + 1) * d]
                        .iter()
                        .map(|&x| f32::from(x) * scale),
                );
            }
        }
        let pairs: Vec<(u32, &[f32])> = slots
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let s_ = s as usize;
                let v = match self.precision {
                    Precision::F32 => &self.f32s[s_ * d..(s_ + 1) * d],
                    Precision::I8 => &dequantized[i * d..(i + 1) * d],
                };
                (s, v)
            })
            .collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // A graph that cannot be built leaves the sign-bit search in charge (same results'
        // guarantees, slower).
        self.graph = Graph::build(d, &pairs, threads).ok();
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Dimension of the stored vectors (0 before the first).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of slots holding a vector.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Number of slots (those without a vector included).
    pub fn slots(&self) -> usize {
        self.keys.len()
    }

    /// One bit per slot (slot `s`: bit `s % 64` of word `s / 64`), set where it holds a vector.
    pub fn present(&self) -> &[u64] {
        &self.present
    }

    /// The key of slot's vector, if it has one.
    pub fn key(&self, slot: u32) -> Option<u64> {
        self.has(slot as usize).then(|| self.keys[slot as usize])
    }

    /// Whether slot `s` holds a vector.
    #[inline]
    pub(super) fn has(&self, s: usize) -> bool {
        self.present
            .get(s / 64)
            .is_some_and(|w| w >> (s % 64) & 1 == 1)
    }

    /// Whether `dim` fits the stored vectors (any dimension fits an empty store).
    pub fn check_dim(&self, dim: usize) -> Result<(), String> {
        if self.count > 0 && dim != self.dim {
            return Err(format!(
                "vector has {dim} dimensions, the index holds vectors of {}",
                self.dim
            ));
        }
        Ok(())
    }

    fn words(&self) -> usize {
        self.dim.div_ceil(64)
    }

    fn ensure_slot(&mut self, slot: u32) {
        let need = slot as usize + 1;
        if self.keys.len() < need {
            self.keys.resize(need, 0);
            self.codes.resize(need * self.words(), 0);
            // int8 is kept in both precisions: the approximate search rescores with it.
            self.i8s.resize(need * self.dim, 0);
            self.scales.resize(need, 0.0);
            if self.precision == Precision::F32 {
                self.f32s.resize(need * self.dim, 0.0);
            }
        }
    }

    /// Room for `slots` slots of `dim`-dimensional vectors, allocated once (a bulk add: no
    /// growth by doubling, no copies left behind). Only for a store without slots yet.
    pub fn reserve(&mut self, slots: usize, dim: usize) {
        if !self.keys.is_empty() || dim == 0 {
            return;
        }
        self.dim = dim;
        let extra = slots;
        self.keys.reserve_exact(extra);
        self.codes.reserve_exact(extra * self.words());
        self.i8s.reserve_exact(extra * dim);
        self.scales.reserve_exact(extra);
        if self.precision == Precision::F32 {
            self.f32s.reserve_exact(extra * dim);
        }
        self.present.reserve_exact(slots.div_ceil(64));
    }

    /// Store the unit vector `v` (already checked: finite, unit or zero) for `slot`.
    pub fn set(&mut self, slot: u32, v: &[f32], key: u64) {
        if self.count == 0 && self.dim != v.len() {
            // First vector (or all were removed): (re)lay the store for this dimension.
            self.dim = v.len();
            let slots = self.keys.len();
            self.f32s.clear();
            self.i8s.clear();
            self.scales.clear();
            self.keys.clear();
            self.codes.clear();
            self.present.clear();
            self.graph = None;
            if slots > 0 {
                self.ensure_slot(slots as u32 - 1);
            }
        }
        debug_assert_eq!(v.len(), self.dim);
        self.ensure_slot(slot);
        let s = slot as usize;
        let d = self.dim;
        if self.precision == Precision::F32 {
            self.f32s[s * d..(s + 1) * d].copy_from_slice(v);
        }
        let (q, scale) = quantize(v);
        self.i8s[s * d..(s + 1) * d].copy_from_slice(&q);
        self.scales[s] = scale;
        let w = self.words();
        let code = &mut self.codes[s * w..(s + 1) * w];
        code.fill(0);
        for (i, &x) in v.iter().enumerate() {
            if x > 0.0 {
                code[i / 64] |= 1u64 << (i % 64);
            }
        }
        if !self.has(s) {
            self.count += 1;
        }
        self.keys[s] = key;
        if self.present.len() <= s / 64 {
            self.present.resize(s / 64 + 1, 0);
        }
        self.present[s / 64] |= 1u64 << (s % 64);
        if let Some(g) = &self.graph {
            if g.put(slot, v).is_err() {
                // The graph no longer holds every vector: drop it (rebuilt by `sync_graph`).
                self.graph = None;
            }
        }
    }

    /// Drop the vector of `slot`, if any.
    pub fn clear(&mut self, slot: u32) {
        let s = slot as usize;
        if self.has(s) {
            self.count -= 1;
            self.present[s / 64] &= !(1u64 << (s % 64));
            if let Some(g) = &self.graph {
                g.remove(slot);
            }
        }
    }

    /// The stored vector of `slot`.
    pub fn get(&self, slot: u32) -> Option<Stored<'_>> {
        self.key(slot)?;
        let (s, d) = (slot as usize, self.dim);
        Some(match self.precision {
            Precision::F32 => Stored::F32(&self.f32s[s * d..(s + 1) * d]),
            Precision::I8 => Stored::I8(&self.i8s[s * d..(s + 1) * d], self.scales[s]),
        })
    }

    /// A stored vector back as `f32` (dequantized for int8).
    pub fn to_f32(&self, slot: u32) -> Option<Vec<f32>> {
        Some(match self.get(slot)? {
            Stored::F32(v) => v.to_vec(),
            Stored::I8(v, scale) => v.iter().map(|&x| f32::from(x) * scale).collect(),
        })
    }

    /// The query as the storage's precision wants it (unit length, quantized for int8).
    pub fn prepare(&self, query: &[f32]) -> Result<QueryVec, String> {
        if self.count > 0 && query.len() != self.dim {
            return Err(format!(
                "query vector has {} dimensions, the index holds vectors of {}",
                query.len(),
                self.dim
            ));
        }
        let q = unit(query)?;
        Ok(match self.precision {
            Precision::F32 => QueryVec::F32(q),
            Precision::I8 => {
                let (v, s) = quantize(&q);
                QueryVec::I8(v, s)
            }
        })
    }

    /// Cosine of the query with the vector of `slot` (which must have one).
    #[inline]
    pub fn score(&self, q: &QueryVec, slot: u32) -> f32 {
        let (s, d) = (slot as usize, self.dim);
        match q {
            QueryVec::F32(q) => dot_f32(q, &self.f32s[s * d..(s + 1) * d]),
            QueryVec::I8(q, qs) => {
                dot_i8(q, &self.i8s[s * d..(s + 1) * d]) as f32 * (qs * self.scales[s])
            }
        }
    }

    /// Ask the CPU to bring the int8 copy of `slot`'s vector (`f32`: also the `f32` one)
    /// into cache: the rescoring reads candidates in slot order, far apart in memory, and
    /// otherwise waits on each one's first cache line.
    #[inline(always)]
    pub fn prefetch(&self, slot: u32, f32s: bool) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let (s, d) = (slot as usize, self.dim);
            if let Some(v) = self.i8s.get(s * d..(s + 1) * d) {
                for line in v.chunks(64) {
                    // SAFETY: a prefetch of a valid address; it reads nothing.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
                }
            }
            if f32s {
                if let Some(v) = self.f32s.get(s * d..(s + 1) * d) {
                    for line in v.chunks(16) {
                        // SAFETY: as above.
                        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
                    }
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (slot, f32s);
    }

    /// The int8 cosine of a quantized query `(q, scale)` with the vector of `slot`.
    #[inline]
    pub fn score_i8(&self, q: &[i8], qs: f32, slot: u32) -> f32 {
        let (s, d) = (slot as usize, self.dim);
        dot_i8(q, &self.i8s[s * d..(s + 1) * d]) as f32 * (qs * self.scales[s])
    }

    pub fn heap_bytes(&self) -> usize {
        self.f32s.capacity() * 4
            + self.i8s.capacity()
            + self.scales.capacity() * 4
            + self.keys.capacity() * 8
            + self.present.capacity() * 8
            + self.codes.capacity() * 8
            + self.graph.as_ref().map_or(0, Graph::heap_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_normalises_replaces_and_clears() {
        let mut v = Vectors::new(Precision::F32);
        v.set(3, &unit(&[3.0, 4.0]).unwrap(), 7);
        assert_eq!(
            (v.len(), v.dim(), v.key(3), v.key(0)),
            (1, 2, Some(7), None)
        );
        assert_eq!(v.to_f32(3).unwrap(), vec![0.6, 0.8]);
        let q = v.prepare(&[0.0, 2.0]).unwrap();
        assert!((v.score(&q, 3) - 0.8).abs() < 1e-6);
        assert!(v
            .prepare(&[1.0, 2.0, 3.0])
            .unwrap_err()
            .contains("3 dimensions"));
        assert!(v.check_dim(3).is_err() && v.check_dim(2).is_ok());
        v.set(3, &unit(&[1.0, 0.0]).unwrap(), 8);
        assert_eq!(v.len(), 1);
        v.clear(3);
        v.clear(3);
        assert_eq!((v.len(), v.key(3)), (0, None));
        assert!(v.check_dim(5).is_ok());
        assert!(unit(&[f32::NAN]).unwrap_err().contains("not a finite"));
        assert!(unit(&[]).is_err());
    }

    #[test]
    fn int8_scores_close_to_f32() {
        let mut f = Vectors::new(Precision::F32);
        let mut q8 = Vectors::new(Precision::I8);
        let docs: Vec<Vec<f32>> = (0..50)
            .map(|d| {
                (0..64)
                    .map(|i| (((d * 31 + i * 17) % 23) as f32 - 11.0) / 5.0)
                    .collect()
            })
            .collect();
        for (s, x) in docs.iter().enumerate() {
            let u = unit(x).unwrap();
            f.set(s as u32, &u, 0);
            q8.set(s as u32, &u, 0);
        }
        let query: Vec<f32> = (0..64).map(|i| ((i * 7 % 13) as f32) - 6.0).collect();
        let (qf, qi) = (f.prepare(&query).unwrap(), q8.prepare(&query).unwrap());
        for s in 0..50 {
            assert!((f.score(&qf, s) - q8.score(&qi, s)).abs() < 0.02);
        }
    }
}
