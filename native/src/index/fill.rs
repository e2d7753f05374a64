//! The postings of a first add written on two threads, one half of the tools each: every list
//! is reserved for all it gains (pass 1 counted it), the lower half's postings are written
//! from the front of the list in slot order and the upper half's from the back in reverse
//! slot order, and the two meet where the halves do, each list sorted by slot. No thread
//! skips another's postings, and none waits for another.
//!
//! The writes go through raw pointers into each list's reserved buffer (or one slot of
//! [`Targets::singles`] for a term of one tool, whose posting lives in its list). They never
//! overlap and never leave the buffer: a term's count is the number of tools whose pass 1
//! terms hold it, each such tool is in exactly one half, and each half writes one posting a
//! tool and term ([`Targets::finish`] checks that the two ends met).

use super::postings::{Posting, PostingList};

/// Per term: where one fill thread writes the term's next posting, and the most `tfw` (the
/// bound's input, `bounds.rs`) of the postings it wrote.
#[derive(Clone, Copy)]
struct Cursor {
    next: *mut Posting,
    tfw: f32,
}

/// One fill thread's cursors, one per term.
pub(super) struct Cursors(Vec<Cursor>);

// SAFETY: the pointers are into buffers that outlive the fill (the lists and
// `Targets::singles`), and each thread writes only where its own cursors point.
unsafe impl Send for Cursors {}

impl Cursors {
    /// Write the next posting of term `t` from the front (the lower half, in slot order).
    ///
    /// # Safety
    /// At most `gained[t]` postings of `t` are written, from both ends together.
    #[inline(always)]
    pub(super) unsafe fn put_front(&mut self, t: u32, post: Posting, tfw: f32) {
        let c = &mut self.0[t as usize];
        // SAFETY: the caller's contract keeps `next` inside the term's buffer.
        unsafe {
            c.next.write(post);
            c.next = c.next.add(1);
        }
        c.tfw = c.tfw.max(tfw);
    }

    /// Write the next posting of term `t` from the back (the upper half, in reverse slot
    /// order).
    ///
    /// # Safety
    /// As for [`Cursors::put_front`].
    #[inline(always)]
    pub(super) unsafe fn put_back(&mut self, t: u32, post: Posting, tfw: f32) {
        let c = &mut self.0[t as usize];
        // SAFETY: as above.
        unsafe {
            c.next = c.next.sub(1);
            c.next.write(post);
        }
        c.tfw = c.tfw.max(tfw);
    }
}

/// The buffers a first add's postings are written into, and each thread's cursors.
pub(super) struct Targets {
    /// The postings of the terms that one tool has, in term order (each moves into its list).
    singles: Vec<Posting>,
}

impl Targets {
    /// Reserve every empty list of `lists` for the `gained[t]` postings it will hold and
    /// return the cursors of the front and back writers.
    pub(super) fn new(lists: &mut [PostingList], gained: &[u32]) -> (Targets, Cursors, Cursors) {
        debug_assert_eq!(lists.len(), gained.len());
        let n_singles = gained.iter().filter(|&&g| g == 1).count();
        let mut singles = vec![Posting::new(0, [0; crate::project::NUM_FIELDS]).0; n_singles];
        let one = singles.as_mut_ptr();
        let mut k = 0;
        let mut front = Vec::with_capacity(lists.len());
        let mut back = Vec::with_capacity(lists.len());
        for (list, &g) in lists.iter_mut().zip(gained) {
            let base = match g {
                0 => std::ptr::null_mut(),
                1 => {
                    // SAFETY: `k < n_singles`, one slot a term of one tool.
                    let p = unsafe { one.add(k) };
                    k += 1;
                    p
                }
                _ => list.bulk_buffer(g as usize),
            };
            front.push(Cursor {
                next: base,
                tfw: 0.0,
            });
            back.push(Cursor {
                // SAFETY: one past the end of the term's buffer (null plus 0 for no posting).
                next: unsafe { base.add(g as usize) },
                tfw: 0.0,
            });
        }
        (Targets { singles }, Cursors(front), Cursors(back))
    }

    /// After both fills completed: every list holds its postings, and `tfw[t]` is the most
    /// of the two writers' bounds of `t`.
    pub(super) fn finish(
        self,
        lists: &mut [PostingList],
        gained: &[u32],
        front: Cursors,
        back: Cursors,
        tfw: &mut [f32],
    ) {
        let mut singles = self.singles.into_iter();
        for (t, (list, &g)) in lists.iter_mut().zip(gained).enumerate() {
            let (a, b) = (front.0[t], back.0[t]);
            assert!(a.next == b.next, "the two fills of term {t} did not meet");
            match g {
                0 => {}
                1 => *list = PostingList::One(singles.next().expect("one a single term")),
                // SAFETY: the two fills met: all `g` postings of the buffer are written.
                _ => unsafe { list.bulk_filled(g as usize) },
            }
            tfw[t] = tfw[t].max(a.tfw.max(b.tfw));
        }
    }
}
