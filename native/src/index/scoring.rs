//! BM25F parameters and the scoring of one posting.

use crate::project::{Field, NUM_FIELDS};

/// Default BM25 term-frequency saturation.
pub const DEFAULT_K1: f32 = 1.2;
/// Default BM25 length normalisation per field: name, description, parameter names,
/// parameter text.
pub const DEFAULT_B: [f32; NUM_FIELDS] = [0.75, 1.0, 0.3, 0.3];
/// Default exponent of a field's relative length in its normalisation: the description's
/// length counts sublinearly, so a long (merged) description is not buried.
pub const DEFAULT_LENGTH_EXPONENT: [f32; NUM_FIELDS] = [1.0, 0.6, 1.0, 1.0];
/// Default field weights: name, description, parameter names, parameter text.
pub const DEFAULT_WEIGHTS: [f32; NUM_FIELDS] = [2.5, 1.0, 1.25, 0.75];

/// Scoring parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub k1: f32,
    pub b: [f32; NUM_FIELDS],
    pub length_exponent: [f32; NUM_FIELDS],
    pub weights: [f32; NUM_FIELDS],
}

impl Default for Params {
    fn default() -> Self {
        Params {
            k1: DEFAULT_K1,
            b: DEFAULT_B,
            length_exponent: DEFAULT_LENGTH_EXPONENT,
            weights: DEFAULT_WEIGHTS,
        }
    }
}

impl Params {
    /// Check the parameters; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(format!("k1 must be a finite number >= 0, got {}", self.k1));
        }
        for (b, f) in self.b.iter().zip(Field::ALL) {
            if !(b.is_finite() && (0.0..=1.0).contains(b)) {
                return Err(format!("{} b must be between 0 and 1, got {b}", f.key()));
            }
        }
        for (e, f) in self.length_exponent.iter().zip(Field::ALL) {
            if !(e.is_finite() && (0.0..=1.0).contains(e)) {
                return Err(format!(
                    "{} length exponent must be between 0 and 1, got {e}",
                    f.key()
                ));
            }
        }
        for (w, f) in self.weights.iter().zip(Field::ALL) {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(format!(
                    "{} weight must be a finite number >= 0, got {w}",
                    f.key()
                ));
            }
        }
        if self.weights.iter().all(|w| *w == 0.0) {
            return Err("at least one field weight must be > 0".to_owned());
        }
        Ok(())
    }
}

/// BM25F scoring of one posting, with the per-search constants.
/// The field normalisation is `1 - b + b * (len / avglen) ^ e`, computed as
/// `one_minus_b + norm_b * len ^ e` with `norm_b = b / avglen ^ e` and `len ^ e` stored per tool.
pub(super) struct Scorer {
    weights: [f32; NUM_FIELDS],
    norm_b: [f32; NUM_FIELDS],
    one_minus_b: [f32; NUM_FIELDS],
    k1: f32,
}

/// `len ^ e` as stored per tool and field.
pub(super) fn scale_len(len: u32, e: f32) -> f32 {
    if e == 1.0 {
        len as f32
    } else {
        (f64::from(len).powf(f64::from(e))) as f32
    }
}

impl Scorer {
    pub(super) fn new(p: &Params, sum_len: &[u64; NUM_FIELDS], n: f64) -> Self {
        let mut norm_b = [0f32; NUM_FIELDS];
        for (f, &total) in sum_len.iter().enumerate() {
            if total > 0 {
                let avg = total as f64 / n;
                norm_b[f] = (f64::from(p.b[f]) / avg.powf(f64::from(p.length_exponent[f]))) as f32;
            }
        }
        Scorer {
            weights: p.weights,
            norm_b,
            one_minus_b: p.b.map(|b| 1.0 - b),
            k1: p.k1,
        }
    }

    /// A scorer whose length normalisation is `norm_b` (the bounds' reference statistics).
    pub(super) fn with_norm_b(p: &Params, norm_b: [f32; NUM_FIELDS]) -> Self {
        Scorer {
            weights: p.weights,
            norm_b,
            one_minus_b: p.b.map(|b| 1.0 - b),
            k1: p.k1,
        }
    }

    /// `b / avglen ^ e` per field (0 for a field no tool has text in).
    pub(super) fn norm_b(&self) -> [f32; NUM_FIELDS] {
        self.norm_b
    }

    /// The saturating part's input: `sum_f w_f * tf_f / (1 - b_f + b_f * (len_f / avglen_f) ^ e_f)`.
    #[inline]
    pub(super) fn tfw(&self, tf: &[u8; NUM_FIELDS], lens: &[f32; NUM_FIELDS]) -> f32 {
        let mut tfw = 0f32;
        let fields = tf
            .iter()
            .zip(&self.weights)
            .zip(&self.one_minus_b)
            .zip(&self.norm_b)
            .zip(lens);
        for ((((&tf, &w), &one_minus_b), &norm_b), &len) in fields {
            if tf != 0 {
                tfw += w * f32::from(tf) / (one_minus_b + norm_b * len);
            }
        }
        tfw
    }

    /// The score of a term of weight `idf` with these (exact) frequencies.
    #[inline]
    pub(super) fn score(&self, idf: f32, tf: &[u8; NUM_FIELDS], lens: &[f32; NUM_FIELDS]) -> f32 {
        let tfw = self.tfw(tf, lens);
        if tfw <= 0.0 {
            return 0.0;
        }
        idf * tfw * (self.k1 + 1.0) / (tfw + self.k1)
    }

    /// The most a term of weight `idf` adds to any tool whose `tfw` is at most `tfw_max`
    /// (the score rises with `tfw`), with a margin of 0.1 % for rounding: never below a real
    /// contribution. Never above `idf * (k1 + 1)`, the bound without any knowledge of `tfw`.
    pub(super) fn bound(&self, idf: f32, tfw_max: f32) -> f32 {
        let most = idf * (self.k1 + 1.0);
        let b = if tfw_max.is_finite() && tfw_max >= 0.0 {
            (idf * tfw_max * (self.k1 + 1.0) / (tfw_max + self.k1)).min(most)
        } else {
            most
        };
        if b.is_nan() {
            return most * 1.001;
        }
        b * 1.001
    }
}
