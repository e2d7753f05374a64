//! A message of several requests (`index/intents.rs`) and the exact scores of chosen tools
//! (`score_slots`, what the hybrid fusion reads for the tools only the vectors found).

use super::super::intents::{Query, PART_WEIGHT};
use super::super::ties::Ties;
use super::super::vectors::QueryVec;
use super::*;

fn skewed(n: usize) -> Index {
    let mut rng = Rng(0x5eed_1234);
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(&skewed_catalog(&mut rng, n, "t")));
    ix
}

#[test]
fn score_slots_gives_every_search_score_bit_for_bit() {
    let ix = skewed(3000);
    let mut rng = Rng(99);
    for q in random_queries(&mut rng, 200) {
        let tokens = analyze_query(&q);
        let hits = ix.search_exhaustive(&tokens, 40, None, None);
        let slots: Vec<u32> = hits.iter().map(|h| h.1).collect();
        let got = ix.score_slots(&tokens, &slots);
        for ((want, slot), got) in hits.iter().zip(got) {
            assert_eq!(want.to_bits(), got.to_bits(), "query {q:?} slot {slot}");
        }
        // A tool with none of the query's terms scores 0.
        if let Some(other) = (0..ix.docs.slots() as u32).find(|s| !slots.contains(s)) {
            let all = ix.search_exhaustive(&tokens, usize::MAX >> 1, None, None);
            if !all.iter().any(|h| h.1 == other) {
                assert_eq!(ix.score_slots(&tokens, &[other]), vec![0.0]);
            }
        }
    }
}

fn rank<'a>(
    ix: &'a Index,
) -> impl Fn(&[String], &Ties, Option<&QueryVec>, usize) -> Vec<(f32, u32)> + 'a {
    move |tokens: &[String], ties: &Ties, _: Option<&QueryVec>, k: usize| {
        ix.search_slots(tokens, k, None, Some(ties))
    }
}

#[test]
fn a_message_of_one_request_is_ranked_as_one_query() {
    let ix = skewed(2000);
    let mut rng = Rng(7);
    for q in random_queries(&mut rng, 100) {
        let query = Query::new(&q, true);
        assert!(query.parts.is_empty(), "{q:?}");
        let got = ix.search_intents(&query, 10, None, rank(&ix)).unwrap();
        let want = ix.search_slots(&query.tokens, 10, None, Some(&query.ties));
        assert_eq!(got, want);
    }
}

#[test]
fn each_request_is_ranked_and_scaled_to_the_whole_message() {
    let ix = skewed(2000);
    let mut rng = Rng(11);
    let queries = random_queries(&mut rng, 300);
    let mut fused = 0;
    for pair in queries.chunks(2) {
        let q = format!("{}; {}", pair[0], pair[1]);
        let query = Query::new(&q, true);
        let whole = ix.search_slots(&query.tokens, 5, None, Some(&query.ties));
        let got = ix.search_intents(&query, 5, None, rank(&ix)).unwrap();
        if query.parts.is_empty() {
            assert_eq!(got, whole);
            continue;
        }
        fused += 1;
        assert_eq!(query.parts.len(), 2);
        let Some(&(top, best)) = whole.first() else {
            assert!(got.is_empty());
            continue;
        };
        assert_eq!(got[0], (top, best), "{q:?}");
        // Every hit's score is its whole-message score or a part's, scaled; and each part's
        // best tool is among the hits unless k tools of the whole score above it.
        for part in &query.parts {
            let ranked = ix.search_slots(&part.tokens, 5, None, Some(&part.ties));
            let Some(&(p_top, p_best)) = ranked.first() else {
                continue;
            };
            let scaled = p_top * (PART_WEIGHT * top / p_top);
            let above = whole.iter().filter(|h| h.0 > scaled).count();
            if above < 4 {
                assert!(got.iter().any(|h| h.1 == p_best), "{q:?}");
            }
        }
        for w in got.windows(2) {
            assert!(w[0].0 >= w[1].0);
        }
    }
    assert!(fused > 50, "{fused}");
}
