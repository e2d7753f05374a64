//! Storage: postings lists, tool records and their compaction, names split in two.

use super::*;
use crate::index::docs::Docs;
use crate::index::postings::{Posting, PostingList};

#[test]
fn posting_lists_keep_slot_order_inline_or_not() {
    assert_eq!(
        std::mem::size_of::<PostingList>(),
        std::mem::size_of::<Vec<Posting>>()
    );
    let post = |slot| Posting::new(slot, [1, 0, 0, 0]).0;
    let slots = |l: &PostingList| l.as_slice().iter().map(|p| p.slot).collect::<Vec<_>>();
    let mut list = PostingList::default();
    list.insert(post(7));
    assert!(matches!(list, PostingList::One(_)) && list.heap_bytes() == 0);
    for s in [3, 9, 1, 8] {
        list.insert(post(s));
    }
    assert_eq!(slots(&list), [1, 3, 7, 8, 9]);
    for s in [3, 42, 9, 1, 8] {
        list.remove(s);
    }
    assert_eq!(slots(&list), [7]);
    list.remove(7);
    assert!(list.is_empty() && list.heap_bytes() == 0);
    let mut one = PostingList::default();
    one.reserve_exact(1);
    one.insert(post(5));
    assert!(matches!(one, PostingList::One(_)));
    one.reserve_exact(3);
    assert!(one.heap_bytes() >= 4 * std::mem::size_of::<Posting>());
    for s in [6, 7, 8] {
        one.insert(post(s));
    }
    assert_eq!(slots(&one), [5, 6, 7, 8]);
}

#[test]
fn records_round_trip_and_compact() {
    let mut docs = Docs::default();
    let mut ids = vec![5, 0, 127, 128, 16_384, 70_000, u32::MAX - 1, 3];
    let a = docs.push_free_slot();
    docs.set(a, "caf\u{e9}.tool", [3, 0, 300, u32::MAX], &mut ids.clone());
    ids.sort_unstable();
    assert_eq!(docs.get(a).unwrap().name(), "caf\u{e9}.tool");
    let (_, _, len) = docs.get(a).unwrap().decode();
    assert!(len < "caf\u{e9}.tool".len() + 4 * 5 + ids.len() * 4);
    // Many replaced records: the arena compacts and every live record survives.
    let slots: Vec<u32> = (0..100).map(|_| docs.push_free_slot()).collect();
    for round in 0..50u32 {
        for &slot in &slots {
            if round > 0 {
                docs.take(slot).unwrap();
            }
            let name = format!("tool{slot}-{round}");
            docs.set(slot, &name, [round, 1, 2, 3], &mut [slot, round + 1000]);
        }
    }
    assert!(docs.bytes.len() <= 2 * 100 * 40 + (1 << 16) + 100);
    for &slot in &slots {
        let doc = docs.get(slot).unwrap();
        assert_eq!(doc.name(), format!("tool{slot}-49"));
        let (lens, terms, _) = doc.decode();
        assert_eq!(lens, [49, 1, 2, 3]);
        assert_eq!(terms, vec![slot, 1049]);
    }
    let (lens, terms) = docs.take(a).unwrap();
    assert_eq!((lens, terms), ([3, 0, 300, u32::MAX], ids));
    assert!(docs.get(a).is_none() && docs.take(a).is_none());
    assert_eq!(docs.iter().count(), 100);
}

#[test]
fn names_split_into_namespace_and_last_segment() {
    assert_eq!(split_name("math.factorial"), (Some("math"), "factorial"));
    assert_eq!(split_name("get_weather"), (None, "get_weather"));
    assert_eq!(split_name("org/model-name"), (Some("org"), "model-name"));
    assert_eq!(
        split_name("hub.org/model:v2"),
        (Some("hub.org/model"), "v2")
    );
    assert_eq!(split_name("trailing."), (None, "trailing."));
    assert_eq!(split_name(".hidden"), (None, ".hidden"));
    assert_eq!(split_name("a..b"), (Some("a."), "b"));
    let staged = stage([tool("math.factorial", "n!", json!({}))]);
    let texts: Vec<_> = staged.texts().collect();
    assert_eq!(
        texts,
        [
            (Field::Name, "factorial"),
            (Field::ParamText, "math"),
            (Field::Description, "n!")
        ]
    );
    let mut ix = Index::new(Params::default()).unwrap();
    ix.add_staged(&staged);
    assert!(ix.contains("math.factorial"));
    assert_eq!(search(&ix, "math", 1)[0].0, "math.factorial");
}
