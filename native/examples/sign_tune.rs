//! Tuning harness for the sign-bit vector search (not part of the extension): `n` vectors from
//! a float32 `.npy` file (rows of `dim`), queries from another; for each `k` and `rescore`,
//! the recall of the approximate top `k` against the exact scan and the search time.
//!
//! `cargo run --release --example sign_tune -- VECTORS.npy QUERIES.npy N K,K.. RESCORE,RESCORE..`

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

fn list(s: &str) -> Vec<usize> {
    s.split(',').map(|x| x.parse().unwrap()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (vs, dim) = npy(&args[1]);
    let (qs, _) = npy(&args[2]);
    let n: usize = args[3].parse::<usize>().unwrap().min(vs.len() / dim);
    let ks = list(&args[4]);
    let rescores = list(&args[5]);
    let mut staged = Staged::default();
    for i in 0..n {
        staged.begin(&format!("t{i}"));
        staged.text(Field::Description, "a tool");
        staged
            .vector(Some(&vs[i * dim..(i + 1) * dim]), Some(1))
            .unwrap();
    }
    let mut ix = Index::with_precision(Params::default(), Precision::F32).unwrap();
    ix.set_ann_from(0);
    ix.add_staged(&staged);
    let nq = (qs.len() / dim).min(300);
    let queries: Vec<_> = (0..nq)
        .map(|i| ix.vectors().prepare(&qs[i * dim..(i + 1) * dim]).unwrap())
        .collect();
    let kmax = *ks.iter().max().unwrap();
    let exact: Vec<Vec<(f32, u32)>> = queries
        .iter()
        .map(|q| ix.search_vector(q, kmax, None))
        .collect();
    for &k in &ks {
        for &rescore in &rescores {
            let how = VectorSearch {
                approx_from: 1,
                rescore,
                expansion: 0,
            };
            let mut hit = 0usize;
            let mut times = Vec::new();
            for _pass in 0..3 {
                let mut t_pass = Vec::new();
                hit = 0;
                for (q, ex) in queries.iter().zip(&exact) {
                    let t = Instant::now();
                    let got = ix.search_vector_with(q, k, None, how, false);
                    t_pass.push(t.elapsed().as_secs_f64() * 1e3);
                    let s: Vec<u32> = got.iter().map(|h| h.1).collect();
                    hit += ex.iter().take(k).filter(|h| s.contains(&h.1)).count();
                }
                t_pass.sort_by(|a, b| a.total_cmp(b));
                if times.is_empty() || t_pass[nq / 2] < times[nq / 2] {
                    times = t_pass;
                }
            }
            println!(
                "n {n} k {k} rescore {rescore}: recall@{k} {:.4} p50 {:.4} ms p95 {:.4} ms (best of 3 passes)",
                hit as f64 / (k * nq) as f64,
                times[nq / 2],
                times[nq * 95 / 100]
            );
        }
    }
}
