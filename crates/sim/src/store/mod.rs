//! The object store: every object as compact JSON (decoded when read, see [`entry`]), one
//! global resourceVersion counter, a bounded event history for watches. The logic lives here;
//! where bytes are kept is a [`Backend`] (memory or SQLite), so both behave the same.

mod backend;
mod by_node;
mod entry;
mod event;
pub mod feed;
mod history;
mod listed;
pub mod memory;
mod rings;
pub mod sqlite;
mod staged;
mod stats;

use history::History;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

pub use backend::{Backend, ObjKey, StoreError};
pub use by_node::{PODS, node_of};
pub use entry::Entry;
pub use event::{Event, EventType};
pub use history::{Kept, TooOld};
pub use listed::Listed;
pub use memory::MemoryBackend;
pub use sqlite::SqliteBackend;
pub use stats::{Stats, Tally};

/// What a mutation closure decided.
pub enum Mutation {
    /// Store this object (resourceVersion is filled in by the store).
    Put(Value),
    /// Remove the object; the value is what watchers see as deleted (with the final rv).
    Delete(Value),
    /// Change nothing; answer with the current object.
    Unchanged,
}

/// What a commit stores: a decision as made, or a Put already encoded (see `staged`).
enum Staged {
    Plain(Mutation),
    Ready(Box<staged::Ready>),
}

impl From<Mutation> for Staged {
    fn from(m: Mutation) -> Self {
        Staged::Plain(m)
    }
}

impl Staged {
    /// Encodes a Put now; anything else stays as it is.
    fn prepare(m: Mutation) -> Self {
        match m {
            Mutation::Put(obj) => match staged::Ready::new(obj) {
                Ok(r) => Staged::Ready(Box::new(r)),
                Err(obj) => Staged::Plain(Mutation::Put(obj)),
            },
            other => Staged::Plain(other),
        }
    }
}

/// etcd's default `--max-request-bytes` (1.5 MiB): the largest object that can be stored.
pub const MAX_OBJECT_BYTES: usize = 3 << 19;

/// An object as a write left it: decoded, and the JSON the store keeps and its watchers are
/// sent (a response can be that JSON as it is).
#[derive(Clone, Debug)]
pub struct Stored {
    pub object: Arc<Value>,
    pub json: Arc<[u8]>,
}

/// Kept events after the requested version, and the receiver for what follows.
pub type WatchStart = (Vec<Kept>, broadcast::Receiver<Arc<Event>>);

type Bucket = BTreeMap<(String, String), Entry>;

struct Inner {
    rv: u64,
    objects: HashMap<String, Bucket>,
    history: History,
    backend: Box<dyn Backend>,
    /// Rings of single-object watches, by resource and name ([`Store::watch_name_from`]).
    named: HashMap<String, rings::Rings>,
    /// Pods by node, and the rings of the watches of one node's pods.
    nodes: by_node::NodeIndex,
}

impl Inner {
    /// The current objects of `gr` (in `namespace`, after the key `after`), in key order.
    fn current<'a>(
        &'a self,
        gr: &str,
        namespace: Option<&'a str>,
        after: Option<&(String, String)>,
    ) -> impl Iterator<Item = (&'a (String, String), &'a Entry)> {
        use std::ops::Bound;
        let start = match (after, namespace) {
            (Some(a), _) => Bound::Excluded(a.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.objects.get(gr).into_iter().flat_map(move |b| {
            b.range((start.clone(), Bound::Unbounded))
                .take_while(move |((ns, _), _)| namespace.is_none_or(|want| ns == want))
        })
    }
}

/// The shared store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    tx: broadcast::Sender<Arc<Event>>,
}

/// Default bound of the packed objects the event history keeps ([`Store::open_with`]).
pub const HISTORY_BYTES: usize = 256 << 20;

impl Store {
    /// Opens a store on `backend`, loading what it holds. `history_limit` bounds the
    /// events kept for watches that resume from an older resourceVersion.
    pub fn open(backend: Box<dyn Backend>, history_limit: usize) -> Result<Self, StoreError> {
        Self::open_with(backend, history_limit, HISTORY_BYTES)
    }

