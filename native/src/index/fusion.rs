//! Hybrid search: the BM25F ranking and the cosine ranking fused into one.
//!
//! The fusion is a convex combination of the two scores, each normalised by its own best score
//! for the query (Bruch, Gai & Ingber 2023, "An analysis of fusion functions for hybrid
//! retrieval": convex combination beats reciprocal rank fusion and needs one constant):
//!
//! ```text
//! fused(d) = w * bm25(d) / bm25_max + (1 - w) * max(cos(d) - floor, 0) / (cos_max - floor)
//! ```
//!
//! over the union of the best `depth` tools of each ranking; a tool outside one ranking's
//! `depth` gets 0 from it. BM25 keeps the larger weight (`w = 0.8`): it decides wherever the
//! query shares words with the tools, and the cosine side lifts the tools it cannot reach
//! (vocabulary gaps). Chosen on every dev set at once (`bench/RESULTS.md`).

use super::vectors::QueryVec;
use super::Index;

/// Default weight of the BM25 side.
pub const DEFAULT_BM25_WEIGHT: f32 = 0.8;
/// Default cosine floor: cosines at or below it contribute nothing.
pub const DEFAULT_COSINE_FLOOR: f32 = 0.0;
/// Default number of hits read from each ranking.
pub const DEFAULT_DEPTH: usize = 20;

/// The fusion's constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fusion {
    pub bm25_weight: f32,
    pub cosine_floor: f32,
    pub depth: usize,
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion {
            bm25_weight: DEFAULT_BM25_WEIGHT,
            cosine_floor: DEFAULT_COSINE_FLOOR,
            depth: DEFAULT_DEPTH,
        }
    }
}

impl Fusion {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.bm25_weight.is_finite() && (0.0..=1.0).contains(&self.bm25_weight)) {
            return Err(format!(
                "bm25_weight must be between 0 and 1, got {}",
                self.bm25_weight
            ));
        }
        if !(self.cosine_floor.is_finite() && (-1.0..1.0).contains(&self.cosine_floor)) {
            return Err(format!(
                "cosine_floor must be in [-1, 1), got {}",
                self.cosine_floor
            ));
        }
        if self.depth == 0 {
            return Err("depth must be >= 1".to_owned());
        }
        Ok(())
    }

    /// Fuse `(score, slot)` rankings (best first) into `(fused, slot)` pairs, unordered.
    pub fn fuse(&self, bm25: &[(f32, u32)], cosine: &[(f32, u32)]) -> Vec<(f32, u32)> {
        let w = self.bm25_weight;
        let mut out: Vec<(u32, f32)> = Vec::with_capacity(bm25.len() + cosine.len());
        if let Some(&(top, _)) = bm25.first() {
            if top > 0.0 {
                out.extend(bm25.iter().map(|&(s, slot)| (slot, w * (s / top))));
            }
        }
        if let Some(&(top, _)) = cosine.first() {
            let span = top - self.cosine_floor;
            if span > 0.0 {
                out.extend(cosine.iter().filter_map(|&(c, slot)| {
                    let v = c - self.cosine_floor;
                    (v > 0.0).then(|| (slot, (1.0 - w) * (v / span)))
                }));
            }
        }
        // A tool in both rankings: its two parts, BM25's first, summed.
        out.sort_by_key(|&(slot, _)| slot);
        let mut fused: Vec<(f32, u32)> = Vec::with_capacity(out.len());
        for (slot, v) in out {
            match fused.last_mut() {
                Some(last) if last.1 == slot => last.0 += v,
                _ => fused.push((v, slot)),
            }
        }
        fused
    }
}

impl Index {
    /// The `k` best tools for a tokenized query and its vector, by [`Fusion`].
    pub fn search_hybrid(
        &self,
        query: &str,
        q: &QueryVec,
        k: usize,
        allow: Option<&[u64]>,
        fusion: &Fusion,
        how: super::VectorSearch,
    ) -> Vec<(f32, u32)> {
        if k == 0 {
            return Vec::new();
        }
        let depth = fusion.depth.max(k);
        let ties = super::ties::Ties::new(query);
        let tokens = super::analyze_query(query);
        let bm25 = self.search_slots(&tokens, depth, allow, Some(&ties));
        let cosine = self.search_vector_with(q, depth, allow, how, false);
        self.top_k_with(fusion.fuse(&bm25, &cosine).into_iter(), k, Some(&ties))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_normalises_each_side_and_sums() {
        let f = Fusion::default();
        let bm25 = [(10.0, 1), (5.0, 2)];
        let cos = [(0.5, 2), (0.25, 3), (-0.1, 4)];
        let mut got = f.fuse(&bm25, &cos);
        got.sort_by_key(|p| p.1);
        let want = [(0.8, 1), (0.4 + 0.2, 2), (0.1, 3)];
        assert_eq!(got.len(), 3, "{got:?}");
        for ((g, gs), (w, ws)) in got.iter().zip(want) {
            assert_eq!(*gs, ws);
            assert!((g - w).abs() < 1e-6, "{got:?}");
        }
        assert!(f.fuse(&[], &[]).is_empty());
        assert_eq!(f.fuse(&[], &[(-0.5, 9)]), vec![]);
        assert!(Fusion {
            bm25_weight: 1.5,
            ..f
        }
        .validate()
        .is_err());
        assert!(Fusion { depth: 0, ..f }.validate().is_err());
        assert!(Fusion {
            cosine_floor: 1.0,
            ..f
        }
        .validate()
        .is_err());
        assert!(f.validate().is_ok());
    }
}
