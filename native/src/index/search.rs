//! Search: MaxScore over the postings, document at a time, then a bounded heap for the top k.
//!
//! Every query term has an upper bound of what it can add to any tool's score (`bounds.rs`).
//! Terms are taken in increasing order of their bounds; the longest prefix whose bounds sum
//! below the current k-th best score is *non-essential*: a tool matching only those terms
//! cannot enter the top k. Only the *essential* terms' postings are walked (in slot order, all
//! at once); each tool found there is completed by looking it up in the non-essential terms'
//! postings, from the largest bound down, and dropped as soon as what it has plus what is
//! left is below the k-th best (Turtle & Flood 1995; Lucene's and tantivy's MaxScore). As the
//! k-th best score rises, more terms become non-essential.
//!
//! The k-th best score is raised early by scoring some tools first: those of the rarest term
//! when its list is short (the *warm start*), or else those having both terms of the largest
//! bounds when their two lists are a small part of the query's (the *pair start*). On a
//! catalog of look-alike tools (`bench_million.py --catalog near-duplicate`) the copies of
//! the best tool are spread over all slots; after the pair start the k-th best score is
//! often so high that no tool lacking one of the two terms can reach it, and the search
//! ends there (p50 at a million look-alikes -28%, `bench/RESULTS.md`).
//!
//! A tool that survives gets its score summed in one fixed order, the *canonical* one (terms
//! by decreasing `idf`, ties in query order), exactly as [`Index::search_exhaustive`] (`exhaustive.rs`), which
//! scores every posting of every term, sums it: pruning changes which tools are scored, never
//! a score, and the top k are exactly those of exhaustive scoring (`cargo test`, and
//! `bench/bench_million.py --check-exact` at a million tools). Ties at the k-th score are kept until the end.

use super::cursor::{intersect, prefetch, seek};
use super::postings::{tf_of, Posting};
use super::scoring::Scorer;
use super::ties::Ties;
use super::Index;

#[cfg(test)]
thread_local! {
    /// Searches that left a term non-essential (pruned), that took the warm start, chunks
    /// intersected, searches that took the pair start and that ended after it: to check the
    /// tests exercise every path.
    pub(super) static PRUNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(super) static WARM: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(super) static CHUNKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(super) static PAIRED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(super) static PAIR_ENDED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A query term: its postings, `idf` and the bound of its contribution.
pub(super) struct Term<'a> {
    pub(super) id: u32,
    pub(super) list: &'a [Posting],
    pub(super) idf: f32,
    pub(super) bound: f32,
}

/// Partial sums are compared with the k-th best score with this much room for the rounding
/// of a sum taken in another order than the canonical one.
const SLACK: f32 = 1.0 + 1e-4;

/// Tools scored together (see `search_slots`).
const BATCH: usize = 16;

/// The rarest term's tools are scored first when it has at most this many, or at most
/// `1 / 16` of the longest list's and at most `WARM_MAX` (see `search_slots`).
const WARM_SHORT: usize = 512;
const WARM_MAX: usize = 4096;

/// Postings of the essential list read per intersection (see `search_slots`).
const CHUNK: usize = 512;

/// Without a rare term, the tools that have both terms of the largest bounds are scored first
/// when those two lists hold at most `1 / PAIR_SHARE` of the query's postings (see
/// `search_slots`).
const PAIR_SHARE: usize = 2;

