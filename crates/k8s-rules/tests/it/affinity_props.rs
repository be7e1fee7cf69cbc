//! Node affinity: terms are ORed, requirements inside a term ANDed, `matchFields` pins
//! `metadata.name`, and `Gt`/`Lt` compare integers (never act as `In`).

use std::collections::BTreeMap;

use gantry_k8s_rules::RequiredNodeAffinity;
use k8s_openapi::api::core::v1::PodSpec;
use proptest::prelude::*;
use serde_json::{Value, json};

fn affinity(terms: Value) -> RequiredNodeAffinity {
    let spec: PodSpec =
        serde_json::from_value(json!({"containers": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
        .expect("pod spec");
    let (a, errors) = RequiredNodeAffinity::from_pod_spec(&spec);
    assert!(errors.is_empty(), "{errors:?}");
    a
}

fn cores(n: i64) -> BTreeMap<String, String> {
    BTreeMap::from([("cores".to_string(), n.to_string())])
}

proptest! {
    #[test]
    fn gt_and_lt_are_integer_comparisons(have in -1000i64..1000, bound in 0i64..1000) {
        let term = |op: &str| json!([{"matchExpressions": [
            {"key": "cores", "operator": op, "values": [bound.to_string()]}]}]);
        prop_assert_eq!(affinity(term("Gt")).matches("n", &cores(have)), have > bound);
        prop_assert_eq!(affinity(term("Lt")).matches("n", &cores(have)), have < bound);
    }

    #[test]
    fn match_fields_select_exactly_the_named_node(
        pinned in "[a-z]{1,4}(-[0-9])?", node in "[a-z]{1,4}(-[0-9])?",
    ) {
        let pin = affinity(json!([{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [pinned.clone()]}]}]));
        prop_assert_eq!(pin.matches(&node, &BTreeMap::new()), node == pinned);
        let avoid = affinity(json!([{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": [pinned.clone()]}]}]));
        prop_assert_eq!(avoid.matches(&node, &BTreeMap::new()), node != pinned);
    }

    #[test]
    fn terms_are_ored_and_requirements_anded(have in 0i64..10, a in 0i64..10, b in 0i64..10) {
        let gt = |v: i64| json!({"key": "cores", "operator": "Gt", "values": [v.to_string()]});
        let ored = affinity(json!([{"matchExpressions": [gt(a)]}, {"matchExpressions": [gt(b)]}]));
        let anded = affinity(json!([{"matchExpressions": [gt(a), gt(b)]}]));
        prop_assert_eq!(ored.matches("n", &cores(have)), have > a || have > b);
        prop_assert_eq!(anded.matches("n", &cores(have)), have > a && have > b);
    }
}
