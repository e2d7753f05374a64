//! The one ranking of every search (`rank.rs`, `top_k_with`) against its definition: every
//! candidate sorted by score (higher first), equal scores by more tie evidence, then by smaller
//! name, cut to k. Many tools tie at every score, scores may be negative or a signed zero (the
//! vectors' cosines), and the candidates outnumber the buffer's first cut.

use super::*;
use crate::index::ties::Ties;

/// The definition of the order, by a full sort.
fn by_definition(
    ix: &Index,
    candidates: &[(f32, u32)],
    k: usize,
    t: Option<&Ties>,
) -> Vec<(f32, u32)> {
    let evidence = |slot: u32| t.map_or(0, |t| t.evidence(ix.name_of(slot)));
    let mut all = candidates.to_vec();
    all.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap()
            .then_with(|| evidence(b.1).cmp(&evidence(a.1)))
            .then_with(|| ix.name_of(a.1).cmp(ix.name_of(b.1)))
    });
    all.truncate(k);
    all
}

#[test]
fn top_k_with_orders_tied_candidates_by_evidence_then_name() {
    let mut rng = Rng(0x7135_0e1d_0ce5_0003);
    // Look-alike tools: names whose parts are query words or numbers, in a few namespaces.
    let words = ["alpha", "beta", "34", "7", "gamma", "x1", "c"];
    let tools = 3000;
    let mut staged = Staged::default();
    for i in 0..tools {
        let parts: Vec<&str> = (0..1 + rng.next(3))
            .map(|_| words[rng.next(words.len())])
            .collect();
        staged.begin(&format!("ns{}.{}_{i}", rng.next(3), parts.join("_")));
        staged.text(Field::Description, "a tool");
    }
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&staged);
    let queries = ["alpha 34", "beta gamma 7 c", "", "the x1 of 34 and alpha"];
    let scores = [
        -0.75f32,
        -0.0,
        0.0,
        0.5,
        1.25,
        1.25 + f32::EPSILON,
        2.0,
        3.75,
    ];
    for round in 0..120 {
        // Up to 2,900 candidates: the buffer is cut at 1,024 (or 2k) and again as it doubles;
        // every fourth round holds one score only (all tied, more than any cut keeps).
        let n = rng.next(if round % 3 == 0 { 2900 } else { 150 });
        let mut slots: Vec<u32> = (0..tools).collect();
        let mut candidates = Vec::new();
        for _ in 0..n {
            let s = slots.swap_remove(rng.next(slots.len()));
            let score = if round % 4 == 0 {
                1.25
            } else {
                scores[rng.next(scores.len())]
            };
            candidates.push((score, s));
        }
        let ties = Ties::new(queries[round % queries.len()]);
        for k in [1, 2, 5, 10, 50, 200, 600, 5000] {
            for t in [None, Some(&ties)] {
                let got = ix.top_k_with(candidates.iter().copied(), k, t);
                let want = by_definition(&ix, &candidates, k, t);
                let key = |v: &[(f32, u32)]| v.iter().map(|c| c.1).collect::<Vec<_>>();
                assert_eq!(key(&got), key(&want), "round {round} k {k} n {n}");
                assert!(got.iter().zip(&want).all(|(g, w)| g.0 == w.0));
            }
        }
    }
}