/// Look `slot` up in the non-essential terms `order[..from]`, the largest bound first, until
/// what it has (`have`: the sum of the bounds of the terms it has) and what is left to look
/// up cannot reach `theta`; its postings go to `posts`. Whether it may still reach `theta`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn probe(
    terms: &[Term<'_>],
    order: &[usize],
    below: &[f32],
    pos: &mut [usize],
    slot: u32,
    from: usize,
    mut have: f32,
    theta: f32,
    posts: &mut Vec<(u32, u32)>,
) -> bool {
    if (have + below[from]) * SLACK < theta {
        return false;
    }
    let mut j = from;
    while j > 0 {
        j -= 1;
        let t = order[j];
        let term = &terms[t];
        let i = seek(term.list, pos[t], slot);
        if term.list.get(i).is_some_and(|p| p.slot == slot) {
            posts.push((t as u32, i as u32));
            have += term.bound;
            pos[t] = i + 1;
        } else {
            pos[t] = i;
            if (have + below[j]) * SLACK < theta {
                return false;
            }
        }
    }
    true
}
/// The `k` largest scores seen: a min-heap whose root is the k-th best.
struct Kth {
    heap: Vec<f32>,
    k: usize,
}

impl Kth {
    /// The k-th best score so far (0 until there are k: any positive score may enter).
    fn threshold(&self) -> f32 {
        if self.heap.len() < self.k {
            0.0
        } else {
            self.heap[0]
        }
    }

    fn push(&mut self, s: f32) {
        let h = &mut self.heap;
        if h.len() < self.k {
            h.push(s);
            let mut i = h.len() - 1;
            while i > 0 && h[(i - 1) / 2] > h[i] {
                h.swap(i, (i - 1) / 2);
                i = (i - 1) / 2;
            }
        } else if s > h[0] {
            h[0] = s;
            let mut i = 0;
            loop {
                let (l, r) = (2 * i + 1, 2 * i + 2);
                let mut m = i;
                if l < h.len() && h[l] < h[m] {
                    m = l;
                }
                if r < h.len() && h[r] < h[m] {
                    m = r;
                }
                if m == i {
                    break;
                }
                h.swap(i, m);
                i = m;
            }
        }
    }
}

