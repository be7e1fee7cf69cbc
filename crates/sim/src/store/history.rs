//! The events kept for watches that resume from an older resourceVersion and for lists at an
//! older one. The newest [`LIVE_EVENTS`] are what the live ring holds, decoded; older ones
//! keep their objects as the compact JSON the store keeps (a `serde_json::Value` takes about
//! six times its JSON), decoded again only when a watch or list reaches back that far. The history
//! is bounded by a count and by the bytes of its packed objects; what falls off is compacted
//! (410 Gone for a watch or list from before it, as etcd's compaction).

use super::backend::ObjKey;
use super::event::{Event, EventType};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Events whose objects stay decoded: what the live ring holds, so it pins nothing more. A
/// watcher further behind goes on from the packed history, which has every event the ring
/// had; so the ring needs to cover only a burst, and each slot pins two decoded objects.
pub const LIVE_EVENTS: usize = 512;

/// An object as JSON.
type Packed = Arc<[u8]>;

/// The requested watch start is older than the kept history.
#[derive(Debug, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub struct TooOld {
    pub requested: u64,
    pub oldest: u64,
}

/// One kept event as [`History::census`] tells it: its object and prev when decoded, else
/// the bytes it holds packed.
pub(super) type Census<'a> = Result<[Option<&'a Arc<Value>>; 2], usize>;

/// One kept event: decoded (the newest) or with its objects as JSON.
#[derive(Clone)]
pub enum Kept {
    Live(Arc<Event>),
    Packed {
        rv: u64,
        kind: EventType,
        key: ObjKey,
        object: Packed,
        prev: Option<Packed>,
        /// The nodes the object and its prev were bound to (`spec.nodeName`): a watch of one
        /// node's pods picks its events without decoding.
        nodes: [Option<Arc<str>>; 2],
        /// What this entry adds to the history's bytes (a prev shared with the entry
        /// before counts there).
        bytes: usize,
    },
}

impl Kept {
    pub fn rv(&self) -> u64 {
        match self {
            Kept::Live(e) => e.rv,
            Kept::Packed { rv, .. } => *rv,
        }
    }

    pub fn key(&self) -> &ObjKey {
        match self {
            Kept::Live(e) => &e.key,
            Kept::Packed { key, .. } => key,
        }
    }

    /// Whether the object was or is bound to `node`.
    pub(super) fn on_node(&self, node: &str) -> bool {
        use super::by_node::node_of;
        match self {
            Kept::Live(e) => {
                node_of(&e.object) == Some(node)
                    || e.prev.as_deref().and_then(node_of) == Some(node)
            }
            Kept::Packed { nodes, .. } => nodes.iter().flatten().any(|n| &**n == node),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Kept::Live(_) => 0,
            Kept::Packed { bytes, .. } => *bytes,
        }
    }

    pub fn kind(&self) -> EventType {
        match self {
            Kept::Live(e) => e.kind,
            Kept::Packed { kind, .. } => *kind,
        }
    }

    /// The object before the change, for a list at an older version: as JSON where the
    /// event keeps it so (decoded only if read), else decoded.
    pub fn prev_listed(&self) -> Option<super::listed::Listed> {
        use super::listed::{Listed, PackedVersion};
        match self {
            Kept::Live(e) => match (&e.prev_json, &e.prev) {
                (Some(j), _) => Some(Listed::Packed(Arc::new(PackedVersion::new(j.clone())))),
                (None, Some(v)) => Some(Listed::Old(v.clone())),
                (None, None) => None,
            },
            Kept::Packed { prev, .. } => prev
                .as_ref()
                .map(|j| Listed::Packed(Arc::new(PackedVersion::new(j.clone())))),
        }
    }

    /// The object as JSON, if kept so (a watcher that needs nothing else sends it as is).
    pub fn json(&self) -> Option<&Arc<[u8]>> {
        match self {
            Kept::Live(_) => None,
            Kept::Packed { object, .. } => Some(object),
        }
    }

    /// The event, with its objects decoded.
    pub fn event(&self) -> Option<Arc<Event>> {
        match self {
            Kept::Live(e) => Some(e.clone()),
            Kept::Packed {
                rv,
                kind,
                key,
                object,
                prev,
                ..
            } => Some(Arc::new(Event {
                rv: *rv,
                kind: *kind,
                key: key.clone(),
                object: Arc::new(unpack(object)?),
                prev: match prev {
                    Some(p) => Some(Arc::new(unpack(p)?)),
                    None => None,
                },
                prev_json: prev.clone(),
                encoded: object.clone().into(),
            })),
        }
    }
}

