use super::docs::Docs;
use super::postings::{Posting, PostingList};
use super::scoring::Scorer;
use super::search::PRUNED;
use super::*;
use crate::project::{project_schema, Field};
use serde_json::json;

type Tool = (&'static str, &'static str, serde_json::Value);

fn tool(name: &'static str, desc: &'static str, schema: serde_json::Value) -> Tool {
    (name, desc, schema)
}

fn stage(tools: impl IntoIterator<Item = Tool>) -> Staged {
    let mut staged = Staged::default();
    for (name, desc, schema) in tools {
        staged.begin(name);
        staged.text(Field::Description, desc);
        project_schema(Some(&&schema), &mut |f, t| staged.text(f, t)).unwrap();
    }
    staged
}

fn add(ix: &mut Index, tools: impl IntoIterator<Item = Tool>) {
    ix.add_staged(&stage(tools));
}

fn catalog() -> Vec<Tool> {
    vec![
        tool(
            "get_weather",
            "Current weather for a city",
            json!({"properties": {"city": {"description": "City name"},
                   "unit": {"enum": ["celsius", "fahrenheit"]}}}),
        ),
        tool(
            "send_email",
            "Send an email message",
            json!({"properties": {"to": {}}}),
        ),
        tool(
            "list_files",
            "List files in a directory",
            json!({"properties": {"path": {}}}),
        ),
        tool("weather_alerts", "Severe weather alerts", json!({})),
    ]
}

fn search(ix: &Index, q: &str, k: usize) -> Vec<(String, f32)> {
    ix.search_tokens(&analyze_query(q), k, None)
}

#[test]
fn ranks_by_name_and_params() {
    let mut ix = Index::new(Params::default()).unwrap();
    add(&mut ix, catalog());
    assert_eq!(ix.len(), 4);
    let hits = search(&ix, "weather in celsius", 5);
    assert_eq!(hits[0].0, "get_weather");
    assert_eq!(hits.len(), 2);
    assert!(hits[0].1 > hits[1].1);
    assert_eq!(search(&ix, "email", 5)[0].0, "send_email");
    assert!(search(&ix, "", 5).is_empty());
    assert!(search(&ix, "the of and", 5).is_empty());
    assert!(search(&ix, "weather", 0).is_empty());
}

#[test]
fn incremental_equals_fresh() {
    let mut inc = Index::new(Params::default()).unwrap();
    for t in catalog() {
        add(&mut inc, [t]);
    }
    add(
        &mut inc,
        [tool("zzz", "temporary weather thing", json!({}))],
    );
    assert!(inc.remove("send_email"));
    assert!(!inc.remove("send_email"));
    add(
        &mut inc,
        [tool(
            "send_email",
            "Send an email message",
            json!({"properties": {"to": {}}}),
        )],
    );
    assert!(inc.remove("zzz"));

    let mut fresh = Index::new(Params::default()).unwrap();
    add(&mut fresh, catalog());
    for q in [
        "weather",
        "send email to",
        "files directory",
        "celsius alerts",
    ] {
        assert_eq!(search(&inc, q, 10), search(&fresh, q, 10), "query {q}");
    }
    assert_eq!(inc.num_postings(), fresh.num_postings());
    assert_eq!(inc.sum_len, fresh.sum_len);
}

#[test]
fn ties_break_by_name_and_heap_is_bounded() {
    let mut ix = Index::new(Params::default()).unwrap();
    for name in ["d_tool", "b_tool", "a_tool", "c_tool", "e_tool"] {
        add(&mut ix, [tool(name, "shared words", json!({}))]);
    }
    let hits = search(&ix, "shared words", 3);
    let names: Vec<_> = hits.iter().map(|h| h.0.as_str()).collect();
    assert_eq!(names, ["a_tool", "b_tool", "c_tool"]);
    let all = search(&ix, "shared", 100);
    assert_eq!(all.len(), 5);
    assert_eq!(all[4].0, "e_tool");
}

