//! Pass 1 of an add: every staged tool's distinct terms with their per-field counts, as ids of
//! a vocabulary of its own. It needs nothing of the index, so it runs on a worker thread while
//! the schema walk (which holds the GIL) stages the next tools, and it leaves the index
//! untouched if the add fails; [`super::Index::insert_pass1`] then merges its vocabulary into
//! the index's and inserts.
//!
//! Repeated work is done once per add: a part's stem per distinct spelling, a short
//! parameter text's terms per distinct text (numbered by the walk as it stages them:
//! [`Staged::text`]), and an ASCII word's terms (whole identifier and parts) per distinct
//! word of the descriptions and parameter texts.

use rust_stemmers::{Algorithm, Stemmer};

use crate::project::{Field, NUM_FIELDS};
use crate::tokenize::{is_stemmable, is_stopword, short_name, split_ascii_words, Kind, Tokenizer};

use super::short_keys::ShortKeys;
use super::stage::{Staged, SEEN, UNNUMBERED};
use super::vocab::Vocab;
use crate::prefetch::prefetch;

/// A part that is a stopword.
const STOP: u32 = u32::MAX;

/// In [`Pass1::numbered`], the count of a numbered text that is a short parameter name.
const SHORT: u32 = 1 << 31;

/// Pass 1's output and its caches. Feed it the staged chunks of one add in order.
pub struct Pass1 {
    /// The terms met, in order of first appearance.
    pub(super) vocab: Vocab,
    /// Every tool's distinct terms (local ids) with their counts per field, tool after tool.
    pub(super) all_terms: Vec<(u32, [u8; NUM_FIELDS])>,
    /// Per tool: its range in `all_terms` and its field lengths.
    pub(super) tools: Vec<(usize, usize, [u32; NUM_FIELDS])>,
    tokenizer: Tokenizer,
    stemmer: Stemmer,
    /// Part as written -> id of its stem (STOP for a stopword).
    part_ids: ShortKeys<u32>,
    /// Numbered short parameter text (by number), ASCII word -> its ids in `memo`.
    numbered: Vec<(u32, u32)>,
    word_ids: ShortKeys<(u32, u32)>,
    memo: Vec<u32>,
    ids: Vec<u32>,
    word: Vec<u8>,
    /// Per local term id: the last tool that met it and the term's entry in `all_terms`, and
    /// how many tools have it (what its postings list gains: [`Pass1::tools_per_term`]).
    seen: Vec<Seen>,
}

/// [`Pass1::seen`]'s entry for one term.
#[derive(Clone, Copy, Default)]
struct Seen {
    /// The last tool that met the term, counted from 1 (0: none).
    tool: u32,
    /// The term's entry in that tool's slice of `all_terms`.
    at: u32,
    /// How many tools have the term.
    tools: u32,
}