fn unpack(b: &[u8]) -> Option<Value> {
    match serde_json::from_slice(b) {
        Ok(v) => Some(v),
        Err(e) => {
            // Written by `pack` from a Value: cannot fail short of a bug.
            tracing::error!(error = %e, "a packed history object does not decode");
            None
        }
    }
}

fn pack(v: &Value) -> Packed {
    serde_json::to_vec(v).unwrap_or_default().into()
}

pub(super) struct History {
    kept: VecDeque<Kept>,
    /// Entries from this index on are live.
    live_from: usize,
    /// How many of the newest stay live ([`LIVE_EVENTS`]).
    live: usize,
    limit: usize,
    byte_limit: usize,
    packed_bytes: usize,
    /// Per object, its newest packed version: the next event's `prev` is usually those same
    /// bytes (the store keeps one copy of a version), counted once in `packed_bytes`.
    newest: HashMap<ObjKey, Packed>,
    /// Events at or below this rv are no longer kept.
    compacted: u64,
}

impl History {
    pub(super) fn new(limit: usize, byte_limit: usize, compacted: u64) -> Self {
        Self {
            kept: VecDeque::new(),
            live_from: 0,
            live: LIVE_EVENTS,
            limit: limit.max(16),
            byte_limit,
            packed_bytes: 0,
            newest: HashMap::new(),
            compacted,
        }
    }

    /// Whether the history still reaches back to `rv`: a watch or list from there is served,
    /// else it is too old (410).
    pub(super) fn reaches(&self, rv: u64) -> Result<(), TooOld> {
        if rv < self.compacted {
            return Err(TooOld {
                requested: rv,
                oldest: self.compacted,
            });
        }
        Ok(())
    }

    /// Keeps `ev`. Returns the events that left the live ring: dropping one frees its decoded
    /// objects, which the caller does once it no longer holds the store's lock.
    #[must_use = "drop the retired events outside the store's lock"]
    pub(super) fn push(&mut self, ev: Arc<Event>) -> Vec<Arc<Event>> {
        self.kept.push_back(Kept::Live(ev));
        let mut retired = Vec::new();
        while self.kept.len() - self.live_from > self.live {
            retired.extend(self.pack_oldest_live());
        }
        while self.kept.len() > self.limit
            || (self.packed_bytes > self.byte_limit && self.live_from > 0)
        {
            let Some(old) = self.kept.pop_front() else {
                break;
            };
            self.live_from = self.live_from.saturating_sub(1);
            self.packed_bytes -= old.bytes();
            self.compacted = old.rv();
            if let Some(p) = self.newest.get(old.key())
                && let Kept::Packed { object, .. } = &old
                && Arc::ptr_eq(p, object)
            {
                self.newest.remove(old.key());
            }
        }
        retired
    }

    /// Packs the oldest live event; returns it.
    fn pack_oldest_live(&mut self) -> Option<Arc<Event>> {
        let i = self.live_from;
        let Some(Kept::Live(e)) = self.kept.get(i) else {
            self.live_from += 1;
            return None;
        };
        let e = e.clone();
        let mut bytes = 0;
        let prev = match (&e.prev_json, &e.prev) {
            (Some(json), _) => {
                if !self
                    .newest
                    .get(&e.key)
                    .is_some_and(|p| Arc::ptr_eq(p, json))
                {
                    bytes += json.len();
                }
                Some(json.clone())
            }
            (None, Some(p)) => {
                let packed = pack(p);
                bytes += packed.len();
                Some(packed)
            }
            (None, None) => None,
        };
        let object = e.json();
        bytes += object.len();
        if e.kind == EventType::Deleted {
            self.newest.remove(&e.key);
        } else {
            self.newest.insert(e.key.clone(), object.clone());
        }
        let node = |v: &Value| super::by_node::node_of(v).map(Arc::<str>::from);
        let kept = Kept::Packed {
            rv: e.rv,
            kind: e.kind,
            key: e.key.clone(),
            object,
            prev,
            nodes: [node(&e.object), e.prev.as_deref().and_then(node)],
            bytes,
        };
        self.packed_bytes += bytes;
        self.kept[i] = kept;
        self.live_from += 1;
        Some(e)
    }

    /// The kept events newer than `rv`, oldest first.
    pub(super) fn since(&self, rv: u64) -> Vec<Kept> {
        self.since_where(rv, |_| true)
    }

    /// The kept events newer than `rv` that `keep` takes, oldest first (cheap: packed ones
    /// stay packed): all of them, or one object's, or one node's pods'.
    pub(super) fn since_where(&self, rv: u64, keep: impl Fn(&Kept) -> bool) -> Vec<Kept> {
        let start = self.kept.partition_point(|k| k.rv() <= rv);
        self.kept
            .range(start..)
            .filter(|k| keep(k))
            .cloned()
            .collect()
    }

