//! A write's object encoded before the store's lock is taken. The store's one lock orders
//! every write and watch; encoding a pod there (its JSON and its stub, ~10 KB) held every
//! other writer up for a tenth of a status write, longer where the writer was descheduled
//! meanwhile (dozens of writers share two cores). The object is encoded with a stand-in for
//! the resourceVersion the commit gives it; under the lock only the version is written in.

use serde_json::Value;
use std::sync::Arc;

/// The resourceVersion's stand-in: control characters, which JSON escapes, so the encoded
/// form is found by its bytes.
const STAND_IN: &str = "\u{0}gantry-rv\u{0}";
const STAND_IN_JSON: &[u8] = b"\"\\u0000gantry-rv\\u0000\"";

/// An object and its JSON and stub, encoded with the stand-in as its resourceVersion.
pub(super) struct Ready {
    obj: Value,
    json: Spliced,
    stub: Spliced,
}

impl Ready {
    /// `Err`: the object as given, to be encoded under the lock (it has no metadata, or its
    /// data holds the stand-in's bytes too, so where the version goes is not known).
    pub(super) fn new(mut obj: Value) -> Result<Self, Value> {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            return Err(obj);
        };
        meta.insert("resourceVersion".into(), Value::String(STAND_IN.into()));
        let json = Spliced::find(super::entry::encode_vec(&obj));
        let stub = Spliced::find(super::entry::stub_vec(&obj));
        match (json, stub) {
            (Some(json), Some(stub)) => Ok(Ready { obj, json, stub }),
            // The commit sets the resourceVersion over the stand-in.
            _ => Err(obj),
        }
    }

    /// The object, its JSON and its stub at resourceVersion `rv`.
    pub(super) fn finish(self, rv: u64) -> (Value, Arc<[u8]>, Arc<[u8]>) {
        let v = rv.to_string();
        let mut obj = self.obj;
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(v.clone()));
        }
        (obj, self.json.with(&v), self.stub.with(&v))
    }

    /// The encoded object's size as stored at resourceVersion `rv`.
    pub(super) fn len_at(&self, rv: u64) -> usize {
        self.json.bytes.len() - STAND_IN_JSON.len() + rv.to_string().len() + 2
    }
}

/// JSON with the stand-in at `at`, once.
struct Spliced {
    bytes: Vec<u8>,
    at: usize,
}

impl Spliced {
    fn find(bytes: Vec<u8>) -> Option<Self> {
        let mut hits = memchr::memmem::find_iter(&bytes, STAND_IN_JSON);
        let at = hits.next()?;
        if hits.next().is_some() {
            return None;
        }
        Some(Spliced { bytes, at })
    }

    /// The JSON with the version `v` (digits) in place of the stand-in.
    fn with(&self, v: &str) -> Arc<[u8]> {
        let (head, tail) = (
            &self.bytes[..self.at],
            &self.bytes[self.at + STAND_IN_JSON.len()..],
        );
        let mut out = Vec::with_capacity(head.len() + v.len() + 2 + tail.len());
        out.extend_from_slice(head);
        out.push(b'"');
        out.extend_from_slice(v.as_bytes());
        out.push(b'"');
        out.extend_from_slice(tail);
        out.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_finished_object_is_what_encoding_it_at_its_version_gives() {
        let v = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "resourceVersion": "7", "labels": {"a": "b"},
                         "managedFields": [{"manager": "m"}]},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let r = Ready::new(v.clone()).ok().unwrap();
        let len = r.len_at(1234);
        let (obj, json, stub) = r.finish(1234);
        assert_eq!(json.len(), len);
        let mut want = v;
        want["metadata"]["resourceVersion"] = json!("1234");
        assert_eq!(obj, want);
        assert_eq!(json, super::super::entry::encode(&want));
        assert_eq!(&*stub, super::super::entry::stub_vec(&want).as_slice());
    }

    #[test]
    fn an_object_holding_the_stand_in_or_without_metadata_is_encoded_under_the_lock() {
        let holds = json!({"metadata": {"name": "c"}, "data": {"k": STAND_IN}});
        assert!(Ready::new(holds).is_err());
        assert!(Ready::new(json!({"kind": "NoMetadata"})).is_err());
        assert!(Ready::new(json!({"metadata": "odd"})).is_err());
    }
}