#[test]
fn allow_mask_filters() {
    let mut ix = Index::new(Params::default()).unwrap();
    add(&mut ix, catalog());
    let mask = ix.allow_mask(["weather_alerts", "unknown"]);
    let hits = ix.search_tokens(&analyze_query("weather"), 5, Some(&mask));
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].0, "weather_alerts");
    let none = ix.allow_mask(std::iter::empty());
    assert!(ix
        .search_tokens(&analyze_query("weather"), 5, Some(&none))
        .is_empty());
}

#[test]
fn posting_lists_keep_slot_order_inline_or_not() {
    assert_eq!(
        std::mem::size_of::<PostingList>(),
        std::mem::size_of::<Vec<Posting>>()
    );
    let post = |slot| Posting {
        slot,
        tf: [1, 0, 0, 0],
    };
    let slots = |l: &PostingList| l.as_slice().iter().map(|p| p.slot).collect::<Vec<_>>();
    let mut list = PostingList::default();
    list.insert(post(7));
    assert!(matches!(list, PostingList::One(_)) && list.heap_bytes() == 0);
    for s in [3, 9, 1, 8] {
        list.insert(post(s));
    }
    assert_eq!(slots(&list), [1, 3, 7, 8, 9]);
    for s in [3, 42, 9, 1, 8] {
        list.remove(s);
    }
    assert_eq!(slots(&list), [7]);
    list.remove(7);
    assert!(list.is_empty() && list.heap_bytes() == 0);
    let mut one = PostingList::default();
    one.reserve_exact(1);
    one.insert(post(5));
    assert!(matches!(one, PostingList::One(_)));
    one.reserve_exact(3);
    assert!(one.heap_bytes() >= 4 * std::mem::size_of::<Posting>());
    for s in [6, 7, 8] {
        one.insert(post(s));
    }
    assert_eq!(slots(&one), [5, 6, 7, 8]);
}

#[test]
fn records_round_trip_and_compact() {
    let mut docs = Docs::default();
    let mut ids = vec![5, 0, 127, 128, 16_384, 70_000, u32::MAX - 1, 3];
    let a = docs.push_free_slot();
    docs.set(a, "caf\u{e9}.tool", [3, 0, 300, u32::MAX], &mut ids.clone());
    ids.sort_unstable();
    assert_eq!(docs.get(a).unwrap().name(), "caf\u{e9}.tool");
    let (_, _, len) = docs.get(a).unwrap().decode();
    assert!(len < "caf\u{e9}.tool".len() + 4 * 5 + ids.len() * 4);
    // Many replaced records: the arena compacts and every live record survives.
    let slots: Vec<u32> = (0..100).map(|_| docs.push_free_slot()).collect();
    for round in 0..50u32 {
        for &slot in &slots {
            if round > 0 {
                docs.take(slot).unwrap();
            }
            let name = format!("tool{slot}-{round}");
            docs.set(slot, &name, [round, 1, 2, 3], &mut [slot, round + 1000]);
        }
    }
    assert!(docs.bytes.len() <= 2 * 100 * 40 + (1 << 16) + 100);
    for &slot in &slots {
        let doc = docs.get(slot).unwrap();
        assert_eq!(doc.name(), format!("tool{slot}-49"));
        let (lens, terms, _) = doc.decode();
        assert_eq!(lens, [49, 1, 2, 3]);
        assert_eq!(terms, vec![slot, 1049]);
    }
    let (lens, terms) = docs.take(a).unwrap();
    assert_eq!((lens, terms), ([3, 0, 300, u32::MAX], ids));
    assert!(docs.get(a).is_none() && docs.take(a).is_none());
    assert_eq!(docs.iter().count(), 100);
}

