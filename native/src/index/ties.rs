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
        let mut seen: Vec<&str> = Vec::new();
        parts(last, |p| {
            if let Some(w) = self.words.iter().find(|w| w.as_str() == p) {
                if !seen.contains(&w.as_str()) {
                    seen.push(w.as_str());
                    found += 1;
                }
            }
        });
        found
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
    }
}
