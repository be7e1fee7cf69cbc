//! Required node affinity as kube-scheduler evaluates it (component-helpers `nodeaffinity`):
//! `spec.nodeSelector` AND `requiredDuringSchedulingIgnoredDuringExecution`, whose terms are
//! ORed and whose `matchExpressions` and `matchFields` inside a term are ANDed.
//!
//! Exactly as upstream: a term with neither expressions nor fields selects nothing and is
//! dropped; a required affinity whose terms are all dropped (or absent) matches no node; a
//! term with an invalid requirement never matches, but the other terms still may. The only
//! node field is `metadata.name`, and `matchFields` takes `In`/`NotIn` with one value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use crate::fields::FieldRequirement;
use crate::selector::{Operator, Requirement};

/// A term that cannot be used, naming where it is and what is wrong; the term matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nodeSelectorTerms[{term}].{path}: {reason}")]
pub struct AffinityError {
    pub term: usize,
    /// `matchExpressions[0]`, `matchFields[1].values` ...
    pub path: String,
    pub reason: String,
}

/// One term: all of its label and field requirements hold.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<Requirement>,
    pub match_fields: Vec<FieldRequirement>,
}

impl NodeSelectorTerm {
    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.match_expressions
            .iter()
            .all(|r| r.matches_value(labels.get(r.key()).map(String::as_str)))
            && self
                .match_fields
                .iter()
                .all(|f| f.matches_value(node_field(node_name, &f.field)))
    }
}

/// The fields a node selector term may read: only `metadata.name` (`extractNodeFields`).
fn node_field<'a>(node_name: &'a str, field: &str) -> &'a str {
    if field == "metadata.name" {
        node_name
    } else {
        ""
    }
}

/// Usable terms, ORed. No usable term: no node matches.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct NodeSelector {
    pub terms: Vec<NodeSelectorTerm>,
}

fn node_operator(op: &str) -> Option<Operator> {
    Some(match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::GreaterThan,
        "Lt" => Operator::LessThan,
        _ => return None,
    })
}

fn term(i: usize, t: &core::NodeSelectorTerm) -> Result<NodeSelectorTerm, AffinityError> {
    let err = |path: String, reason: String| AffinityError {
        term: i,
        path,
        reason,
    };
    let mut out = NodeSelectorTerm::default();
    for (j, e) in t.match_expressions.iter().flatten().enumerate() {
        let path = format!("matchExpressions[{j}]");
        let op = node_operator(&e.operator).ok_or_else(|| {
            err(
                format!("{path}.operator"),
                format!(
                    "unsupported operator {:?} (In, NotIn, Exists, DoesNotExist, Gt, Lt)",
                    e.operator
                ),
            )
        })?;
        let values = e.values.as_deref().unwrap_or_default();
        out.match_expressions
            .push(Requirement::new(&e.key, op, values).map_err(|r| err(path, r))?);
    }
    for (j, f) in t.match_fields.iter().flatten().enumerate() {
        let path = format!("matchFields[{j}]");
        let equal = match f.operator.as_str() {
            "In" => true,
            "NotIn" => false,
            other => {
                return Err(err(
                    format!("{path}.operator"),
                    format!("unsupported operator {other:?} for a node field (In, NotIn)"),
                ));
            }
        };
        let values = f.values.as_deref().unwrap_or_default();
        let [value] = values else {
            return Err(err(
                format!("{path}.values"),
                format!("must have one element, got {}", values.len()),
            ));
        };
        out.match_fields.push(FieldRequirement {
            field: f.key.clone(),
            equal,
            value: value.clone(),
        });
    }
    Ok(out)
}

impl NodeSelector {
    /// Convert the API form. Empty terms are dropped silently (upstream: "nil or empty term
    /// selects no objects"); invalid terms are dropped and reported.
    pub fn from_k8s(ns: &core::NodeSelector) -> (NodeSelector, Vec<AffinityError>) {
        let mut terms = Vec::new();
        let mut errors = Vec::new();
        for (i, t) in ns.node_selector_terms.iter().enumerate() {
            let empty = t.match_expressions.as_ref().is_none_or(Vec::is_empty)
                && t.match_fields.as_ref().is_none_or(Vec::is_empty);
            if empty {
                continue;
            }
            match term(i, t) {
                Ok(t) => terms.push(t),
                Err(e) => errors.push(e),
            }
        }
        (NodeSelector { terms }, errors)
    }

    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().any(|t| t.matches(node_name, labels))
    }
}

/// A pod's hard placement constraint on nodes: `nodeSelector` and required node affinity.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct RequiredNodeAffinity {
    /// Labels the node must carry with exactly these values.
    pub node_selector: BTreeMap<String, String>,
    /// `None`: no required node affinity (every node passes this part).
    pub affinity: Option<NodeSelector>,
}

