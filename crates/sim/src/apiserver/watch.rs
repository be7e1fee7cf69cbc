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
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
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

/// Body chunks (event lines) a watcher may have waiting for its client: its buffer. The
/// stream behind it (HTTP/2 window or HTTP/1 write buffer, TLS, socket) adds a bounded amount.
pub const WATCHER_BUFFER: usize = 64;
/// A watcher whose buffer stays full this long is closed, as kube-apiserver's cacher closes
/// an unresponsive watcher ("Forcing watcher close due to unresponsiveness"): the client sees
/// the watch end and resumes from its last resourceVersion, or lists again on 410.
pub const SLOW_WATCHER_TIMEOUT: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// Closes the HTTP/1 connection a request came on (set by the accept loop around each
    /// connection). A watch closed for not reading ends its connection too: its client has
    /// left the server's bytes unread in the socket, so the connection could never be used
    /// again and would hold its buffers. HTTP/2 streams run on their own tasks and never see
    /// it; their flow-control window bounds them and the stream just ends.
    pub static CLOSE_CONNECTION: Arc<tokio::sync::Notify>;
}

/// Open watches and those closed for being too slow (`/metrics`).
#[derive(Default)]
pub struct WatchCounts {
    open: AtomicI64,
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

    fn terminate(&self, resource: &str) {
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

/// Counts a watch as open while it lives.
struct Registered(Arc<ApiServer>);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.watches.open.fetch_sub(1, Ordering::Relaxed);
    }
}

type Tx = mpsc::Sender<Result<Bytes, std::convert::Infallible>>;

/// Why a watch stops sending.
enum Stop {
    /// The client went away.
    Gone,
    /// Its buffer stayed full past [`SLOW_WATCHER_TIMEOUT`].
    Slow,
}

/// Queues one chunk, waiting at most [`SLOW_WATCHER_TIMEOUT`] for room.
async fn send(tx: &Tx, chunk: Bytes) -> Result<(), Stop> {
    match tx.try_send(Ok(chunk)) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(Stop::Gone),
        Err(mpsc::error::TrySendError::Full(c)) => {
            match tokio::time::timeout(SLOW_WATCHER_TIMEOUT, tx.send(c)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(Stop::Gone),
                Err(_) => Err(Stop::Slow),
            }
        }
    }
}

/// Where a watch starts: the objects to send as ADDED first (a snapshot of shared stored
/// objects, encoded one at a time as the client takes them, never a list per watcher), the
/// resourceVersion they are at, the kept events after it and the live subscription.
struct Start {
    initial: Vec<Arc<Value>>,
    end_bookmark: bool,
    rv: u64,
    backlog: Vec<Arc<Event>>,
    sub: Option<broadcast::Receiver<Arc<Event>>>,
    error: Option<Value>,
}

fn begin(srv: &ApiServer, filter: &Filter) -> Result<Start, ApiError> {
    let rv = filter.opts.resource_version.clone().unwrap_or_default();
    let from_now = rv.is_empty() || rv == "0";
    let initial = filter.opts.send_initial_events.unwrap_or(from_now);
    if initial || from_now {
        let ns = (filter.target.info.namespaced && !filter.target.namespace.is_empty())
            .then_some(filter.target.namespace.as_str());
        let (objs, list_rv) = if initial {
            srv.store.list(&filter.gr, ns, None)
        } else {
            (Vec::new(), srv.store.current_rv())
        };
        let (backlog, sub) = srv
            .store
            .watch_from(list_rv)
            .map_err(|e| ApiError::gone(e.to_string()))?;
        return Ok(Start {
            initial: objs,
            end_bookmark: filter.opts.send_initial_events == Some(true),
            rv: list_rv,
            backlog,
            sub: Some(sub),
            error: None,
        });
    }
    let want = parse_rv(&rv)?;
    Ok(match srv.store.watch_from(want) {
        Ok((backlog, sub)) => Start {
            initial: Vec::new(),
            end_bookmark: false,
            rv: want,
            backlog,
            sub: Some(sub),
            error: None,
        },
        Err(e) => Start {
            initial: Vec::new(),
            end_bookmark: false,
            rv: want,
            backlog: Vec::new(),
            sub: None,
            error: Some(ApiError::gone(e.to_string()).to_status()),
        },
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
    let start = begin(&srv, &filter)?;
    let (tx, rx) = mpsc::channel(WATCHER_BUFFER);
    srv.watches.open.fetch_add(1, Ordering::Relaxed);
    let registered = Registered(srv.clone());
    let close = CLOSE_CONNECTION.try_with(Arc::clone).ok();
    tokio::spawn(async move {
        let _registered = registered;
        if let Err(Stop::Slow) = run(&srv, &filter, start, &tx).await {
            tracing::debug!(resource = %filter.gr, "closing a watcher that does not read");
            srv.watches.terminate(&filter.target.info.plural);
            if let Some(c) = close {
                c.notify_one();
            }
        }
    });
    Ok(rx)
}

/// Sends a watch's events until it times out, its client goes or falls behind.
async fn run(srv: &ApiServer, filter: &Filter, start: Start, tx: &Tx) -> Result<(), Stop> {
    if let Some(status) = start.error {
        return send(tx, line("ERROR", &status)).await;
    }
    for item in start.initial {
        if !filter.matches(&item) {
            continue;
        }
        let l = if filter.target.info.builtin {
            encoded_line("ADDED", &serde_json::to_vec(&*item).unwrap_or_default())
        } else {
            line("ADDED", &filter.target.present(&item))
        };
        send(tx, l).await?;
    }
    if start.end_bookmark {
        send(tx, line("BOOKMARK", &filter.bookmark(start.rv, true))).await?;
    }
    let Some(mut sub) = start.sub else {
        return Ok(());
    };
    let mut last = start.rv;
    for ev in start.backlog {
        last = last.max(ev.rv);
        if let Some(l) = filter.line_for(&ev, &srv.encodings) {
            send(tx, l).await?;
        }
    }
    let deadline = tokio::time::sleep(filter.opts.timeout.unwrap_or(DEFAULT_TIMEOUT));
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(BOOKMARK_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => return Ok(()),
            _ = tx.closed() => return Err(Stop::Gone),
            _ = tick.tick(), if filter.opts.bookmarks => {
                send(tx, line("BOOKMARK", &filter.bookmark(last, false))).await?;
            }
            got = sub.recv() => match got {
                Ok(ev) => {
                    if ev.rv <= last {
                        continue;
                    }
                    last = ev.rv;
                    if let Some(l) = filter.line_for(&ev, &srv.encodings) {
                        send(tx, l).await?;
                    }
                }
                // Behind by more than the store's event ring, or shutting down: end the
                // watch; the client resumes from its last resourceVersion (or lists on 410).
                Err(broadcast::error::RecvError::Lagged(_)) => return Err(Stop::Slow),
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
        }
    }
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
