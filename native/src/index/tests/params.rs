//! BM25F parameters: long descriptions scored sublinearly, parameters validated.

use super::*;

#[test]
fn long_descriptions_count_sublinearly() {
    // Same matches, one description 30 times longer: with the default exponent 0.6 the
    // long one keeps more of its score than plain BM25 (exponent 1) leaves it.
    let long = "image classification ".to_owned() + &"filler ".repeat(300);
    let ratio = |e: f32| {
        let mut ix = Index::new(Params {
            length_exponent: [1.0, e, 1.0, 1.0],
            ..Params::default()
        })
        .unwrap();
        let mut staged = Staged::default();
        staged.begin("long_tool");
        staged.text(Field::Description, &long);
        staged.begin("short_tool");
        staged.text(Field::Description, "image classification model");
        for i in 0..8 {
            staged.begin(&format!("other{i}"));
            staged.text(Field::Description, "something else entirely here");
        }
        ix.add_staged(&staged);
        let hits = search(&ix, "image classification", 2);
        assert_eq!(hits[0].0, "short_tool");
        hits[1].1 / hits[0].1
    };
    assert!(
        ratio(0.6) > ratio(1.0) * 2.0,
        "{} {}",
        ratio(0.6),
        ratio(1.0)
    );
}

#[test]
fn params_validated() {
    assert!(Index::new(Params {
        k1: -1.0,
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        b: [0.5, 1.5, 0.5, 0.5],
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        weights: [0.0; NUM_FIELDS],
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        k1: f32::NAN,
        ..Params::default()
    })
    .is_err());
    assert!(Index::new(Params {
        length_exponent: [1.0, 1.5, 1.0, 1.0],
        ..Params::default()
    })
    .is_err());
}
