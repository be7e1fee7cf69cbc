//! Watch streams: newline-delimited `{"type", "object"}` events after a resourceVersion,
//! with bookmarks, timeouts, 410 Gone for compacted versions and the streaming list
//! (`sendInitialEvents=true`, ended by a bookmark annotated `k8s.io/initial-events-end`).

pub mod state;

use super::selectors::{FieldSelector, LabelSelector};
use super::server::ApiServer;
use super::status::ApiError;
use super::target::Target;
use crate::store::{Event, EventType, Kept, Listed, ObjKey, TooOld, WatchStart};
use axum::body::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How often a watch that allows bookmarks gets one (upstream's `defaultBookmarkFrequency`).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// A watch that allows bookmarks gets one this long before its deadline, as upstream's.
const BOOKMARK_BEFORE_DEADLINE: Duration = Duration::from_secs(2);
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
    /// Send each object as `PartialObjectMetadata` of this `meta.k8s.io` version.
    pub metadata: Option<&'static str>,
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
    fn line_for(&self, ev: &Event) -> Option<Line> {
        let kind = self.translate(ev)?;
        let json = self.target.info.builtin.then(|| ev.json());
        self.line_of(kind, json.as_ref(), || Some(ev.object.clone()))
    }

    /// The line of an object: a built-in kind's from its stored JSON, `json` (sent as it is,
    /// one encoding shared by every watcher, or cut to its metadata), else from the object
    /// `decoded` gives. `None` only where neither is to be had.
    fn line_of(
        &self,
        kind: EventType,
        json: Option<&Arc<[u8]>>,
        decoded: impl FnOnce() -> Option<Arc<Value>>,
    ) -> Option<Line> {
        let stored = json.filter(|_| self.target.info.builtin);
        let Some(v) = self.opts.metadata else {
            return match stored {
                Some(json) => Some(Line::shared(kind, json.clone())),
                None => Some(Line::Own(line(
                    kind.as_str(),
                    &self.target.present(&*decoded()?),
                ))),
            };
        };
        let partial = match stored.and_then(|json| super::partial::encode_json(json, v)) {
            Some(partial) => partial,
            None => super::partial::encode(&*decoded()?, v),
        };
        Some(Line::Own(encoded_line(kind.as_str(), &partial)))
    }

    /// [`Filter::line_for`] for a kept event: an older one's JSON goes out as it was kept
    /// (or cut to its metadata) when nothing needs it decoded (a built-in kind, no selector).
    fn line_for_kept(&self, k: &Kept) -> Option<Line> {
        // What the key decides comes first: nothing is decoded for another object.
        if !self.wants(k.key()) {
            return None;
        }
        match k.json() {
            Some(json) if self.plain() => self.line_of(k.kind(), Some(json), || None),
            _ => self.line_for(&*k.event()?),
        }
    }

    /// The kept events after `rv` and a receiver of what follows: of the one object a
    /// single-object watch names, or of one node's pods (woken by their events only), else of
    /// all objects.
    fn watch_from(&self, srv: &ApiServer, rv: u64) -> Result<WatchStart, TooOld> {
        if let Some(name) = self.opts.fields.name() {
            return srv.store.watch_name_from(rv, &self.gr, name);
        }
        match self.node() {
            Some(node) => srv.store.watch_node_from(rv, node),
            None => srv.store.watch_from(rv),
        }
    }

    /// The node of a watch of one node's pods (`spec.nodeName=<node>`), which the store's node
    /// index serves.
    fn node(&self) -> Option<&str> {
        (self.gr == crate::store::PODS)
            .then(|| self.opts.fields.node_name())
            .flatten()
            .filter(|n| !n.is_empty())
    }

    /// Whether the store sends this watch only the events that may concern it (one object's,
    /// or one node's pods'), rather than every event.
    fn indexed(&self) -> bool {
        self.opts.fields.name().is_some() || self.node().is_some()
    }

    /// A built-in kind with no selector: every object goes out from its stored JSON, as it
    /// is or cut to its metadata, nothing decoded.
    fn plain(&self) -> bool {
        self.target.info.builtin && self.opts.labels.is_empty() && self.opts.fields.is_empty()
    }

    /// Whether events of this object can concern the watcher at all: its resource, its
    /// namespace, and (a single-object watch) its name.
    fn wants(&self, key: &ObjKey) -> bool {
        let other_ns = self.target.info.namespaced
            && !self.target.namespace.is_empty()
            && key.namespace != self.target.namespace;
        let other_name = self.opts.fields.name().is_some_and(|n| n != key.name);
        key.gr == self.gr && !other_ns && !other_name
    }

    /// The event type a watcher of this filter sees for a store event, if any.
    fn translate(&self, ev: &Event) -> Option<EventType> {
        if !self.wants(&ev.key) {
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
        match self.opts.metadata {
            Some(v) => json!({"kind": "PartialObjectMetadata", "apiVersion": v, "metadata": meta}),
            None => {
                json!({"kind": self.target.info.kind, "apiVersion": self.target.info.api_version(&self.target.version), "metadata": meta})
            }
        }
    }
}

/// One event line as a watcher sends it: made for this watcher, or the event's shared JSON
/// between a prefix and a suffix (three chunks, no copy of the object per watcher).
enum Line {
    Own(Bytes),
    Shared(EventType, Bytes),
}

impl Line {
    fn shared(kind: EventType, json: Arc<[u8]>) -> Self {
        Line::Shared(kind, Bytes::from_owner(json))
    }
}

/// `{"type":KIND,"object":`, the part of a line before its object.
fn prefix(kind: EventType) -> &'static [u8] {
    match kind {
        EventType::Added => b"{\"type\":\"ADDED\",\"object\":",
        EventType::Modified => b"{\"type\":\"MODIFIED\",\"object\":",
        EventType::Deleted => b"{\"type\":\"DELETED\",\"object\":",
    }
}