impl Index {
    /// The score of `slot` from its postings `posts` (as `(term, position)`): every term it
    /// has, summed in canonical order (`part`: one zeroed entry a term, left zeroed).
    #[inline(always)]
    fn score_posts(
        &self,
        terms: &[Term<'_>],
        scorer: &Scorer,
        part: &mut [f32],
        posts: &[(u32, u32)],
        slot: u32,
    ) -> f32 {
        let l = &self.scaled_lens[slot as usize];
        for &(t, i) in posts {
            let term = &terms[t as usize];
            let tf = tf_of(&self.wide, term.id, &term.list[i as usize]);
            part[t as usize] = scorer.score(term.idf, &tf, l);
        }
        let mut score = 0f32;
        for x in part.iter_mut() {
            if *x > 0.0 {
                score += *x;
            }
            *x = 0.0;
        }
        score
    }

    /// The `k` best tools for a tokenized query, best first, as `(name, score)`.
    pub fn search_tokens(
        &self,
        tokens: &[String],
        k: usize,
        allow: Option<&[u64]>,
    ) -> Vec<(String, f32)> {
        self.named(self.search_slots(tokens, k, allow, None))
    }

    /// The `k` best tools for a query text, best first; equal scores ordered by the evidence
    /// of [`Ties`], then by name.
    pub fn search_query(&self, query: &str, k: usize, allow: Option<&[u64]>) -> Vec<(f32, u32)> {
        let tokens = super::analyze_query(query);
        self.search_slots(&tokens, k, allow, Some(&Ties::new(query)))
    }

    /// `(score, slot)` hits as `(name, score)`.
    pub fn named(&self, hits: Vec<(f32, u32)>) -> Vec<(String, f32)> {
        hits.into_iter()
            .map(|(s, slot)| (self.name_of(slot).to_owned(), s))
            .collect()
    }

    /// The distinct known query terms in canonical order (decreasing `idf`, ties in query
    /// order), each with its `idf` and bound, and the scorer of the current statistics.
    pub(super) fn query_terms(&self, tokens: &[String]) -> (Vec<Term<'_>>, Scorer) {
        let n = self.by_name.len() as f64;
        let scorer = self.scorer();
        // A repeated query word counts once (BM25's k3 = 0): in tool queries repeats are
        // mostly argument values.
        let mut ids: Vec<u32> = Vec::with_capacity(tokens.len());
        for tok in tokens {
            if let Some(id) = self.vocab.get(tok.as_str()) {
                if !ids.contains(&id) && !self.postings[id as usize].is_empty() {
                    ids.push(id);
                }
            }
        }
        let drift = self.bounds.drift(&self.params, &scorer);
        let mut terms: Vec<Term<'_>> = ids
            .iter()
            .map(|&t| {
                let list = self.postings[t as usize].as_slice();
                let df = list.len() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
                let tfw = self
                    .bounds
                    .tfw
                    .get(t as usize)
                    .copied()
                    .unwrap_or(f32::INFINITY);
                Term {
                    id: t,
                    list,
                    idf,
                    bound: scorer.bound(idf, tfw * drift),
                }
            })
            .collect();
        // Stable: equal idf keep query order.
        terms.sort_by(|a, b| b.idf.total_cmp(&a.idf));
        (terms, scorer)
    }

    /// The exact BM25F scores of `slots` for a tokenized query (0 for a tool with none of its
    /// terms), each summed in canonical order as every search sums it.
    pub(super) fn score_slots(&self, tokens: &[String], slots: &[u32]) -> Vec<f32> {
        if slots.is_empty() {
            return Vec::new();
        }
        let (terms, scorer) = self.query_terms(tokens);
        slots
            .iter()
            .map(|&slot| {
                let l = &self.scaled_lens[slot as usize];
                let mut score = 0f32;
                for term in &terms {
                    let i = seek(term.list, 0, slot);
                    if term.list.get(i).is_some_and(|p| p.slot == slot) {
                        let s =
                            scorer.score(term.idf, &tf_of(&self.wide, term.id, &term.list[i]), l);
                        if s > 0.0 {
                            score += s;
                        }
                    }
                }
                score
            })
            .collect()
    }

    /// [`Index::search_tokens`] as `(score, slot)`: MaxScore (see the module's comment).
    pub fn search_slots(
        &self,
        tokens: &[String],
        k: usize,
        allow: Option<&[u64]>,
        ties: Option<&Ties>,
    ) -> Vec<(f32, u32)> {
        if k == 0 || self.by_name.is_empty() || tokens.is_empty() {
            return Vec::new();
        }
        let (terms, scorer) = self.query_terms(tokens);
        if terms.is_empty() {
            return Vec::new();
        }
        let allowed = |slot: u32| match allow {
            Some(mask) => mask[(slot / 64) as usize] & (1u64 << (slot % 64)) != 0,
            None => true,
        };
        let lens = &self.scaled_lens;
        let nt = terms.len();
        // Terms by increasing bound; below[i]: the sum of the bounds of order[..i].
        let mut order: Vec<usize> = (0..nt).collect();
        order.sort_by(|&a, &b| terms[a].bound.total_cmp(&terms[b].bound).then(a.cmp(&b)));
        let mut below = vec![0f32; nt + 1];
        for i in 0..nt {
            below[i + 1] = below[i] + terms[order[i]].bound;
        }
        let mut pos = vec![0usize; nt];
        let mut kth = Kth {
            heap: Vec::with_capacity(k.min(1 << 16)),
            k,
        };
        let mut candidates: Vec<(f32, u32)> = Vec::new();
        // Warm start: when the term of the largest bound is rare (a product name), its tools
        // are scored first, so the k-th best score is high before the long lists are read;
        // the main loop then skips them (`top`: order[..top] are left to the main loop).
        let rare = order[nt - 1];
        let rare_len = terms[rare].list.len();
        let longest = terms.iter().map(|t| t.list.len()).max().unwrap_or(0);
        let warm =
            nt > 1 && (rare_len <= WARM_SHORT || rare_len * 16 <= longest.min(WARM_MAX * 16));
        let top = if warm { nt - 1 } else { nt };
        // Pair start: without a rare term, the tools that have both terms of the largest
        // bounds are scored first, when their two lists are a small part of the query's. On a
        // catalog of look-alike tools the copies of the best one are spread over all slots,
        // and slot order alone raises the k-th best score only late; the pair raises it at
        // once, often so high that no other tool can reach it and the search ends there.
        let (e, p1) = (order[nt - 1], order[nt.saturating_sub(2)]);
        let pair = !warm && nt > 1 && {
            let two = terms[e].list.len() + terms[p1].list.len();
            two * PAIR_SHARE <= terms.iter().map(|t| t.list.len()).sum::<usize>()
        };
        // Tools that passed the bounds, waiting to be scored: their slots, and the postings
        // they have as (term, position). Scoring them in batches lets the memory of their
        // lengths load in parallel (each is a cache miss in a large index).
        let mut batch: Vec<(u32, u32)> = Vec::with_capacity(BATCH);
        let mut batch_posts: Vec<(u32, u32)> = Vec::with_capacity(BATCH * nt);
        let mut part = vec![0f32; nt];
        // order[..lazy] are non-essential.
        let mut lazy = 0;
        let mut theta = 0f32;
        let mut flush = |batch: &mut Vec<(u32, u32)>,
                         batch_posts: &mut Vec<(u32, u32)>,
                         lazy: &mut usize,
                         theta: &mut f32| {
            let mut from = 0usize;
            for &(slot, end) in batch.iter() {
                let posts = &batch_posts[from..end as usize];
                from = end as usize;
                let score = self.score_posts(&terms, &scorer, &mut part, posts, slot);
                if score <= 0.0 || score < *theta {
                    continue;
                }
                candidates.push((score, slot));
                kth.push(score);
                *theta = kth.threshold();
            }
            batch.clear();
            batch_posts.clear();
            while *lazy < top && below[*lazy + 1] * SLACK < *theta {
                *lazy += 1;
            }
        };
        // Queue `slot` for scoring if, with its postings from `mark` on (of the terms it has
        // among order[from..]), it can reach the k-th best score after the lookups.
        macro_rules! consider {
            ($slot:expr, $from:expr, $have:expr, $mark:expr) => {
                if probe(
                    &terms,
                    &order,
                    &below,
                    &mut pos,
                    $slot,
                    $from,
                    $have,
                    theta,
                    &mut batch_posts,
                ) {
                    prefetch(&lens[$slot as usize]);
                    batch.push(($slot, batch_posts.len() as u32));
                    if batch.len() == BATCH {
                        flush(&mut batch, &mut batch_posts, &mut lazy, &mut theta);
                    }
                } else {
                    batch_posts.truncate($mark);
                }
            };
        }
        if warm {
            #[cfg(test)]
            WARM.with(|w| w.set(w.get() + 1));
            for (i, p) in terms[rare].list.iter().enumerate() {
                if allowed(p.slot) {
                    let mark = batch_posts.len();
                    batch_posts.push((rare as u32, i as u32));
                    consider!(p.slot, nt - 1, terms[rare].bound, mark);
                }
            }
            flush(&mut batch, &mut batch_posts, &mut lazy, &mut theta);
            pos.iter_mut().for_each(|p| *p = 0);
        }
        let mut matches: Vec<(u32, u32)> = Vec::new();
        if pair {
            #[cfg(test)]
            PAIRED.with(|w| w.set(w.get() + 1));
            let (el, pl) = (terms[e].list, terms[p1].list);
            let have = terms[e].bound + terms[p1].bound;
            let (mut i, mut j) = (0usize, 0usize);
            while i < el.len() && j < pl.len() {
                let end = (i + CHUNK).min(el.len());
                (i, j) = intersect(el, i, end, pl, j, &mut matches);
                for &(ie, jp) in &matches {
                    let slot = el[ie as usize].slot;
                    if allowed(slot) {
                        let mark = batch_posts.len();
                        batch_posts.push((e as u32, ie));
                        batch_posts.push((p1 as u32, jp));
                        consider!(slot, nt - 2, have, mark);
                    }
                }
            }
            flush(&mut batch, &mut batch_posts, &mut lazy, &mut theta);
            pos.iter_mut().for_each(|p| *p = 0);
        }
        // Whether the warm or pair start has scored `slot` already (cursors in the rare term's
        // list, in the pair's lists).
        let (mut rare_at, mut e_at, mut p1_at) = (0usize, 0usize, 0usize);
        let mut done = |slot: u32| -> bool {
            let has = |list: &[Posting], at: &mut usize| {
                *at = seek(list, *at, slot);
                list.get(*at).is_some_and(|p| p.slot == slot)
            };
            if warm {
                has(terms[rare].list, &mut rare_at)
            } else {
                pair && has(terms[e].list, &mut e_at) && has(terms[p1].list, &mut p1_at)
            }
        };
        loop {
            // After the pair start, once a tool without both of its terms cannot reach the
            // k-th best score, every tool that can has been scored.
            if pair && lazy == nt - 1 && (terms[e].bound + below[nt - 2]) * SLACK < theta {
                #[cfg(test)]
                PAIR_ENDED.with(|w| w.set(w.get() + 1));
                break;
            }
            // One essential term whose tools must also have the first non-essential one to
            // reach the k-th best score: intersect the two lists, a chunk at a time, without a
            // branch per posting (most of a query's time at a million tools was here).
            if top - lazy == 1 && lazy > 0 {
                let (e, p1) = (order[lazy], order[lazy - 1]);
                if (terms[e].bound + below[lazy - 1]) * SLACK < theta {
                    let (el, pl) = (terms[e].list, terms[p1].list);
                    let end = (pos[e] + CHUNK).min(el.len());
                    let (i, j) = intersect(el, pos[e], end, pl, pos[p1], &mut matches);
                    #[cfg(test)]
                    CHUNKS.with(|c| c.set(c.get() + 1));
                    pos[e] = if j >= pl.len() { el.len() } else { i };
                    pos[p1] = j;
                    for &(ie, jp) in &matches {
                        let slot = el[ie as usize].slot;
                        if !allowed(slot) || done(slot) {
                            continue;
                        }
                        let mark = batch_posts.len();
                        batch_posts.push((e as u32, ie));
                        batch_posts.push((p1 as u32, jp));
                        let have = terms[e].bound + terms[p1].bound;
                        consider!(slot, lazy - 1, have, mark);
                    }
                    if pos[e] >= el.len() {
                        break;
                    }
                    continue;
                }
            }
            // The next tool: the smallest slot among the essential terms' cursors.
            let mut slot = u32::MAX;
            for &t in &order[lazy..top] {
                if let Some(p) = terms[t].list.get(pos[t]) {
                    slot = slot.min(p.slot);
                }
            }
            if slot == u32::MAX {
                break;
            }
            // Which essential terms it has (no scoring yet: bounds first, scores last).
            let mark = batch_posts.len();
            let mut have = 0f32;
            for &t in &order[lazy..top] {
                let term = &terms[t];
                let i = pos[t];
                if term.list.get(i).is_some_and(|p| p.slot == slot) {
                    batch_posts.push((t as u32, i as u32));
                    have += term.bound;
                    pos[t] = i + 1;
                }
            }
            if allowed(slot) && !done(slot) {
                consider!(slot, lazy, have, mark);
            } else {
                batch_posts.truncate(mark);
            }
        }
        flush(&mut batch, &mut batch_posts, &mut lazy, &mut theta);
        #[cfg(test)]
        if lazy > 0 {
            PRUNED.with(|p| p.set(p.get() + 1));
        }
        self.top_k_with(candidates.into_iter().filter(|c| c.0 >= theta), k, ties)
    }
}