    /// [`Store::open`] with the history also bounded to `history_bytes` of packed objects
    /// (the newest events, whose objects are still shared with the store, are not counted).
    pub fn open_with(
        mut backend: Box<dyn Backend>,
        history_limit: usize,
        history_bytes: usize,
    ) -> Result<Self, StoreError> {
        let (objects, rv) = backend.load()?;
        let mut map: HashMap<String, Bucket> = HashMap::new();
        let mut nodes = by_node::NodeIndex::default();
        for (key, obj) in objects {
            let version = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|v| v.parse().ok())
                .unwrap_or(rv);
            let obj = Arc::new(obj);
            let e = Entry::new(&key.gr, version, &obj, entry::encode(&obj));
            let k = (key.namespace, key.name);
            if key.gr == PODS {
                nodes.update(&k, None, e.node());
            }
            map.entry(key.gr).or_default().insert(k, e);
        }
        // The ring holds what the history keeps decoded: a receiver behind it resumes from
        // the history (`watch_from`), which has everything the ring had.
        let (tx, _) = broadcast::channel(history::LIVE_EVENTS);
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                rv,
                objects: map,
                history: History::new(history_limit, history_bytes, rv),
                backend,
                named: HashMap::new(),
                nodes,
            })),
            tx,
        })
    }

    /// An in-memory store.
    pub fn memory(history_limit: usize) -> Self {
        match Self::open(Box::new(MemoryBackend), history_limit) {
            Ok(s) => s,
            // The memory backend's load cannot fail; keep the signature honest anyway.
            Err(_) => unreachable!("memory backend load is infallible"),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (mutations are applied
        // after all fallible steps), so recovering from poisoning is safe.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, gr: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        // Decoded outside the lock.
        self.entry(gr, namespace, name)?.value()
    }

    /// The object's metadata only (`{"metadata": …}`, without `managedFields`): cheap, for
    /// readers of owners, uids and deletion marks.
    pub fn get_stub(&self, gr: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        Some(Arc::new(self.entry(gr, namespace, name)?.stub()))
    }

    fn entry(&self, gr: &str, namespace: &str, name: &str) -> Option<Entry> {
        let inner = self.lock();
        inner
            .objects
            .get(gr)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// [`Store::list`] as metadata stubs ([`Store::get_stub`]): a scan of every object that
    /// decodes none of them whole. Each stub is decoded as the scan reaches it (and outside
    /// the lock), so a scan of 45,000 objects holds one decoded stub, not 45,000.
    pub fn list_stubs(
        &self,
        gr: &str,
        namespace: Option<&str>,
    ) -> impl ExactSizeIterator<Item = Arc<Value>> + use<> {
        let entries: Vec<Entry> = {
            let inner = self.lock();
            inner
                .current(gr, namespace, None)
                .map(|(_, e)| e.clone())
                .collect()
        };
        entries.into_iter().map(|e| Arc::new(e.stub()))
    }

    /// Objects of one resource, in (namespace, name) order, with the store rv.
    /// `namespace: None` lists all namespaces. `after` skips keys up to and including it.
    pub fn list(
        &self,
        gr: &str,
        namespace: Option<&str>,
        after: Option<&(String, String)>,
    ) -> (Vec<Arc<Value>>, u64) {
        match self.list_at(gr, namespace, after, None) {
            Ok(r) => r,
            // Unreachable without `at`; an empty page is the harmless answer.
            Err(_) => (Vec::new(), self.current_rv()),
        }
    }

    /// The objects of `gr` (in `namespace`, after the key `after`) as they were at resourceVersion
    /// `at` (None: now), and that rv. A paged list reads every page at its first page's rv, as
    /// the real API server does: otherwise a change to an object on an earlier page, made
    /// while later pages are read, falls between the list and the watch that follows it.
    /// The past is rebuilt by undoing the kept events newer than `at`.
    pub fn list_at(
        &self,
        gr: &str,
        namespace: Option<&str>,
        after: Option<&(String, String)>,
        at: Option<u64>,
    ) -> Result<(Vec<Arc<Value>>, u64), TooOld> {
        let (items, at) = self.listed_at(gr, namespace, after, at)?;
        // Decoded outside the lock.
        Ok((items.iter().filter_map(Listed::value).collect(), at))
    }

    /// [`Store::list_at`] without decoding: selectors on labels and names read each item's
    /// [`Listed::stub`], and a list of a built-in kind is written from the stored JSON.
    pub fn listed_at(
        &self,
        gr: &str,
        namespace: Option<&str>,
        after: Option<&(String, String)>,
        at: Option<u64>,
    ) -> Result<(Vec<Listed>, u64), TooOld> {
        let inner = self.lock();
        let at = at.unwrap_or(inner.rv).min(inner.rv);
        inner.history.reaches(at)?;
        let in_range = |k: &(String, String)| {
            namespace.is_none_or(|want| k.0 == want) && after.is_none_or(|a| k > a)
        };
        let items = inner.current(gr, namespace, after);
        if at == inner.rv {
            return Ok((items.map(|(_, e)| Listed::Current(e.clone())).collect(), at));
        }
        let mut then: BTreeMap<(String, String), Listed> = items
            .map(|(k, e)| (k.clone(), Listed::Current(e.clone())))
            .collect();
        // Newest first: the last event seen for a key is the first after `at`, and its prev
        // is the object as it was then. Nothing is decoded here, under the lock: an older
        // version is listed as the JSON the history keeps.
        let mut first_after: HashMap<(String, String), &Kept> = HashMap::new();
        for kept in inner.history.undo_since(at, gr) {
            let key = kept.key();
            let k = (key.namespace.clone(), key.name.clone());
            if in_range(&k) {
                first_after.insert(k, kept);
            }
        }
        for (k, kept) in first_after {
            match (kept.kind(), kept.prev_listed()) {
                (EventType::Added, _) | (_, None) => {
                    then.remove(&k);
                }
                (_, Some(prev)) => {
                    then.insert(k, prev);
                }
            }
        }
        Ok((then.into_values().collect(), at))
    }

    /// The current objects of one resource as the store keeps them (nothing decoded), in
    /// (namespace, name) order, with the store rv: a watch's initial events.
    pub fn snapshot(&self, gr: &str, namespace: Option<&str>) -> (Vec<Listed>, u64) {
        match self.listed_at(gr, namespace, None, None) {
            Ok(r) => r,
            // Unreachable without `at`; an empty snapshot is the harmless answer.
            Err(_) => (Vec::new(), self.current_rv()),
        }
    }

    /// Every resource key with at least one object (for garbage collection scans).
    pub fn resources(&self) -> Vec<String> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Atomically reads the current object and applies `f`'s decision. `f` gets the
    /// current object and the resourceVersion the write will carry.
    pub fn mutate<E: From<StoreError>>(
        &self,
        key: &ObjKey,
        f: impl FnOnce(Option<&Arc<Value>>, u64) -> Result<Mutation, E>,
    ) -> Result<Option<Stored>, E> {
        self.commit(
            key,
            |e| e.and_then(Entry::value),
            |cur, rv| f(cur, rv).map(Staged::from),
        )
    }

    /// Stores `obj` as a new object, or answers `exists()` where `key` is taken. The object
    /// is encoded before the store's lock is taken (see `staged`).
    pub fn create<E: From<StoreError>>(
        &self,
        key: &ObjKey,
        obj: Value,
        exists: impl FnOnce() -> E,
    ) -> Result<Option<Stored>, E> {
        let staged = Staged::prepare(Mutation::Put(obj));
        let taken = std::cell::Cell::new(false);
        self.commit(
            key,
            |e| {
                taken.set(e.is_some());
                None
            },
            |_, _| {
                if taken.get() {
                    Err(exists())
                } else {
                    Ok(staged)
                }
            },
        )
    }

    /// [`Store::mutate`], with the current object as `current` makes it from the stored
    /// entry (under the lock).
    fn commit<E: From<StoreError>>(
        &self,
        key: &ObjKey,
        current: impl FnOnce(Option<&Entry>) -> Option<Arc<Value>>,
        f: impl FnOnce(Option<&Arc<Value>>, u64) -> Result<Staged, E>,
    ) -> Result<Option<Stored>, E> {
        let mut inner = self.lock();
        let k = (key.namespace.clone(), key.name.clone());
        let entry = inner.objects.get(&key.gr).and_then(|b| b.get(&k)).cloned();
        let current = current(entry.as_ref());
        let next = inner.rv + 1;
        let put = |obj: Value, json: Arc<[u8]>, stub: Option<Arc<[u8]>>| {
            let obj = Arc::new(obj);
            let kind = if entry.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            let stored = match stub {
                Some(stub) => Entry::with_stub(&key.gr, next, &obj, json.clone(), stub),
                None => Entry::new(&key.gr, next, &obj, json.clone()),
            };
            (kind, Some(stored), obj, json)
        };
        let too_large = |size: usize| StoreError::TooLarge {
            size,
            limit: MAX_OBJECT_BYTES,
        };
        let (kind, stored, event_obj, json) = match f(current.as_ref(), next)? {
            Staged::Plain(Mutation::Unchanged) => {
                return Ok(current
                    .zip(entry.map(|e| e.json))
                    .map(|(object, json)| Stored { object, json }));
            }
            Staged::Ready(r) => {
                let size = r.len_at(next);
                if size > MAX_OBJECT_BYTES {
                    return Err(too_large(size).into());
                }
                let (obj, json, stub) = r.finish(next);
                inner.backend.put(key, &json, next)?;
                put(obj, json, Some(stub))
            }
            Staged::Plain(Mutation::Put(mut obj)) => {
                set_rv(&mut obj, next);
                let json = entry::encode(&obj);
                if json.len() > MAX_OBJECT_BYTES {
                    return Err(too_large(json.len()).into());
                }
                inner.backend.put(key, &json, next)?;
                put(obj, json, None)
            }
            Staged::Plain(Mutation::Delete(mut obj)) => {
                set_rv(&mut obj, next);
                inner.backend.delete(key, next)?;
                let json = entry::encode(&obj);
                (EventType::Deleted, None, Arc::new(obj), json)
            }
        };
        inner.rv = next;
        if key.gr == PODS {
            let was = entry.as_ref().and_then(Entry::node);
            let now = stored.as_ref().and_then(Entry::node);
            inner.nodes.update(&k, was, now);
        }
        match stored {
            Some(e) => {
                inner
                    .objects
                    .entry(key.gr.clone())
                    .or_default()
                    .insert(k, e);
            }
            None => {
                if let Some(b) = inner.objects.get_mut(&key.gr) {
                    b.remove(&k);
                }
            }
        }
        // Deletions keep the prev too: a paged list rebuilds the past from it (`list_at`).
        let had_prev = kind != EventType::Added;
        let event = Arc::new(Event {
            rv: next,
            kind,
            key: key.clone(),
            object: event_obj.clone(),
            prev: if had_prev { current } else { None },
            prev_json: if had_prev {
                entry.map(|e| e.json)
            } else {
                None
            },
            encoded: json.clone().into(),
        });
        let retired = inner.history.push(event.clone());
        if let Some(n) = inner.named.get_mut(&key.gr) {
            n.send(&key.name, &event);
        }
        if key.gr == PODS {
            inner.nodes.send(&event);
        }
        // No receivers is fine.
        let _ = self.tx.send(event);
        // Freeing the retired events' decoded objects is most of a push's work: not under
        // the lock every writer and watch waits on.
        drop(inner);
        drop(retired);
        Ok(Some(Stored {
            object: event_obj,
            json,
        }))
    }

    /// As `mutate`, but `f` decides outside the store's lock, on the object as read just
    /// before; the decision is stored only if nobody wrote the object in between, else `f`
    /// decides again on the newer one (upstream's `GuaranteedUpdate`). Every write and watch
    /// takes that lock, so the lock covers only the commit, not decoding and validating.
    pub fn guaranteed_update<E: From<StoreError>>(
        &self,
        key: &ObjKey,
        mut f: impl FnMut(Option<&Arc<Value>>) -> Result<Mutation, E>,
    ) -> Result<Option<Stored>, E> {
        loop {
            let seen = self.entry(&key.gr, &key.namespace, &key.name);
            let seen_value = seen.as_ref().and_then(Entry::value);
            let decision = Staged::prepare(f(seen_value.as_ref())?);
            let stale = std::cell::Cell::new(false);
            let out = self.commit(
                key,
                |cur| {
                    // Same version: the same rv (every write makes a new one).
                    stale.set(cur.map(|e| e.rv) != seen.as_ref().map(|e| e.rv));
                    // A stale decision is dropped and made again: nothing to decode.
                    if stale.get() { None } else { seen_value }
                },
                |_, _| {
                    Ok(if stale.get() {
                        Staged::Plain(Mutation::Unchanged)
                    } else {
                        decision
                    })
                },
            )?;
            if !stale.get() {
                return Ok(out);
            }
        }
    }

    /// Starts a watch after `rv`: the kept events newer than `rv` and a receiver for what
    /// follows, taken atomically so nothing falls between them.
    pub fn watch_from(&self, rv: u64) -> Result<WatchStart, TooOld> {
        let inner = self.lock();
        inner.history.reaches(rv)?;
        let rx = self.tx.subscribe();
        Ok((inner.history.since(rv), rx))
    }

    /// [`Store::watch_from`] for a watch of the objects named `name` in `gr` only (any
    /// namespace): its backlog holds only their events, and its receiver gets only theirs,
    /// so thousands of such watches (a node agent each, watching its own Node) are not each
    /// woken by every event in the cluster.
    pub fn watch_name_from(&self, rv: u64, gr: &str, name: &str) -> Result<WatchStart, TooOld> {
        let mut inner = self.lock();
        inner.history.reaches(rv)?;
        let rx = inner
            .named
            .entry(gr.to_string())
            .or_default()
            .subscribe(name);
        let backlog = inner
            .history
            .since_where(rv, |k| k.key().gr == gr && k.key().name == name);
        Ok((backlog, rx))
    }

    /// [`Store::watch_from`] for a watch of the pods bound to `node` only
    /// (`spec.nodeName=<node>`, as each kubelet watches): its backlog and receiver carry the
    /// events of pods that are or were on `node`, so a kubelet's watch is not woken by every
    /// pod in the cluster.
    pub fn watch_node_from(&self, rv: u64, node: &str) -> Result<WatchStart, TooOld> {
        let mut inner = self.lock();
        inner.history.reaches(rv)?;
        let rx = inner.nodes.subscribe(node);
        let backlog = inner
            .history
            .since_where(rv, |k| k.key().gr == PODS && k.on_node(node));
        Ok((backlog, rx))
    }

    /// The current object keyed (`namespace`, `name`) in `gr`, if any, with the store rv:
    /// [`Store::listed_at`] now for a list of one object by name.
    pub fn listed_one(&self, gr: &str, namespace: &str, name: &str) -> (Vec<Listed>, u64) {
        let inner = self.lock();
        let one = inner
            .objects
            .get(gr)
            .and_then(|b| b.get(&(namespace.to_string(), name.to_string())))
            .map(|e| Listed::Current(e.clone()));
        (one.into_iter().collect(), inner.rv)
    }

    /// The current pods bound to `node` (in `namespace`, after the key `after`), in key
    /// order, with the store rv: [`Store::listed_at`] now, read from the node index.
    pub fn listed_on_node(
        &self,
        node: &str,
        namespace: Option<&str>,
        after: Option<&(String, String)>,
    ) -> (Vec<Listed>, u64) {
        let inner = self.lock();
        let Some(bucket) = inner.objects.get(PODS) else {
            return (Vec::new(), inner.rv);
        };
        let items = inner
            .nodes
            .keys(node)
            .filter(|k| namespace.is_none_or(|ns| k.0 == ns) && after.is_none_or(|a| *k > a))
            .filter_map(|k| bucket.get(k).map(|e| Listed::Current(e.clone())))
            .collect();
        (items, inner.rv)
    }

    /// Counts what the store holds, by resource, under the lock (it encodes the decoded
    /// objects of the live ring): for benchmarks and debugging.
    pub fn stats(&self) -> Stats {
        let inner = self.lock();
        let current = inner
            .objects
            .iter()
            .flat_map(|(gr, b)| b.values().map(move |e| (gr.as_str(), &e.json)));
        stats::census(current, &inner.history)
    }

    /// A receiver of all future events plus the current rv, for controllers.
    pub fn subscribe(&self) -> (broadcast::Receiver<Arc<Event>>, u64) {
        let inner = self.lock();
        (self.tx.subscribe(), inner.rv)
    }
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> ObjKey {
        ObjKey::configmap(name)
    }

    fn put(store: &Store, name: &str) -> u64 {
        let obj = store
            .mutate::<StoreError>(&key(name), |_, _| {
                Ok(Mutation::Put(json!({"metadata": {"name": name}})))
            })
            .ok()
            .flatten();
        obj.and_then(|o| {
            o.object["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
        })
        .unwrap_or(0)
    }

    #[test]
    fn resource_versions_increase_and_history_compacts() {
        let store = Store::memory(16);
        let first = put(&store, "a");
        let second = put(&store, "b");
        assert!(second > first);
        for i in 0..40 {
            put(&store, &format!("c{i}"));
        }
        assert!(store.watch_from(first).is_err());
        let (backlog, _) = store
            .watch_from(store.current_rv() - 3)
            .expect("recent rv is kept");
        assert_eq!(backlog.len(), 3);
    }

    #[test]
    fn an_object_larger_than_etcd_stores_is_refused_and_nothing_changes() {
        let store = Store::memory(16);
        let rv = store.current_rv();
        let big = json!({"metadata": {"name": "a"}, "data": {"a": "x".repeat(MAX_OBJECT_BYTES)}});
        let err = store
            .mutate::<StoreError>(&key("a"), |_, _| Ok(Mutation::Put(big)))
            .expect_err("too large");
        assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
        let api = crate::apiserver::status::ApiError::from(err);
        assert_eq!((api.code, api.reason), (413, "RequestEntityTooLarge"));
        assert_eq!(store.current_rv(), rv);
        assert!(store.list("/configmaps", None, None).0.is_empty());
        put(&store, "a");
    }

    #[test]
    fn list_scopes_by_namespace() {
        let store = Store::memory(16);
        put(&store, "x");
        let other = ObjKey {
            namespace: "other".into(),
            ..key("y")
        };
        let _ =
            store.mutate::<StoreError>(&other, |_, _| Ok(Mutation::Put(json!({"metadata": {}}))));
        assert_eq!(store.list("/configmaps", Some("default"), None).0.len(), 1);
        assert_eq!(store.list("/configmaps", None, None).0.len(), 2);
        assert_eq!(store.list("/secrets", None, None).0.len(), 0);
    }

    #[test]
    fn a_guaranteed_update_decides_again_when_the_object_changed_under_it() {
        let store = Store::memory(16);
        put(&store, "a");
        let mut tries = Vec::new();
        let out = store.guaranteed_update::<StoreError>(&key("a"), |cur| {
            let seen = cur.and_then(|c| c["data"]["n"].as_i64()).unwrap_or(0);
            tries.push(seen);
            if tries.len() == 1 {
                // Another writer lands between this read and the commit.
                let _ = store.mutate::<StoreError>(&key("a"), |_, _| {
                    Ok(Mutation::Put(
                        json!({"metadata": {"name": "a"}, "data": {"n": 5}}),
                    ))
                });
            }
            Ok(Mutation::Put(
                json!({"metadata": {"name": "a"}, "data": {"n": seen + 1}}),
            ))
        });
        // The first decision (from n = 0) is dropped; the second builds on the other write.
        assert_eq!(tries, vec![0, 5]);
        let stored = out.ok().flatten().expect("stored");
        assert_eq!(stored.object["data"]["n"], 6);
        assert_eq!(
            store
                .get("/configmaps", "default", "a")
                .map(|o| o["data"]["n"].clone()),
            Some(json!(6))
        );
    }

    fn del(store: &Store, name: &str) {
        let _ = store.mutate::<StoreError>(&key(name), |cur, _| {
            Ok(Mutation::Delete(
                cur.map(|c| (**c).clone()).unwrap_or_default(),
            ))
        });
    }

    fn names(items: &[Arc<Value>]) -> Vec<String> {
        items
            .iter()
            .map(|o| {
                format!(
                    "{}@{}",
                    o["metadata"]["name"].as_str().unwrap_or(""),
                    o["metadata"]["resourceVersion"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    #[test]
    fn a_list_at_an_older_version_undoes_later_changes() {
        let store = Store::memory(64);
        let a1 = put(&store, "a");
        let b1 = put(&store, "b");
        put(&store, "d");
        let snap = store.current_rv();
        // After the snapshot: a changes, b goes, c comes, d changes twice.
        put(&store, "a");
        del(&store, "b");
        put(&store, "c");
        put(&store, "d");
        let d_last = put(&store, "d");
        let (then, rv) = store
            .list_at("/configmaps", None, None, Some(snap))
            .unwrap();
        assert_eq!(rv, snap);
        assert_eq!(
            names(&then),
            vec![format!("a@{a1}"), format!("b@{b1}"), format!("d@{}", snap)]
        );
        // The next page of that list (after "a") reads the same past.
        let after = ("default".to_string(), "a".to_string());
        let (page2, _) = store
            .list_at("/configmaps", Some("default"), Some(&after), Some(snap))
            .unwrap();
        assert_eq!(names(&page2), vec![format!("b@{b1}"), format!("d@{snap}")]);
        // Now is now.
        let (now, rv) = store.list_at("/configmaps", None, None, None).unwrap();
        assert_eq!(rv, d_last);
        assert_eq!(names(&now).len(), 3);
        assert!(names(&now).contains(&format!("d@{d_last}")));
    }

    #[test]
    fn a_list_older_than_the_kept_history_is_too_old() {
        let store = Store::memory(16);
        let first = put(&store, "a");
        for i in 0..40 {
            put(&store, &format!("c{i}"));
        }
        assert!(
            store
                .list_at("/configmaps", None, None, Some(first))
                .is_err()
        );
    }
}
