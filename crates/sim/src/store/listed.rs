//! What a list is made of: the current version of an object as the store keeps it, or an
//! older one from the history (a list at an older resourceVersion, a paged list's later pages).

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

/// An older version of an object as JSON, decoded on first use.
pub struct PackedVersion {
    json: Arc<[u8]>,
    value: std::sync::OnceLock<Arc<Value>>,
}

impl PackedVersion {
    pub fn new(json: Arc<[u8]>) -> Self {
        Self {
            json,
            value: std::sync::OnceLock::new(),
        }
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
    /// At least the object's metadata (`{"metadata": …}` for a current one, the whole older
    /// version otherwise): enough for label selectors, names and owners without decoding.
    pub fn stub(&self) -> &Value {
        match self {
            Listed::Current(e) => &e.stub,
            Listed::Old(v) => v,
            Listed::Packed(p) => p.value(),
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
