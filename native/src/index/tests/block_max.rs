//! Block maxima (`bounds.rs`): every posting within its block's bound through first adds on
//! one and two threads, adds, removes and rebases; MaxScore that skips blocks on them stays
//! exact (the same top-k as exhaustive scoring), and does skip.

use super::*;
use crate::index::bounds::BLOCK;
use crate::index::search::SKIPPED;

/// Every term's blocks are in slot order, none above the term's bound, and under the current
/// statistics no posting scores above the bound of the block its slot falls in.
fn assert_block_bounds_hold(ix: &Index) -> usize {
    let scorer = ix.scorer();
    let drift = ix.bounds.drift(&ix.params, &scorer);
    let n = ix.len() as f64;
    let mut with_blocks = 0;
    for (t, list) in ix.postings.iter().enumerate() {
        let blocks = ix.bounds.blocks_of(t as u32);
        let list = list.as_slice();
        if blocks.is_empty() || list.is_empty() {
            continue;
        }
        with_blocks += 1;
        assert!(blocks.windows(2).all(|w| w[0].last < w[1].last), "term {t}");
        assert!(blocks.iter().all(|b| b.tfw <= ix.bounds.tfw[t]), "term {t}");
        let df = list.len() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
        for p in list {
            let slot = p.slot;
            let b = blocks
                .partition_point(|b| b.last < slot)
                .min(blocks.len() - 1);
            let bound = scorer.bound(idf, blocks[b].tfw * drift);
            let s = scorer.score(
                idf,
                &tf_of(&ix.wide, t as u32, p),
                &ix.scaled_lens[slot as usize],
            );
            assert!(
                s <= bound,
                "term {t} slot {slot}: {s} above its block's {bound}"
            );
        }
    }
    with_blocks
}

/// `base` copied `copies` times under other names, each copy a word longer or not (the
/// near-duplicate catalog of `bench_million`, small).
fn near_duplicates(
    rng: &mut Rng,
    base: &[(String, String, Vec<String>)],
    copies: usize,
) -> Vec<(String, String, Vec<String>)> {
    let mut tools = Vec::new();
    for c in 0..copies {
        for (name, desc, params) in base {
            let extra = if rng.next(2) == 0 {
                format!(" w{}", rng.next(400))
            } else {
                String::new()
            };
            tools.push((
                format!("{name}_c{c}"),
                format!("{desc}{extra}"),
                params.clone(),
            ));
        }
    }
    tools
}

/// Queries of two or three frequent words (long lists, no rare word: no warm start).
fn common_pairs(rng: &mut Rng, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            (0..2 + rng.next(2))
                .map(|_| format!("w{}", rng.next(30)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn build(tools: &[(String, String, Vec<String>)], one_thread: bool) -> Index {
    crate::index::build::ONE_THREAD.with(|o| o.set(one_thread));
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&stage_catalog(tools));
    crate::index::build::ONE_THREAD.with(|o| o.set(false));
    ix
}

fn skipped() -> usize {
    SKIPPED.with(|s| s.get())
}

/// A skewed catalog whose later part has the query words only in long descriptions (no name,
/// no parameters): the blocks there have much lower maxima than the term's.
fn two_regions(
    mut tools: Vec<(String, String, Vec<String>)>,
) -> Vec<(String, String, Vec<String>)> {
    let n = tools.len();
    for (i, t) in tools.iter_mut().enumerate().skip(n / 3) {
        t.0 = format!("pad_{i}");
        t.1 = format!(
            "{} {}",
            t.1,
            (0..40)
                .map(|j| format!("pad{}", j % 7))
                .collect::<Vec<_>>()
                .join(" ")
        );
        t.2.clear();
    }
    tools
}

#[test]
fn block_maxima_bound_every_posting_and_maxscore_skips_blocks_exactly() {
    let mut rng = Rng(0x0b10_c4a5_5eed_0001);
    let base = skewed_catalog(&mut rng, 2200, "b");
    let tools = two_regions(near_duplicates(&mut rng, &base, 8));
    assert!(tools.len() >= crate::index::build::PARALLEL_FIRST_ADD);
    let mut queries = random_queries(&mut rng, 100);
    queries.extend(common_pairs(&mut rng, 100));
    for one_thread in [false, true] {
        let ix = build(&tools, one_thread);
        let long = ix.postings.iter().filter(|l| l.len() > BLOCK).count();
        assert!(long > 20, "{long} lists of more than a block");
        assert_eq!(
            assert_block_bounds_hold(&ix),
            long,
            "every long list has blocks"
        );
        let before = skipped();
        assert_pruning_exact(&ix, &queries, None);
        assert!(
            skipped() - before > 0,
            "blocks skipped: {} (one thread: {one_thread})",
            skipped() - before
        );
    }
}

#[test]
fn stale_block_maxima_stay_upper_bounds_through_removes_adds_and_rebases() {
    let mut rng = Rng(0x5eed_b10c_0002);
    let base = skewed_catalog(&mut rng, 1500, "s");
    let mut tools = two_regions(near_duplicates(&mut rng, &base, 4));
    let mut ix = build(&tools, false);
    let mut queries = random_queries(&mut rng, 40);
    queries.extend(common_pairs(&mut rng, 60));
    assert!(assert_block_bounds_hold(&ix) > 3);
    for round in 0..5 {
        // A few removes (below the rebase's count: the blocks go stale, not recomputed), then
        // tools into the freed slots (inserts inside blocks) and past the end (new blocks),
        // some much longer (the statistics drift: a rebase at some round).
        let mut kept = Vec::new();
        let cut = if round < 2 { 40 } else { 4 };
        for t in tools.drain(..) {
            if rng.next(cut) == 0 {
                assert!(ix.remove(&t.0));
            } else {
                kept.push(t);
            }
        }
        tools = kept;
        assert_block_bounds_hold(&ix);
        let fresh = skewed_catalog(&mut rng, 300, &format!("r{round}_"));
        let mut more = near_duplicates(&mut rng, &fresh, 3);
        for t in more.iter_mut() {
            if round >= 3 {
                t.1 = format!("{} {}", t.1, t.1.repeat(5));
            }
        }
        ix.add_staged(&stage_catalog(&more));
        tools.extend(more);
        assert!(assert_block_bounds_hold(&ix) > 3);
        assert_bounds_hold(&ix);
        assert_pruning_exact(&ix, &queries, None);
        // One by one too: the one-tool path of an add.
        let one = skewed_catalog(&mut rng, 20, &format!("one{round}_"));
        for t in &one {
            ix.add_staged(&stage_catalog(std::slice::from_ref(t)));
        }
        tools.extend(one);
        assert_block_bounds_hold(&ix);
    }
    assert_pruning_exact(&ix, &queries, None);
    // A rebase recomputes them: still bounds, and the same rankings.
    let scorer = ix.scorer();
    ix.bounds
        .rebase(&scorer, &ix.postings, &ix.scaled_lens, &ix.wide);
    assert!(assert_block_bounds_hold(&ix) > 3);
    assert_pruning_exact(&ix, &queries, None);
}
