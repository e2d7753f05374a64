//! Cursors over slot-sorted postings lists: seeking a slot, intersecting two lists without a
//! branch per posting, and prefetching what is about to be read (used by MaxScore, `search.rs`).

use super::postings::Posting;

/// The first position at or after `from` in `list` whose slot is `>= slot`. A near target is
/// found by stepping; a far one by interpolation (slots spread over a list much as they do
/// over the catalog), then galloping from the guess: in a long list a far seek then reads a
/// few cache lines, not the dozen of a binary search.
#[inline]
pub(super) fn seek(list: &[Posting], from: usize, slot: u32) -> usize {
    let n = list.len();
    if from >= n || list[from].slot >= slot {
        return from;
    }
    if from + 1 >= n || list[from + 1].slot >= slot {
        return from + 1;
    }
    // list[from + 1].slot < slot: interpolate between from + 1 and the end.
    let lo_slot = list[from + 1].slot;
    let hi_slot = list[n - 1].slot;
    if hi_slot < slot {
        return n;
    }
    let span = u64::from(hi_slot - lo_slot) + 1;
    let guess = from + 1 + ((u64::from(slot - lo_slot) * (n - from - 1) as u64) / span) as usize;
    let guess = guess.clamp(from + 2, n - 1);
    // Bracket the answer around the guess: (lo, hi] with list[lo].slot < slot <= list[hi].slot.
    let (mut lo, mut hi);
    if list[guess].slot < slot {
        lo = guess;
        let mut step = 1;
        loop {
            hi = lo + step;
            if hi >= n - 1 {
                hi = n - 1;
                break;
            }
            if list[hi].slot >= slot {
                break;
            }
            lo = hi;
            step *= 2;
        }
    } else {
        hi = guess;
        let mut step = 1;
        loop {
            if hi - (from + 1) <= step {
                lo = from + 1;
                break;
            }
            lo = hi - step;
            if list[lo].slot < slot {
                break;
            }
            hi = lo;
            step *= 2;
        }
    }
    lo + 1 + list[lo + 1..hi].partition_point(|p| p.slot < slot)
}

/// The positions `(i, j)` of the slots that `e[from..end]` shares with `p[at..]`, into `out`,
/// merging both lists without a branch per posting; returns where each cursor stopped (`e`:
/// `end`, or short of it if `p` ran out).
pub(super) fn intersect(
    e: &[Posting],
    from: usize,
    end: usize,
    p: &[Posting],
    at: usize,
    out: &mut Vec<(u32, u32)>,
) -> (usize, usize) {
    out.clear();
    out.resize(end - from + 1, (0, 0));
    let (mut i, mut j, mut n) = (from, at, 0usize);
    while i < end && j < p.len() {
        let (a, b) = (e[i].slot, p[j].slot);
        out[n] = (i as u32, j as u32);
        n += usize::from(a == b);
        i += usize::from(a <= b);
        j += usize::from(b <= a);
    }
    out.truncate(n);
    (i, j)
}

/// Ask for the cache line of `x` ahead of its use.
#[inline(always)]
pub(super) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(
            (x as *const T).cast::<i8>(),
            std::arch::x86_64::_MM_HINT_T0,
        );
    }
}