impl Default for Pass1 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pass1 {
    pub fn new() -> Self {
        Pass1 {
            vocab: Vocab::default(),
            all_terms: Vec::new(),
            tools: Vec::new(),
            tokenizer: Tokenizer::default(),
            stemmer: Stemmer::create(Algorithm::English),
            part_ids: ShortKeys::default(),
            numbered: Vec::new(),
            word_ids: ShortKeys::default(),
            memo: Vec::new(),
            ids: Vec::new(),
            word: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// Per local term id, how many of the tools tokenized have the term.
    pub(super) fn tools_per_term(&self) -> Vec<u32> {
        let n = self.vocab.len();
        let mut counts: Vec<u32> = self.seen.iter().take(n).map(|s| s.tools).collect();
        counts.resize(n, 0);
        counts
    }

    /// Number of tools tokenized so far.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Tokenize every tool of `staged` (the next chunk of the add), calling `progress(done)`
    /// whenever the count of tools reaches a multiple of `every`.
    pub fn tokenize(&mut self, staged: &Staged, every: usize, progress: &mut dyn FnMut(usize)) {
        self.tools.reserve(staged.len());
        for tool in &staged.tools {
            let (first, end) = tool.texts;
            let start = self.all_terms.len();
            let tool_no = self.tools.len() as u32 + 1;
            let mut lens = [0u32; NUM_FIELDS];
            for (&(from, to, field), &number) in staged.texts[first..end]
                .iter()
                .zip(&staged.numbers[first..end])
            {
                let text = &staged.arena[from..to];
                let (terms, short) = self.text_terms(text, field, number);
                let Pass1 {
                    ids,
                    memo,
                    seen,
                    all_terms,
                    vocab,
                    ..
                } = self;
                let terms = match terms {
                    Terms::Memo(at, n) => &memo[at..at + n],
                    Terms::Ids => &ids[..],
                };
                let f = field as usize;
                // A short parameter name (`q`) adds no length: every other score stays as it
                // was without it (`tokenize/names.rs`).
                if !short {
                    lens[f] = lens[f].saturating_add(terms.len() as u32);
                }
                if seen.len() < vocab.len() {
                    // Every id met is interned: below the vocabulary's length.
                    seen.resize(vocab.len().next_power_of_two(), Seen::default());
                }
                // The entry of the term AHEAD ids on is fetched while this one is counted
                // (`seen` is far bigger than a cache).
                const AHEAD: usize = 4;
                for (k, &id) in terms.iter().enumerate() {
                    if let Some(&next) = terms.get(k + AHEAD) {
                        prefetch(&seen[next as usize]);
                    }
                    count(seen, all_terms, tool_no, id, f);
                }
            }
            self.tools.push((start, self.all_terms.len(), lens));
            if self.tools.len().is_multiple_of(every) {
                progress(self.tools.len());
            }
        }
    }

    /// The ids of `text`'s terms: where in `memo` they are for a numbered text met before,
    /// else in `self.ids` (`number`: its number in the add's [`Staged::numbers`]); and
    /// whether the text is a short parameter name (which adds no length).
    fn text_terms(&mut self, text: &str, field: Field, number: u32) -> (Terms, bool) {
        if number != UNNUMBERED && number & SEEN != 0 {
            // Numbered in order as staged, and tokenized in that order: known by now (a text
            // met again is staged without its bytes: `text` is empty here).
            let (at, n) = self.numbered[(number & !SEEN) as usize];
            let short = n & SHORT != 0;
            return (Terms::Memo(at as usize, (n & !SHORT) as usize), short);
        }
        self.ids.clear();
        if field != Field::Name && text.is_ascii() {
            // Word by word, each distinct word tokenized once (names are words of their own,
            // met once: not remembered).
            let Pass1 {
                word,
                word_ids,
                memo,
                ids,
                tokenizer,
                part_ids,
                vocab,
                stemmer,
                ..
            } = self;
            split_ascii_words(text.as_bytes(), word, |w| {
                let hash = ShortKeys::<(u32, u32)>::hash(w);
                if let Some((at, n)) = word_ids.get(hash, w) {
                    ids.extend_from_slice(&memo[at as usize..(at + n) as usize]);
                    return;
                }
                let start = ids.len();
                tokenizer.for_each_in_word(w, |tok, kind| {
                    let id = term_id(tok, kind, part_ids, vocab, stemmer);
                    if id != STOP {
                        ids.push(id);
                    }
                });
                // Not remembered past 4 GiB of words: tokenized again when met again.
                word_ids.insert(hash, w, (memo.len() as u32, (ids.len() - start) as u32));
                memo.extend_from_slice(&ids[start..]);
            });
        } else {
            let Pass1 {
                ids,
                tokenizer,
                part_ids,
                vocab,
                stemmer,
                ..
            } = self;
            tokenizer.for_each(text, |tok, kind| {
                let id = term_id(tok, kind, part_ids, vocab, stemmer);
                if id != STOP {
                    ids.push(id);
                }
            });
        }
        // A parameter called `q` or `to` (which the recipe drops: no term above): its name,
        // whole (`tokenize/names.rs`). Checked only when nothing else came of the text.
        let mut is_short = false;
        if field == Field::ParamNames && self.ids.is_empty() {
            if let Some(term) = short_name(text) {
                self.ids.push(self.vocab.intern(&term));
                is_short = true;
            }
        }
        if number != UNNUMBERED {
            let i = number as usize;
            if self.numbered.len() <= i {
                self.numbered.resize(i + 1, (0, 0));
            }
            let n = self.ids.len() as u32 | if is_short { SHORT } else { 0 };
            self.numbered[i] = (self.memo.len() as u32, n);
            self.memo.extend_from_slice(&self.ids);
        }
        (Terms::Ids, is_short)
    }

    /// The texts of the local term ids (tests).
    #[cfg(test)]
    pub(super) fn terms_of(&self, tool: usize) -> Vec<(String, [u8; NUM_FIELDS])> {
        let (a, b, _) = self.tools[tool];
        self.all_terms[a..b]
            .iter()
            .map(|&(id, tf)| (self.vocab.term(id).to_owned(), tf))
            .collect()
    }
}

/// Where [`Pass1::text_terms`] left a text's term ids.
enum Terms {
    /// `memo[at..at + n]`.
    Memo(usize, usize),
    /// `Pass1::ids`.
    Ids,
}

/// One occurrence of term `id` in field `f` of tool `tool_no` (counted from 1), which
/// `all_terms` ends with: the tool's entry of the term counts it, or a new entry does.
/// Aggregated without sorting: `seen[id]` holds the tool that last met the term and the
/// term's entry in that tool's slice of `all_terms` (one read a term: the array is as long
/// as the vocabulary, far bigger than a cache), and counts the term's tools in the same read.
#[inline(always)]
fn count(
    seen: &mut [Seen],
    all_terms: &mut Vec<(u32, [u8; NUM_FIELDS])>,
    tool_no: u32,
    id: u32,
    f: usize,
) {
    let seen = &mut seen[id as usize];
    if seen.tool == tool_no {
        let tf = &mut all_terms[seen.at as usize].1[f];
        *tf = tf.saturating_add(1);
    } else {
        seen.tool = tool_no;
        seen.at = all_terms.len() as u32;
        seen.tools += 1;
        // One count in field `f`, built in a register (not byte by byte in memory).
        all_terms.push((id, (1u32 << (8 * f as u32)).to_le_bytes()));
    }
}

/// The id of a token: a whole identifier as it is, a part by its stem (STOP: a stopword),
/// each distinct part looked up once.
#[inline]
fn term_id(
    tok: &str,
    kind: Kind,
    part_ids: &mut ShortKeys<u32>,
    vocab: &mut Vocab,
    stemmer: &Stemmer,
) -> u32 {
    match kind {
        Kind::Whole => vocab.intern(tok),
        Kind::Part => {
            let hash = ShortKeys::<u32>::hash(tok.as_bytes());
            if let Some(id) = part_ids.get(hash, tok.as_bytes()) {
                return id;
            }
            let id = if is_stopword(tok) {
                STOP
            } else if is_stemmable(tok) {
                vocab.intern(&stemmer.stem(tok))
            } else {
                vocab.intern(tok)
            };
            part_ids.insert(hash, tok.as_bytes(), id);
            id
        }
    }
}
