//! The final ranking of a pruned search (`search.rs`, `rank`) against the heap of
//! `top_k_with`: the same hits in the same order, with many tools tied at every score.

use super::*;
use crate::index::ties::Ties;

#[test]
fn rank_orders_tied_candidates_as_the_heap_does() {
    let mut rng = Rng(0x7135_0e1d_0ce5_0003);
    // Look-alike tools: names whose parts are query words or numbers, in a few namespaces.
    let words = ["alpha", "beta", "34", "7", "gamma", "x1", "c"];
    let mut staged = Staged::default();
    let mut names = Vec::new();
    for i in 0..400 {
        let parts: Vec<&str> = (0..1 + rng.next(3))
            .map(|_| words[rng.next(words.len())])
            .collect();
        let name = format!("ns{}.{}_{i}", rng.next(3), parts.join("_"));
        staged.begin(&name);
        staged.text(Field::Description, "a tool");
        names.push(name);
    }
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&staged);
    let queries = ["alpha 34", "beta gamma 7 c", "", "the x1 of 34 and alpha"];
    let scores = [0.5f32, 1.25, 1.25 + f32::EPSILON, 2.0, 3.75];
    for round in 0..300 {
        let n = rng.next(120);
        let mut slots: Vec<u32> = (0..400).collect();
        let mut candidates = Vec::new();
        for _ in 0..n {
            let s = slots.swap_remove(rng.next(slots.len()));
            candidates.push((scores[rng.next(scores.len())], s));
        }
        let ties = Ties::new(queries[round % queries.len()]);
        for k in [1, 2, 5, 10, 50, 200] {
            for t in [None, Some(&ties)] {
                let want = ix.top_k_with(candidates.iter().copied(), k, t);
                assert_eq!(
                    ix.rank(candidates.clone(), k, t),
                    want,
                    "round {round} k {k}"
                );
            }
        }
    }
}
