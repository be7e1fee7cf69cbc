//! The verbs on objects: create, get, list, update, patch, delete, plus the pod
//! subresources binding and eviction. HTTP-free so controllers can call them too.
//!
//! Here: the reads; `prepare` builds what a write stores (server-set metadata, checks,
//! managed fields), `write` the writes, `apply` server-side apply. Their arguments
//! ([`Target`], [`ListOpts`], [`DeleteOpts`]) are in [`super::target`].

mod apply;
mod prepare;
mod write;

pub use super::deletion::delete_decision;
use super::paging::{decode_continue, encode_continue};
use super::resources::ResourceInfo;
use super::server::ApiServer;
use super::status::ApiError;
pub use super::target::{DeleteOpts, ListOpts, Target};
use crate::store::Listed;
use serde_json::value::RawValue;
use serde_json::{Value, json};

fn meta_str<'v>(obj: &'v Value, field: &str) -> Option<&'v str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn rv_of(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or_default()
}

fn generate_suffix() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Whether the parts of an object whose change bumps `metadata.generation` differ.
fn spec_changed(info: &ResourceInfo, a: &Value, b: &Value) -> bool {
    let skip = |k: &str| k == "metadata" || (k == "status" && info.has_status());
    !super::meta::same_fields(a, b, &skip, &|_, x, y| x == y)
}

impl ApiServer {
    pub fn get(&self, t: &Target, name: &str) -> Result<Value, ApiError> {
        self.store
            .get(&t.info.gr(), &t.namespace, name)
            .map(|o| t.present(&o))
            .ok_or_else(|| t.not_found(name))
    }

    /// The list as a value, each item as served in the requested version.
    pub fn list(&self, t: &Target, opts: &ListOpts) -> Result<Value, ApiError> {
        Ok(self.list_shared(t, opts)?.into_value(t))
    }

    /// The list with the stored objects themselves as items, written out without a copy of
    /// each (a list of thousands of pods would otherwise clone them all). Served as is only
    /// for built-in kinds, which are stored as served; [`Self::list`] presents each item.
    pub fn list_shared(&self, t: &Target, opts: &ListOpts) -> Result<SharedList, ApiError> {
        let ns = t
            .info
            .namespaced
            .then_some(t.namespace.as_str())
            .filter(|n| !n.is_empty());
        let (after, at) = match &opts.continue_token {
            Some(tok) => {
                let (key, rv) = decode_continue(tok)?;
                (Some(key), rv)
            }
            None => (None, None),
        };
        let gr = t.info.gr();
        // One node's pods, now: from the store's node index, not a scan of every pod.
        let node = (gr == crate::store::PODS && at.is_none())
            .then(|| opts.fields.node_name())
            .flatten()
            .filter(|n| !n.is_empty());
        // One object by name (a kubelet's list of its own Node), now: looked up, not scanned.
        let one = (at.is_none() && after.is_none() && (ns.is_some() || !t.info.namespaced))
            .then(|| opts.fields.name())
            .flatten();
        // Every page at the first page's resourceVersion (the token carries it).
        let (objs, rv) = match (one, node) {
            (Some(name), _) => Ok(self.store.listed_one(&gr, ns.unwrap_or_default(), name)),
            (None, Some(node)) => Ok(self.store.listed_on_node(node, ns, after.as_ref())),
            (None, None) => self.store.listed_at(&gr, ns, after.as_ref(), at),
        }
        .map_err(|e| {
            ApiError::gone(format!(
                "The provided continue parameter is too old to display a consistent list \
                     result ({e}). You can start a new list without the continue parameter."
            ))
        })?;
        let mut items = Vec::new();
        let mut next = None;
        let filtered = !opts.labels.is_empty() || !opts.fields.is_empty();
        let mut matching = objs
            .iter()
            .filter(|o| super::selectors::selected(&opts.labels, &opts.fields, o));
        let mut remaining = 0usize;
        for o in matching.by_ref() {
            if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                remaining = 1;
                break;
            }
            items.push(o.clone());
        }
        if remaining > 0 {
            // Upstream counts what is left of an unfiltered list only; a filtered one would
            // have to test (and, for older versions, decode) every item to count.
            if !filtered {
                remaining += matching.count();
            }
            if let Some(last) = items.last() {
                let last = last.stub();
                let key = (
                    meta_str(&last, "namespace").unwrap_or_default().to_string(),
                    meta_str(&last, "name").unwrap_or_default().to_string(),
                );
                next = Some(encode_continue(&key, rv));
            }
        }
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if let Some(tok) = next {
            meta["continue"] = json!(tok);
            if !filtered {
                meta["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(SharedList {
            kind: format!("{}List", t.info.kind),
            api_version: t.api_version(),
            metadata: meta,
            items,
        })
    }
}

/// A list response over the stored objects; serializes as the `…List` object would, each
/// current item as its stored JSON (nothing decoded or copied per item).
pub struct SharedList {
    kind: String,
    api_version: String,
    metadata: Value,
    items: Vec<Listed>,
}

