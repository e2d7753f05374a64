//! The index's unit tests, by subject; this module holds what they share: a small catalog,
//! staging helpers, a brute-force scorer, a deterministic generator, a skewed catalog and the
//! checks that pruned and exhaustive searches agree.

use super::postings::tf_of;
use super::scoring::Scorer;
use super::*;
use crate::project::{project_schema, Field};
use serde_json::json;

mod building;
mod intents;
mod params;
mod pruning;
mod rank_ties;
mod ranking;
mod storage;
mod vector_graph;

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
                score += scorer.score(idf, &tf_of(&ix.wide, t, p), &ix.scaled_lens[slot]);
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

/// A catalog with skewed word frequencies, rare words (product names), identical tools under
/// different names (ties at every score), and a few long descriptions.
fn skewed_catalog(rng: &mut Rng, n: usize, tag: &str) -> Vec<(String, String, Vec<String>)> {
    let common: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    let rare: Vec<String> = (0..300).map(|i| format!("rare{i}x")).collect();
    let pick = |rng: &mut Rng| {
        // The square root of a uniform draw: high-numbered words are far more frequent.
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
            let s = scorer.score(
                idf,
                &tf_of(&ix.wide, t as u32, p),
                &ix.scaled_lens[p.slot as usize],
            );
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
