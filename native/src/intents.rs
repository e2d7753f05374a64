//! A message split into its requests ("book a flight to Paris and reserve a hotel"):
//! deterministic, no model, pure Rust. A search ranks each request and the whole message and
//! fuses the rankings (`index/intents.rs`); this module only says where the requests are.
//!
//! Where a message is cut (the words compared without case, ASCII):
//!
//! 1. at every line break and every `;` (`；`): lists, one request a line, in any language;
//! 2. before the word `then` (a `, and` or `and` just before it goes too: `A, and then B`);
//! 3. at `also` or `additionally` that opens a sentence (after `.`, `?`, `!` or at the start of
//!    a piece), and at `and` that opens one (`A. And B`);
//! 4. at `and also` and `as well as` anywhere;
//! 5. at `and` when the word after it opens a request: a verb a request starts with (`find`,
//!    `get`, `calculate`, `book`, ... [`REQUEST_WORDS`]), a question word (`what`, `how`, ...),
//!    or `can`, `could`, `would`, `please`. `the area of a triangle with base 10 and height 5`
//!    is one request; `the weather in Paris and convert 100 EUR to USD` is two.
//!
//! The words of rules 2-5 are English; in other languages only rule 1 cuts. The marker words
//! themselves belong to no part. A part is a byte range of the message; the caller drops
//! the parts with too few words to search on their own.

/// Words that open a request after `and` (rule 5): imperative verbs of tool requests, question
/// words, and the polite openers. Lowercase, sorted (binary search).
pub const REQUEST_WORDS: &[&str] = &[
    "add",
    "analyse",
    "analyze",
    "apply",
    "book",
    "buy",
    "calculate",
    "call",
    "can",
    "cancel",
    "check",
    "classify",
    "compare",
    "compute",
    "convert",
    "could",
    "count",
    "create",
    "delete",
    "detect",
    "determine",
    "display",
    "download",
    "draw",
    "email",
    "estimate",
    "evaluate",
    "extract",
    "fetch",
    "fill",
    "find",
    "generate",
    "get",
    "give",
    "help",
    "how",
    "identify",
    "list",
    "locate",
    "look",
    "lookup",
    "make",
    "measure",
    "monitor",
    "open",
    "order",
    "pay",
    "please",
    "plot",
    "post",
    "predict",
    "provide",
    "read",
    "recommend",
    "remove",
    "reserve",
    "retrieve",
    "run",
    "save",
    "schedule",
    "search",
    "sell",
    "send",
    "set",
    "share",
    "show",
    "solve",
    "sort",
    "start",
    "stop",
    "store",
    "suggest",
    "summarise",
    "summarize",
    "switch",
    "tell",
    "track",
    "transfer",
    "translate",
    "turn",
    "update",
    "upload",
    "what",
    "whats",
    "when",
    "where",
    "which",
    "who",
    "whom",
    "whose",
    "why",
    "would",
    "write",
];

/// Whether `word` (lowercase) opens a request after `and` (rule 5).
pub fn opens_request(word: &str) -> bool {
    REQUEST_WORDS.binary_search(&word).is_ok()
}

/// A word of a piece: its byte range and whether a sentence end (`.`, `?`, `!`) or the start
/// of the piece comes before it (only spaces and punctuation between).
#[derive(Clone, Copy, Debug)]
struct Word {
    start: usize,
    end: usize,
    opens_sentence: bool,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'\'' || b >= 0x80
}

fn words_of(text: &str, from: usize, to: usize, out: &mut Vec<Word>) {
    out.clear();
    let bytes = text.as_bytes();
    let mut i = from;
    let mut sentence = true;
    while i < to {
        if is_word_byte(bytes[i]) {
            let start = i;
            while i < to && is_word_byte(bytes[i]) {
                i += 1;
            }
            out.push(Word {
                start,
                end: i,
                opens_sentence: sentence,
            });
            sentence = false;
        } else {
            if matches!(bytes[i], b'.' | b'?' | b'!') {
                // `3.14` and `e.g.x` are not sentence ends: a space must follow.
                sentence = bytes.get(i + 1).is_none_or(|b| b.is_ascii_whitespace());
            }
            i += 1;
        }
    }
}

