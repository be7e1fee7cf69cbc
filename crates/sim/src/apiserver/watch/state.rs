//! What the server keeps for all its watches: the recent events' JSON every watcher of a
//! built-in kind sends, and the counts of open and slow watches (`/metrics`).

use crate::store::Event;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// How many recent events' encodings are kept: watchers send an event within moments of each
/// other, so a short window serves them all without holding the whole watch history twice.
const ENCODINGS_KEPT: usize = 4096;

/// The JSON of recent events by resourceVersion (unique per store event).
#[derive(Default)]
pub struct Encodings(Mutex<Recent>);

/// Encodings by resourceVersion, and the order they came in (the oldest goes first).
type Recent = (HashMap<u64, Arc<[u8]>>, VecDeque<u64>);

impl Encodings {
    pub(super) fn get(&self, ev: &Event) -> Arc<[u8]> {
        if let Ok(g) = self.0.lock()
            && let Some(b) = g.0.get(&ev.rv)
        {
            return b.clone();
        }
        let b: Arc<[u8]> = serde_json::to_vec(&*ev.object).unwrap_or_default().into();
        if let Ok(mut g) = self.0.lock() {
            let (map, order) = &mut *g;
            if map.insert(ev.rv, b.clone()).is_none() {
                order.push_back(ev.rv);
            }
            while order.len() > ENCODINGS_KEPT {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
        b
    }
}

/// Open watches and those closed for being too slow (`/metrics`).
#[derive(Default)]
pub struct WatchCounts {
    pub(super) open: AtomicI64,
    terminated: Mutex<BTreeMap<String, u64>>,
}

impl WatchCounts {
    pub fn open(&self) -> i64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Watchers closed for not reading, over all resources.
    pub fn terminated(&self) -> u64 {
        self.terminated
            .lock()
            .map(|m| m.values().sum())
            .unwrap_or(0)
    }

    pub(super) fn terminate(&self, resource: &str) {
        if let Ok(mut m) = self.terminated.lock() {
            *m.entry(resource.to_string()).or_default() += 1;
        }
    }

    /// The Prometheus text exposition, with upstream's metric names.
    pub fn exposition(&self) -> String {
        let mut out = format!(
            "# HELP apiserver_registered_watchers Number of currently registered watchers.\n\
             # TYPE apiserver_registered_watchers gauge\napiserver_registered_watchers {}\n\
             # HELP apiserver_terminated_watchers_total Counter of watchers closed due to unresponsiveness broken by resource type.\n\
             # TYPE apiserver_terminated_watchers_total counter\n",
            self.open()
        );
        for (r, n) in self
            .terminated
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
        {
            let _ = writeln!(
                out,
                "apiserver_terminated_watchers_total{{resource=\"{r}\"}} {n}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::line;
    use super::*;
    use crate::store::{EventType, ObjKey};
    use serde_json::{Value, json};

    fn event(rv: u64) -> Event {
        Event {
            rv,
            kind: EventType::Modified,
            key: ObjKey {
                gr: "pods".into(),
                namespace: "default".into(),
                name: format!("p{rv}"),
            },
            object: Arc::new(
                json!({"metadata": {"name": format!("p{rv}"), "resourceVersion": rv.to_string()}}),
            ),
            prev: None,
        }
    }

    #[test]
    fn an_event_is_encoded_once_and_the_window_stays_bounded() {
        let enc = Encodings::default();
        let e = event(7);
        let a = enc.get(&e);
        let b = enc.get(&e);
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second watcher reuses the first's bytes"
        );
        let back: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(back, *e.object);
        let l = line("MODIFIED", &e.object);
        assert!(l.ends_with(b"}\n"), "one event a line");
        let ev: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(ev, json!({"type": "MODIFIED", "object": *e.object}));
        for rv in 8..(8 + ENCODINGS_KEPT as u64 + 10) {
            enc.get(&event(rv));
        }
        let g = enc.0.lock().unwrap();
        assert_eq!(g.0.len(), ENCODINGS_KEPT);
        assert_eq!(g.1.len(), ENCODINGS_KEPT);
        assert!(!g.0.contains_key(&7), "the oldest went first");
    }
}
