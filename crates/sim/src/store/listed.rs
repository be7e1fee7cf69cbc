//! What a list is made of: the current version of an object as the store keeps it, or an
//! older one from the history (a list at an older resourceVersion, a paged list's later pages).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use super::entry::Entry;

/// One object as a list at some resourceVersion sees it: stored now (as JSON, decoded on
/// demand), or an older version from the history.
#[derive(Clone)]
pub enum Listed {
    Current(Entry),
    Old(Arc<Value>),
    /// An older version as the history keeps it, JSON decoded the first time it is read.
    Packed(Arc<PackedVersion>),
}

/// An older version of an object as JSON, decoded on first use: its stub alone where that
/// is all a reader needs (a selector on labels or names), else whole.
pub struct PackedVersion {
    json: Arc<[u8]>,
    stub: std::sync::OnceLock<Value>,
    value: std::sync::OnceLock<Arc<Value>>,
}

/// What a stub is read from: metadata and `spec.nodeName`, the rest of the object skipped.
#[derive(serde::Deserialize)]
struct StubFields {
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    spec: Option<SpecNode>,
}

#[derive(serde::Deserialize)]
struct SpecNode {
    #[serde(default, rename = "nodeName")]
    node_name: Option<Value>,
}

impl PackedVersion {
    pub fn new(json: Arc<[u8]>) -> Self {
        Self {
            json,
            stub: std::sync::OnceLock::new(),
            value: std::sync::OnceLock::new(),
        }
    }

    /// The version's stub, as the store makes one for a current object (`Entry::stub`).
    fn stub(&self) -> &Value {
        self.stub.get_or_init(|| {
            if let Some(v) = self.value.get() {
                return super::entry::stub_of(v);
            }
            match serde_json::from_slice::<StubFields>(&self.json) {
                Ok(f) => {
                    let mut v = serde_json::json!({ "metadata": f.metadata });
                    if let Some(node) = f.spec.and_then(|s| s.node_name) {
                        v["spec"] = serde_json::json!({ "nodeName": node });
                    }
                    super::entry::stub_of(&v)
                }
                Err(_) => super::entry::stub_of(self.value()),
            }
        })
    }

    fn value(&self) -> &Arc<Value> {
        self.value.get_or_init(|| {
            // Written by the store from a Value: cannot fail short of a bug.
            Arc::new(serde_json::from_slice(&self.json).unwrap_or_else(|e| {
                tracing::error!(error = %e, "a kept older version does not decode");
                Value::Null
            }))
        })
    }
}

impl Listed {
    /// At least the object's metadata and node (`{"metadata": …, "spec": {"nodeName": …}}`
    /// for a current or packed version, the whole version given back decoded): enough for
    /// selectors on labels, names and nodes, and for owners, without decoding the object.
    pub fn stub(&self) -> Cow<'_, Value> {
        match self {
            Listed::Current(e) => Cow::Owned(e.stub()),
            Listed::Old(v) => Cow::Borrowed(v),
            Listed::Packed(p) => Cow::Borrowed(p.stub()),
        }
    }

    /// The object as stored JSON, where it is kept so (the current version, or an older one
    /// from the history).
    pub fn json(&self) -> Option<&Arc<[u8]>> {
        match self {
            Listed::Current(e) => Some(e.json()),
            Listed::Old(_) => None,
            Listed::Packed(p) => Some(&p.json),
        }
    }

    /// The object, decoded.
    pub fn value(&self) -> Option<Arc<Value>> {
        match self {
            Listed::Current(e) => e.value(),
            Listed::Old(v) => Some(v.clone()),
            Listed::Packed(p) => Some(p.value().clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_older_versions_stub_is_read_without_decoding_the_rest() {
        let old = json!({"metadata": {"name": "p", "labels": {"app": "a"},
                                      "managedFields": [{"manager": "m"}]},
                         "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
                         "status": {"phase": "Running"}});
        let p = Arc::new(PackedVersion::new(serde_json::to_vec(&old).unwrap().into()));
        let l = Listed::Packed(p.clone());
        assert_eq!(
            *l.stub(),
            json!({"metadata": {"name": "p", "labels": {"app": "a"}}, "spec": {"nodeName": "n1"}})
        );
        assert!(p.value.get().is_none(), "the whole version stays undecoded");
        assert_eq!(l.value().unwrap()["status"]["phase"], "Running");
    }
}
