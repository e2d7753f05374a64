//! MaxScore pruning: the same top-k as brute-force and exhaustive scoring, through adds and
//! removes; postings cursors against a scan.

use super::*;
use crate::index::postings::Posting;
use crate::index::search::PRUNED;

#[test]
fn pruned_search_equals_brute_force() {
    // A deterministic pseudo-random catalog with skewed word frequencies.
    let words = [
        "get",
        "list",
        "create",
        "issue",
        "repo",
        "github",
        "slack",
        "message",
        "open",
        "closed",
        "user",
        "team",
        "invoice",
        "stripe",
        "payment",
        "refund",
        "file",
        "drive",
        "share",
        "folder",
        "weather",
        "city",
        "forecast",
        "alert",
        "metric",
        "dashboard",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |m: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % m as u64) as usize
    };
    let mut staged = Staged::default();
    for i in 0..600 {
        let pick = |next: &mut dyn FnMut(usize) -> usize| {
            // Square root of a uniform draw: high-index words are much more frequent.
            let r = next(words.len() * words.len());
            words[(r as f64).sqrt() as usize]
        };
        let name = format!("{}_{}_{i}", pick(&mut next), pick(&mut next));
        staged.begin(&name);
        let desc: Vec<&str> = (0..next(12)).map(|_| pick(&mut next)).collect();
        staged.text(Field::Description, &desc.join(" "));
        for _ in 0..next(4) {
            staged.text(Field::ParamNames, pick(&mut next));
            staged.text(
                Field::ParamText,
                &format!("{} {}", pick(&mut next), pick(&mut next)),
            );
        }
    }
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&staged);
    let mut pruned_some = 0;
    for _ in 0..400 {
        let q: Vec<&str> = (0..1 + next(6)).map(|_| words[next(words.len())]).collect();
        let q = q.join(" ");
        for k in [1, 3, 5, 20] {
            let got = ix.search_tokens(&analyze_query(&q), k, None);
            assert_eq!(got, brute_force(&ix, &q, k), "query {q:?} k {k}");
            pruned_some += usize::from(got.len() == k);
        }
    }
    assert!(pruned_some > 100);
    assert!(
        PRUNED.with(|p| p.get()) > 100,
        "pruning was never exercised"
    );
}

#[test]
fn seek_and_intersect_agree_with_a_scan() {
    use crate::index::cursor::{intersect, seek};
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..300 {
        let density = 1 + rng.next(60);
        let mut list: Vec<Posting> = Vec::new();
        let mut slot = rng.next(5) as u32;
        for _ in 0..rng.next(if round % 3 == 0 { 5 } else { 3000 }) {
            list.push(Posting::new(slot, [1, 0, 0, 0]).0);
            slot += 1 + rng.next(density) as u32;
        }
        let max = slot + 10;
        for _ in 0..50 {
            let from = rng.next(list.len() + 1);
            let target = rng.next(max as usize) as u32;
            let want = from + list[from..].partition_point(|p| p.slot < target);
            assert_eq!(
                seek(&list, from, target),
                want,
                "from {from} target {target}"
            );
        }
        let mut other: Vec<Posting> = list.iter().filter(|_| rng.next(3) == 0).copied().collect();
        for _ in 0..rng.next(200) {
            other.push(Posting::new(rng.next(max as usize) as u32, [0, 1, 0, 0]).0);
        }
        other.sort_by_key(|p| p.slot);
        other.dedup_by_key(|p| p.slot);
        let (from, at) = (rng.next(list.len() + 1), rng.next(other.len() + 1));
        let end = from + rng.next(list.len() - from + 1);
        let mut out = Vec::new();
        let (i, j) = intersect(&list, from, end, &other, at, &mut out);
        let want: Vec<(u32, u32)> = (from..i)
            .filter_map(|a| {
                other[at..]
                    .iter()
                    .position(|p| p.slot == list[a].slot)
                    .map(|b| (a as u32, (at + b) as u32))
            })
            .collect();
        assert_eq!(out, want);
        assert!(i == end || j == other.len());
        // Every posting of `other` before `j` is below the next slot of `list` still to read.
        if j > at && i < list.len() {
            assert!(other[j - 1].slot < list[i].slot || i == end);
        }
    }
}

