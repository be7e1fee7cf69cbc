//! Label selectors: what the docs promise for each operator, and that printing a selector and
//! parsing it back selects the same label sets.

use std::collections::BTreeMap;

use gantry_k8s_rules::{Operator, Requirement, Selector};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("app".to_string()),
        Just("tier".to_string()),
        Just("nvidia.com/gpu.count".to_string()),
        "[a-z][a-z0-9]{0,4}",
    ]
}
fn value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9]{1,3}", "-?[0-9]{1,3}"]
}
fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(key(), value(), 0..4)
}
fn op() -> impl Strategy<Value = Operator> {
    prop_oneof![
        Just(Operator::Equals),
        Just(Operator::NotEquals),
        Just(Operator::In),
        Just(Operator::NotIn),
        Just(Operator::Exists),
        Just(Operator::DoesNotExist),
        Just(Operator::GreaterThan),
        Just(Operator::LessThan),
    ]
}
fn requirement() -> impl Strategy<Value = Requirement> {
    (key(), op(), proptest::collection::vec(value(), 1..3)).prop_filter_map(
        "operator needs a fitting value count",
        |(k, op, vals)| {
            let vals = match op {
                Operator::Exists | Operator::DoesNotExist => vec![],
                Operator::Equals | Operator::NotEquals => vals[..1].to_vec(),
                Operator::GreaterThan | Operator::LessThan => {
                    vec![vals[0].parse::<i64>().ok()?.to_string()]
                }
                _ => vals,
            };
            Requirement::new(&k, op, &vals).ok()
        },
    )
}

/// The documented meaning of each operator, written independently of the crate.
fn documented(r: &Requirement, labels: &BTreeMap<String, String>) -> bool {
    let v = labels.get(r.key());
    let vals = r.values();
    match r.operator() {
        Operator::Equals | Operator::In => v.is_some_and(|v| vals.contains(v)),
        Operator::NotEquals | Operator::NotIn => v.is_none_or(|v| !vals.contains(v)),
        Operator::Exists => v.is_some(),
        Operator::DoesNotExist => v.is_none(),
        Operator::GreaterThan => v
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|n| n > vals[0].parse::<i64>().unwrap_or(i64::MAX)),
        Operator::LessThan => v
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|n| n < vals[0].parse::<i64>().unwrap_or(i64::MIN)),
    }
}

proptest! {
    #[test]
    fn a_selector_is_the_and_of_its_requirements(
        reqs in proptest::collection::vec(requirement(), 0..4),
        l in labels(),
    ) {
        let sel = reqs.iter().cloned().fold(Selector::everything(), Selector::and);
        prop_assert_eq!(sel.matches(&l), reqs.iter().all(|r| documented(r, &l)));
    }

    #[test]
    fn printed_selectors_parse_back_to_the_same_meaning(
        reqs in proptest::collection::vec(requirement(), 0..4),
        l in labels(),
    ) {
        let sel = reqs.iter().cloned().fold(Selector::everything(), Selector::and);
        let text = sel.to_string();
        let back = Selector::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.matches(&l), sel.matches(&l), "{}", text);
    }

    #[test]
    fn the_parser_never_panics_and_errors_name_the_input(s in "[ a-z0-9=!(),<>.\\-/]{0,16}") {
        if let Err(e) = Selector::parse(&s) {
            let shown = format!("{s:?}");
            prop_assert!(e.to_string().contains(&shown));
        }
    }

    #[test]
    fn a_negated_key_with_anything_after_it_is_rejected(
        k in "[a-z]{1,5}", v in "[a-z]{1,5}", op in prop_oneof![Just("="), Just("=="), Just("!=")],
    ) {
        let text = format!("!{k}{op}{v}");
        prop_assert!(Selector::parse(&text).is_err(), "{}", text);
    }
}
