//! Adds: pass 1 tokenizes as the analyzer does, and a first add on two threads leaves what one
//! thread does.

use super::*;

#[test]
fn pass1_tokenizes_as_the_analyzer_with_its_caches() {
    use crate::tokenize::Analyzer;
    let texts = [
        "get_weather getWeather get-weather GET_WEATHER",
        "a__b x. .y -z- _private_ a-_b end.",
        "getHTTPResponseCode side1 s3_upload getV2Users HTTP2Server ipv4 2024",
        "Turn the lights off, not on! The files, the FILES.",
        "math.factorial x = 3.14, y = 2 v1.2.3 a.b_c ab--cd",
        "Caf\u{e9} Stra\u{df}e na\u{ef}ve r\u{e9}sum\u{e9} \u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}",
        "",
        "weather weather weather forecast",
    ];
    for field in [
        Field::Description,
        Field::ParamText,
        Field::ParamNames,
        Field::Name,
    ] {
        let mut staged = Staged::default();
        // Each text twice: the second time comes from the caches.
        for text in texts.iter().chain(texts.iter()) {
            staged.begin("x");
            staged.text(field, text);
        }
        let mut pass1 = Pass1::new();
        pass1.tokenize(&staged, usize::MAX, &mut |_| {});
        for (i, text) in texts.iter().chain(texts.iter()).enumerate() {
            let mut want: Vec<(String, u8)> = Vec::new();
            for tok in Analyzer::new().tokenize(text) {
                match want.iter_mut().find(|w| w.0 == tok) {
                    Some(w) => w.1 += 1,
                    None => want.push((tok, 1)),
                }
            }
            let got: Vec<(String, u8)> = pass1
                .terms_of(i)
                .into_iter()
                .map(|(t, tf)| (t, tf[field as usize]))
                .collect();
            assert_eq!(got, want, "{field:?} {text:?}");
            assert_eq!(
                pass1.tools[i].2[field as usize] as usize,
                want.iter().map(|w| w.1 as usize).sum::<usize>()
            );
        }
    }
}

/// Everything an add leaves, compared field by field (bit for bit).
fn assert_same_index(a: &Index, b: &Index) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.sum_len, b.sum_len);
    assert_eq!(a.wide.len(), b.wide.len());
    assert_eq!(a.vocab.len(), b.vocab.len());
    for t in 0..a.vocab.len() as u32 {
        assert_eq!(a.vocab.term(t), b.vocab.term(t));
    }
    assert_eq!(a.postings.len(), b.postings.len());
    for (t, (pa, pb)) in a.postings.iter().zip(&b.postings).enumerate() {
        let (sa, sb) = (pa.as_slice(), pb.as_slice());
        assert_eq!(sa.len(), sb.len(), "term {t}");
        for (x, y) in sa.iter().zip(sb) {
            let (tx, ty) = (tf_of(&a.wide, t as u32, x), tf_of(&b.wide, t as u32, y));
            assert_eq!((x.slot, tx), (y.slot, ty), "term {t}");
        }
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.bounds.tfw), bits(&b.bounds.tfw));
    assert_eq!(
        a.bounds.reference.map(|r| bits(&r)),
        b.bounds.reference.map(|r| bits(&r))
    );
    assert_eq!(a.scaled_lens.len(), b.scaled_lens.len());
    for (x, y) in a.scaled_lens.iter().zip(&b.scaled_lens) {
        assert_eq!(bits(x), bits(y));
    }
    assert_eq!(a.docs.slots(), b.docs.slots());
    for ((sa, da), (sb, db)) in a.docs.iter().zip(b.docs.iter()) {
        assert_eq!(sa, sb);
        assert_eq!(da.name(), db.name());
        assert_eq!(da.decode().0, db.decode().0);
        assert_eq!(da.decode().1, db.decode().1);
        assert_eq!(a.slot_of(da.name()), Some(sa));
        assert_eq!(b.slot_of(db.name()), Some(sb));
    }
    for slot in 0..a.docs.slots() as u32 {
        assert_eq!(a.vectors.to_f32(slot), b.vectors.to_f32(slot));
    }
}

fn add_on_threads(staged: &Staged, one: bool) -> Index {
    crate::index::build::ONE_THREAD.with(|o| o.set(one));
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(staged);
    crate::index::build::ONE_THREAD.with(|o| o.set(false));
    ix
}

#[test]
fn a_first_add_on_two_threads_leaves_what_one_thread_does() {
    let n = crate::index::build::PARALLEL_FIRST_ADD + 3000;
    let mut rng = Rng(0x7f4a_7c15_9e37_79b9);
    let mut tools = skewed_catalog(&mut rng, n, "p");
    // Frequencies of 15 and more (the wide table) in each thread's half of the tools (the
    // first and the last tools), of a term only that tool has and of a common one.
    let wide = |name: &str, word: &str| (name.to_owned(), vec![word; 40].join(" "), Vec::new());
    tools.insert(0, wide("wide_first", "zzwide"));
    tools.push(wide("wide_last", "w1"));
    let mut staged = stage_catalog(&tools);
    // Vectors for most tools, none for some.
    let mut staged_v = Staged::default();
    for (i, (name, desc, params)) in tools.iter().enumerate() {
        staged_v.begin(name);
        staged_v.text(Field::Description, desc);
        for p in params {
            staged_v.text(Field::ParamNames, p);
        }
        let v = [(i % 7) as f32 + 1.0, (i % 3) as f32, 1.0, (i % 11) as f32];
        let v = (i % 5 != 0).then_some(&v[..]);
        staged_v.vector(v, Some(i as u64)).unwrap();
    }
    for s in [&staged, &staged_v] {
        let two = add_on_threads(s, false);
        let one = add_on_threads(s, true);
        let last = (tools.len() - 1) as u32;
        for slot in [0, last] {
            assert!(
                two.wide.keys().any(|&(_, s)| s == slot),
                "a wide posting of {slot}"
            );
        }
        assert_same_index(&two, &one);
        assert_bounds_hold(&two);
        assert_pruning_exact(&two, &random_queries(&mut rng, 60), None);
    }
    // Two tools with one name: the two-thread path gives up, the later tool replaces the
    // earlier one as on one thread.
    staged.begin(&tools[17].0);
    staged.text(Field::Description, "a replacement w1 w2 rare7x");
    let two = add_on_threads(&staged, false);
    let one = add_on_threads(&staged, true);
    assert_eq!(two.len(), n + 2);
    assert_eq!(two.wide.len(), 2, "one wide posting in each half");
    assert_same_index(&two, &one);
    let hits = two.named(two.search_slots(&analyze_query("replacement"), 1, None, None));
    assert_eq!(hits[0].0, tools[17].0);
}
