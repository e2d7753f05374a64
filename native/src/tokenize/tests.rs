//! The tokenizer's unit tests.

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

/// The words of an ASCII text by the recipe, byte by byte (the reference for the splitter).
fn words_by_the_recipe(text: &[u8]) -> Vec<Vec<u8>> {
    let (mut words, mut word, mut joiner) = (Vec::new(), Vec::new(), None);
    for &b in text {
        if b.is_ascii_alphanumeric() {
            if let Some(j) = joiner.take() {
                word.push(j);
            }
            word.push(b);
        } else if matches!(b, b'_' | b'.' | b'-') && !word.is_empty() {
            joiner = Some(b);
        } else {
            joiner = None;
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[test]
fn ascii_words_split_as_the_recipe_says() {
    // Every text of up to 6 bytes over an alphabet of each class, then longer random ones.
    let alphabet = b"a1_.- ,";
    let mut texts: Vec<Vec<u8>> = vec![Vec::new()];
    for len in 1..=6 {
        let mut t = vec![0usize; len];
        loop {
            texts.push(t.iter().map(|&i| alphabet[i]).collect());
            let Some(k) = (0..len).rev().find(|&k| t[k] + 1 < alphabet.len()) else {
                break;
            };
            t[k] += 1;
            t[k + 1..].iter_mut().for_each(|x| *x = 0);
        }
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let len = (x % 40) as usize;
        texts.push(
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    alphabet[(x % alphabet.len() as u64) as usize]
                })
                .collect(),
        );
    }
    let mut buf = Vec::new();
    for text in &texts {
        let mut got = Vec::new();
        split_ascii_words(text, &mut buf, |w| got.push(w.to_vec()));
        assert_eq!(
            got,
            words_by_the_recipe(text),
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn short_parameter_names_in_pairs() {
    assert_eq!(toks("q=Paris"), ["pari", "q"]);
    assert_eq!(
        toks("search with q=Paris&lang=fr"),
        ["search", "pari", "lang", "fr", "q"]
    );
    assert_eq!(
        toks("to=ann x=3 n=-2, from=Oslo"),
        ["ann", "oslo", "to", "x", "n", "from"]
    );
    // Not pairs: spaces before `=`, comparisons, equations, a longer word's tail, joined words.
    assert!(toks("x = 3.14, y = 2").is_empty());
    assert!(toks("x==3 x<=3 y=x^2 y=2x+1 3x=1")
        .iter()
        .all(|t| t.len() > 1));
    assert_eq!(toks("my_q=2 e.x=1"), ["myq", "ex"]);
    assert_eq!(short_name("Q"), Some("q".to_owned()));
    assert_eq!(short_name("from"), Some("from".to_owned()));
    assert_eq!(short_name("city"), None);
    assert_eq!(short_name("x1"), None);
    assert_eq!(short_name(""), None);
}
