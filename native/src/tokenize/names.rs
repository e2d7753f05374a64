//! Parameter names as users write them: `q=Paris`, `x = 3`, `to=ann@example.com`. A name of
//! one letter, or one that is a stopword (`to`, `from`, `in`, `a`), is no word of prose and
//! the recipe drops it everywhere else; as a parameter's name and as the name of a
//! `name=value` in a query it is kept, whole and lowercased (never stemmed), so a request
//! written `q=Paris` reaches the tools whose parameter is `q`. Longer names need nothing:
//! their words are tokens already (`city=Paris` yields `city` and `paris`).

use super::is_stopword;

/// The term of a parameter name the recipe would drop: a single ASCII letter, or a stopword
/// (one word of ASCII letters), lowercased; `None` for any other name (tokenized as usual).
pub fn short_name(name: &str) -> Option<String> {
    let name = name.trim();
    if name.is_empty() || name.len() > 10 || !name.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    (lower.len() == 1 || is_stopword(&lower)).then_some(lower)
}

/// Call `f` with the term of every `name=value` of `text` whose name is a [`short_name`]:
/// a word directly before `=` (not `==`), preceded by neither a letter, a digit nor a joiner
/// (`_ . -`), so `a_b=1` and `3x=1` name nothing short. An equation is no pair: a value
/// holding `^ * / + < >` (`y=x^2`, `y=2x+1`) names no parameter.
pub fn for_each_short_name_of_pairs(text: &str, mut f: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    for (i, _) in text.match_indices('=') {
        if bytes.get(i + 1) == Some(&b'=') || (i > 0 && bytes[i - 1] == b'=') {
            continue;
        }
        let value = bytes[i + 1..]
            .iter()
            .skip_while(|b| **b == b' ')
            .take_while(|b| !b.is_ascii_whitespace() && !matches!(b, b',' | b';' | b'&'));
        if value
            .clone()
            .any(|b| matches!(b, b'^' | b'*' | b'/' | b'+' | b'<' | b'>' | b'='))
        {
            continue;
        }
        let end = i;
        let mut start = end;
        while start > 0 && bytes[start - 1].is_ascii_alphabetic() {
            start -= 1;
        }
        if start == end
            || (start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || matches!(bytes[start - 1], b'_' | b'.' | b'-')
                    || bytes[start - 1] >= 0x80))
        {
            continue;
        }
        if let Some(term) = short_name(&text[start..end]) {
            f(&term);
        }
    }
}
