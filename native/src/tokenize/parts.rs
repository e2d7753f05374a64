//! Steps 3-6 of the recipe for one word: parts at joiners and camelCase humps, lowercased,
//! the whole identifier, letter and digit runs; values and over-long tokens dropped.

use super::words::is_joiner;
use super::{Kind, MAX_PART_LEN, MAX_WHOLE_LEN};

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
pub(super) fn emit_word(
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
