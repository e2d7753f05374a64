//! A hint to fetch memory that will be read soon, for build loops that probe a big table at
//! places known a few steps ahead (the name table of a million tools): their cache misses
//! overlap instead of coming one after the other.

/// Start fetching the cache line of `item` (a no-op where the target has no such hint).
#[inline(always)]
pub(crate) fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing the program sees.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (item as *const T).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}
