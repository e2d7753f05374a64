//! Ranking: names and parameters, incremental adds against a fresh index, ties, allow masks.

use super::*;

#[test]
fn ranks_by_name_and_params() {
    let mut ix = Index::new(Params::default()).unwrap();
    add(&mut ix, catalog());
    assert_eq!(ix.len(), 4);
    let hits = search(&ix, "weather in celsius", 5);
    assert_eq!(hits[0].0, "get_weather");
    assert_eq!(hits.len(), 2);
    assert!(hits[0].1 > hits[1].1);
    assert_eq!(search(&ix, "email", 5)[0].0, "send_email");
    assert!(search(&ix, "", 5).is_empty());
    assert!(search(&ix, "the of and", 5).is_empty());
    assert!(search(&ix, "weather", 0).is_empty());
}

#[test]
fn incremental_equals_fresh() {
    let mut inc = Index::new(Params::default()).unwrap();
    for t in catalog() {
        add(&mut inc, [t]);
    }
    add(
        &mut inc,
        [tool("zzz", "temporary weather thing", json!({}))],
    );
    assert!(inc.remove("send_email"));
    assert!(!inc.remove("send_email"));
    add(
        &mut inc,
        [tool(
            "send_email",
            "Send an email message",
            json!({"properties": {"to": {}}}),
        )],
    );
    assert!(inc.remove("zzz"));

    let mut fresh = Index::new(Params::default()).unwrap();
    add(&mut fresh, catalog());
    for q in [
        "weather",
        "send email to",
        "files directory",
        "celsius alerts",
    ] {
        assert_eq!(search(&inc, q, 10), search(&fresh, q, 10), "query {q}");
    }
    assert_eq!(inc.num_postings(), fresh.num_postings());
    assert_eq!(inc.sum_len, fresh.sum_len);
}

#[test]
fn ties_break_by_name_and_heap_is_bounded() {
    let mut ix = Index::new(Params::default()).unwrap();
    for name in ["d_tool", "b_tool", "a_tool", "c_tool", "e_tool"] {
        add(&mut ix, [tool(name, "shared words", json!({}))]);
    }
    let hits = search(&ix, "shared words", 3);
    let names: Vec<_> = hits.iter().map(|h| h.0.as_str()).collect();
    assert_eq!(names, ["a_tool", "b_tool", "c_tool"]);
    let all = search(&ix, "shared", 100);
    assert_eq!(all.len(), 5);
    assert_eq!(all[4].0, "e_tool");
}

#[test]
fn allow_mask_filters() {
    let mut ix = Index::new(Params::default()).unwrap();
    add(&mut ix, catalog());
    let mask = ix.allow_mask(["weather_alerts", "unknown"]);
    let hits = ix.search_tokens(&analyze_query("weather"), 5, Some(&mask));
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].0, "weather_alerts");
    let none = ix.allow_mask(std::iter::empty());
    assert!(ix
        .search_tokens(&analyze_query("weather"), 5, Some(&none))
        .is_empty());
}
