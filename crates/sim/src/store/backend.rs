//! What a storage backend implements, and the key and error type it shares with the store.

use serde_json::Value;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Larger than etcd stores ([`super::MAX_OBJECT_BYTES`]).
    #[error("etcdserver: request is too large ({size} bytes; limit is {limit})")]
    TooLarge { size: usize, limit: usize },
    #[error("sqlite database {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error("stored object {key} is not valid JSON: {source}")]
    Corrupt {
        key: String,
        source: serde_json::Error,
    },
    #[error("creating data directory {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Where objects are kept. Writes are called under the store lock, in resourceVersion
/// order; a write returns only once it survives the process being killed.
pub trait Backend: Send {
    /// Every stored object with its key, and the last resourceVersion handed out.
    fn load(&mut self) -> Result<(Vec<(ObjKey, Value)>, u64), StoreError>;
    /// Store `json`, the object as the store encoded it (with its resourceVersion).
    fn put(&mut self, key: &ObjKey, json: &[u8], rv: u64) -> Result<(), StoreError>;
    fn delete(&mut self, key: &ObjKey, rv: u64) -> Result<(), StoreError>;
}

/// Identifies one object: `gr` is `group/resource` (core group is empty: `/pods`),
/// `namespace` is empty for cluster-scoped objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    pub gr: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.gr, self.namespace, self.name)
    }
}

#[cfg(test)]
impl ObjKey {
    /// A ConfigMap in `default`, for the store's tests.
    pub(super) fn configmap(name: &str) -> Self {
        ObjKey {
            gr: "/configmaps".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }
}