    /// The kept events newer than `at`, newest first, for one resource (`gr`): what a list
    /// at `at` undoes.
    pub(super) fn undo_since(&self, at: u64, gr: &str) -> impl Iterator<Item = &Kept> {
        self.kept
            .iter()
            .rev()
            .take_while(move |k| k.rv() > at)
            .filter(move |k| k.key().gr == gr)
    }

    /// Per kept event: its resource, and its objects when decoded (live) or the bytes it
    /// holds packed (for the store's census).
    pub(super) fn census(&self) -> impl Iterator<Item = (&str, Census<'_>)> {
        self.kept.iter().map(|k| match k {
            Kept::Live(e) => (e.key.gr.as_str(), Ok([Some(&e.object), e.prev.as_ref()])),
            Kept::Packed { key, bytes, .. } => (key.gr.as_str(), Err(*bytes)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> ObjKey {
        ObjKey::configmap(name)
    }

    /// `n` modifications of one object after its creation, each a new version.
    fn versions(h: &mut History, n: u64) -> Vec<Arc<Event>> {
        let mut prev: Option<Arc<Value>> = None;
        let mut out: Vec<Arc<Event>> = Vec::new();
        for rv in 1..=n {
            let obj = Arc::new(json!({"metadata": {"name": "a"}, "data": {"n": rv.to_string()}}));
            let ev = Arc::new(Event {
                rv,
                kind: if prev.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                },
                key: key("a"),
                object: obj.clone(),
                prev: prev.replace(obj),
                // As the store does: the prev's bytes are the event before's.
                prev_json: out.last().map(|e| e.json()),
                encoded: Default::default(),
            });
            let _retired = h.push(ev.clone());
            out.push(ev);
        }
        out
    }

    fn small(limit: usize, bytes: usize) -> History {
        let mut h = History::new(limit, bytes, 0);
        h.live = 4;
        h
    }

    #[test]
    fn older_events_come_back_from_their_packed_form_unchanged() {
        let mut h = small(100, usize::MAX);
        let sent = versions(&mut h, 20);
        assert_eq!(h.live_from, 16, "all but the newest four are packed");
        let back: Vec<Arc<Event>> = h.since(0).iter().filter_map(Kept::event).collect();
        assert_eq!(back.len(), 20);
        assert!(h.since(0)[0].json().is_some() && h.since(0)[19].json().is_none());
        for (a, b) in sent.iter().zip(&back) {
            assert_eq!((a.rv, a.kind, &a.key), (b.rv, b.kind, &b.key));
            assert_eq!(a.object, b.object);
            assert_eq!(a.prev, b.prev);
        }
        assert_eq!(h.since(17).len(), 3);
    }

    #[test]
    fn a_version_is_packed_once_though_two_events_hold_it() {
        let mut h = small(100, usize::MAX);
        let sent = versions(&mut h, 20);
        let one: usize = sent[..16]
            .iter()
            .map(|e| serde_json::to_vec(&*e.object).map_or(0, |b| b.len()))
            .sum();
        assert_eq!(
            h.packed_bytes, one,
            "each prev shares the bytes of the version before"
        );
    }

    #[test]
    fn the_byte_bound_compacts_the_oldest_packed_events() {
        let size = serde_json::to_vec(&json!({"metadata": {"name": "a"}, "data": {"n": "10"}}))
            .map_or(0, |b| b.len());
        let mut h = small(100, size * 5);
        versions(&mut h, 30);
        assert!(
            h.packed_bytes <= size * 5,
            "{} > {}",
            h.packed_bytes,
            size * 5
        );
        assert!(h.compacted >= 20, "compacted at {}", h.compacted);
        assert_eq!(h.since(h.compacted).len() as u64, 30 - h.compacted);
        // The live events are never dropped for bytes.
        assert!(h.since(26).len() == 4);
    }

    #[test]
    fn undoing_reads_packed_prevs() {
        let mut h = small(100, usize::MAX);
        let sent = versions(&mut h, 10);
        let undo: Vec<_> = h.undo_since(2, "/configmaps").collect();
        assert_eq!(undo.len(), 8);
        // Newest first; the oldest undone (rv 3) restores version 2.
        assert_eq!(undo[7].kind(), EventType::Modified);
        assert!(undo[7].json().is_some(), "packed");
        assert_eq!(
            undo[7].prev_listed().and_then(|l| l.value()).as_deref(),
            Some(&*sent[1].object)
        );
        assert_eq!(h.undo_since(2, "/secrets").count(), 0);
    }
}
