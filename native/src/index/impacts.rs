//! Impact prefixes: per term, its postings of the largest `tfw` in decreasing order, and a
//! bound of every other posting's (what the threshold start of `search.rs` reads).
//!
//! A term's postings are sorted by slot; the tools a common term scores highest (many
//! occurrences, a short text) are spread over the whole list. The prefix lists them first, so
//! a search can score the best tools of each term before any long list is walked, and the
//! bound of the rest (`rest`) caps what a term gives a tool outside its prefix.
//!
//! Prefixes are made under the current statistics, at the end of an add for the lists of at
//! least `EAGER_FROM` postings and on a term's first search for the others (`O(list)`, then
//! cached); every add and remove empties the cache first: a prefix is always exact for the
//! current statistics. Its size is `PREFIX_SHARE` of the list, at least
//! `PREFIX_MIN` postings (the whole list when shorter), at most `PREFIX_MAX`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::postings::{tf_of, Posting, PostingList, WideTf};
use super::scoring::Scorer;
use crate::project::NUM_FIELDS;

const PREFIX_MIN: usize = 256;
const PREFIX_SHARE: usize = 16;
const PREFIX_MAX: usize = 1 << 16;

/// After an add, the prefixes of the lists of at least this many postings are made at once
/// (on two threads), so that no search pays for them; shorter ones on their first search.
#[cfg(not(test))]
pub(super) const EAGER_FROM: usize = 65_536;
#[cfg(test)]
pub(super) const EAGER_FROM: usize = 512;

/// The cache holds at most this many prefix entries (8 bytes each); past it, it starts over.
const CACHE_MAX_ENTRIES: usize = 1 << 22;

/// One term's impact prefix.
#[derive(Debug)]
pub(super) struct Impact {
    /// `(tfw, position in the term's list)`, `tfw` decreasing.
    pub(super) top: Vec<(f32, u32)>,
    /// The largest `tfw` of the postings not in `top` (0 when `top` holds the whole list).
    pub(super) rest: f32,
}

/// Every term's prefix made so far, by term id.
#[derive(Debug, Default)]
pub(super) struct Impacts {
    cache: RwLock<(HashMap<u32, Arc<Impact>>, usize)>,
}

impl Impacts {
    /// Forget every prefix (the postings or the statistics changed).
    pub(super) fn clear(&mut self) {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        cache.0 = HashMap::new();
        cache.1 = 0;
    }

    pub(super) fn heap_bytes(&self) -> usize {
        let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
        cache.1 * 8 + cache.0.capacity() * 24
    }

    /// The prefixes of every list of at least `EAGER_FROM` postings, made on `threads`
    /// threads (the cache emptied first).
    pub(super) fn make_long(
        &mut self,
        postings: &[PostingList],
        scorer: &Scorer,
        wide: &WideTf,
        lens: &[[f32; NUM_FIELDS]],
        threads: usize,
    ) {
        self.clear();
        let long: Vec<u32> = (0..postings.len() as u32)
            .filter(|&t| postings[t as usize].len() >= EAGER_FROM)
            .collect();
        let total: usize = long.iter().map(|&t| postings[t as usize].len()).sum();
        let made: Vec<(u32, Impact)> = if threads < 2 || total < 4 * EAGER_FROM {
            long.iter()
                .map(|&t| {
                    (
                        t,
                        make(t, postings[t as usize].as_slice(), scorer, wide, lens),
                    )
                })
                .collect()
        } else {
            // Two halves of about as many postings each.
            let mut acc = 0usize;
            let cut = long
                .iter()
                .position(|&t| {
                    acc += postings[t as usize].len();
                    acc * 2 >= total
                })
                .map_or(long.len(), |i| i + 1);
            let (a, b) = long.split_at(cut);
            let run = |part: &[u32]| -> Vec<(u32, Impact)> {
                part.iter()
                    .map(|&t| {
                        (
                            t,
                            make(t, postings[t as usize].as_slice(), scorer, wide, lens),
                        )
                    })
                    .collect()
            };
            std::thread::scope(|s| {
                let other = s.spawn(|| run(b));
                let mut mine = run(a);
                mine.extend(
                    other
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                );
                mine
            })
        };
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        for (t, imp) in made {
            if cache.1 + imp.top.len() > CACHE_MAX_ENTRIES {
                break;
            }
            cache.1 += imp.top.len();
            cache.0.insert(t, Arc::new(imp));
        }
    }

    /// The prefix of term `id` (postings `list`), made now if it is not cached.
    pub(super) fn get(
        &self,
        id: u32,
        list: &[Posting],
        scorer: &Scorer,
        wide: &WideTf,
        lens: &[[f32; NUM_FIELDS]],
    ) -> Arc<Impact> {
        if let Some(i) = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .get(&id)
        {
            return Arc::clone(i);
        }
        let made = Arc::new(make(id, list, scorer, wide, lens));
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        if cache.1 + made.top.len() > CACHE_MAX_ENTRIES {
            cache.0.clear();
            cache.1 = 0;
        }
        let (map, entries) = &mut *cache;
        Arc::clone(map.entry(id).or_insert_with(|| {
            *entries += made.top.len();
            made
        }))
    }
}

fn make(
    id: u32,
    list: &[Posting],
    scorer: &Scorer,
    wide: &WideTf,
    lens: &[[f32; NUM_FIELDS]],
) -> Impact {
    let mut all: Vec<(f32, u32)> = list
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                scorer.tfw(&tf_of(wide, id, p), &lens[p.slot as usize]),
                i as u32,
            )
        })
        .collect();
    let want = (list.len() / PREFIX_SHARE).clamp(PREFIX_MIN, PREFIX_MAX);
    let by_impact = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    let rest = if all.len() > want {
        all.select_nth_unstable_by(want, by_impact);
        let rest = all[want..].iter().map(|x| x.0).fold(0f32, f32::max);
        all.truncate(want);
        rest
    } else {
        0.0
    };
    all.sort_unstable_by(by_impact);
    all.shrink_to_fit();
    Impact { top: all, rest }
}
