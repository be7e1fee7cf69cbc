//! `labelSelector` / `fieldSelector` on JSON objects: parsing and matching are the shared
//! Kubernetes rules (`gantry_k8s_rules`); malformed input answers 400 BadRequest with the
//! parser's reason, as the real API server does, instead of matching everything or nothing.

use gantry_k8s_rules::{FieldSelector as Fields, Selector};
use serde_json::Value;

use super::status::ApiError;
use crate::store::Listed;

/// Whether a listed object passes both selectors, decided on its metadata where they read
/// only that (labels, `metadata.name`, `metadata.namespace`), else on the decoded object.
pub fn selected(labels: &LabelSelector, fields: &FieldSelector, o: &Listed) -> bool {
    // An older version kept as JSON is decoded only if a selector reads it.
    if !labels.is_empty() && !labels.matches(&o.stub()) {
        return false;
    }
    if fields.is_empty() {
        return true;
    }
    if fields.on_stub_only() {
        return fields.matches(&o.stub());
    }
    o.value().is_some_and(|v| fields.matches(&v))
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Selector);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        Selector::parse(s)
            .map(Self)
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        self.0
            .matches_fn(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }
}

/// A parsed field selector on dotted paths (`metadata.name`, `spec.nodeName`,
/// `status.phase`); empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Fields);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        Fields::parse(s)
            .map(Self)
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `metadata.name=X` requirement, if any (used by single-object watches).
    pub fn name(&self) -> Option<&str> {
        self.0.required_value("metadata.name")
    }

    /// The `spec.nodeName=X` requirement, if any (a kubelet's watch and list of its pods).
    pub fn node_name(&self) -> Option<&str> {
        self.0.required_value("spec.nodeName")
    }

    /// Every requirement reads `metadata.…` or `spec.nodeName`: the stored object's stub
    /// decides it, nothing decoded (see `store::Entry`).
    pub fn on_stub_only(&self) -> bool {
        self.0
            .requirements()
            .iter()
            .all(|r| r.field.starts_with("metadata.") || r.field == "spec.nodeName")
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.matches_fn(|path| {
            let v = path.split('.').try_fold(obj, |cur, seg| cur.get(seg))?;
            match v {
                Value::String(s) => Some(s.clone()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_operators() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let m = |s: &str| LabelSelector::parse(s).expect("parses").matches(&obj);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db),tier notin (back)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m(""));
        assert!(LabelSelector::parse("").expect("empty").matches(&json!({})));
    }

    #[test]
    fn malformed_selectors_are_bad_requests() {
        for bad in ["!app=web", "!!!(((", "app in web", "bad key=x", "a=-b"] {
            let e = LabelSelector::parse(bad).expect_err(bad);
            assert_eq!(e.code, 400, "{bad}");
            assert!(e.message.contains(&format!("{bad:?}")), "{}", e.message);
        }
        let e = FieldSelector::parse("nonsense").expect_err("no operator");
        assert_eq!(e.code, 400);
    }

    #[test]
    fn field_paths() {
        let obj = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let m = |s: &str| FieldSelector::parse(s).expect("parses").matches(&obj);
        assert!(m("metadata.name=p,metadata.namespace=ns"));
        assert!(m("spec.nodeName!=n2"));
        assert!(m("status.phase==Running"));
        assert!(m("spec.schedulerName="));
        assert!(!m("spec.nodeName="));
        assert_eq!(
            FieldSelector::parse("metadata.name=p")
                .expect("parses")
                .name(),
            Some("p")
        );
    }
}