fn is(text: &str, w: &Word, word: &str) -> bool {
    text[w.start..w.end].eq_ignore_ascii_case(word)
}

/// Cut the piece `text[from..to]` at rules 2-5; parts go to `out` as byte ranges.
fn cut_piece(
    text: &str,
    from: usize,
    to: usize,
    words: &mut Vec<Word>,
    out: &mut Vec<(usize, usize)>,
) {
    words_of(text, from, to, words);
    let mut start = from;
    // Words of the current part so far (a marker with none before it is no cut).
    let mut have = 0usize;
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let next = words.get(i + 1).copied();
        // The cut: the part so far ends at `end`, the next starts at `resume`; `skip` more
        // words are the marker's.
        let mut cut: Option<(usize, usize, usize)> = None;
        if is(text, &w, "then") {
            let after_and = i > 0 && is(text, &words[i - 1], "and");
            if have > usize::from(after_and) {
                let end = if after_and {
                    words[i - 1].start
                } else {
                    w.start
                };
                cut = Some((end, w.end, 0));
            }
        } else if (is(text, &w, "also") || is(text, &w, "additionally")) && w.opens_sentence {
            cut = Some((w.start, w.end, 0));
        } else if is(text, &w, "and") && have > 0 {
            if w.opens_sentence {
                cut = Some((w.start, w.end, 0));
            } else if let Some(n) = next {
                if is(text, &n, "also") {
                    cut = Some((w.start, n.end, 1));
                } else if opens_request(&text[n.start..n.end].to_ascii_lowercase()) {
                    cut = Some((w.start, w.end, 0));
                }
            }
        } else if is(text, &w, "as") && have > 0 {
            if let (Some(n), Some(n2)) = (next, words.get(i + 2)) {
                if is(text, &n, "well") && is(text, n2, "as") {
                    cut = Some((w.start, n2.end, 2));
                }
            }
        }
        match cut {
            Some((end, resume, skip)) => {
                if start < end {
                    out.push((start, end));
                }
                start = resume;
                have = 0;
                i += 1 + skip;
            }
            None => {
                have += 1;
                i += 1;
            }
        }
    }
    if start < to {
        out.push((start, to));
    }
}

