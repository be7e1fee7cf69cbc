//! Whether a pod template may run on a node, pure: nodeSelector, required node affinity,
//! and taints (NoSchedule/NoExecute) against tolerations.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, PodSpec, Taint, Toleration};

fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn requirement(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// nodeSelector and `requiredDuringSchedulingIgnoredDuringExecution` node affinity.
pub fn node_matches(spec: &PodSpec, node: &Node) -> bool {
    let l = labels(node);
    if let Some(sel) = &spec.node_selector
        && !sel.iter().all(|(k, v)| l.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let Some(required) = required else {
        return true;
    };
    let name = node.metadata.name.as_deref();
    // Terms are ORed; the requirements inside a term are ANDed. An empty term matches nothing.
    required.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|r| requirement(r, l.get(&r.key).map(String::as_str)))
            && fields
                .iter()
                .all(|r| r.key == "metadata.name" && requirement(r, name))
    })
}

/// Whether `t` tolerates `taint`.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    match t.key.as_deref().filter(|k| !k.is_empty()) {
        // An empty key with Exists tolerates everything.
        None => t.operator.as_deref() == Some("Exists"),
        Some(k) if k != taint.key => false,
        Some(_) => match t.operator.as_deref().unwrap_or("Equal") {
            "Exists" => true,
            _ => {
                t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
            }
        },
    }
}

/// Every NoSchedule / NoExecute taint of the node is tolerated.
pub fn taints_tolerated(tolerations: &[Toleration], node: &Node) -> bool {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}}),
        )
        .unwrap()
    }
    fn spec(v: serde_json::Value) -> PodSpec {
        let mut v = v;
        v["containers"] = json!([]);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn selectors_and_affinity() {
        let n = node(
            json!({"gpu": "true", "zone": "a", "cores": "64"}),
            json!([]),
        );
        assert!(node_matches(&spec(json!({})), &n));
        assert!(node_matches(
            &spec(json!({"nodeSelector": {"gpu": "true"}})),
            &n
        ));
        assert!(!node_matches(
            &spec(json!({"nodeSelector": {"gpu": "false"}})),
            &n
        ));
        let aff = |terms: serde_json::Value| {
            spec(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
        };
        assert!(node_matches(
            &aff(
                json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}])
            ),
            &n
        ));
        assert!(!node_matches(
            &aff(
                json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}])
            ),
            &n
        ));
        assert!(node_matches(
            &aff(json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}, {"key": "cores", "operator": "Gt", "values": ["32"]}]}
            ])),
            &n
        ));
        assert!(!node_matches(
            &aff(json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}])),
            &n
        ));
        assert!(node_matches(
            &aff(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
            ),
            &n
        ));
        assert!(!node_matches(
            &aff(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])
            ),
            &n
        ));
        assert!(!node_matches(&aff(json!([{}])), &n));
    }

    #[test]
    fn taints_and_tolerations() {
        let n = node(
            json!({}),
            json!([
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"}
            ]),
        );
        let tol = |v: serde_json::Value| -> Vec<Toleration> { serde_json::from_value(v).unwrap() };
        assert!(!taints_tolerated(&[], &n));
        assert!(taints_tolerated(
            &tol(json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])),
            &n
        ));
        assert!(taints_tolerated(
            &tol(json!([{"key": "nvidia.com/gpu", "operator": "Exists"}])),
            &n
        ));
        assert!(taints_tolerated(&tol(json!([{"operator": "Exists"}])), &n));
        assert!(!taints_tolerated(
            &tol(json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}])),
            &n
        ));
        assert!(!taints_tolerated(
            &tol(json!([{"key": "nvidia.com/gpu", "value": "x"}])),
            &n
        ));
        let n2 = node(
            json!({}),
            json!([{"key": "k", "value": "v", "effect": "NoExecute"}]),
        );
        assert!(taints_tolerated(
            &tol(json!([{"key": "k", "operator": "Equal", "value": "v"}])),
            &n2
        ));
        assert!(!taints_tolerated(
            &tol(json!([{"key": "k", "operator": "Equal", "value": "w"}])),
            &n2
        ));
    }
}
