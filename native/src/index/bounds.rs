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
//! Per term of more than [`BLOCK`] postings the same quantity is also kept per *block* of its
//! postings (block-max MaxScore, as Lucene's and tantivy's block-max WAND): a block is a range
//! of slots, `(last of the previous block, last]`, the final block open above. Every posting
//! of the block has a `tfw` (under the reference statistics) at most the block's, so a block's
//! bound is valid under the current statistics times the same `drift`. An add raises the
//! maximum of the block its slot falls in (or opens a new block at the end); a remove leaves
//! the blocks as they are (looser); a rebase recomputes them, [`BLOCK`] postings each.
//!
//! Bounds only decide what may be skipped, never a score: a stale or loose bound costs time,
//! never a result, so rankings do not depend on when the bounds were last recomputed.

use crate::project::NUM_FIELDS;

use super::postings::{tf_of, Posting, PostingList, WideTf};
use super::scoring::{Params, Scorer};

/// Recompute the bounds once the statistics have loosened them by this factor.
pub(super) const REBASE_DRIFT: f32 = 1.02;

/// Postings per block of a term's block maxima (a rebase or a first add; an add may make a
/// block longer).
pub(super) const BLOCK: usize = 512;

/// A block of a term's postings: the slots up to `last` (from the previous block's `last` on;
/// the final block also every slot above), the largest `tfw` of its postings under the
/// reference statistics, and how many postings it was given (to know when the final one is
/// full; removes do not lower it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Block {
    pub(super) last: u32,
    pub(super) tfw: f32,
    pub(super) len: u32,
}

/// The block maxima of the terms that have them (more than [`BLOCK`] postings once).
pub(super) type Blocks = rustc_hash::FxHashMap<u32, Vec<Block>>;

#[derive(Debug, Default)]
pub(super) struct Bounds {
    /// Per term id: the largest `tfw` of its postings under `reference` (0 for no posting).
    pub(super) tfw: Vec<f32>,
    /// `norm_b` of the statistics the bounds were computed with; `None` before the first add.
    pub(super) reference: Option<[f32; NUM_FIELDS]>,
    /// Postings removed since the last rebase (their bounds may be too high).
    pub(super) removed: usize,
    /// Per term of more than [`BLOCK`] postings, its blocks in slot order.
    pub(super) blocks: Blocks,
}

impl Bounds {
    pub(super) fn heap_bytes(&self) -> usize {
        self.tfw.capacity() * 4
            + self.blocks.capacity() * (std::mem::size_of::<(u32, Vec<Block>)>() + 1)
            + self
                .blocks
                .values()
                .map(|b| b.capacity() * std::mem::size_of::<Block>())
                .sum::<usize>()
    }

    /// The blocks of term `t` (empty: its bound `tfw[t]` is its only block).
    #[inline]
    pub(super) fn blocks_of(&self, t: u32) -> &[Block] {
        self.blocks.get(&t).map_or(&[], Vec::as_slice)
    }

    /// A posting of term `t` at `slot`, whose `tfw` under the reference statistics is `tfw`,
    /// was inserted; `list` is the term's postings now (with it).
    #[inline]
    pub(super) fn note(&mut self, t: u32, slot: u32, list: &[Posting], tfw: f32) {
        let bound = &mut self.tfw[t as usize];
        let before = *bound;
        *bound = before.max(tfw);
        if self.blocks.is_empty() && list.len() <= BLOCK {
            return;
        }
        match self.blocks.get_mut(&t) {
            Some(blocks) => note_block(blocks, slot, tfw),
            None if list.len() > BLOCK => {
                // One block for all it has now; the next ones [`BLOCK`] postings each.
                let last = list[list.len() - 1].slot;
                let len = list.len() as u32;
                let tfw = before.max(tfw);
                self.blocks.insert(t, vec![Block { last, tfw, len }]);
            }
            None => {}
        }
    }

    /// The blocks of a first add's postings (`postings`, filled in slot order), from the
    /// full blocks the fill closed: `(term, last slot, largest tfw)` in slot order per term,
    /// each after `BLOCK` postings of its term; the fill then restarted `tfw[term]` at 0, so
    /// `tfw[term]` is the maximum of the postings after the last closed block. Every term's
    /// `tfw` becomes the maximum of its postings again.
    pub(super) fn first_add_blocks(
        &mut self,
        postings: &[PostingList],
        closed: impl IntoIterator<Item = (u32, u32, f32)>,
    ) {
        let mut closed: Vec<(u32, u32, f32)> = closed.into_iter().collect();
        closed.sort_by_key(|c| c.0); // stable: each term's blocks stay in slot order
        let mut at = 0;
        while at < closed.len() {
            let t = closed[at].0;
            let end = at + closed[at..].partition_point(|c| c.0 == t);
            let list = postings[t as usize].as_slice();
            let mut blocks: Vec<Block> = closed[at..end]
                .iter()
                .map(|&(_, last, tfw)| Block {
                    last,
                    tfw,
                    len: BLOCK as u32,
                })
                .collect();
            let rest = list.len() - BLOCK * blocks.len();
            let bound = &mut self.tfw[t as usize];
            if rest > 0 {
                blocks.push(Block {
                    last: list[list.len() - 1].slot,
                    tfw: *bound,
                    len: rest as u32,
                });
            }
            *bound = blocks.iter().map(|b| b.tfw).fold(*bound, f32::max);
            if blocks.len() > 1 {
                self.blocks.insert(t, blocks);
            }
            at = end;
        }
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
        self.blocks.clear();
        let blocks = &mut self.blocks;
        self.tfw
            .extend(postings.iter().enumerate().map(|(t, list)| {
                let list = list.as_slice();
                let tfw_of = |p: &Posting| {
                    current.tfw(&tf_of(wide, t as u32, p), &scaled_lens[p.slot as usize])
                };
                if list.len() <= BLOCK {
                    return list.iter().map(tfw_of).fold(0f32, f32::max);
                }
                let term_blocks: Vec<Block> = list
                    .chunks(BLOCK)
                    .map(|chunk| Block {
                        last: chunk[chunk.len() - 1].slot,
                        tfw: chunk.iter().map(tfw_of).fold(0f32, f32::max),
                        len: chunk.len() as u32,
                    })
                    .collect();
                let most = term_blocks.iter().map(|b| b.tfw).fold(0f32, f32::max);
                blocks.insert(t as u32, term_blocks);
                most
            }));
        self.reference = Some(current.norm_b());
        self.removed = 0;
    }
}

/// A posting at `slot` of `tfw` into a term's blocks: the block its slot falls in, or a new
/// final block past the last slot when the final one is full.
#[inline]
fn note_block(blocks: &mut Vec<Block>, slot: u32, tfw: f32) {
    let n = blocks.len();
    let last = &mut blocks[n - 1];
    if slot > last.last {
        if last.len as usize >= BLOCK {
            blocks.push(Block {
                last: slot,
                tfw,
                len: 1,
            });
        } else {
            last.last = slot;
            last.tfw = last.tfw.max(tfw);
            last.len += 1;
        }
        return;
    }
    let b = blocks.partition_point(|b| b.last < slot).min(n - 1);
    let block = &mut blocks[b];
    block.tfw = block.tfw.max(tfw);
    block.len += 1;
}