#[test]
fn names_split_into_namespace_and_last_segment() {
    assert_eq!(split_name("math.factorial"), (Some("math"), "factorial"));
    assert_eq!(split_name("get_weather"), (None, "get_weather"));
    assert_eq!(split_name("org/model-name"), (Some("org"), "model-name"));
    assert_eq!(
        split_name("hub.org/model:v2"),
        (Some("hub.org/model"), "v2")
    );
    assert_eq!(split_name("trailing."), (None, "trailing."));
    assert_eq!(split_name(".hidden"), (None, ".hidden"));
    assert_eq!(split_name("a..b"), (Some("a."), "b"));
    let staged = stage([tool("math.factorial", "n!", json!({}))]);
    let texts: Vec<_> = staged.texts().collect();
    assert_eq!(
        texts,
        [
            (Field::Name, "factorial"),
            (Field::ParamText, "math"),
            (Field::Description, "n!")
        ]
    );
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&staged);
    assert!(ix.contains("math.factorial"));
    assert_eq!(search(&ix, "math", 1)[0].0, "math.factorial");
}

#[test]
fn long_descriptions_count_sublinearly() {
    // Same matches, one description 30 times longer: with the default exponent 0.6 the
    // long one keeps more of its score than plain BM25 (exponent 1) leaves it.
    let long = "image classification ".to_owned() + &"filler ".repeat(300);
    let ratio = |e: f32| {
        let mut ix = Index::new(Params {
            length_exponent: [1.0, e, 1.0, 1.0],
            ..Params::default()
        })
        .unwrap();
        let mut staged = Staged::default();
        staged.begin("long_tool");
        staged.text(Field::Description, &long);
        staged.begin("short_tool");
        staged.text(Field::Description, "image classification model");
        for i in 0..8 {
            staged.begin(&format!("other{i}"));
            staged.text(Field::Description, "something else entirely here");
        }
        ix.add_staged(&staged);
        let hits = search(&ix, "image classification", 2);
        assert_eq!(hits[0].0, "short_tool");
        hits[1].1 / hits[0].1
    };
    assert!(
        ratio(0.6) > ratio(1.0) * 2.0,
        "{} {}",
        ratio(0.6),
        ratio(1.0)
    );
}

#[test]
fn params_validated() {
    assert!(Index::new(Params {
        k1: -1.0,
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        b: [0.5, 1.5, 0.5, 0.5],
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        weights: [0.0; NUM_FIELDS],
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        k1: f32::NAN,
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        length_exponent: [1.0, 1.5, 1.0, 1.0],
        ..Params::default()
    })
    .is_err());
}

/// Every tool's full score, by brute force over all tools and terms (no pruning), in the
/// same term order as `search_tokens`, ranked the same way.
fn brute_force(ix: &Index, q: &str, k: usize) -> Vec<(String, f32)> {
    let n = ix.len() as f64;
    let scorer = Scorer::new(&ix.params, &ix.sum_len, n);
    let mut terms: Vec<(u32, f32, f32)> = Vec::new();
    for tok in analyze_query(q) {
        if let Some(t) = ix.vocab.get(tok.as_str()) {
            let df = ix.postings[t as usize].len() as f64;
            if df == 0.0 || terms.iter().any(|x| x.0 == t) {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
            terms.push((t, idf, idf * (ix.params.k1 + 1.0) * 1.001));
        }
    }
    terms.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut all: Vec<(String, f32)> = Vec::new();
    for (slot, doc) in ix.docs.iter() {
        let slot = slot as usize;
        let mut score = 0f32;
        for &(t, idf, _) in &terms {
            if let Some(p) = ix.postings[t as usize]
                .as_slice()
                .iter()
                .find(|p| p.slot as usize == slot)
            {
                score += scorer.score(idf, p, &ix.scaled_lens[slot]);
            }
        }
        if score > 0.0 {
            all.push((doc.name().to_owned(), score));
        }
    }
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

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
            // Square the draw: low-index words are much more frequent.
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

/// A deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self, m: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % m as u64) as usize
    }
}

