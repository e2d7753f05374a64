//! Vectors: the HNSW graph finds the nearest and never returns removed or disallowed tools.

use super::*;

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
    use crate::index::vectors::{Precision, VectorSearch};
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
        let graph_before = crate::index::vectors::GRAPH.with(|g| g.get());
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
        assert_eq!(
            crate::index::vectors::GRAPH.with(|g| g.get()) - graph_before,
            50
        );
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
