//! Hybrid search: the BM25F ranking and the cosine ranking fused into one.
//!
//! The fusion is a convex combination of the two scores, each normalised by its best score
//! among the candidates (Bruch, Gai & Ingber 2023, "An analysis of fusion functions for hybrid
//! retrieval": convex combination beats reciprocal rank fusion and needs one constant):
//!
//! ```text
//! fused(d) = w * bm25(d) / bm25_max + (1 - w) * max(cos(d) - floor, 0) / (cos_max - floor)
//! ```
//!
//! The candidates are the best `depth` tools of each ranking, and each gets both of its scores,
//! exactly: the BM25F score of a tool found by its vector and the cosine of a tool found by its
//! words are computed for it (a tool outside one ranking's `depth` is not scored 0 by it).
//! BM25 keeps the larger weight (`w = 0.9`): it decides wherever the query shares words with
//! the tools, and the cosine side lifts the tools it cannot reach (vocabulary gaps).
//!
//! **Equal BM25F scores stay in BM25's order.** Tools whose BM25F scores are equal (the
//! look-alike variants of one model, whose texts match the query alike) are ordered by the
//! evidence of `ties.rs` (the query's words in their names), and the cosine does not reorder
//! them: each takes the best fused score of its group. The cosines of look-alikes differ by
//! noise, and reordering them cost the PyTorch Hub slice of APIBench what the name evidence
//! had won. Chosen on every dev set at once, where the fusion is at or above BM25 alone on
//! every figure (`bench/RESULTS.md`).

use super::vectors::QueryVec;
use super::Index;

/// Default weight of the BM25 side.
pub const DEFAULT_BM25_WEIGHT: f32 = 0.9;
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

    /// The fused scores of candidates with BM25F scores `bm25` and cosines `cosine` (one each,
    /// in the same order), each side normalised by its best among them; equal positive BM25F
    /// scores share their group's best fused score (the module's comment).
    pub fn fuse(&self, bm25: &[f32], cosine: &[f32]) -> Vec<f32> {
        debug_assert_eq!(bm25.len(), cosine.len());
        let w = self.bm25_weight;
        let floor = self.cosine_floor;
        let bmax = bm25.iter().copied().fold(0f32, f32::max);
        let cmax = cosine.iter().copied().fold(floor, f32::max);
        let mut fused: Vec<f32> = bm25
            .iter()
            .zip(cosine)
            .map(|(&b, &c)| {
                let lexical = if bmax > 0.0 { w * (b / bmax) } else { 0.0 };
                let semantic = if cmax > floor {
                    (1.0 - w) * ((c - floor).max(0.0) / (cmax - floor))
                } else {
                    0.0
                };
                lexical + semantic
            })
            .collect();
        // Groups of equal BM25F scores: each member gets the group's best.
        let mut order: Vec<usize> = (0..bm25.len()).filter(|&i| bm25[i] > 0.0).collect();
        order.sort_unstable_by(|&a, &b| bm25[a].total_cmp(&bm25[b]));
        for group in order.chunk_by(|&a, &b| bm25[a] == bm25[b]) {
            if group.len() > 1 {
                let best = group.iter().map(|&i| fused[i]).fold(f32::MIN, f32::max);
                group.iter().for_each(|&i| fused[i] = best);
            }
        }
        fused
    }
}

impl Index {
    /// The `k` best tools for a tokenized query and, when given, its vector, by [`Fusion`]
    /// (without a vector: BM25F alone).
    #[allow(clippy::too_many_arguments)]
    pub fn search_hybrid_tokens(
        &self,
        tokens: &[String],
        ties: &super::ties::Ties,
        q: Option<&QueryVec>,
        k: usize,
        allow: Option<&[u64]>,
        fusion: &Fusion,
        how: super::VectorSearch,
    ) -> Vec<(f32, u32)> {
        let Some(q) = q else {
            return self.search_slots(tokens, k, allow, Some(ties));
        };
        if k == 0 {
            return Vec::new();
        }
        let depth = fusion.depth.max(k);
        let bm25 = self.search_slots(tokens, depth, allow, Some(ties));
        let cosine = self.search_vector_with(q, depth, allow, how, false);
        // The candidates, each with both of its scores.
        let mut slots: Vec<u32> = bm25.iter().map(|h| h.1).collect();
        let mut b: Vec<f32> = bm25.iter().map(|h| h.0).collect();
        let mut c: Vec<f32> = bm25.iter().map(|h| self.cosine_of(q, h.1)).collect();
        let only_cosine: Vec<(f32, u32)> = cosine
            .into_iter()
            .filter(|h| !slots.contains(&h.1))
            .collect();
        let lexical: Vec<u32> = only_cosine.iter().map(|h| h.1).collect();
        b.extend(self.score_slots(tokens, &lexical));
        c.extend(only_cosine.iter().map(|h| h.0));
        slots.extend(lexical);
        let fused = fusion.fuse(&b, &c);
        let hits = fused.into_iter().zip(slots).filter(|h| h.0 > 0.0);
        self.top_k_with(hits, k, Some(ties))
    }

    /// The cosine of the query with the vector of `slot` (0 when it has none).
    fn cosine_of(&self, q: &QueryVec, slot: u32) -> f32 {
        if self.vectors.key(slot).is_some() {
            self.vectors.score(q, slot)
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_normalises_each_side_and_sums() {
        let f = Fusion::default();
        assert_eq!(f.bm25_weight, 0.9);
        // Tools 1 and 3 tie in BM25F: both take the better fused score (tool 1's).
        let got = f.fuse(&[10.0, 5.0, 0.0, 5.0], &[0.1, 0.5, 0.25, 0.3]);
        let want = [0.9 + 0.1 * 0.2, 0.45 + 0.1, 0.1 * 0.5, 0.45 + 0.1];
        assert_eq!(got.len(), 4);
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?}");
        }
        // A negative cosine adds nothing; a side without a positive best adds nothing.
        let got = f.fuse(&[2.0, 0.0], &[-0.5, -0.1]);
        assert!((got[0] - 0.9).abs() < 1e-6 && got[1] == 0.0, "{got:?}");
        assert!(f.fuse(&[], &[]).is_empty());
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
