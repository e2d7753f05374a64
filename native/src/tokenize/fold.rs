//! Step 1 of the recipe: every character folded to ASCII where a decomposition exists.

use unicode_normalization::char::{decompose_compatible, is_combining_mark};

/// Append the ASCII folding of `c` to `out` (keeping case; other scripts pass through).
pub(super) fn fold_char(c: char, out: &mut String) {
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
