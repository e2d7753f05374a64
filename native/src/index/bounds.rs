//! Upper bounds of each term's contribution, for dynamic pruning (MaxScore, `search.rs`).
//!
//! A term's contribution to a tool is `idf * tfw * (k1 + 1) / (tfw + k1)`, rising with
//! `tfw = sum_f w_f * tf_f / (1 - b_f + norm_b_f * len_f ^ e_f)`, where `norm_b_f = b_f /
//! avglen_f ^ e_f` moves with every add and remove. Per term the index keeps the largest `tfw`
//! of its postings under *reference* statistics (`norm_b` at the last rebase). Under the
//! current statistics every denominator is at least `min(1, norm_b / norm_b_ref)` times its
//! reference value, so `tfw <= tfw_ref * drift` with `drift = max_f max(1, norm_b_ref_f /
//! norm_b_f)`: the stored bounds stay valid, only looser, until the statistics drift by more
//! than [`REBASE_DRIFT`] (or many postings were removed), when every bound is recomputed.
//!
//! Bounds only decide what may be skipped, never a score: a stale or loose bound costs time,
//! never a result, so rankings do not depend on when the bounds were last recomputed.

use crate::project::NUM_FIELDS;

use super::postings::{tf_of, PostingList, WideTf};
use super::scoring::{Params, Scorer};

/// Recompute the bounds once the statistics have loosened them by this factor.
pub(super) const REBASE_DRIFT: f32 = 1.02;

#[derive(Debug, Default)]
pub(super) struct Bounds {
    /// Per term id: the largest `tfw` of its postings under `reference` (0 for no posting).
    pub(super) tfw: Vec<f32>,
    /// `norm_b` of the statistics the bounds were computed with; `None` before the first add.
    pub(super) reference: Option<[f32; NUM_FIELDS]>,
    /// Postings removed since the last rebase (their bounds may be too high).
    pub(super) removed: usize,
}

impl Bounds {
    pub(super) fn heap_bytes(&self) -> usize {
        self.tfw.capacity() * 4
    }

    /// How much looser than `tfw` the stored bounds may be under `current` (`INFINITY`:
    /// unusable, a field that had no text at the reference now has some).
    pub(super) fn drift(&self, p: &Params, current: &Scorer) -> f32 {
        let Some(reference) = self.reference else {
            return f32::INFINITY;
        };
        let now = current.norm_b();
        let mut drift = 1f32;
        for f in 0..NUM_FIELDS {
            if p.weights[f] == 0.0 || p.b[f] == 0.0 || now[f] == 0.0 {
                continue; // the field adds nothing, or nothing depends on its length
            }
            if reference[f] == 0.0 {
                return f32::INFINITY;
            }
            drift = drift.max(reference[f] / now[f]);
        }
        drift
    }

    /// The scorer of the reference statistics (for the bounds of new postings).
    pub(super) fn reference_scorer(&self, p: &Params) -> Option<Scorer> {
        self.reference.map(|nb| Scorer::with_norm_b(p, nb))
    }

    /// Whether the bounds should be recomputed: too loose under `current`, or many postings
    /// gone since they were.
    pub(super) fn stale(&self, p: &Params, current: &Scorer, postings: usize) -> bool {
        self.drift(p, current) > REBASE_DRIFT || self.removed > postings / 8 + 1024
    }

    /// Every bound recomputed under `current`, from every posting.
    pub(super) fn rebase(
        &mut self,
        current: &Scorer,
        postings: &[PostingList],
        scaled_lens: &[[f32; NUM_FIELDS]],
        wide: &WideTf,
    ) {
        self.tfw.clear();
        self.tfw
            .extend(postings.iter().enumerate().map(|(t, list)| {
                list.as_slice()
                    .iter()
                    .map(|p| current.tfw(&tf_of(wide, t as u32, p), &scaled_lens[p.slot as usize]))
                    .fold(0f32, f32::max)
            }));
        self.reference = Some(current.norm_b());
        self.removed = 0;
    }
}
