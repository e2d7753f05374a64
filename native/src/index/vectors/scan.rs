//! The scans over every stored vector: Hamming distances of the sign bits (the approximate
//! search's candidates) and the exact cosine of every vector.

use super::kernels::{allowed, dot_f32_body, dot_i8_body, hamming_all_body, hamming_body};
#[cfg(target_arch = "x86_64")]
use super::kernels::{hamming_all_avx512, hamming_all_popcnt};
#[cfg(target_arch = "x86_64")]
use super::kernels::{has_avx2, has_popcnt, has_vpopcnt};
use super::{QueryVec, Vectors};

impl Vectors {
    /// Sign bits of a query prepared by [`Vectors::prepare`].
    pub fn code_of(&self, q: &QueryVec) -> Vec<u64> {
        let mut code = vec![0u64; self.words()];
        let mut put = |i: usize, pos: bool| {
            if pos {
                code[i / 64] |= 1u64 << (i % 64);
            }
        };
        match q {
            QueryVec::F32(v) => v.iter().enumerate().for_each(|(i, &x)| put(i, x > 0.0)),
            QueryVec::I8(v, _) => v.iter().enumerate().for_each(|(i, &x)| put(i, x > 0)),
        }
        code
    }

    /// Hamming distance of every slot's code to `code`, into `out` (one per slot, slots
    /// without a vector included: the caller skips them).
    pub fn hamming_all(&self, code: &[u64], out: &mut Vec<u16>) {
        out.clear();
        out.resize(self.keys.len(), 0);
        #[cfg(target_arch = "x86_64")]
        {
            if has_vpopcnt() {
                // SAFETY: the CPU has AVX-512 VPOPCNTDQ (checked at run time).
                return unsafe { hamming_all_avx512(&self.codes, code, out) };
            }
            if has_popcnt() {
                // SAFETY: the CPU has POPCNT (checked at run time).
                return unsafe { hamming_all_popcnt(&self.codes, code, out) };
            }
        }
        hamming_all_body(&self.codes, code, out)
    }

    /// Hamming distance of slots `s0..s1`' codes to `code`, into `out` (`s1 - s0` of them,
    /// slots without a vector included: the caller skips them).
    pub fn hamming_range(&self, code: &[u64], s0: usize, s1: usize, out: &mut [u16]) {
        let w = self.words();
        let codes = &self.codes[s0 * w..s1 * w];
        #[cfg(target_arch = "x86_64")]
        {
            if has_vpopcnt() {
                // SAFETY: the CPU has AVX-512 VPOPCNTDQ (checked at run time).
                return unsafe { hamming_all_avx512(codes, code, out) };
            }
            if has_popcnt() {
                // SAFETY: the CPU has POPCNT (checked at run time).
                return unsafe { hamming_all_popcnt(codes, code, out) };
            }
        }
        hamming_all_body(codes, code, out)
    }

    /// Hamming distance of every slot with a vector (allowed by `allow`) to `code`:
    /// `f(distance, slot)`.
    pub fn hamming_scan(&self, code: &[u64], allow: Option<&[u64]>, mut f: impl FnMut(u32, u32)) {
        #[cfg(target_arch = "x86_64")]
        if has_popcnt() {
            // SAFETY: the CPU has POPCNT (checked at run time).
            return unsafe { self.hamming_popcnt(code, allow, &mut f) };
        }
        self.hamming_body(code, allow, &mut f)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn hamming_popcnt(
        &self,
        code: &[u64],
        allow: Option<&[u64]>,
        f: &mut dyn FnMut(u32, u32),
    ) {
        self.hamming_body(code, allow, f)
    }

    #[inline(always)]
    fn hamming_body(&self, code: &[u64], allow: Option<&[u64]>, f: &mut dyn FnMut(u32, u32)) {
        let w = self.words();
        for s in 0..self.keys.len() {
            if !self.has(s) || !allowed(allow, s) {
                continue;
            }
            f(
                hamming_body(code, &self.codes[s * w..(s + 1) * w]),
                s as u32,
            );
        }
    }

    /// Every slot with a vector, allowed by `allow`, with its cosine: `f(score, slot)`.
    pub fn scan(&self, q: &QueryVec, allow: Option<&[u64]>, mut f: impl FnMut(f32, u32)) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked at run time).
            return unsafe { self.scan_avx2(q, allow, &mut f) };
        }
        self.scan_body(q, allow, &mut f)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn scan_avx2(&self, q: &QueryVec, allow: Option<&[u64]>, f: &mut dyn FnMut(f32, u32)) {
        self.scan_body(q, allow, f)
    }

    #[inline(always)]
    fn scan_body(&self, q: &QueryVec, allow: Option<&[u64]>, f: &mut dyn FnMut(f32, u32)) {
        let d = self.dim;
        for s in 0..self.keys.len() {
            if !self.has(s) || !allowed(allow, s) {
                continue;
            }
            let score = match q {
                QueryVec::F32(q) => dot_f32_body(q, &self.f32s[s * d..(s + 1) * d]),
                QueryVec::I8(q, qs) => {
                    dot_i8_body(q, &self.i8s[s * d..(s + 1) * d]) as f32 * (qs * self.scales[s])
                }
            };
            f(score, s as u32);
        }
    }
}
