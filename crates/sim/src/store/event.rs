//! One change to the store, as watchers see it.

use super::backend::ObjKey;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as seen by watchers. `prev` is the object before a modification or deletion.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    pub key: ObjKey,
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
    /// `prev` as the store kept it (the JSON the event before sent): the history packs the
    /// event with these bytes instead of a second copy. `None` where there is no prev, or
    /// where the event was not made by the store (`prev` is then encoded when packed).
    pub prev_json: Option<Arc<[u8]>>,
    /// `object` as JSON: the store fills it in as it writes (it keeps the object so), else the
    /// first who needs it. Every watcher of a built-in kind sends these bytes, and the
    /// history keeps them once the event is no longer recent.
    pub encoded: OnceLock<Arc<[u8]>>,
}

impl Event {
    /// `object` as JSON, encoded once.
    pub fn json(&self) -> Arc<[u8]> {
        self.encoded
            .get_or_init(|| serde_json::to_vec(&*self.object).unwrap_or_default().into())
            .clone()
    }
}
