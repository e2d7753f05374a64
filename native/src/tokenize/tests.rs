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