/// Queues the lines of kept events, moving `last` past each.
async fn send_backlog(
    tx: &Tx,
    filter: &Filter,
    backlog: Vec<Kept>,
    last: &mut u64,
) -> Result<(), Stop> {
    for k in backlog {
        *last = (*last).max(k.rv());
        if let Some(l) = filter.line_for_kept(&k) {
            send_line(tx, l).await?;
        }
    }
    Ok(())
}

/// Queues a live event's line, if it is newer than `last` and concerns the watcher.
async fn send_event(tx: &Tx, filter: &Filter, ev: &Event, last: &mut u64) -> Result<(), Stop> {
    if ev.rv <= *last {
        return Ok(());
    }
    *last = ev.rv;
    match filter.line_for(ev) {
        Some(l) => send_line(tx, l).await,
        None => Ok(()),
    }
}

/// Behind the store's live ring (or a single-object watch's): the history has every event
/// the ring let go, so the watch goes on from there with a fresh receiver. `false` once a
/// 410 was sent instead (the history was compacted too): the watch ends.
async fn resume(
    srv: &ApiServer,
    filter: &Filter,
    tx: &Tx,
    sub: &mut broadcast::Receiver<Arc<Event>>,
    last: &mut u64,
) -> Result<bool, Stop> {
    match filter.watch_from(srv, *last) {
        Ok((backlog, fresh)) => {
            *sub = fresh;
            send_backlog(tx, filter, backlog, last).await?;
            Ok(true)
        }
        Err(e) => {
            send(
                tx,
                line("ERROR", &ApiError::gone(e.to_string()).to_status()),
            )
            .await?;
            Ok(false)
        }
    }
}

/// Queues a line: a shared one goes as prefix, object and suffix.
async fn send_line(tx: &Tx, l: Line) -> Result<(), Stop> {
    match l {
        Line::Own(b) => send(tx, b).await,
        Line::Shared(kind, json) => {
            send(tx, Bytes::from_static(prefix(kind))).await?;
            send(tx, json).await?;
            send(tx, Bytes::from_static(b"}\n")).await
        }
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

/// Body chunks a watcher may have waiting for its client: its buffer, 64 events of up to
/// three chunks (a shared line's prefix, object and suffix). The stream behind it (HTTP/2
/// window or HTTP/1 write buffer, TLS, socket) adds a bounded amount.
pub const WATCHER_BUFFER: usize = 3 * 64;
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

/// Where a watch starts: the objects to send as ADDED first (a snapshot of the stored JSON,
/// shared, decoded one at a time as the client takes them only where a selector or a custom
/// kind's version needs it; never a list per watcher), the resourceVersion they are at, the
/// kept events after it and the live subscription.
struct Start {
    initial: Vec<Listed>,
    end_bookmark: bool,
    rv: u64,
    backlog: Vec<Kept>,
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
        let (objs, list_rv) = match filter.node() {
            Some(node) if initial => srv.store.listed_on_node(node, ns, None),
            _ if initial => srv.store.snapshot(&filter.gr, ns),
            _ => (Vec::new(), srv.store.current_rv()),
        };
        let (backlog, sub) = filter
            .watch_from(srv, list_rv)
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
    Ok(match filter.watch_from(srv, want) {
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
        if !super::selectors::selected(&filter.opts.labels, &filter.opts.fields, &item) {
            continue;
        }
        let Some(l) = filter.line_of(EventType::Added, item.json(), || item.value()) else {
            continue;
        };
        send_line(tx, l).await?;
    }
    if start.end_bookmark {
        send(tx, line("BOOKMARK", &filter.bookmark(start.rv, true))).await?;
    }
    let Some(mut sub) = start.sub else {
        return Ok(());
    };
    let mut last = start.rv;
    send_backlog(tx, filter, start.backlog, &mut last).await?;
    let timeout = filter.opts.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    // Upstream's cacher: a bookmark every minute, and one just before the watch's deadline,
    // so the client resumes from a version the history still keeps.
    let last_call = tokio::time::sleep(timeout.saturating_sub(BOOKMARK_BEFORE_DEADLINE));
    tokio::pin!(last_call);
    let mut last_call_due = filter.opts.bookmarks && timeout > BOOKMARK_BEFORE_DEADLINE;
    let mut tick = tokio::time::interval(BOOKMARK_EVERY);
    tick.tick().await;
    loop {
        let bookmark_now = tokio::select! {
            _ = &mut deadline => return Ok(()),
            _ = tx.closed() => return Err(Stop::Gone),
            _ = tick.tick(), if filter.opts.bookmarks => true,
            _ = &mut last_call, if last_call_due => {
                last_call_due = false;
                true
            }
            got = sub.recv() => {
                match got {
                    Ok(ev) => send_event(tx, filter, &ev, &mut last).await?,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if !resume(srv, filter, tx, &mut sub, &mut last).await? {
                            return Ok(());
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                }
                false
            }
        };
        if !bookmark_now {
            continue;
        }
        if filter.indexed() {
            // A single-object or one node's watch sees only the events that may concern it,
            // so its bookmark carries the store's version: every event up to it has been
            // queued for this watch (the store sends under the lock that version is read
            // under), and those still queued go out first.
            let now = srv.store.current_rv();
            loop {
                match sub.try_recv() {
                    Ok(ev) => send_event(tx, filter, &ev, &mut last).await?,
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                        if !resume(srv, filter, tx, &mut sub, &mut last).await? {
                            return Ok(());
                        }
                    }
                    Err(_) => break,
                }
            }
            last = last.max(now);
        }
        send(tx, line("BOOKMARK", &filter.bookmark(last, false))).await?;
    }
}
