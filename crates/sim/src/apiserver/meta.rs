//! Object metadata every verb shares: the timestamp format, the finalizers deletes set and
//! the garbage collector clears, and comparing two objects while ignoring what the server
//! sets on each write.

use serde_json::Value;

/// Finalizer of an owner deleted with `propagationPolicy: Foreground`.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer of an owner deleted with `propagationPolicy: Orphan`.
pub const ORPHAN: &str = "orphan";
/// Finalizer of a deleted CRD until its custom objects are gone.
pub const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The current time as Kubernetes writes it (RFC 3339, seconds).
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Compares two objects ignoring resourceVersion and managedFields timestamps.
pub(crate) fn same_content(a: &Value, b: &Value) -> bool {
    fn scrub(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            if let Some(Value::Array(mf)) = meta.get_mut("managedFields") {
                for e in mf.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
        }
        v
    }
    scrub(a) == scrub(b)
}