#[test]
fn seek_and_intersect_agree_with_a_scan() {
    use super::cursor::{intersect, seek};
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..300 {
        let density = 1 + rng.next(60);
        let mut list: Vec<Posting> = Vec::new();
        let mut slot = rng.next(5) as u32;
        for _ in 0..rng.next(if round % 3 == 0 { 5 } else { 3000 }) {
            list.push(Posting {
                slot,
                tf: [1, 0, 0, 0],
            });
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
            other.push(Posting {
                slot: rng.next(max as usize) as u32,
                tf: [0, 1, 0, 0],
            });
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

/// A catalog with skewed word frequencies, rare words (product names), identical tools under
/// different names (ties at every score), and a few long descriptions.
fn skewed_catalog(rng: &mut Rng, n: usize, tag: &str) -> Vec<(String, String, Vec<String>)> {
    let common: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    let rare: Vec<String> = (0..300).map(|i| format!("rare{i}x")).collect();
    let pick = |rng: &mut Rng| {
        // A squared draw: low-numbered words are far more frequent.
        let r = rng.next(common.len() * common.len());
        common[(r as f64).sqrt() as usize].clone()
    };
    let mut tools: Vec<(String, String, Vec<String>)> = Vec::new();
    for i in 0..n {
        if i > 0 && rng.next(12) == 0 {
            // A copy of an earlier tool, another name: same score for every query.
            let (_, d, p) = tools[rng.next(tools.len())].clone();
            tools.push((format!("{tag}copy{i}"), d, p));
            continue;
        }
        let mut desc: Vec<String> = (0..1 + rng.next(10)).map(|_| pick(rng)).collect();
        if rng.next(5) == 0 {
            desc.push(rare[rng.next(rare.len())].clone());
        }
        if rng.next(200) == 0 {
            desc.extend((0..300).map(|_| pick(rng)));
        }
        let params: Vec<String> = (0..rng.next(4)).map(|_| pick(rng)).collect();
        let name = format!("{}_{}_{tag}{i}", pick(rng), pick(rng));
        tools.push((name, desc.join(" "), params));
    }
    tools
}

fn stage_catalog(tools: &[(String, String, Vec<String>)]) -> Staged {
    let mut staged = Staged::default();
    for (name, desc, params) in tools {
        staged.begin(name);
        staged.text(Field::Description, desc);
        for p in params {
            staged.text(Field::ParamNames, p);
            staged.text(Field::ParamText, &format!("the {p} of it"));
        }
    }
    staged
}

/// Under the current statistics, no posting scores above its term's bound.
fn assert_bounds_hold(ix: &Index) {
    let scorer = ix.scorer();
    let drift = ix.bounds.drift(&ix.params, &scorer);
    let n = ix.len() as f64;
    for (t, list) in ix.postings.iter().enumerate() {
        let df = list.len() as f64;
        if df == 0.0 {
            continue;
        }
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
        let bound = scorer.bound(idf, ix.bounds.tfw[t] * drift);
        for p in list.as_slice() {
            let s = scorer.score(idf, p, &ix.scaled_lens[p.slot as usize]);
            assert!(s <= bound, "term {t}: score {s} above its bound {bound}");
        }
    }
}

fn random_queries(rng: &mut Rng, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            (0..1 + rng.next(7))
                .map(|_| match rng.next(4) {
                    0 => format!("rare{}x", rng.next(300)),
                    1 => format!("w{}", rng.next(20)),
                    _ => format!("w{}", rng.next(400)),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Pruned and exhaustive searches agree exactly (names, scores bit for bit, order).
fn assert_pruning_exact(ix: &Index, queries: &[String], allow: Option<&[u64]>) {
    for q in queries {
        let tokens = analyze_query(q);
        let ties = super::ties::Ties::new(q);
        for k in [1, 2, 5, 10, 50] {
            let got = ix.search_slots(&tokens, k, allow, Some(&ties));
            let want = ix.search_exhaustive(&tokens, k, allow, Some(&ties));
            assert_eq!(ix.named(got), ix.named(want), "query {q:?} k {k}");
        }
    }
}

#[test]
fn maxscore_equals_exhaustive_scoring_on_a_skewed_catalog() {
    use super::search::{CHUNKS, WARM};
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
fn maxscore_stays_exact_through_adds_and_removes() {
    let mut rng = Rng(0x51_7cc1_b727_220a);
    let mut tools = skewed_catalog(&mut rng, 3000, "a");
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(&tools));
    let queries = random_queries(&mut rng, 120);
    // Remove a third (the statistics move, the bounds go stale), re-add some changed, add
    // tools with much longer texts (average lengths grow: the bounds must be rebased).
    for round in 0..4 {
        let mut kept = Vec::new();
        for t in tools.drain(..) {
            if rng.next(3) == 0 {
                assert!(ix.remove(&t.0));
            } else {
                kept.push(t);
            }
        }
        tools = kept;
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
fn pass1_tokenizes_as_the_analyzer_with_its_caches() {
    use crate::tokenize::Analyzer;
    let texts = [
        "get_weather getWeather get-weather GET_WEATHER",
        "a__b x. .y -z- _private_ a-_b end.",
        "getHTTPResponseCode side1 s3_upload getV2Users HTTP2Server ipv4 2024",
        "Turn the lights off, not on! The files, the FILES.",
        "math.factorial x = 3.14, y = 2 v1.2.3 a.b_c ab--cd",
        "Caf\u{e9} Stra\u{df}e na\u{ef}ve r\u{e9}sum\u{e9} \u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}",
        "",
        "weather weather weather forecast",
    ];
    for field in [
        Field::Description,
        Field::ParamText,
        Field::ParamNames,
        Field::Name,
    ] {
        let mut staged = Staged::default();
        // Each text twice: the second time comes from the caches.
        for text in texts.iter().chain(texts.iter()) {
            staged.begin("x");
            staged.text(field, text);
        }
        let mut pass1 = Pass1::new();
        pass1.tokenize(&staged, usize::MAX, &mut |_| {});
        for (i, text) in texts.iter().chain(texts.iter()).enumerate() {
            let mut want: Vec<(String, u8)> = Vec::new();
            for tok in Analyzer::new().tokenize(text) {
                match want.iter_mut().find(|w| w.0 == tok) {
                    Some(w) => w.1 += 1,
                    None => want.push((tok, 1)),
                }
            }
            let got: Vec<(String, u8)> = pass1
                .terms_of(i)
                .into_iter()
                .map(|(t, tf)| (t, tf[field as usize]))
                .collect();
            assert_eq!(got, want, "{field:?} {text:?}");
            assert_eq!(
                pass1.tools[i].2[field as usize] as usize,
                want.iter().map(|w| w.1 as usize).sum::<usize>()
            );
        }
    }
}

/// Everything an add leaves, compared field by field (bit for bit).
fn assert_same_index(a: &Index, b: &Index) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.sum_len, b.sum_len);
    assert_eq!(a.vocab.len(), b.vocab.len());
    for t in 0..a.vocab.len() as u32 {
        assert_eq!(a.vocab.term(t), b.vocab.term(t));
    }
    assert_eq!(a.postings.len(), b.postings.len());
    for (t, (pa, pb)) in a.postings.iter().zip(&b.postings).enumerate() {
        let (sa, sb) = (pa.as_slice(), pb.as_slice());
        assert_eq!(sa.len(), sb.len(), "term {t}");
        for (x, y) in sa.iter().zip(sb) {
            assert_eq!((x.slot, x.tf), (y.slot, y.tf), "term {t}");
        }
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.bounds.tfw), bits(&b.bounds.tfw));
    assert_eq!(
        a.bounds.reference.map(|r| bits(&r)),
        b.bounds.reference.map(|r| bits(&r))
    );
    assert_eq!(a.scaled_lens.len(), b.scaled_lens.len());
    for (x, y) in a.scaled_lens.iter().zip(&b.scaled_lens) {
        assert_eq!(bits(x), bits(y));
    }
    assert_eq!(a.docs.slots(), b.docs.slots());
    for ((sa, da), (sb, db)) in a.docs.iter().zip(b.docs.iter()) {
        assert_eq!(sa, sb);
        assert_eq!(da.name(), db.name());
        assert_eq!(da.decode().0, db.decode().0);
        assert_eq!(da.decode().1, db.decode().1);
        assert_eq!(a.slot_of(da.name()), Some(sa));
        assert_eq!(b.slot_of(db.name()), Some(sb));
    }
    for slot in 0..a.docs.slots() as u32 {
        assert_eq!(a.vectors.to_f32(slot), b.vectors.to_f32(slot));
    }
}

fn add_on_threads(staged: &Staged, one: bool) -> Index {
    super::build::ONE_THREAD.with(|o| o.set(one));
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(staged);
    super::build::ONE_THREAD.with(|o| o.set(false));
    ix
}

#[test]
fn a_first_add_on_two_threads_leaves_what_one_thread_does() {
    let n = super::build::PARALLEL_FIRST_ADD + 3000;
    let mut rng = Rng(0x7f4a_7c15_9e37_79b9);
    let tools = skewed_catalog(&mut rng, n, "p");
    let mut staged = stage_catalog(&tools);
    // Vectors for most tools, none for some.
    let mut staged_v = Staged::default();
    for (i, (name, desc, params)) in tools.iter().enumerate() {
        staged_v.begin(name);
        staged_v.text(Field::Description, desc);
        for p in params {
            staged_v.text(Field::ParamNames, p);
        }
        let v = [(i % 7) as f32 + 1.0, (i % 3) as f32, 1.0, (i % 11) as f32];
        let v = (i % 5 != 0).then_some(&v[..]);
        staged_v.vector(v, Some(i as u64)).unwrap();
    }
    for s in [&staged, &staged_v] {
        let two = add_on_threads(s, false);
        let one = add_on_threads(s, true);
        assert_same_index(&two, &one);
        assert_bounds_hold(&two);
        assert_pruning_exact(&two, &random_queries(&mut rng, 60), None);
    }
    // Two tools with one name: the two-thread path gives up, the later tool replaces the
    // earlier one as on one thread.
    staged.begin(&tools[17].0);
    staged.text(Field::Description, "a replacement w1 w2 rare7x");
    let two = add_on_threads(&staged, false);
    let one = add_on_threads(&staged, true);
    assert_eq!(two.len(), n);
    assert_same_index(&two, &one);
    let hits = two.named(two.search_slots(&analyze_query("replacement"), 1, None, None));
    assert_eq!(hits[0].0, tools[17].0);
}

/// Clustered unit-ish vectors: `n` tools around 20 centres in 32 dimensions.
fn clustered(rng: &mut Rng, n: usize) -> Vec<Vec<f32>> {
    let centres: Vec<Vec<f32>> = (0..20)
        .map(|_| {
            (0..32)
                .map(|_| rng.next(2001) as f32 / 1000.0 - 1.0)
                .collect()
        })
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[i % 20];
            c.iter()
                .map(|x| x + (rng.next(601) as f32 / 1000.0 - 0.3))
                .collect()
        })
        .collect()
}

fn add_vectors(ix: &mut Index, names: &[String], vs: &[Vec<f32>]) {
    let mut staged = Staged::default();
    for (name, v) in names.iter().zip(vs) {
        staged.begin(name);
        staged.text(Field::Description, "a tool");
        staged.vector(Some(v), Some(1)).unwrap();
    }
    ix.add_staged(&staged);
}

#[test]
fn the_vector_graph_finds_the_nearest_and_never_returns_removed_or_disallowed_tools() {
    use super::vectors::{Precision, VectorSearch};
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for precision in [Precision::F32, Precision::I8] {
        let mut ix = Index::with_precision(Params::default(), precision).unwrap();
        ix.set_ann_from(1000);
        let n = 3000;
        let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let vs = clustered(&mut rng, n);
        add_vectors(&mut ix, &names, &vs);
        assert!(
            ix.vectors.graph().is_some(),
            "3,000 vectors >= ann_from: a graph"
        );
        let how = VectorSearch {
            approx_from: 500,
            rescore: 100,
            expansion: 64,
        };
        let queries: Vec<_> = (0..50)
            .map(|i| ix.vectors.prepare(&vs[i * 37 % n]).unwrap())
            .collect();
        // Recall against the exact scan, and every score the exact one.
        let graph_before = super::vectors::GRAPH.with(|g| g.get());
        let mut got = 0;
        for q in &queries {
            let exact = ix.search_vector(q, 10, None);
            let approx = ix.search_vector_with(q, 10, None, how, false);
            assert_eq!(approx.len(), 10);
            for &(s, slot) in &approx {
                assert_eq!(s.to_bits(), ix.vectors.score(q, slot).to_bits());
            }
            got += approx.iter().filter(|a| exact.contains(a)).count();
        }
        assert!(got >= 450, "recall@10 {got} / 500");
        assert_eq!(super::vectors::GRAPH.with(|g| g.get()) - graph_before, 50);
        // Removed tools never come back; the graph stays (2,000 >= ann_from / 2).
        for name in names.iter().step_by(3) {
            assert!(ix.remove(name));
        }
        assert!(ix.vectors.graph().is_some());
        for q in &queries {
            let hits = ix.named(ix.search_vector_with(q, 50, None, how, false));
            assert_eq!(hits.len(), 50);
            for (name, _) in &hits {
                let i: usize = name[1..].parse().unwrap();
                assert!(!i.is_multiple_of(3), "{name} was removed");
            }
        }
        // Removed slots reused by new tools with other vectors: a query at an old vector
        // finds the new tool only by its own vector's score.
        let fresh: Vec<String> = (0..200).map(|i| format!("new{i}")).collect();
        let fresh_v = clustered(&mut rng, 200);
        add_vectors(&mut ix, &fresh, &fresh_v);
        for (i, name) in fresh.iter().enumerate().take(20) {
            let q = ix.vectors.prepare(&fresh_v[i]).unwrap();
            let hits = ix.named(ix.search_vector_with(&q, 5, None, how, false));
            assert!(
                hits.iter().any(|(h, _)| h == name),
                "{name} near its own vector"
            );
            assert!(hits.iter().all(|(h, _)| ix.slot_of(h).is_some()));
        }
        // An allow-list holds (a wide one through the graph, a narrow one through the scan).
        let live: Vec<&str> = names
            .iter()
            .chain(&fresh)
            .map(String::as_str)
            .filter(|n| ix.slot_of(n).is_some())
            .collect();
        for keep in [1usize, 40] {
            // Every tool but a tenth (the graph), then one in 40 (the sign-bit scan).
            let allowed: Vec<&str> = if keep == 1 {
                live.iter().copied().filter(|n| !n.ends_with('7')).collect()
            } else {
                live.iter().copied().step_by(keep).collect()
            };
            let mask = ix.allow_mask(allowed.iter().copied());
            for q in &queries {
                let hits = ix.named(ix.search_vector_with(q, 20, Some(&mask), how, false));
                assert_eq!(hits.len(), 20.min(allowed.len()));
                assert!(hits.iter().all(|(h, _)| allowed.contains(&h.as_str())));
            }
        }
        // Below half of ann_from the graph goes.
        for name in live.iter().take(live.len() - 400) {
            ix.remove(name);
        }
        assert!(ix.vectors.graph().is_none());
        assert_eq!(
            ix.search_vector_with(&queries[0], 5, None, how, false)
                .len(),
            5
        );
    }
}
