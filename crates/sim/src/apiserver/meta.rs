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

/// Whether two JSON objects have the same fields, leaving out the keys `skip` names, each
/// pair of values compared by `eq` (its key given). Compares in place: writes compare whole
/// objects several times each, and copying them to strip a key cost a clone per side.
pub(crate) fn same_fields(
    a: &Value,
    b: &Value,
    skip: &dyn Fn(&str) -> bool,
    eq: &dyn Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, x)| b.get(k).is_some_and(|y| eq(k, x, y)))
}

/// Compares two objects ignoring resourceVersion and managedFields timestamps.
pub(crate) fn same_content(a: &Value, b: &Value) -> bool {
    same_content_except(a, b, &|_| false)
}

/// [`same_content`], with the top-level fields `settled` says are equal not compared.
pub(crate) fn same_content_except(a: &Value, b: &Value, settled: &dyn Fn(&str) -> bool) -> bool {
    let plain = |_: &str, x: &Value, y: &Value| x == y;
    let entry = |x: &Value, y: &Value| same_fields(x, y, &|k| k == "time", &plain);
    let managed = |x: &Value, y: &Value| match (x.as_array(), y.as_array()) {
        (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| entry(x, y)),
        _ => x == y,
    };
    let meta = |x: &Value, y: &Value| {
        same_fields(x, y, &|k| k == "resourceVersion", &|k, x, y| {
            if k == "managedFields" {
                managed(x, y)
            } else {
                x == y
            }
        })
    };
    same_fields(a, b, settled, &|k, x, y| {
        if k == "metadata" { meta(x, y) } else { x == y }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_content_ignores_the_version_and_managed_field_times_only() {
        let a = json!({"metadata": {"name": "a", "resourceVersion": "1",
            "managedFields": [{"manager": "m", "time": "t1"}]}, "spec": {"x": 1}});
        let mut b = a.clone();
        b["metadata"]["resourceVersion"] = json!("2");
        b["metadata"]["managedFields"][0]["time"] = json!("t2");
        assert!(same_content(&a, &b));
        let mut c = b.clone();
        c["metadata"]["managedFields"][0]["manager"] = json!("n");
        assert!(!same_content(&a, &c));
        let mut d = b.clone();
        d["spec"]["x"] = json!(2);
        assert!(!same_content(&a, &d));
        let mut e = b.clone();
        e["metadata"]["labels"] = json!({"k": "v"});
        assert!(!same_content(&a, &e));
        let mut f = b.clone();
        f["metadata"]
            .as_object_mut()
            .map(|m| m.remove("resourceVersion"));
        assert!(same_content(&a, &f));
        let mut g = b.clone();
        g["status"] = json!({});
        assert!(!same_content(&a, &g));
    }
}
