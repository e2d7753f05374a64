//! Ranking candidates: the top k by score, equal scores ordered by the evidence of [`Ties`],
//! then by tool name (names are unique, so the order is total).
//!
//! One ranking for every search (MaxScore, the exhaustive scorer, the vectors, the fusion).
//! Candidates are kept in a buffer that is cut, whenever it grows past twice its last size, to
//! those scoring at least the k-th best score (every tool tied with the k-th stays); names and
//! evidence are read only at the end, once a tool, for the groups of equal scores. A catalog of
//! look-alike tools ties many at the top (20 copies on the near-duplicate 1M catalog): a heap
//! ordered by name would read and parse both names at every comparison of two of them.

use super::docs::doc_name;
use super::ties::Ties;
use super::Index;

/// The buffer of candidates is first cut at this many (or `2k`, if more).
const FIRST_CUT: usize = 1024;

/// Keep the candidates scoring at least the `k`-th best score (all tied with it); that score,
/// or `-inf` while there are at most `k`.
fn cut(kept: &mut Vec<(f32, u32)>, k: usize) -> f32 {
    if kept.len() <= k {
        return f32::NEG_INFINITY;
    }
    let kth = kept
        .select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0))
        .1
         .0;
    kept.retain(|c| c.0 >= kth);
    kth
}

impl Index {
    pub(super) fn name_of(&self, slot: u32) -> &str {
        doc_name(&self.docs, slot)
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

    /// The `k` best of `(score, slot)` candidates (finite scores), best first: higher score,
    /// equal scores by more `ties` evidence (when given), then by smaller name.
    pub(super) fn top_k_with(
        &self,
        candidates: impl Iterator<Item = (f32, u32)>,
        k: usize,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
        if k == 0 {
            return Vec::new();
        }
        let mut kept: Vec<(f32, u32)> = Vec::new();
        let mut limit = k.saturating_mul(2).max(FIRST_CUT);
        // No candidate below the k-th best score seen so far can be among the k best.
        let mut floor = f32::NEG_INFINITY;
        for c in candidates {
            if c.0 < floor {
                continue;
            }
            kept.push(c);
            if kept.len() >= limit {
                floor = cut(&mut kept, k);
                // Many tied with the k-th: cut again only once the buffer doubles.
                limit = limit.max(2 * kept.len());
            }
        }
        cut(&mut kept, k);
        self.rank_kept(kept, k, ties)
    }

    /// `kept` (every candidate that may be among the `k` best, ties included) in rank order,
    /// cut to `k`: each tool's name and evidence read once, for groups of equal scores only.
    fn rank_kept(
        &self,
        mut kept: Vec<(f32, u32)>,
        k: usize,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
        kept.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        let mut out = Vec::with_capacity(k.min(kept.len()));
        let mut group: Vec<(u32, &str, (f32, u32))> = Vec::new();
        let mut i = 0;
        while i < kept.len() && out.len() < k {
            let score = kept[i].0;
            // Equal as `==` says (0.0 and -0.0 are one group; `total_cmp` keeps them adjacent).
            let end = i + kept[i..].partition_point(|c| c.0 == score);
            if end - i == 1 {
                out.push(kept[i]);
            } else {
                group.clear();
                group.extend(kept[i..end].iter().map(|&c| {
                    let name = self.name_of(c.1);
                    (ties.map_or(0, |t| t.evidence(name)), name, c)
                }));
                group.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
                let room = k - out.len();
                out.extend(group.iter().take(room).map(|g| g.2));
            }
            i = end;
        }
        out
    }
}
