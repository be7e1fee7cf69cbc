//! One stored object version: its JSON (the bytes watchers were sent and the history keeps),
//! its metadata as JSON of its own (what scans such as the garbage collector's read, without
//! the rest of the object), and the decoded object while anyone still holds it. A
//! `serde_json::Value` takes about six times its JSON (a pod's decoded metadata alone was
//! ~5 KB), so current objects and their metadata are kept as JSON and decoded when read.

use serde_json::{Map, Value};
use std::sync::{Arc, Weak};

#[derive(Clone)]
pub struct Entry {
    /// The version's resourceVersion: two reads saw the same version iff their rvs match.
    pub(super) rv: u64,
    pub(super) json: Arc<[u8]>,
    /// `{"metadata": …}` without `managedFields`, and `{"spec": {"nodeName": …}}` where set,
    /// as JSON: what scans and selectors read without decoding the object ([`Entry::stub`]).
    stub: Arc<[u8]>,
    /// The node the object is bound to (`spec.nodeName`), for the store's index by node.
    node: Option<Arc<str>>,
    /// The decoded object: held for the kinds read on every request ([`keeps_decoded`]),
    /// else while an event of the live ring or a reader holds it.
    value: Held,
}

#[derive(Clone)]
enum Held {
    Kept(Arc<Value>),
    Weak(Weak<Value>),
}

/// Resources whose objects the API server reads on many requests (a custom resource's CRD for
/// its schema, webhook configurations, namespaces, RBAC rules): few objects, kept decoded.
pub(super) fn keeps_decoded(gr: &str) -> bool {
    gr == "/namespaces"
        || gr.starts_with("apiextensions.k8s.io/")
        || gr.starts_with("admissionregistration.k8s.io/")
        || gr.starts_with("rbac.authorization.k8s.io/")
}

impl Entry {
    pub(super) fn new(gr: &str, rv: u64, value: &Arc<Value>, json: Arc<[u8]>) -> Self {
        Self::with_stub(gr, rv, value, json, stub_vec(value).into())
    }

    /// [`Entry::new`] with the stub already encoded (see `staged`).
    pub(super) fn with_stub(
        gr: &str,
        rv: u64,
        value: &Arc<Value>,
        json: Arc<[u8]>,
        stub: Arc<[u8]>,
    ) -> Self {
        Entry {
            rv,
            json,
            stub,
            node: super::by_node::node_of(value).map(Arc::from),
            value: if keeps_decoded(gr) {
                Held::Kept(value.clone())
            } else {
                Held::Weak(Arc::downgrade(value))
            },
        }
    }

    /// The node the object is bound to (`spec.nodeName`, where set and not empty).
    pub(super) fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// The object's stub ([`stub_of`]), decoded.
    pub fn stub(&self) -> Value {
        if let Held::Kept(v) = &self.value {
            return stub_of(v);
        }
        serde_json::from_slice(&self.stub).unwrap_or_else(|e| {
            // Encoded by the store from a Value: cannot fail short of a bug.
            tracing::error!(error = %e, "a stored object's metadata does not decode");
            Value::Null
        })
    }

    /// The object as stored.
    pub fn json(&self) -> &Arc<[u8]> {
        &self.json
    }

    /// The object, decoded unless someone still holds it decoded.
    pub fn value(&self) -> Option<Arc<Value>> {
        match &self.value {
            Held::Kept(v) => return Some(v.clone()),
            Held::Weak(w) => {
                if let Some(v) = w.upgrade() {
                    return Some(v);
                }
            }
        }
        match serde_json::from_slice(&self.json) {
            Ok(v) => Some(Arc::new(v)),
            Err(e) => {
                // Encoded by the store from a Value: cannot fail short of a bug.
                tracing::error!(error = %e, "a stored object does not decode");
                None
            }
        }
    }
}

/// The object's metadata, without the managers' bookkeeping, under `metadata`; and the node
/// it is bound to, under `spec.nodeName`, where it has one.
pub(super) fn stub_of(v: &Value) -> Value {
    // Serializing a Value cannot fail (its keys are strings).
    serde_json::to_value(Stub(v)).unwrap_or_default()
}

