//! Watch streams: newline-delimited `{"type", "object"}` events after a resourceVersion,
//! with bookmarks, timeouts, 410 Gone for compacted versions and the streaming list
//! (`sendInitialEvents=true`, ended by a bookmark annotated `k8s.io/initial-events-end`).

use super::ApiServer;
use super::objects::Target;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use crate::store::{Event, EventType};
use axum::body::Bytes;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How often an idle watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);
/// The longest a watch stays open when the client names no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

#[derive(Debug, Default, Clone)]
pub struct WatchOpts {
    pub resource_version: Option<String>,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub send_initial_events: Option<bool>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

struct Filter {
    target: Target,
    gr: String,
    opts: WatchOpts,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.opts.labels.matches(obj) && self.opts.fields.matches(obj)
    }

    /// The line a watcher of this filter gets for a store event, if any.
    fn line_for(&self, ev: &Event, encodings: &Encodings) -> Option<Bytes> {
        let kind = self.translate(ev)?;
        if !self.target.info.builtin {
            return Some(line(kind.as_str(), &self.target.present(&ev.object)));
        }
        // Built-in kinds are sent as stored: one encoding per event, whatever the watchers.
        Some(encoded_line(kind.as_str(), &encodings.get(ev)))
    }

    /// The event type a watcher of this filter sees for a store event, if any.
    fn translate(&self, ev: &Event) -> Option<EventType> {
        if ev.key.gr != self.gr {
            return None;
        }
        if self.target.info.namespaced
            && !self.target.namespace.is_empty()
            && ev.key.namespace != self.target.namespace
        {
            return None;
        }
        let now = self.matches(&ev.object);
        let kind = match (ev.kind, ev.prev.as_deref().map(|p| self.matches(p))) {
            (EventType::Modified, Some(true)) if now => EventType::Modified,
            (EventType::Modified, Some(true)) => EventType::Deleted,
            (EventType::Modified, _) if now => EventType::Added,
            (EventType::Modified, _) => return None,
            (k, _) if now => k,
            _ => return None,
        };
        Some(kind)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"kind": self.target.info.kind, "apiVersion": self.target.info.api_version(&self.target.version), "metadata": meta})
    }
}

/// How many recent events' encodings are kept: watchers send an event within moments of each
/// other, so a short window serves them all without holding the whole watch history twice.
const ENCODINGS_KEPT: usize = 4096;

/// The JSON of recent events by resourceVersion (unique per store event).
#[derive(Default)]
pub struct Encodings(Mutex<Recent>);

/// Encodings by resourceVersion, and the order they came in (the oldest goes first).
type Recent = (HashMap<u64, Arc<[u8]>>, VecDeque<u64>);

impl Encodings {
    fn get(&self, ev: &Event) -> Arc<[u8]> {
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

fn line(kind: &str, object: &Value) -> Bytes {
    encoded_line(kind, &serde_json::to_vec(object).unwrap_or_default())
}

/// One event line, `{"type":KIND,"object":OBJECT}` and a newline, around an object already
/// encoded as JSON.
fn encoded_line(kind: &str, object: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(object.len() + 32);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(kind.as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    v.extend_from_slice(object);
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse().map_err(|_| {
        ApiError::bad_request(format!("invalid resourceVersion {rv:?}: must be a number"))
    })
}

/// Starts a watch; the returned channel yields the response body chunks.
pub fn start(
    srv: Arc<ApiServer>,
    target: Target,
    opts: WatchOpts,
) -> Result<mpsc::Receiver<Result<Bytes, std::convert::Infallible>>, ApiError> {
    let filter = Filter {
        gr: target.info.gr(),
        target,
        opts,
    };
    let rv = filter.opts.resource_version.clone().unwrap_or_default();
    let initial = match filter.opts.send_initial_events {
        Some(b) => b,
        None => rv.is_empty() || rv == "0",
    };
    let (tx, rx) = mpsc::channel(256);
    let mut first: Vec<Bytes> = Vec::new();
    let (start_rv, backlog, sub) = if initial || rv.is_empty() || rv == "0" {
        let list = srv.list(
            &filter.target,
            &super::objects::ListOpts {
                labels: filter.opts.labels.clone(),
                fields: filter.opts.fields.clone(),
                ..Default::default()
            },
        )?;
        let list_rv = parse_rv(
            list.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("0"),
        )?;
        if initial {
            for item in list["items"].as_array().into_iter().flatten() {
                first.push(line("ADDED", item));
            }
        }
        if filter.opts.send_initial_events == Some(true) {
            first.push(line("BOOKMARK", &filter.bookmark(list_rv, true)));
        }
        match srv.store.watch_from(list_rv) {
            Ok((b, s)) => (list_rv, b, Some(s)),
            Err(e) => return Err(ApiError::gone(e.to_string())),
        }
    } else {
        let want = parse_rv(&rv)?;
        match srv.store.watch_from(want) {
            Ok((b, s)) => (want, b, Some(s)),
            Err(e) => {
                let status = ApiError::gone(e.to_string()).to_status();
                first.push(line("ERROR", &status));
                (want, Vec::new(), None)
            }
        }
    };
    tokio::spawn(async move {
        for chunk in first {
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
        let Some(mut sub) = sub else { return };
        let mut last = start_rv;
        for ev in backlog {
            last = last.max(ev.rv);
            if let Some(l) = filter.line_for(&ev, &srv.encodings)
                && tx.send(Ok(l)).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(filter.opts.timeout.unwrap_or(DEFAULT_TIMEOUT));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                _ = tick.tick(), if filter.opts.bookmarks => {
                    if tx.send(Ok(line("BOOKMARK", &filter.bookmark(last, false)))).await.is_err() {
                        return;
                    }
                }
                got = sub.recv() => match got {
                    Ok(ev) => {
                        if ev.rv <= last {
                            continue;
                        }
                        last = ev.rv;
                        if let Some(l) = filter.line_for(&ev, &srv.encodings)
                            && tx.send(Ok(l)).await.is_err()
                        {
                            return;
                        }
                    }
                    // Too slow to keep up, or shutting down: end the watch; the client
                    // resumes from its last resourceVersion (or relists on 410).
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ObjKey;

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
