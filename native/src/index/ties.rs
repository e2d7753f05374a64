//! Equal scores ordered by evidence the scores do not see: which of the query's words (numbers
//! and short words included, which the tokenizer drops) appear among the parts of a tool's
//! name. `resnet18` and `resnet34` score alike for "a ResNet with 34 layers", where the `34`
//! is a value to BM25; here it tells them apart. Then by name, as before.

use crate::tokenize::is_stopword;

/// The query's words for tie-breaking.
#[derive(Debug, Default, Clone)]
pub struct Ties {
    words: Vec<String>,
}

/// Lowercased runs of letters or of digits (`resnet-50` -> `resnet`, `50`).
fn parts(text: &str, mut f: impl FnMut(&str)) {
    let mut cur = String::new();
    let mut digits = false;
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            let d = c.is_ascii_digit();
            if !cur.is_empty() && d != digits {
                f(&cur);
                cur.clear();
            }
            digits = d;
            cur.push(c);
        } else if !cur.is_empty() {
            f(&cur);
            cur.clear();
        }
    }
    if !cur.is_empty() {
        f(&cur);
    }
}

impl Ties {
    pub fn new(query: &str) -> Self {
        let mut words: Vec<String> = Vec::new();
        parts(query, |w| {
            let digits = w.bytes().all(|b| b.is_ascii_digit());
            if (digits || w.chars().count() >= 2)
                && !is_stopword(w)
                && !words.iter().any(|x| x == w)
            {
                words.push(w.to_owned());
            }
        });
        Ties { words }
    }

    /// How many of the query's words are parts of `name` (its last segment).
    pub fn evidence(&self, name: &str) -> u32 {
        if self.words.is_empty() {
            return 0;
        }
        let (_, last) = super::split_name(name);
        let mut found = 0u32;
        let mut seen: Vec<usize> = Vec::new();
        let mut count = |i: Option<usize>| {
            if let Some(i) = i {
                if !seen.contains(&i) {
                    seen.push(i);
                    found += 1;
                }
            }
        };
        if last.is_ascii() {
            // Most names: the parts are slices of the name, compared without case (what
            // `parts` gives for ASCII, without building each lowercased part).
            ascii_parts(last, |p| {
                count(self.words.iter().position(|w| w.eq_ignore_ascii_case(p)));
            });
        } else {
            parts(last, |p| count(self.words.iter().position(|w| w == p)));
        }
        found
    }
}

/// [`parts`] of an ASCII `text`, as slices of it (not lowercased).
fn ascii_parts(text: &str, mut f: impl FnMut(&str)) {
    let b = text.as_bytes();
    let mut start = 0;
    while start < b.len() {
        if !b[start].is_ascii_alphanumeric() {
            start += 1;
            continue;
        }
        let digits = b[start].is_ascii_digit();
        let mut end = start + 1;
        while end < b.len() && b[end].is_ascii_alphanumeric() && b[end].is_ascii_digit() == digits {
            end += 1;
        }
        f(&text[start..end]);
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_parts_of_the_name_count_once() {
        let t = Ties::new("Classify with a ResNet-34 (34 layers), not the 18");
        assert_eq!(t.evidence("torchhub.pytorch.vision.resnet34"), 2);
        assert_eq!(t.evidence("torchhub.pytorch.vision.resnet18"), 2);
        assert_eq!(t.evidence("torchhub.pytorch.vision.resnet50"), 1);
        assert_eq!(t.evidence("vision.34.resnet"), 1); // the namespace does not count
        assert_eq!(Ties::new("").evidence("resnet34"), 0);
        assert_eq!(Ties::new("the a of").evidence("the_a_of"), 0);
        assert_eq!(t.evidence("hub.ResNet34-V2"), 2); // case and separators as in the query
        assert_eq!(Ties::new("café 34").evidence("x.Café34"), 2); // beyond ASCII too
    }

    #[test]
    fn ascii_parts_are_the_parts_of_an_ascii_text() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = b"aZ09_-. x7Q";
        for _ in 0..2000 {
            let mut text = String::new();
            for _ in 0..(rng % 14) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                text.push(alphabet[(rng % alphabet.len() as u64) as usize] as char);
            }
            let (mut want, mut got) = (Vec::new(), Vec::new());
            parts(&text, |p| want.push(p.to_owned()));
            ascii_parts(&text, |p| got.push(p.to_ascii_lowercase()));
            assert_eq!(got, want, "{text:?}");
        }
    }
}
