//! Dot-product and popcount kernels, with the CPU features chosen at run time. Each sums in one
//! fixed order (16 lanes for `f32`, 32 for `i8`, then the lanes in order) on every path, with
//! or without AVX2 and no fused multiply-add: the same vectors give the same bits everywhere.

#[inline(always)]
pub(super) fn allowed(allow: Option<&[u64]>, s: usize) -> bool {
    match allow {
        Some(mask) => mask
            .get(s / 64)
            .is_some_and(|m| m & (1u64 << (s % 64)) != 0),
        None => true,
    }
}

const LANES: usize = 16;

#[inline(always)]
pub(super) fn dot_f32_body(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        let x: &[f32; LANES] = x.try_into().expect("a whole chunk");
        let y: &[f32; LANES] = y.try_into().expect("a whole chunk");
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[i] += x * y;
    }
    // A fixed reduction order, the same on every path.
    let mut s = 0f32;
    for v in acc {
        s += v;
    }
    s
}

#[inline(always)]
pub(super) fn dot_i8_body(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    // Pairs of products summed into one i32 lane (what `pmaddwd` does: sign-extended to i16,
    // multiplied, adjacent pairs added); integer sums, so exact in any order.
    let mut acc = [0i32; 16];
    let mut ca = a.chunks_exact(32);
    let mut cb = b.chunks_exact(32);
    for (x, y) in (&mut ca).zip(&mut cb) {
        let x: &[i8; 32] = x.try_into().expect("a whole chunk");
        let y: &[i8; 32] = y.try_into().expect("a whole chunk");
        for j in 0..16 {
            let (x0, x1) = (i32::from(x[2 * j] as i16), i32::from(x[2 * j + 1] as i16));
            let (y0, y1) = (i32::from(y[2 * j] as i16), i32::from(y[2 * j + 1] as i16));
            acc[j] += x0 * y0 + x1 * y1;
        }
    }
    let mut s: i32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += i32::from(*x) * i32::from(*y);
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_body(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
    dot_i8_body(a, b)
}

/// An integer sum: exact on every path, so the wider registers change no bit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dot_i8_avx512(a: &[i8], b: &[i8]) -> i32 {
    dot_i8_body(a, b)
}

#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx512bw() -> bool {
    use std::sync::OnceLock;
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    })
}

#[inline(always)]
pub(super) fn hamming_body(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn hamming_popcnt(a: &[u64], b: &[u64]) -> u32 {
    hamming_body(a, b)
}

/// Number of differing bits.
#[inline]
pub fn hamming(a: &[u64], b: &[u64]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if has_popcnt() {
        // SAFETY: the CPU has POPCNT (checked at run time).
        return unsafe { hamming_popcnt(a, b) };
    }
    hamming_body(a, b)
}

#[inline(always)]
pub(super) fn hamming_all_body(codes: &[u64], code: &[u64], out: &mut [u16]) {
    let w = code.len();
    if w == 4 {
        // 256 dimensions: the common case, unrolled so the compiler can vectorize it.
        let q: [u64; 4] = [code[0], code[1], code[2], code[3]];
        for (c, o) in codes.chunks_exact(4).zip(out.iter_mut()) {
            let c: &[u64; 4] = c.try_into().expect("a whole code");
            *o = ((c[0] ^ q[0]).count_ones()
                + (c[1] ^ q[1]).count_ones()
                + (c[2] ^ q[2]).count_ones()
                + (c[3] ^ q[3]).count_ones()) as u16;
        }
        return;
    }
    for (c, o) in codes.chunks_exact(w).zip(out.iter_mut()) {
        *o = hamming_body(c, code) as u16;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
pub(super) unsafe fn hamming_all_popcnt(codes: &[u64], code: &[u64], out: &mut [u16]) {
    hamming_all_body(codes, code, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq,popcnt")]
pub(super) unsafe fn hamming_all_avx512(codes: &[u64], code: &[u64], out: &mut [u16]) {
    hamming_all_body(codes, code, out)
}

#[cfg(target_arch = "x86_64")]
pub(super) fn has_vpopcnt() -> bool {
    use std::sync::OnceLock;
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512vpopcntdq")
            && std::arch::is_x86_feature_detected!("avx512bw")
    })
}

#[cfg(target_arch = "x86_64")]
pub(super) fn has_popcnt() -> bool {
    use std::sync::OnceLock;
    static POPCNT: OnceLock<bool> = OnceLock::new();
    *POPCNT.get_or_init(|| std::arch::is_x86_feature_detected!("popcnt"))
}

#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static AVX2: OnceLock<bool> = OnceLock::new();
    *AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
}

/// `sum a[i] * b[i]` in a fixed order (no fused multiply-add: the same bits on every path).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked at run time).
        return unsafe { dot_f32_avx2(a, b) };
    }
    dot_f32_body(a, b)
}

/// Integer dot product (exact).
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx512bw() {
        // SAFETY: the CPU supports AVX-512 F and BW (checked at run time).
        return unsafe { dot_i8_avx512(a, b) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked at run time).
        return unsafe { dot_i8_avx2(a, b) };
    }
    dot_i8_body(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_match_the_plain_sum_on_every_path() {
        let a: Vec<f32> = (0..261)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0)
            .collect();
        let b: Vec<f32> = (0..261)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 7.0)
            .collect();
        let plain: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert!((f64::from(dot_f32(&a, &b)) - plain).abs() < 1e-3 * plain.abs().max(1.0));
        assert_eq!(dot_f32(&a, &b).to_bits(), dot_f32_body(&a, &b).to_bits());
        let qa: Vec<i8> = (0..261).map(|i| (i * 37 % 255) as i8).collect();
        let qb: Vec<i8> = (0..261).map(|i| (i * 11 % 255) as i8).collect();
        let exact: i32 = qa
            .iter()
            .zip(&qb)
            .map(|(x, y)| i32::from(*x) * i32::from(*y))
            .sum();
        assert_eq!(dot_i8(&qa, &qb), exact);
        assert_eq!(dot_i8_body(&qa, &qb), exact);
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            // SAFETY: checked just above.
            assert_eq!(unsafe { dot_i8_avx2(&qa, &qb) }, exact);
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx512bw() {
            // SAFETY: checked just above.
            assert_eq!(unsafe { dot_i8_avx512(&qa, &qb) }, exact);
        }
    }
}
