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

use std::collections::HashMap;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::char::{decompose_compatible, is_combining_mark};

/// Parts longer than this many bytes are dropped.
pub const MAX_PART_LEN: usize = 64;
/// Whole identifiers longer than this many bytes are dropped (their parts are kept).
pub const MAX_WHOLE_LEN: usize = 128;
/// The stem cache of one analyzer is cleared when it grows past this many words.
const STEM_CACHE_LIMIT: usize = 200_000;

/// English stopwords (the Snowball list, minus the words tools depend on).
pub const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "again",
    "against",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "nor",
    "of",
    "once",
    "only",
    "or",
    "other",
    "ought",
    "our",
    "ours",
    "ourselves",
    "over",
    "own",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Words that look like stopwords but carry meaning for tools; never dropped.
pub const KEPT_WORDS: &[&str] = &[
    "not", "no", "off", "on", "up", "down", "out", "all", "before", "after",
];

fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

fn is_joiner(c: char) -> bool {
    matches!(c, '_' | '.' | '-')
}

/// Append the ASCII folding of `c` to `out` (keeping case; other scripts pass through).
fn fold_char(c: char, out: &mut Vec<char>) {
    if c.is_ascii() {
        out.push(c);
        return;
    }
    let special: Option<&str> = match c {
        'ß' => Some("ss"),
        'ẞ' => Some("SS"),
        'æ' => Some("ae"),
        'Æ' => Some("AE"),
        'œ' => Some("oe"),
        'Œ' => Some("OE"),
        'ø' => Some("o"),
        'Ø' => Some("O"),
        'đ' | 'ð' => Some("d"),
        'Đ' | 'Ð' => Some("D"),
        'ł' => Some("l"),
        'Ł' => Some("L"),
        'þ' => Some("th"),
        'Þ' => Some("TH"),
        'ı' => Some("i"),
        _ => None,
    };
    if let Some(s) = special {
        out.extend(s.chars());
        return;
    }
    decompose_compatible(c, |d| {
        if !is_combining_mark(d) {
            out.push(d);
        }
    });
}

/// The tokenizer with its stemmer and a word -> stem cache. Not shared between threads.
pub struct Analyzer {
    stemmer: Stemmer,
    cache: HashMap<String, String>,
    folded: Vec<char>,
    parts: Vec<String>,
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new()
    }
}

impl Analyzer {
    pub fn new() -> Self {
        Analyzer {
            stemmer: Stemmer::create(Algorithm::English),
            cache: HashMap::new(),
            folded: Vec::new(),
            parts: Vec::new(),
        }
    }

    /// Tokenize `text`, calling `emit` with every token in text order.
    pub fn for_each_token(&mut self, text: &str, mut emit: impl FnMut(&str)) {
        self.folded.clear();
        for c in text.chars() {
            fold_char(c, &mut self.folded);
        }
        let folded = std::mem::take(&mut self.folded);
        let n = folded.len();
        let mut i = 0;
        while i < n {
            // Skip to the start of a word.
            while i < n && !folded[i].is_alphanumeric() {
                i += 1;
            }
            if i >= n {
                break;
            }
            let start = i;
            // A word: alphanumerics, with joiners only between two alphanumerics.
            let mut end = i;
            while i < n {
                let c = folded[i];
                if c.is_alphanumeric() {
                    i += 1;
                    end = i;
                } else if is_joiner(c) && i + 1 < n && folded[i + 1].is_alphanumeric() {
                    i += 1;
                } else {
                    break;
                }
            }
            self.word(&folded[start..end], &mut emit);
            i = end.max(i);
        }
        self.folded = folded;
    }

    /// Tokenize `text` into a vector (convenience for tests and queries).
    pub fn tokenize(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_token(text, |t| out.push(t.to_owned()));
        out
    }

    fn word(&mut self, w: &[char], emit: &mut impl FnMut(&str)) {
        let mut parts = std::mem::take(&mut self.parts);
        parts.clear();
        split_parts(w, &mut parts);
        if parts.len() > 1 {
            let whole_len: usize = parts.iter().map(String::len).sum();
            if whole_len <= MAX_WHOLE_LEN {
                let whole: String = parts.concat();
                if is_meaningful(&whole) {
                    emit(&whole);
                }
            }
        }
        for p in &parts {
            self.part(p, emit);
            let mixed = p.chars().any(char::is_numeric) && p.chars().any(char::is_alphabetic);
            if mixed {
                let mut start = 0;
                let mut prev_digit = None;
                for (i, c) in p.char_indices() {
                    let digit = c.is_numeric();
                    if prev_digit.is_some_and(|d| d != digit) {
                        self.part(&p[start..i], emit);
                        start = i;
                    }
                    prev_digit = Some(digit);
                }
                self.part(&p[start..], emit);
            }
        }
        self.parts = parts;
    }

