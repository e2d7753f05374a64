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

use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::FxHashMap;
use unicode_normalization::char::{decompose_compatible, is_combining_mark};

/// Parts longer than this many bytes are dropped.
pub const MAX_PART_LEN: usize = 64;
/// Whole identifiers longer than this many bytes are dropped (their parts are kept).
pub const MAX_WHOLE_LEN: usize = 128;
/// The stem cache of one analyzer is cleared when it grows past this many words.
const STEM_CACHE_LIMIT: usize = 100_000;

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

/// Whether a (lowercase, unstemmed) part is a stopword.
pub fn is_stopword(word: &str) -> bool {
    word.len() <= 10 && STOPWORDS.binary_search(&word).is_ok()
}

fn is_joiner(c: char) -> bool {
    matches!(c, '_' | '.' | '-')
}

/// Append the ASCII folding of `c` to `out` (keeping case; other scripts pass through).
fn fold_char(c: char, out: &mut String) {
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
        out.push_str(s);
        return;
    }
    decompose_compatible(c, |d| {
        if !is_combining_mark(d) {
            out.push(d);
        }
    });
}

/// What a token is: a whole identifier (never stemmed) or a part (which the consumer drops if
/// it is a stopword and stems otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Whole,
    Part,
}

/// Whether a part is stemmed: only parts made of ASCII lowercase letters are.
pub fn is_stemmable(part: &str) -> bool {
    part.bytes().all(|b| b.is_ascii_lowercase())
}

/// The tokenizer without stemming: steps 1-7 of the recipe. Reuses its buffers; not shared
/// between threads.
#[derive(Default)]
pub struct Tokenizer {
    folded: String,
    word: Vec<char>,
    lower: String,
    ends: Vec<usize>,
}

impl Tokenizer {
    /// Call `emit` with every token of `text`, in text order. Parts are filtered by length and
    /// numbers; stopwords and stemming are the consumer's (see [`Analyzer`]).
    pub fn for_each(&mut self, text: &str, mut emit: impl FnMut(&str, Kind)) {
        let Tokenizer {
            folded,
            word,
            lower,
            ends,
        } = self;
        let src: &str = if text.is_ascii() {
            text
        } else {
            folded.clear();
            for c in text.chars() {
                fold_char(c, folded);
            }
            folded
        };
        word.clear();
        let mut joiner = None;
        for c in src.chars() {
            if c.is_alphanumeric() {
                if let Some(j) = joiner.take() {
                    word.push(j);
                }
                word.push(c);
            } else if is_joiner(c) && !word.is_empty() {
                joiner = Some(c);
            } else {
                joiner = None;
                if !word.is_empty() {
                    emit_word(word, lower, ends, &mut emit);
                    word.clear();
                }
            }
        }
        if !word.is_empty() {
            emit_word(word, lower, ends, &mut emit);
            word.clear();
        }
    }
}

impl Tokenizer {
    /// Call `emit` with the tokens of one word as [`split_ascii_words`] yields it (ASCII,
    /// joiners only between alphanumerics): what [`Tokenizer::for_each`] emits for that word.
    pub fn for_each_in_word(&mut self, word: &[u8], mut emit: impl FnMut(&str, Kind)) {
        let Tokenizer {
            word: chars,
            lower,
            ends,
            ..
        } = self;
        chars.clear();
        chars.extend(word.iter().map(|&b| char::from(b)));
        emit_word(chars, lower, ends, &mut emit);
        chars.clear();
    }
}