/// [`stub_of`] as JSON, written straight from the object: every write stores one, and no copy
/// of the metadata is made for it.
pub(super) fn stub_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(&Stub(v)).unwrap_or_default()
}

/// What [`stub_of`] and [`stub_vec`] write: one definition of a stub.
struct Stub<'a>(&'a Value);

#[derive(serde::Serialize)]
struct SpecNode<'a> {
    #[serde(rename = "nodeName")]
    node_name: &'a Value,
}

/// Metadata without `managedFields` (often most of it).
struct Meta<'a>(&'a Map<String, Value>);

impl serde::Serialize for Stub<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        match self.0.get("metadata") {
            Some(Value::Object(meta)) => m.serialize_entry("metadata", &Meta(meta))?,
            Some(other) => m.serialize_entry("metadata", other)?,
            None => m.serialize_entry("metadata", &Map::new())?,
        }
        // As it is (even empty): a selector reads the same from the stub as from the object.
        if let Some(node @ Value::String(_)) = self.0.get("spec").and_then(|s| s.get("nodeName")) {
            m.serialize_entry("spec", &SpecNode { node_name: node })?;
        }
        m.end()
    }
}

impl serde::Serialize for Meta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, x) in self.0.iter().filter(|(k, _)| *k != "managedFields") {
            m.serialize_entry(k, x)?;
        }
        m.end()
    }
}

/// `v` as the compact JSON the store keeps.
pub(super) fn encode(v: &Value) -> Arc<[u8]> {
    encode_vec(v).into()
}

/// [`encode`] as a `Vec` (`staged` writes the resourceVersion into it): one encoding of a
/// stored object.
pub(super) fn encode_vec(v: &Value) -> Vec<u8> {
    // Serializing a Value cannot fail (its keys are strings).
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_what_nobody_holds_and_shares_what_someone_does() {
        let v = Arc::new(
            json!({"metadata": {"name": "a", "managedFields": [{"manager": "m"}]}, "data": {"k": "v"}}),
        );
        let e = Entry::new("/configmaps", 3, &v, encode(&v));
        assert!(Arc::ptr_eq(&e.value().unwrap(), &v));
        assert_eq!(e.stub(), json!({"metadata": {"name": "a"}}));
        assert_eq!(e.node(), None);
        drop(v);
        let back = e.value().unwrap();
        assert_eq!(back["data"]["k"], "v");
        assert_eq!(back["metadata"]["managedFields"][0]["manager"], "m");
    }

    #[test]
    fn the_stored_stub_is_the_stub() {
        for v in [
            json!({"metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"manager": "m"}],
                                "ownerReferences": [{"uid": "u"}]},
                   "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": ""}}),
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": 3}}),
            json!({"metadata": "odd"}),
            json!({"kind": "NoMetadata"}),
        ] {
            let stored: Value = serde_json::from_slice(&stub_vec(&v)).unwrap();
            assert_eq!(stored, stub_of(&v), "{v}");
        }
        assert_eq!(
            stub_of(
                &json!({"metadata": {"name": "p", "managedFields": []}, "spec": {"nodeName": ""}})
            ),
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": ""}})
        );
        assert_eq!(stub_of(&json!({"kind": "K"})), json!({"metadata": {}}));
    }

    #[test]
    fn a_bound_pods_stub_names_its_node() {
        let v = Arc::new(
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": []}}),
        );
        let e = Entry::new("/pods", 2, &v, encode(&v));
        assert_eq!(
            e.stub(),
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}})
        );
        assert_eq!(e.node(), Some("n1"));
    }

    #[test]
    fn a_crd_stays_decoded() {
        let v = Arc::new(json!({"metadata": {"name": "c"}}));
        let e = Entry::new(
            "apiextensions.k8s.io/customresourcedefinitions",
            1,
            &v,
            encode(&v),
        );
        drop(v);
        let (a, b) = (e.value().unwrap(), e.value().unwrap());
        assert!(Arc::ptr_eq(&a, &b));
    }
}