/// Whether `text` may hold a cut at all: a line break, a `;` (`；`), or one of the marker
/// words (`and`, `then`, `also`, `additionally`, `as`) as a word, without case. Most queries
/// hold none: their split is this one scan.
fn may_cut(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphanumeric() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let w = &b[start..i];
            if (2..=12).contains(&w.len())
                && matches!(w[0] | 0x20, b'a' | b't')
                && MARKERS.iter().any(|m| w.eq_ignore_ascii_case(m))
            {
                return true;
            }
        } else {
            if matches!(b[i], b'\n' | b'\r' | b';' | 0xEF) {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// The words that open a cut of rules 2-5 (`as` for `as well as`).
const MARKERS: [&[u8]; 5] = [b"and", b"then", b"also", b"additionally", b"as"];

thread_local! {
    static WORDS: std::cell::RefCell<Vec<Word>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The requests of `text` as byte ranges, in order (rules 1-5 of the module). A message of one
/// request gives one range (none for a text without a word).
pub fn split(text: &str) -> Vec<(usize, usize)> {
    let mut out = if may_cut(text) {
        cut(text)
    } else {
        vec![(0, text.len())]
    };
    out.retain(|&(a, b)| {
        text.as_bytes()[a..b]
            .iter()
            .any(|&c| c.is_ascii_alphanumeric() || c >= 0x80)
    });
    out
}

/// Every cut of rules 1-5 (what [`split`] does past its first scan).
fn cut(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    WORDS.with(|words| {
        let words = &mut *words.borrow_mut();
        let mut from = 0;
        for (i, c) in text.char_indices() {
            if matches!(c, '\n' | '\r' | ';' | '；') {
                cut_piece(text, from, i, words, &mut out);
                from = i + c.len_utf8();
            }
        }
        cut_piece(text, from, text.len(), words, &mut out);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> Vec<&str> {
        split(text)
            .into_iter()
            .map(|(a, b)| text[a..b].trim_matches(|c: char| c.is_whitespace() || c == ','))
            .collect()
    }

    #[test]
    fn request_words_are_sorted_lowercase_and_unique() {
        assert!(REQUEST_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(REQUEST_WORDS
            .iter()
            .all(|w| w.bytes().all(|b| b.is_ascii_lowercase())));
    }

    #[test]
    fn one_request_stays_whole() {
        for text in [
            "Calculate the area of a triangle with base 10 units and height 5 units.",
            "Find the distance between New York City and Los Angeles.",
            "What is the temperature in celsius and humidity level of Tokyo?",
            "I am an English teacher. I need to translate a sentence.",
            "Pi is 3.14 and e is 2.72",
            "",
        ] {
            assert!(split(text).len() <= 1, "{text:?}: {:?}", parts(text));
        }
    }

    #[test]
    fn each_marker_cuts() {
        assert_eq!(
            parts("Get the weather in Paris and convert 100 EUR to USD."),
            ["Get the weather in Paris", "convert 100 EUR to USD."]
        );
        assert_eq!(
            parts("book a flight; reserve a hotel\n- rent a car"),
            ["book a flight", "reserve a hotel", "- rent a car"]
        );
        assert_eq!(
            parts("Find a hotel, and then book it, then email me"),
            ["Find a hotel", "book it", "email me"]
        );
        assert_eq!(
            parts("Find a hotel. Also, book a table. And call a taxi"),
            ["Find a hotel.", "book a table.", "call a taxi"]
        );
        assert_eq!(
            parts("Also find a hotel and also book a table as well as a taxi"),
            ["find a hotel", "book a table", "a taxi"]
        );
        // Only a sentence's first `also` cuts; `and` is no marker at the very start.
        assert_eq!(parts("I also need a hotel"), ["I also need a hotel"]);
        assert_eq!(parts("And then?"), ["And then?"]);
    }

    #[test]
    fn the_first_scan_misses_no_cut() {
        // Texts of words, markers, punctuation and other scripts: `split` (a first scan, then
        // the cuts only where it says there may be one) equals the cuts made everywhere.
        let pieces = [
            "and",
            "And",
            "then",
            "also",
            "Also",
            "additionally",
            "as",
            "well",
            "band",
            "thence",
            "asap",
            "find",
            "get",
            "the",
            "weather",
            "of",
            "Paris",
            "3.14",
            ",",
            ".",
            "?",
            ";",
            "\n",
            "；",
            "und",
            "東京",
            "x=1",
            "'",
            " ",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut text = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 12) as usize;
            for j in 0..n {
                let p = pieces[((seed >> (j * 5)) % pieces.len() as u64) as usize];
                text.push_str(p);
                if (seed >> (j + 40)) & 1 == 1 {
                    text.push(' ');
                }
            }
            let mut all = cut(&text);
            all.retain(|&(a, b)| {
                text.as_bytes()[a..b]
                    .iter()
                    .any(|&c| c.is_ascii_alphanumeric() || c >= 0x80)
            });
            assert_eq!(split(&text), all, "{text:?}");
        }
    }

    #[test]
    fn other_languages_cut_only_at_lines_and_semicolons() {
        assert_eq!(
            parts("Wetter in Paris und rechne 100 Euro in Dollar um"),
            ["Wetter in Paris und rechne 100 Euro in Dollar um"]
        );
        assert_eq!(
            parts("météo à Paris；convertir 100 euros en dollars\n東京の天気"),
            [
                "météo à Paris",
                "convertir 100 euros en dollars",
                "東京の天気"
            ]
        );
    }
}