/// The words of an ASCII text, as [`Tokenizer::for_each`] splits them (step 2 of the
/// recipe): maximal runs of alphanumerics, a joiner (`_ . -`) kept only between two of them
/// (the last of a run of joiners). `buf` is scratch.
pub fn split_ascii_words(text: &[u8], buf: &mut Vec<u8>, mut f: impl FnMut(&[u8])) {
    buf.clear();
    let mut joiner: Option<u8> = None;
    for &b in text {
        if b.is_ascii_alphanumeric() {
            if let Some(j) = joiner.take() {
                buf.push(j);
            }
            buf.push(b);
        } else if matches!(b, b'_' | b'.' | b'-') && !buf.is_empty() {
            joiner = Some(b);
        } else {
            joiner = None;
            if !buf.is_empty() {
                f(buf);
                buf.clear();
            }
        }
    }
    if !buf.is_empty() {
        f(buf);
        buf.clear();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum CharKind {
    Lower,
    Upper,
    Digit,
    Other,
}

fn char_kind(c: char) -> CharKind {
    if c.is_ascii() {
        return match c {
            'a'..='z' => CharKind::Lower,
            'A'..='Z' => CharKind::Upper,
            '0'..='9' => CharKind::Digit,
            _ => CharKind::Other,
        };
    }
    if c.is_numeric() {
        CharKind::Digit
    } else if c.is_uppercase() {
        CharKind::Upper
    } else if c.is_lowercase() {
        CharKind::Lower
    } else {
        CharKind::Other
    }
}

/// A token worth indexing: two characters or more, and not a bare number (numbers and single
/// letters in queries are argument values and variable names, not what a tool is about).
fn is_meaningful(tok: &str) -> bool {
    let mut chars = tok.chars();
    chars.next().is_some() && chars.next().is_some() && !tok.chars().all(char::is_numeric)
}

/// Split one word into lowercase parts at joiners and camelCase humps (`getV2Users` ->
/// `get`, `v2`, `users`; letters and digits stay together), appended to `lower` with their end
/// offsets in `ends`; then emit the whole identifier and the parts.
fn emit_word(
    w: &[char],
    lower: &mut String,
    ends: &mut Vec<usize>,
    emit: &mut impl FnMut(&str, Kind),
) {
    lower.clear();
    ends.clear();
    let mut start = 0;
    for (i, &c) in w.iter().enumerate() {
        if is_joiner(c) {
            if lower.len() > start {
                ends.push(lower.len());
                start = lower.len();
            }
            continue;
        }
        if lower.len() > start {
            let prev = char_kind(w[i - 1]);
            let here = char_kind(c);
            let boundary = match (prev, here) {
                (CharKind::Lower, CharKind::Upper) | (CharKind::Digit, CharKind::Upper) => true,
                (CharKind::Upper, CharKind::Upper) => w
                    .get(i + 1)
                    .is_some_and(|&n| char_kind(n) == CharKind::Lower),
                _ => false,
            };
            if boundary {
                ends.push(lower.len());
                start = lower.len();
            }
        }
        if c.is_ascii() {
            lower.push(c.to_ascii_lowercase());
        } else {
            lower.extend(c.to_lowercase());
        }
    }
    if lower.len() > start {
        ends.push(lower.len());
    }
    if ends.len() > 1 && lower.len() <= MAX_WHOLE_LEN && is_meaningful(lower) {
        emit(lower, Kind::Whole);
    }
    let mut from = 0;
    for &to in ends.iter() {
        let part = &lower[from..to];
        emit_part(part, emit);
        let has_digit = part.chars().any(char::is_numeric);
        if has_digit && part.chars().any(char::is_alphabetic) {
            let mut run = 0;
            let mut prev_digit = None;
            for (i, c) in part.char_indices() {
                let digit = c.is_numeric();
                if prev_digit.is_some_and(|d| d != digit) {
                    emit_part(&part[run..i], emit);
                    run = i;
                }
                prev_digit = Some(digit);
            }
            emit_part(&part[run..], emit);
        }
        from = to;
    }
}

fn emit_part(part: &str, emit: &mut impl FnMut(&str, Kind)) {
    if part.len() <= MAX_PART_LEN && is_meaningful(part) {
        emit(part, Kind::Part);
    }
}

/// The full tokenizer (steps 1-8), with a word -> stem cache. Not shared between threads.
pub struct Analyzer {
    tokenizer: Tokenizer,
    stemmer: Stemmer,
    cache: FxHashMap<Box<str>, Box<str>>,
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new()
    }
}

impl Analyzer {
    pub fn new() -> Self {
        Analyzer {
            tokenizer: Tokenizer::default(),
            stemmer: Stemmer::create(Algorithm::English),
            cache: FxHashMap::default(),
        }
    }

    /// Call `emit` with every (stemmed) token of `text`, in text order.
    pub fn for_each_token(&mut self, text: &str, mut emit: impl FnMut(&str)) {
        let Analyzer {
            tokenizer,
            stemmer,
            cache,
        } = self;
        tokenizer.for_each(text, |tok, kind| {
            if kind == Kind::Part && is_stopword(tok) {
                return;
            }
            if kind == Kind::Part && is_stemmable(tok) {
                if cache.len() >= STEM_CACHE_LIMIT && !cache.contains_key(tok) {
                    cache.clear();
                }
                if !cache.contains_key(tok) {
                    cache.insert(tok.into(), stemmer.stem(tok).into());
                }
                emit(&cache[tok]);
            } else {
                emit(tok);
            }
        });
    }

    /// Tokenize `text` into a vector.
    pub fn tokenize(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_token(text, |t| out.push(t.to_owned()));
        out
    }
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