impl RequiredNodeAffinity {
    /// From a pod spec (`GetRequiredNodeAffinity`), with the problems of terms that can never match.
    pub fn from_pod_spec(spec: &core::PodSpec) -> (RequiredNodeAffinity, Vec<AffinityError>) {
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        let (affinity, errors) = match required.map(NodeSelector::from_k8s) {
            Some((s, e)) => (Some(s), e),
            None => (None, Vec::new()),
        };
        let node_selector = spec.node_selector.clone().unwrap_or_default();
        (
            RequiredNodeAffinity {
                node_selector,
                affinity,
            },
            errors,
        )
    }

    /// Whether the node passes `nodeSelector`.
    pub fn node_selector_matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }

    /// Whether the node passes the required node affinity.
    pub fn affinity_matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.affinity
            .as_ref()
            .is_none_or(|a| a.matches(node_name, labels))
    }

    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector_matches(labels) && self.affinity_matches(node_name, labels)
    }

    /// Whether this constrains nothing.
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.affinity.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> core::PodSpec {
        let mut v = v;
        v["containers"] = json!([]);
        serde_json::from_value(v).expect("pod spec")
    }
    fn aff(terms: serde_json::Value) -> (RequiredNodeAffinity, Vec<AffinityError>) {
        RequiredNodeAffinity::from_pod_spec(&spec(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})))
    }
    fn labels() -> BTreeMap<String, String> {
        [("gpu", "true"), ("zone", "a"), ("cores", "64")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn on_n1(terms: serde_json::Value) -> bool {
        let (a, errors) = aff(terms);
        assert!(errors.is_empty(), "{errors:?}");
        a.matches("n1", &labels())
    }

    #[test]
    fn node_selector_and_expressions() {
        let l = labels();
        let (none, _) = RequiredNodeAffinity::from_pod_spec(&spec(json!({})));
        assert!(none.is_empty() && none.matches("n1", &l));
        let (sel, _) =
            RequiredNodeAffinity::from_pod_spec(&spec(json!({"nodeSelector": {"gpu": "false"}})));
        assert!(!sel.matches("n1", &l));
        assert!(on_n1(
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}])
        ));
        assert!(!on_n1(
            json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}])
        ));
        assert!(on_n1(json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
        ])));
        assert!(!on_n1(
            json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}])
        ));
    }

    #[test]
    fn gt_and_lt_compare_integers() {
        let gt = |v: &str| json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": [v]}]}]);
        let lt = |v: &str| json!([{"matchExpressions": [{"key": "cores", "operator": "Lt", "values": [v]}]}]);
        assert!(on_n1(gt("32")));
        assert!(!on_n1(gt("64")));
        assert!(!on_n1(gt("100")), "Gt is not In: 64 > 100 is false");
        assert!(on_n1(lt("65")));
        assert!(!on_n1(lt("64")));
        let (a, errors) = aff(gt("-1"));
        assert!(
            !a.matches("n1", &labels()),
            "a negative bound is not a label value upstream"
        );
        assert_eq!(errors.len(), 1);
        let absent =
            json!([{"matchExpressions": [{"key": "mem", "operator": "Lt", "values": ["9"]}]}]);
        assert!(!on_n1(absent), "Lt on an absent label is false");
        let non_int =
            json!([{"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]}]);
        assert!(!on_n1(non_int), "Gt on a non-integer label is false");
        let (a, errors) = aff(
            json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["many"]}]}]),
        );
        assert!(!a.matches("n1", &labels()));
        assert!(
            errors[0].to_string().contains("must be an integer"),
            "{errors:?}"
        );
    }

    #[test]
    fn match_fields_pin_the_node_name() {
        let pin = |op: &str, name: &str| json!([{"matchFields": [{"key": "metadata.name", "operator": op, "values": [name]}]}]);
        assert!(on_n1(pin("In", "n1")));
        assert!(
            !on_n1(pin("In", "cpu-2")),
            "a matchFields-only term is not empty"
        );
        assert!(on_n1(pin("NotIn", "cpu-2")));
        assert!(!on_n1(pin("NotIn", "n1")));
        // Fields and expressions in one term are ANDed.
        assert!(!on_n1(json!([{
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        }])));
        for bad in [
            json!([{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}]),
        ] {
            let (a, errors) = aff(bad);
            assert!(!a.matches("n1", &labels()));
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0]
                    .to_string()
                    .starts_with("nodeSelectorTerms[0].matchFields[0]")
            );
        }
    }

    #[test]
    fn empty_terms_and_lists_match_nothing() {
        assert!(!on_n1(json!([])), "no terms: nothing");
        assert!(!on_n1(json!([{}])), "an empty term: nothing");
        assert!(!on_n1(json!([{"matchExpressions": [], "matchFields": []}])));
        assert!(on_n1(
            json!([{}, {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}])
        ));
        // An invalid term does not spoil a valid one.
        let (a, errors) = aff(json!([
            {"matchExpressions": [{"key": "gpu", "operator": "Near"}]},
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
        ]));
        assert!(a.matches("n1", &labels()));
        assert!(errors[0].to_string().contains("\"Near\""), "{errors:?}");
    }
}