impl SharedList {
    fn into_value(self, t: &Target) -> Value {
        let items: Vec<Value> = self
            .items
            .iter()
            .filter_map(Listed::value)
            .map(|o| t.present(&o))
            .collect();
        json!({
            "kind": self.kind,
            "apiVersion": self.api_version,
            "metadata": self.metadata,
            "items": items,
        })
    }
}

/// One list item as written: stored JSON as is, or an older version's value.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Item<'a> {
    Raw(&'a RawValue),
    Value(std::borrow::Cow<'a, Value>),
}

impl serde::Serialize for SharedList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let items = self
            .items
            .iter()
            .map(|o| match o.json() {
                Some(json) => serde_json::from_slice::<&RawValue>(json).map(Item::Raw),
                // An older version given back decoded: its stub is the whole object.
                None => Ok(Item::Value(o.stub())),
            })
            .collect::<Result<Vec<Item<'_>>, _>>()
            .map_err(S::Error::custom)?;
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("kind", &self.kind)?;
        m.serialize_entry("apiVersion", &self.api_version)?;
        m.serialize_entry("metadata", &self.metadata)?;
        m.serialize_entry("items", &items)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn a_patch_changes_what_it_names_and_a_status_patch_the_status_only() {
        use crate::apiserver::patch::PatchType;
        let srv = ApiServer::new(Store::memory(100), None);
        let t = srv.target("", "v1", "pods", "default").unwrap();
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        srv.create(&t, pod, "test").unwrap();
        let patch = |sub: &str, kind: PatchType, body: Value| {
            let body = body.to_string().into_bytes();
            srv.patch(&t, "p", sub, kind, &body, Some("m"), false)
                .unwrap()
                .0
        };
        let rv = |v: &Value| v["metadata"]["resourceVersion"].clone();
        // A status patch that also names the spec and the labels changes the status only.
        let body = json!({"metadata": {"labels": {"a": "2"}},
            "spec": {"containers": [{"name": "c", "image": "other"}]},
            "status": {"phase": "Running"}});
        for kind in [PatchType::Merge, PatchType::Strategic] {
            let out = patch("status", kind, body.clone());
            assert_eq!(out["status"]["phase"], "Running");
            assert_eq!(out["spec"]["containers"][0]["image"], "busybox");
            assert_eq!(out["metadata"]["labels"]["a"], "1");
            assert_eq!(out["metadata"]["generation"], 1);
        }
        // The same status again stores nothing.
        let before = srv.get(&t, "p").unwrap();
        let again = patch(
            "status",
            PatchType::Merge,
            json!({"status": {"phase": "Running"}}),
        );
        assert_eq!(rv(&again), rv(&before));
        // A patch of the labels leaves the spec, the status and the generation.
        let out = patch(
            "",
            PatchType::Merge,
            json!({"metadata": {"labels": {"b": "x"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"a": "1", "b": "x"}));
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["metadata"]["generation"], 1);
        // The main resource ignores the status it names; a spec change bumps the generation.
        let out = patch(
            "",
            PatchType::Merge,
            json!({"spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Failed"}}),
        );
        assert_eq!(out["spec"]["activeDeadlineSeconds"], 5);
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["metadata"]["generation"], 2);
        // A directive at the top is followed, whatever the keys say.
        let out = patch(
            "",
            PatchType::Strategic,
            json!({"$patch": "replace", "metadata": {"name": "p", "labels": {"c": "y"}},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}], "activeDeadlineSeconds": 5}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"c": "y"}));
    }

    #[test]
    fn a_shared_list_writes_the_same_bytes_as_the_copied_one() {
        let srv = ApiServer::new(Store::memory(100), None);
        let t = srv.target("", "v1", "pods", "default").unwrap();
        for i in 0..5 {
            let pod = json!({
                "metadata": {"name": format!("p{i}"), "labels": {"n": i.to_string()}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            });
            srv.create(&t, pod, "test").unwrap();
        }
        let bytes = |shared: bool, opts: &ListOpts| {
            if shared {
                serde_json::to_vec(&srv.list_shared(&t, opts).unwrap()).unwrap()
            } else {
                serde_json::to_vec(&srv.list(&t, opts).unwrap()).unwrap()
            }
        };
        let all = ListOpts::default();
        assert_eq!(bytes(true, &all), bytes(false, &all));
        // A page and its continue token, as served both ways.
        let page = ListOpts {
            limit: Some(2),
            ..ListOpts::default()
        };
        assert_eq!(bytes(true, &page), bytes(false, &page));
        let first = srv.list(&t, &page).unwrap();
        assert_eq!(first["items"].as_array().map(Vec::len), Some(2));
        let next = ListOpts {
            continue_token: first["metadata"]["continue"].as_str().map(str::to_string),
            ..page
        };
        assert_eq!(bytes(true, &next), bytes(false, &next));
    }
}
