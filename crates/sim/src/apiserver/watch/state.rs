//! What the server keeps for all its watches: the counts of open and slow watches
//! (`/metrics`). (Each event carries its own JSON: [`crate::store::Event::json`].)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

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
    use crate::store::{Event, EventType, ObjKey};
    use serde_json::{Value, json};
    use std::sync::Arc;

    #[test]
    fn an_event_is_encoded_once_for_all_its_watchers() {
        let e = Event {
            rv: 7,
            kind: EventType::Modified,
            key: ObjKey {
                gr: "pods".into(),
                namespace: "default".into(),
                name: "p7".into(),
            },
            object: Arc::new(json!({"metadata": {"name": "p7", "resourceVersion": "7"}})),
            prev: None,
            prev_json: None,
            encoded: Default::default(),
        };
        let (a, b) = (e.json(), e.json());
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
    }
}
