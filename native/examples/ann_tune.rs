//! Tuning harness for the vector graph (not part of the extension): `n` vectors from a
//! float32 `.npy` file (rows of `dim`), queries from another; recall of the graph's top 10 /
//! 50 against the exact scan, and the search time, at several `expansion` values.
//!
//! `cargo run --release --example ann_tune -- VECTORS.npy QUERIES.npy N [EXPANSION ...]`

use std::time::Instant;

use _native::index::vectors::{Precision, VectorSearch};
use _native::index::{Index, Params, Staged};
use _native::project::Field;

fn npy(path: &str) -> (Vec<f32>, usize) {
    let bytes = std::fs::read(path).expect("read");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    let shape = &header[header.find("'shape': (").unwrap() + 10..];
    let dims: Vec<usize> = shape[..shape.find(')').unwrap()]
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    let data = &bytes[10 + header_len..];
    let v: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (v, dims[1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (vs, dim) = npy(&args[1]);
    let (qs, _) = npy(&args[2]);
    let n: usize = args[3].parse().unwrap();
    let efs: Vec<usize> = args[4..].iter().map(|a| a.parse().unwrap()).collect();
    let mut staged = Staged::default();
    for i in 0..n {
        staged.begin(&format!("t{i}"));
        staged.text(Field::Description, "a tool");
        staged
            .vector(Some(&vs[i * dim..(i + 1) * dim]), Some(1))
            .unwrap();
    }
    let mut ix = Index::with_precision(Params::default(), Precision::F32).unwrap();
    ix.set_ann_from(usize::MAX);
    ix.add_staged(&staged);
    let t = Instant::now();
    ix.set_ann_from(1);
    eprintln!(
        "graph built in {:.1} s, heap {} MB",
        t.elapsed().as_secs_f64(),
        ix.heap_bytes() >> 20
    );
    let nq = (qs.len() / dim).min(300);
    let queries: Vec<_> = (0..nq)
        .map(|i| ix.vectors().prepare(&qs[i * dim..(i + 1) * dim]).unwrap())
        .collect();
    let exact: Vec<Vec<(f32, u32)>> = queries
        .iter()
        .map(|q| ix.search_vector(q, 50, None))
        .collect();
    for &ef in &efs {
        let how = VectorSearch {
            approx_from: 1,
            rescore: 1000,
            expansion: ef,
        };
        let (mut r10, mut r50) = (0usize, 0usize);
        let mut times = Vec::new();
        for (q, ex) in queries.iter().zip(&exact) {
            let t = Instant::now();
            let got = ix.search_vector_with(q, 50, None, how, false);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            let s50: Vec<u32> = got.iter().map(|h| h.1).collect();
            r50 += ex.iter().filter(|h| s50.contains(&h.1)).count();
            let s10: Vec<u32> = got.iter().take(10).map(|h| h.1).collect();
            r10 += ex.iter().take(10).filter(|h| s10.contains(&h.1)).count();
        }
        times.sort_by(|a, b| a.total_cmp(b));
        println!(
            "n {n} expansion {ef}: recall@10 {:.4} recall@50 {:.4} p50 {:.3} ms p95 {:.3} ms",
            r10 as f64 / (10 * nq) as f64,
            r50 as f64 / (50 * nq) as f64,
            times[nq / 2],
            times[nq * 95 / 100]
        );
    }
}
