//! The tokenizer: one recipe for tool text and for queries (the contract is in `native/README.md`).
//!
//! 1. Fold every character to ASCII where a decomposition exists (NFKD, combining marks dropped,
//!    plus a few letters without a decomposition: `ß` -> `ss`, `æ` -> `ae`, ...). Letters of other
//!    scripts stay as they are.
//! 2. Split into words at every character that is neither alphanumeric nor an identifier joiner
//!    (`_`, `.`, `-`); joiners only join when they sit between two alphanumerics.
//! 3. Split each word into parts at joiners and camelCase humps (`getHTTPResponse` -> `get`,
//!    `http`, `response`; `getV2Users` -> `get`, `v2`, `users`). A part mixing letters and digits
//!    also yields its letter and digit runs (`side1` -> `side1`, `side`, `1`).
//! 4. Lowercase. A word of two or more parts also yields its whole identifier, the parts
//!    concatenated (`get_weather`, `getWeather` and `get-weather` all yield `getweather`).
//! 5. Drop tokens of one character and bare numbers, and English stopwords (never the words tools
//!    depend on: `not`, `no`, `off`, `on`, `up`, `down`, `out`, `all`, `before`, `after`); stem
//!    purely alphabetic parts with the Snowball English stemmer. Whole identifiers are not stemmed.
//! 6. Drop parts longer than [`MAX_PART_LEN`] bytes and identifiers longer than
//!    [`MAX_WHOLE_LEN`] bytes (they are never words anybody searches for).
//! 7. Parameter names of one letter or a stopword (`q`, `x`, `to`) are kept where they name a
//!    parameter: a tool's parameter names, and a query's `name=value` pairs (`names`).
//!
//! The recipe's steps live in one module each: `fold` (step 1), `words` (step 2 and the
//! [`Tokenizer`]), `parts` (steps 3-6 for one word), `stopwords` and `analyzer` (the
//! stopwords and the stemmer, with its cache).

mod analyzer;
mod fold;
mod names;
mod parts;
mod stopwords;
mod words;

#[cfg(test)]
mod tests;

pub use analyzer::{is_stemmable, Analyzer};
pub use names::{for_each_short_name_of_pairs, short_name};
pub use stopwords::{is_stopword, KEPT_WORDS, STOPWORDS};
pub use words::{split_ascii_words, Tokenizer};

/// Parts longer than this many bytes are dropped.
pub const MAX_PART_LEN: usize = 64;
/// Whole identifiers longer than this many bytes are dropped (their parts are kept).
pub const MAX_WHOLE_LEN: usize = 128;

/// What a token is: a whole identifier (never stemmed) or a part (which the consumer drops if
/// it is a stopword and stems otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Whole,
    Part,
}