#[test]
fn maxscore_equals_exhaustive_scoring_on_a_skewed_catalog() {
    use crate::index::search::{CHUNKS, WARM};
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let tools = skewed_catalog(&mut rng, 6000, "t");
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(&tools));
    assert_bounds_hold(&ix);
    let queries = random_queries(&mut rng, 400);
    let (pruned, warm, chunks) = (
        PRUNED.with(|p| p.get()),
        WARM.with(|w| w.get()),
        CHUNKS.with(|c| c.get()),
    );
    assert_pruning_exact(&ix, &queries, None);
    // Every path ran: terms left non-essential, the warm start, the chunked intersection.
    assert!(PRUNED.with(|p| p.get()) - pruned > 500);
    assert!(WARM.with(|w| w.get()) - warm > 100);
    assert!(CHUNKS.with(|c| c.get()) - chunks > 100);
    // With a filter: a random third of the tools.
    let names: Vec<String> = tools.iter().map(|t| t.0.clone()).collect();
    let allowed: Vec<&str> = names
        .iter()
        .filter(|_| rng.next(3) == 0)
        .map(String::as_str)
        .collect();
    let mask = ix.allow_mask(allowed.iter().copied());
    assert_pruning_exact(&ix, &queries[..150], Some(&mask));
}

#[test]
fn maxscore_equals_exhaustive_scoring_on_look_alike_tools() {
    // The catalog copied 12 times, each copy with two extra words (as real registries are
    // full of look-alikes, and as `bench/bench_million.py --catalog near-duplicate`), and
    // two words most tools have: the best tool's copies are spread over every slot, and the
    // query's longest lists are not its best terms, the case of the pair start.
    use crate::index::search::{PAIRED, PAIR_ENDED};
    let mut rng = Rng(0x6a09_e667_f3bc_c908);
    let mut base = skewed_catalog(&mut rng, 1500, "b");
    for tool in base.iter_mut() {
        for (word, one_in) in [("api", 2), ("data", 3)] {
            if rng.next(one_in) == 0 {
                tool.1 = format!("{word} {}", tool.1);
            }
        }
    }
    let mut tools = Vec::new();
    for copy in 0..12 {
        for (name, desc, params) in &base {
            let extra = format!("w{} w{}", rng.next(400), rng.next(400));
            tools.push((
                format!("{name}_c{copy}"),
                format!("{desc} {extra}"),
                params.clone(),
            ));
        }
    }
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(&tools));
    // Queries as users ask: the common words and a few of one tool's, and random ones.
    let mut queries = random_queries(&mut rng, 60);
    for _ in 0..240 {
        let words: Vec<&str> = base[rng.next(base.len())].1.split(' ').collect();
        let mut q: Vec<&str> = (0..1 + rng.next(3))
            .map(|_| words[rng.next(words.len())])
            .collect();
        q.extend(["api", "data"].iter().filter(|_| rng.next(3) != 0));
        queries.push(q.join(" "));
    }
    let (paired, ended) = (PAIRED.with(|p| p.get()), PAIR_ENDED.with(|p| p.get()));
    assert_pruning_exact(&ix, &queries, None);
    assert!(
        PAIRED.with(|p| p.get()) - paired > 200,
        "the pair start never ran"
    );
    assert!(
        PAIR_ENDED.with(|p| p.get()) - ended > 100,
        "no search ended after the pair"
    );
    let mask = ix.allow_mask(
        tools
            .iter()
            .filter(|_| rng.next(2) == 0)
            .map(|t| t.0.as_str()),
    );
    assert_pruning_exact(&ix, &queries[..150], Some(&mask));
}

