//! A message of several requests ("get the weather in Paris and convert 100 EUR to USD"):
//! the whole message and each of its requests (`crate::intents`) are ranked, and the rankings
//! fused so that every request's best tools can reach the top k. One query vector averages
//! the requests and one BM25F ranking favours the request with the rarest words; the parts
//! give each its own.
//!
//! With `s` the whole message's scores (BM25F, or fused with the cosines), `s_p` a part's,
//! and `top`, `top_p` their best:
//!
//! ```text
//! fused(d) = max(s(d), PART_WEIGHT * s_p(d) * top / top_p)   over the parts p
//! ```
//!
//! The whole message's best tool stays first, and a part's best tool comes after every tool
//! the whole message scores within 20% of its best: where a message holds one request cut
//! in two by mistake, its own ranking is kept where it is confident. A message of one request
//! (the split finds fewer than two parts of [`MIN_PART_TERMS`] terms) is ranked as before,
//! bit for bit. The scores are the whole message's (BM25F, or fused), parts' scaled to them.
//! Equal fused scores keep the order of the ranking they come from (the whole message's
//! first), so each ranking's own order of ties (`ties.rs`) holds. The top k of
//! the fusion are among the top k of the rankings (a tool's fused score is one of its scores,
//! and each ranking has k tools at least as high), so each ranking asks for k.

use super::ties::Ties;
use super::vectors::QueryVec;
use super::{analyze_query, Index};

/// A part's scores count this much of the whole message's (its best tool scores 0.8 of the
/// whole message's best). Chosen on the multi-intent and single-request dev sets at once
/// (`bench/RESULTS.md`): at 1.0 a single request cut in two loses tools the whole message
/// ranks 2nd to 5th; at 0.7 a second request's tool often stays out of the top 5.
pub const PART_WEIGHT: f32 = 0.8;

/// A part is ranked on its own when it has at least this many distinct terms ("classify it"
/// has one: a fragment, not a request).
pub const MIN_PART_TERMS: usize = 2;

/// A query: its terms and tie evidence, and those of its requests when it has two or more.
pub struct Query {
    pub tokens: Vec<String>,
    pub ties: Ties,
    /// The requests ranked on their own (none for a message of one request).
    pub parts: Vec<Part>,
}

/// One request of a message.
pub struct Part {
    /// Its byte range in the message.
    pub span: (usize, usize),
    pub tokens: Vec<String>,
    pub ties: Ties,
}

impl Query {
    /// `text` tokenized, and split into its requests when `intents` (see the module).
    pub fn new(text: &str, intents: bool) -> Self {
        Query {
            tokens: analyze_query(text),
            ties: Ties::new(text),
            parts: if intents { parts(text) } else { Vec::new() },
        }
    }
}

/// The requests of `text` ranked on their own: those of [`MIN_PART_TERMS`] distinct terms or
/// more, when there are two or more of them (else none).
fn parts(text: &str) -> Vec<Part> {
    let spans = crate::intents::split(text);
    if spans.len() < 2 {
        return Vec::new();
    }
    let mut parts = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        let part = &text[a..b];
        let tokens = analyze_query(part);
        let mut distinct: Vec<&str> = tokens.iter().map(String::as_str).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() >= MIN_PART_TERMS {
            parts.push(Part {
                span: (a, b),
                ties: Ties::new(part),
                tokens,
            });
        }
    }
    if parts.len() < 2 {
        parts.clear();
    }
    parts
}

/// The parts of `text` a search ranks on their own, as byte ranges (none for one request).
pub fn parts_of(text: &str) -> Vec<(usize, usize)> {
    parts(text).into_iter().map(|p| p.span).collect()
}

/// Vectors of a query: the whole message's and one per part (`None`: that part by BM25F alone).
pub struct QueryVectors<'a> {
    pub whole: &'a QueryVec,
    pub parts: &'a [Option<QueryVec>],
}

impl Index {
    /// The `k` best tools for `query` (see the module), each ranking from `rank(tokens, ties,
    /// vector, k)`.
    pub fn search_intents(
        &self,
        query: &Query,
        k: usize,
        vectors: Option<&QueryVectors<'_>>,
        rank: impl Fn(&[String], &Ties, Option<&QueryVec>, usize) -> Vec<(f32, u32)>,
    ) -> Result<Vec<(f32, u32)>, String> {
        if let Some(v) = vectors {
            if !v.parts.is_empty() && !query.parts.is_empty() && v.parts.len() != query.parts.len()
            {
                return Err(format!(
                    "{} intent vectors for a query of {} parts (split_intents)",
                    v.parts.len(),
                    query.parts.len()
                ));
            }
        }
        let whole = rank(&query.tokens, &query.ties, vectors.map(|v| v.whole), k);
        if query.parts.is_empty() || k == 0 {
            return Ok(whole);
        }
        let Some(&(top, _)) = whole.first() else {
            // A part's terms are the whole message's: nothing matches either.
            return Ok(whole);
        };
        // (score, ranking, rank, slot): the whole message's ranking is 0, the parts' follow.
        let mut hits: Vec<(f32, u32, u32, u32)> = whole
            .iter()
            .enumerate()
            .map(|(r, &(s, slot))| (s, 0, r as u32, slot))
            .collect();
        for (i, part) in query.parts.iter().enumerate() {
            let v = vectors
                .and_then(|v| v.parts.get(i))
                .and_then(Option::as_ref);
            let ranked = rank(&part.tokens, &part.ties, v, k);
            if let Some(&(best, _)) = ranked.first() {
                if best > 0.0 {
                    let scale = PART_WEIGHT * top / best;
                    hits.extend(
                        ranked
                            .into_iter()
                            .enumerate()
                            .map(|(r, (s, slot))| (s * scale, i as u32 + 1, r as u32, slot)),
                    );
                }
            }
        }
        // Best first; equal scores in the order of the ranking they come from (the whole
        // message's first), so each ranking's own tie order (`ties.rs`) holds.
        let order = |a: &(f32, u32, u32, u32), b: &(f32, u32, u32, u32)| {
            b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
        };
        hits.sort_unstable_by(|a, b| a.3.cmp(&b.3).then_with(|| order(a, b)));
        hits.dedup_by_key(|h| h.3);
        hits.sort_unstable_by(order);
        Ok(hits.into_iter().take(k).map(|h| (h.0, h.3)).collect())
    }
}