    fn part(&mut self, p: &str, emit: &mut impl FnMut(&str)) {
        if p.len() > MAX_PART_LEN || !is_meaningful(p) || is_stopword(p) {
            return;
        }
        if p.bytes().all(|b| b.is_ascii_lowercase()) {
            emit(self.stem(p));
        } else {
            emit(p);
        }
    }

    fn stem(&mut self, word: &str) -> &str {
        if self.cache.len() >= STEM_CACHE_LIMIT && !self.cache.contains_key(word) {
            self.cache.clear();
        }
        if !self.cache.contains_key(word) {
            let stem = self.stemmer.stem(word).into_owned();
            self.cache.insert(word.to_owned(), stem);
        }
        self.cache.get(word).map(String::as_str).unwrap_or("")
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lower,
    Upper,
    Digit,
    Other,
}

fn kind(c: char) -> Kind {
    if c.is_numeric() {
        Kind::Digit
    } else if c.is_uppercase() {
        Kind::Upper
    } else if c.is_lowercase() {
        Kind::Lower
    } else {
        Kind::Other
    }
}

/// A token worth indexing: two characters or more, and not a bare number (numbers and single
/// letters in queries are argument values and variable names, not what a tool is about).
fn is_meaningful(tok: &str) -> bool {
    let mut chars = tok.chars();
    chars.next().is_some() && chars.next().is_some() && !tok.chars().all(char::is_numeric)
}

/// Split one word into lowercase parts at joiners and camelCase humps (`getV2Users` ->
/// `get`, `v2`, `users`); letters and digits stay together.
fn split_parts(w: &[char], parts: &mut Vec<String>) {
    let mut cur = String::new();
    let flush = |cur: &mut String, parts: &mut Vec<String>| {
        if !cur.is_empty() {
            parts.push(std::mem::take(cur));
        }
    };
    for (i, &c) in w.iter().enumerate() {
        if is_joiner(c) {
            flush(&mut cur, parts);
            continue;
        }
        if i > 0 && !cur.is_empty() {
            let prev = kind(w[i - 1]);
            let here = kind(c);
            let next = w.get(i + 1).map(|&n| kind(n));
            let boundary = match (prev, here) {
                (Kind::Lower, Kind::Upper) | (Kind::Digit, Kind::Upper) => true,
                (Kind::Upper, Kind::Upper) => next == Some(Kind::Lower),
                _ => false,
            };
            if boundary {
                flush(&mut cur, parts);
            }
        }
        cur.extend(c.to_lowercase());
    }
    flush(&mut cur, parts);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        Analyzer::new().tokenize(s)
    }

    #[test]
    fn stopwords_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
        for kept in KEPT_WORDS {
            assert!(!is_stopword(kept), "{kept} must not be a stopword");
        }
    }

    #[test]
    fn snake_camel_dotted_kebab() {
        assert_eq!(toks("get_weather"), ["getweather", "get", "weather"]);
        assert_eq!(toks("getWeather"), ["getweather", "get", "weather"]);
        assert_eq!(toks("get-weather"), ["getweather", "get", "weather"]);
        assert_eq!(toks("math.factorial"), ["mathfactorial", "math", "factori"]);
        assert_eq!(
            toks("getHTTPResponseCode"),
            ["gethttpresponsecode", "get", "http", "respons", "code"]
        );
    }

    #[test]
    fn digits() {
        assert_eq!(toks("side1"), ["side1", "side"]);
        assert_eq!(toks("ipv4 2024"), ["ipv4", "ipv"]);
        assert_eq!(toks("s3_upload"), ["s3upload", "s3", "upload"]);
        assert_eq!(toks("getV2Users"), ["getv2users", "get", "v2", "user"]);
        assert_eq!(
            toks("HTTP2Server"),
            ["http2server", "http2", "http", "server"]
        );
        // Bare numbers and single characters are values and variables, not tool words.
        assert!(toks("x = 3.14, y = 2").is_empty());
    }

    #[test]
    fn prose_stopwords_and_kept_words() {
        assert_eq!(
            toks("Turn the lights off, not on!"),
            ["turn", "light", "off", "not", "on"]
        );
        assert_eq!(toks("end of a sentence."), ["end", "sentenc"]);
    }

    #[test]
    fn unicode_folding() {
        assert_eq!(toks("Café Straße"), ["cafe", "strass"]);
        assert_eq!(toks("naïve résumé"), ["naiv", "resum"]);
        // Other scripts pass through, lowercased.
        assert_eq!(toks("Привет"), ["привет"]);
    }

    #[test]
    fn huge_tokens_dropped() {
        let long = "x".repeat(1000);
        assert!(toks(&long).is_empty());
        assert_eq!(toks(&format!("{long} weather")), ["weather"]);
    }

    #[test]
    fn empty_and_punctuation() {
        assert!(toks("").is_empty());
        assert!(toks("... --- ___ !!!").is_empty());
        assert_eq!(toks("_private_"), ["privat"]);
    }
}
