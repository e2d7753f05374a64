//! The full tokenizer: the [`Tokenizer`]'s tokens without stopwords, parts stemmed (Snowball
//! English) through a word -> stem cache.

use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::FxHashMap;

use super::{is_stopword, Kind, Tokenizer};

/// The stem cache of one analyzer is cleared when it grows past this many words.
const STEM_CACHE_LIMIT: usize = 100_000;

/// Whether a part is stemmed: only parts made of ASCII lowercase letters are.
pub fn is_stemmable(part: &str) -> bool {
    part.bytes().all(|b| b.is_ascii_lowercase())
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

    /// Call `emit` with every (stemmed) token of `text`, in text order, then the short names
    /// of its `name=value` pairs ([`super::for_each_short_name_of_pairs`]).
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
        super::for_each_short_name_of_pairs(text, |name| emit(name));
    }

    /// Tokenize `text` into a vector.
    pub fn tokenize(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_token(text, |t| out.push(t.to_owned()));
        out
    }
}
