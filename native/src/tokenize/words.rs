//! Step 2 of the recipe: text split into words (runs of alphanumerics, joiners between them),
//! and the [`Tokenizer`] that emits every word's tokens.

use super::fold::fold_char;
use super::parts::emit_word;
use super::Kind;

pub(super) fn is_joiner(c: char) -> bool {
    matches!(c, '_' | '.' | '-')
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
