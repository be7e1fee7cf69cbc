//! Which rendered objects need writing, and the kinds the operator knows how to address.
//!
//! An object is written (server-side apply, forced, one field manager) only when it is not
//! [`up_to_date`]: the stored copy must carry the hash of the rendered object (catches fields
//! the render dropped) and contain every rendered field with the rendered value (catches
//! hand edits). A reconcile that finds every object up to date writes nothing.

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// Annotation holding the hash of the rendered object last applied (upstream's key).
pub const ANNOTATION_APPLIED_HASH: &str = gantry_api::names::ANNOTATION_LAST_APPLIED_HASH;

/// A kind the operator reads and writes: how to address it.
#[derive(Clone, Debug)]
pub struct KindInfo {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Kinds the render emits and the reconciler watches (by `LABEL_STATE`), so that deleting or
/// editing one triggers a reconcile. (group, version, kind, plural, namespaced)
pub const WATCHED: &[(&str, &str, &str, &str, bool)] = &[
    ("apps", "v1", "DaemonSet", "daemonsets", true),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    ("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", false),
];

/// Kinds the render may emit that need a CRD (not watched; read on demand).
pub const OPTIONAL: &[(&str, &str, &str, &str, bool)] = &[
    (
        "monitoring.coreos.com",
        "v1",
        "ServiceMonitor",
        "servicemonitors",
        true,
    ),
    (
        "monitoring.coreos.com",
        "v1",
        "PrometheusRule",
        "prometheusrules",
        true,
    ),
    (
        "security.openshift.io",
        "v1",
        "SecurityContextConstraints",
        "securitycontextconstraints",
        false,
    ),
];

fn info(row: &(&str, &str, &str, &str, bool)) -> KindInfo {
    let (group, version, kind, plural, namespaced) = *row;
    KindInfo {
        resource: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            plural,
        ),
        namespaced,
    }
}

/// The watched kinds.
pub fn watched() -> Vec<KindInfo> {
    WATCHED.iter().map(info).collect()
}

/// How to address `apiVersion`/`kind`, when it is a kind the operator knows.
pub fn kind_info(api_version: &str, kind: &str) -> Option<KindInfo> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    WATCHED
        .iter()
        .chain(OPTIONAL)
        .find(|r| r.0 == group && r.1 == version && r.2 == kind)
        .map(info)
}

/// Identity of a rendered object: (apiVersion, kind, namespace, name).
pub type ObjectKey = (String, String, String, String);

/// The key of a manifest; `None` when it lacks apiVersion, kind or name.
pub fn key_of(obj: &Value) -> Option<ObjectKey> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_string);
    Some((
        s("/apiVersion")?,
        s("/kind")?,
        s("/metadata/namespace").unwrap_or_default(),
        s("/metadata/name")?,
    ))
}

/// FNV-1a of the manifest's JSON text, hex. The render is deterministic, so equal objects
/// hash equal.
pub fn hash(obj: &Value) -> String {
    let text = obj.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The manifest with [`ANNOTATION_APPLIED_HASH`] set to the hash of the manifest as rendered.
pub fn stamp(mut obj: Value) -> Value {
    let h = hash(&obj);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(a) = ann.as_object_mut() {
            a.insert(ANNOTATION_APPLIED_HASH.into(), Value::String(h));
        }
    }
    obj
}

/// Whether `want` (a stamped manifest) is already what `have` (the stored object) says.
pub fn up_to_date(want: &Value, have: &Value) -> bool {
    let h = |v: &Value| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(ANNOTATION_APPLIED_HASH))
            .cloned()
    };
    h(want).is_some() && h(want) == h(have) && contains(want, have)
}

/// Whether every field of `want` is in `have` with the same value. Null and empty
/// objects/lists in `want` match an absent field (the server drops them).
pub fn contains(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, wv)| match h.get(k) {
            Some(hv) => contains(wv, hv),
            None => is_empty(wv),
        }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| contains(a, b))
        }
        (w, Value::Null) => is_empty(w),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (w, h) => w == h,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator",
                "labels": {"gantry.dev/operand-state": "state-device-plugin"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "args": []}],
                "securityContext": {}}}}})
    }

    /// What a server returns after storing `want`: defaults, server fields, other managers.
    fn stored(want: &Value) -> Value {
        let mut have = want.clone();
        have["metadata"]["uid"] = json!("u1");
        have["metadata"]["resourceVersion"] = json!("42");
        have["metadata"]["labels"]["other"] = json!("x");
        have["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
            json!("IfNotPresent");
        have["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("args");
        have["status"] = json!({"numberReady": 3});
        have
    }

    #[test]
    fn stored_copy_with_server_fields_is_up_to_date() {
        let want = stamp(ds());
        assert!(up_to_date(&want, &stored(&want)));
    }

    #[test]
    fn hand_edit_or_render_change_needs_apply() {
        let want = stamp(ds());
        let mut edited = stored(&want);
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("evil");
        assert!(!up_to_date(&want, &edited));
        let mut unlabelled = stored(&want);
        unlabelled["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("gantry.dev/operand-state");
        assert!(!up_to_date(&want, &unlabelled));
        // The render dropped a field: same remaining fields, different hash.
        let mut smaller = ds();
        smaller["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("image");
        assert!(!up_to_date(&stamp(smaller), &stored(&want)));
        // Never applied by us (no hash).
        assert!(!up_to_date(&want, &ds()));
    }

    #[test]
    fn keys_and_kinds() {
        assert_eq!(
            key_of(&ds()),
            Some((
                "apps/v1".into(),
                "DaemonSet".into(),
                "gpu-operator".into(),
                "nvidia-device-plugin-daemonset".into()
            ))
        );
        assert!(key_of(&json!({"kind": "X"})).is_none());
        let k = kind_info("rbac.authorization.k8s.io/v1", "ClusterRole").unwrap();
        assert_eq!(k.resource.plural, "clusterroles");
        assert!(!k.namespaced);
        assert_eq!(
            kind_info("v1", "ConfigMap").unwrap().resource.plural,
            "configmaps"
        );
        assert!(kind_info("monitoring.coreos.com/v1", "ServiceMonitor").is_some());
        assert!(kind_info("v1", "Nonsense").is_none());
    }
}