#[test]
fn maxscore_stays_exact_through_adds_and_removes() {
    let mut rng = Rng(0x51_7cc1_b727_220a);
    let mut tools = skewed_catalog(&mut rng, 3000, "a");
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(&tools));
    let queries = random_queries(&mut rng, 120);
    // Remove a third (the statistics move, the bounds go stale), re-add some changed, add
    // tools with much longer texts (average lengths grow: the bounds must be rebased).
    for round in 0..4 {
        remove_some(&mut ix, &mut tools, &mut rng, 3);
        let mut more = skewed_catalog(&mut rng, 400, &format!("r{round}_"));
        for t in more.iter_mut() {
            if round % 2 == 1 {
                t.1 = format!("{} {}", t.1, t.1.repeat(6));
            }
        }
        ix.add_staged(&stage_catalog(&more));
        tools.extend(more);
        assert_bounds_hold(&ix);
        assert_pruning_exact(&ix, &queries, None);
    }
    // And the same ranking as an index built from scratch.
    let mut fresh = Index::new(Params::default()).unwrap();
    fresh.add_staged(&stage_catalog(&tools));
    for q in &queries {
        let tokens = analyze_query(q);
        for k in [1, 5, 20] {
            assert_eq!(
                ix.named(ix.search_slots(&tokens, k, None, None)),
                fresh.named(fresh.search_slots(&tokens, k, None, None)),
                "query {q:?}"
            );
        }
    }
}

#[test]
fn the_threshold_start_stays_exact_on_common_words_through_adds_and_removes() {
    // Few words, most tools holding several (as a small vocabulary makes them): every query
    // term's list is long, many tools tie, and the threshold start runs on every query. Its
    // impact prefixes are made by the searches; the adds and removes between them must not
    // leave a stale one (a tool added with a larger impact than any prefix held).
    use crate::index::search::{THRESHOLD_ENDED, THRESHOLD_HANDED};
    let mut rng = Rng(0x9b05_688c_2b3e_6c1f);
    let words: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
    let catalog = |rng: &mut Rng, n: usize, tag: &str, short: bool| {
        (0..n)
            .map(|i| {
                let len = if short {
                    1 + rng.next(2)
                } else {
                    3 + rng.next(10)
                };
                let desc: Vec<&str> = (0..len)
                    .map(|_| words[(rng.next(30 * 30) as f64).sqrt() as usize].as_str())
                    .collect();
                (format!("{tag}{i}"), desc.join(" "), Vec::new())
            })
            .collect::<Vec<(String, String, Vec<String>)>>()
    };
    let mut tools = catalog(&mut rng, 4000, "z", false);
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(&tools));
    let queries: Vec<String> = (0..80)
        .map(|_| {
            (0..1 + rng.next(4))
                .map(|_| words[29 - rng.next(12)].clone())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let (ended, handed) = (
        THRESHOLD_ENDED.with(|c| c.get()),
        THRESHOLD_HANDED.with(|c| c.get()),
    );
    assert_pruning_exact(&ix, &queries, None);
    for round in 0..3 {
        remove_some(&mut ix, &mut tools, &mut rng, 4);
        // Short texts of the same words: impacts above every prefix made so far.
        let more = catalog(&mut rng, 300, &format!("s{round}_"), round != 1);
        ix.add_staged(&stage_catalog(&more));
        tools.extend(more);
        assert_pruning_exact(&ix, &queries, None);
        let mask = ix.allow_mask(
            tools
                .iter()
                .filter(|_| rng.next(2) == 0)
                .map(|t| t.0.as_str()),
        );
        assert_pruning_exact(&ix, &queries[..30], Some(&mask));
    }
    assert!(
        THRESHOLD_ENDED.with(|c| c.get()) - ended > 50,
        "no threshold start ended a search"
    );
    assert!(
        THRESHOLD_HANDED.with(|c| c.get()) - handed > 50,
        "no threshold start handed over"
    );
}

/// Remove about one tool in `one_in` from `ix` and from `tools`.
fn remove_some(
    ix: &mut Index,
    tools: &mut Vec<(String, String, Vec<String>)>,
    rng: &mut Rng,
    one_in: usize,
) {
    tools.retain(|t| {
        if rng.next(one_in) == 0 {
            assert!(ix.remove(&t.0));
            false
        } else {
            true
        }
    });
}
