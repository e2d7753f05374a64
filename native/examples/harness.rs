//! Profiling harness (not part of the extension): build an index from a JSONL catalog
//! (`{"name", "description", "input_schema"}` per line) and time queries from a JSON list.
//!
//! `cargo run --release --example harness -- CATALOG.jsonl QUERIES.json [--check]`

use std::io::BufRead;
use std::time::Instant;

use _native::index::ties::Ties;
use _native::index::{analyze_query, Index, Params, Staged};
use _native::project::{project_schema, Field};

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}
extern "C" {
    fn clock_gettime(clk: i32, ts: *mut Timespec) -> i32;
}
/// This thread's CPU time in ms (CLOCK_THREAD_CPUTIME_ID): what a busy machine moves least.
fn cpu_ms() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 * 1e3 + ts.nsec as f64 / 1e6
}

/// The process's CPU time in ms (every thread).
fn proc_ms() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(2, &mut ts) };
    ts.sec as f64 * 1e3 + ts.nsec as f64 / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let catalog = &args[1];
    let queries: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(&args[2]).unwrap()).unwrap();
    let check = args.iter().any(|a| a == "--check");
    let t = Instant::now();
    let mut staged = Staged::default();
    let f = std::io::BufReader::new(std::fs::File::open(catalog).unwrap());
    for line in f.lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        staged.begin(v["name"].as_str().unwrap());
        if let Some(d) = v["description"].as_str() {
            if !d.is_empty() {
                staged.text(Field::Description, d);
            }
        }
        let schema = &v["input_schema"];
        project_schema(Some(&schema), &mut |f, t| staged.text(f, t)).unwrap();
    }
    eprintln!("staged {} tools in {:?}", staged.len(), t.elapsed());
    let mut ix = Index::new(Params::default()).unwrap();
    let (t, c) = (Instant::now(), proc_ms());
    let (mut last, mut last_c) = (Instant::now(), proc_ms());
    ix.add_staged_with(&staged, usize::MAX - 1, &mut |phase, done| {
        eprintln!(
            "  {phase} {done}: {:?} wall, {:.0} ms cpu",
            last.elapsed(),
            proc_ms() - last_c
        );
        last = Instant::now();
        last_c = proc_ms();
    });
    eprintln!(
        "built in {:?} wall, {:.0} ms cpu; heap {} MB",
        t.elapsed(),
        proc_ms() - c,
        ix.heap_bytes() >> 20
    );
    for (k, v) in ix.heap_parts() {
        eprintln!("  {k}: {:.1} MB", v as f64 / 1048576.0);
    }
    drop(staged);
    let mut lat = Vec::new();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    for round in 0..rounds {
        lat.clear();
        for q in &queries {
            let t = cpu_ms();
            let hits = ix.search_query(q, 5, None);
            lat.push(cpu_ms() - t);
            std::hint::black_box(hits);
        }
        lat.sort_by(f64::total_cmp);
        eprintln!(
            "round {round}: cpu p50 {:.4} ms p95 {:.4} ms max {:.3} ms",
            lat[lat.len() / 2],
            lat[lat.len() * 95 / 100],
            lat[lat.len() - 1]
        );
    }
    if std::env::var("PERQ").is_ok() {
        let mut rows = Vec::new();
        for q in &queries {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                std::hint::black_box(ix.search_query(q, 5, None));
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            rows.push((best, q.clone()));
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        for i in [0, 100, 250, 400, 500, 600, 750, 900, 950, 990, 999] {
            let r = &rows[i];
            eprintln!("{i}: {:.4} ms {:?}", r.0, analyze_query(&r.1));
        }
    }
    if check {
        let mut bad = 0;
        for q in &queries {
            for k in [1, 5, 10, 50] {
                let a = ix.search_query(q, k, None);
                let b = ix.search_exhaustive(&analyze_query(q), k, None, Some(&Ties::new(q)));
                if a != b {
                    bad += 1;
                    eprintln!("MISMATCH {q:?} k {k}\n  {a:?}\n  {b:?}");
                }
            }
        }
        eprintln!(
            "check: {bad} mismatches over {} queries x 4 k",
            queries.len()
        );
    }
}
