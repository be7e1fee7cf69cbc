//! The HTTPS accept loop, with the hygiene a server facing careless or hostile clients
//! needs: a bound on open connections, a TLS handshake timeout, idle timeouts on
//! kept-alive connections, back-off when `accept` fails (at the file-descriptor limit it
//! fails at once, every time) and rate-limited logging of repeated errors. Connections that
//! have shown no valid token are few and short-lived, and one client (one token) holds at
//! most half the connections ([`Admission`]), so idle or hostile sockets cannot take the
//! slots everyone else needs.

use crate::apiserver::{ApiServer, Credential};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tower::ServiceExt as _;

/// A client must finish the TLS handshake within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// An HTTP/1 connection waiting longer than this for a request's headers is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Streams one HTTP/2 connection may have open (watches included): `gantry sim kubelets`
/// runs thousands of nodes' watches over one (see `crate::client`).
pub const MAX_STREAMS: u32 = 1 << 16;
/// A connection that has sent no request with a valid token this long after it was accepted
/// is closed (kube-apiserver closes one that sends no request headers within 32 s).
pub const UNAUTHENTICATED_TIMEOUT: Duration = Duration::from_secs(32);
/// Accept back-off bounds (as Go's net/http: 5 ms doubling to 1 s).
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line per repeated error per this interval.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The most connections served at once: a margin below the open-file limit (the rest is
/// for the store, watches' files and sockets). Thousands of simulated nodes hold about three
/// connections each, so the open-file limit is the bound, not a fixed count.
pub fn connection_limit() -> usize {
    open_file_limit().saturating_sub(128).max(64)
}

/// This process's soft limit of open files (1,024 where it cannot be read).
pub fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(1024)
}

/// Logs the first of a run of equal errors, then at most one summary per [`LOG_EVERY`].
pub struct RateLimitedLog {
    what: &'static str,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            last: None,
            suppressed: 0,
        }
    }

    /// Whether this occurrence was logged (false: counted for the next summary).
    pub fn warn(&mut self, error: &dyn std::fmt::Display) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.suppressed += 1;
            return false;
        }
        tracing::warn!(what = self.what, %error, suppressed = self.suppressed, "repeated error (similar ones are logged at most every 5 s)");
        self.last = Some(now);
        self.suppressed = 0;
        true
    }
}

/// The next accept back-off after `cur` (none: the first failure).
fn next_backoff(cur: Option<Duration>) -> Duration {
    cur.map_or(BACKOFF_MIN, |d| (d * 2).min(BACKOFF_MAX))
}

/// Who may hold a connection. A connection is unauthenticated from `accept` until it sends a
/// request with a bearer token that the server accepts; unauthenticated connections are
/// capped at a quarter of the limit, and a new one past the cap closes the oldest (a client
/// that means business sends its request within milliseconds of connecting). Authenticated
/// connections count against their token: one client may hold half the limit. The cluster's
/// own credential (the admin token: the simulated nodes, the controllers, the kubeconfig's
/// user) is not held to a share: thousands of simulated nodes use it at once.
pub struct Admission {
    state: Mutex<AdmissionState>,
    unauthenticated_limit: usize,
    per_client_limit: usize,
}

#[derive(Default)]
struct AdmissionState {
    next: u64,
    /// Unauthenticated connections, oldest first, with the signal that closes each.
    unauthenticated: BTreeMap<u64, Arc<Notify>>,
    /// Authenticated connections per client (a hash of its token).
    clients: HashMap<u64, usize>,
}

/// One admitted connection; dropping it releases its place.
pub struct Conn {
    id: u64,
    admission: Arc<Admission>,
    /// Notified when the connection must close: to make room, or because a watch on it was
    /// closed for not reading.
    pub close: Arc<Notify>,
    client: Mutex<Client>,
}

/// Whose connection it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Client {
    Unknown,
    /// The cluster's own credential: counted against no share.
    Trusted,
    /// A client (a hash of its token) whose connections are counted.
    Counted(u64),
}

impl Admission {
    pub fn new(max_connections: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            unauthenticated_limit: (max_connections / 4).max(8),
            per_client_limit: (max_connections / 2).max(8),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AdmissionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new connection as unauthenticated, closing the oldest such one past the cap.
    pub fn accept(self: &Arc<Self>) -> Conn {
        let close = Arc::new(Notify::new());
        let mut st = self.lock();
        let id = st.next;
        st.next += 1;
        st.unauthenticated.insert(id, close.clone());
        while st.unauthenticated.len() > self.unauthenticated_limit {
            if let Some((_, oldest)) = st.unauthenticated.pop_first() {
                oldest.notify_one();
            }
        }
        Conn {
            id,
            admission: self.clone(),
            close,
            client: Mutex::new(Client::Unknown),
        }
    }

    /// Unauthenticated connections held now.
    pub fn unauthenticated(&self) -> usize {
        self.lock().unauthenticated.len()
    }
}

impl Conn {
    /// Records that this connection's client (`token`) was accepted; false if that client
    /// already holds its share of the connections.
    pub fn authenticate(&self, token: &[u8]) -> bool {
        let mut mine = self.client();
        if *mine != Client::Unknown {
            return true;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        token.hash(&mut h);
        let client = h.finish();
        let mut st = self.admission.lock();
        let held = st.clients.entry(client).or_default();
        if *held >= self.admission.per_client_limit {
            return false;
        }
        *held += 1;
        *mine = Client::Counted(client);
        st.unauthenticated.remove(&self.id);
        true
    }

    /// Records that this connection carries the cluster's own credential (no share).
    pub fn trust(&self) {
        let mut mine = self.client();
        if *mine == Client::Unknown {
            *mine = Client::Trusted;
            self.admission.lock().unauthenticated.remove(&self.id);
        }
    }

    fn client(&self) -> std::sync::MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_authenticated(&self) -> bool {
        *self.client() != Client::Unknown
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let client = *self.client();
        let mut st = self.admission.lock();
        st.unauthenticated.remove(&self.id);
        if let Client::Counted(c) = client
            && let Some(n) = st.clients.get_mut(&c)
        {
            *n -= 1;
            if *n == 0 {
                st.clients.remove(&c);
            }
        }
    }
}

/// 429 for a request over its client's share of the connections; the connection closes.
fn too_many_connections() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let mut r = crate::apiserver::status::ApiError::new(
        429,
        "TooManyRequests",
        "too many connections from this client; close some or retry later",
    )
    .into_response();
    r.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    r
}

/// The router as seen by one connection: the first request with a token the server accepts
/// authenticates the connection, counted against that client (over its share: 429 and the
/// connection closes, before the request is served).
fn per_connection(router: axum::Router, api: Arc<ApiServer>, conn: Arc<Conn>) -> ConnService {
    tower::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        let (router, api, conn) = (router.clone(), api.clone(), conn.clone());
        // Writes take turns by connection (`apiserver::fair`).
        req.extensions_mut()
            .insert(crate::apiserver::fair::Flow(conn.id));
        async move {
            if !conn.is_authenticated()
                && let Some(token) = req
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
            {
                match api.credential(token) {
                    Some(Credential::Cluster) => conn.trust(),
                    Some(Credential::Client) if !conn.authenticate(token.as_bytes()) => {
                        return Ok(too_many_connections());
                    }
                    _ => {}
                }
            }
            router.oneshot(req).await
        }
    })
    .boxed_clone()
}

type ConnService = tower::util::BoxCloneService<
    http::Request<hyper::body::Incoming>,
    axum::response::Response,
    std::convert::Infallible,
>;

/// Serves `api` on `listener` over TLS until `stop` changes.
pub async fn serve(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    api: Arc<ApiServer>,
    mut stop: watch::Receiver<bool>,
    max_connections: usize,
) {
    let router = api.clone().router();
    let slots = Arc::new(Semaphore::new(max_connections));
    let admission = Admission::new(max_connections);
    let mut conns = tokio::task::JoinSet::new();
    let mut backoff: Option<Duration> = None;
    let mut accept_log = RateLimitedLog::new("accepting a connection");
    loop {
        // At the limit, leave new connections in the kernel's backlog until one ends.
        let permit = tokio::select! {
            _ = stop.changed() => break,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                backoff = None;
                a
            }
            Err(e) => {
                accept_log.warn(&e);
                let d = next_backoff(backoff);
                backoff = Some(d);
                drop(permit);
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(d) => continue,
                }
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let conn = Arc::new(admission.accept());
        let service =
            TowerToHyperService::new(per_connection(router.clone(), api.clone(), conn.clone()));
        conns.spawn(async move {
            let _permit = permit;
            let unauthenticated_too_long = async {
                tokio::time::sleep(UNAUTHENTICATED_TIMEOUT).await;
                if conn.is_authenticated() {
                    std::future::pending::<()>().await;
                }
            };
            let served = crate::apiserver::watch::CLOSE_CONNECTION
                .scope(conn.close.clone(), serve_connection(tcp, peer, acceptor, service));
            tokio::select! {
                _ = served => {}
                _ = conn.close.notified() => {
                    tracing::debug!(%peer, "closed a connection (to make room, or a watch on it did not read)");
                }
                _ = unauthenticated_too_long => {
                    tracing::debug!(%peer, "closed a connection that sent no valid token");
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
}

/// The TLS handshake (bounded by [`HANDSHAKE_TIMEOUT`]) and HTTP on one connection.
async fn serve_connection(
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    service: TowerToHyperService<ConnService>,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(IDLE_TIMEOUT / 2))
        .keep_alive_timeout(HANDSHAKE_TIMEOUT)
        // A process of simulated kubelets holds every watch of its nodes on one connection.
        .max_concurrent_streams(MAX_STREAMS);
    if let Err(e) = builder
        .serve_connection_with_upgrades(TokioIo::new(tls), service)
        .await
    {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let n = next_backoff(d);
            seen.push(n.as_millis());
            d = Some(n);
        }
        assert_eq!(&seen[..4], &[5, 10, 20, 40]);
        assert_eq!(*seen.last().expect("some"), 1000);
    }

    #[test]
    fn repeated_errors_are_summarised() {
        let mut log = RateLimitedLog::new("test");
        let e = std::io::Error::other("too many open files");
        assert!(log.warn(&e));
        let logged = (0..10_000).filter(|_| log.warn(&e)).count();
        assert_eq!(logged, 0);
        assert_eq!(log.suppressed, 10_000);
        assert!(connection_limit() >= 64);
    }

    #[test]
    fn unauthenticated_connections_past_the_cap_close_the_oldest() {
        let adm = Admission::new(64); // 16 unauthenticated, 32 per client
        let first: Vec<Conn> = (0..16).map(|_| adm.accept()).collect();
        assert_eq!(adm.unauthenticated(), 16);
        // A client that authenticates leaves the unauthenticated pool.
        assert!(first[1].authenticate(b"Bearer a"));
        assert!(first[1].is_authenticated());
        assert_eq!(adm.unauthenticated(), 15);
        let _more: Vec<Conn> = (0..2).map(|_| adm.accept()).collect();
        assert_eq!(adm.unauthenticated(), 16);
        // The oldest unauthenticated one (0) was told to close; the authenticated one was not.
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let mut told = |c: &Conn| {
            let n = c.close.notified();
            futures::pin_mut!(n);
            n.poll(&mut cx).is_ready()
        };
        use std::future::Future as _;
        assert!(told(&first[0]));
        assert!(!told(&first[1]));
        assert!(!told(&first[3]));
        drop(first);
        assert_eq!(adm.unauthenticated(), 2);
    }

    #[test]
    fn one_client_holds_at_most_half_the_connections() {
        let adm = Admission::new(64);
        let conns: Vec<Conn> = (0..33).map(|_| adm.accept()).collect();
        let ok = conns.iter().filter(|c| c.authenticate(b"Bearer a")).count();
        assert_eq!(ok, 32);
        assert!(
            conns[32].authenticate(b"Bearer b"),
            "another client still gets in"
        );
        drop(conns);
        let c = adm.accept();
        assert!(
            c.authenticate(b"Bearer a"),
            "places come back when connections end"
        );
    }

    #[test]
    fn the_clusters_own_credential_is_held_to_no_share() {
        let adm = Admission::new(64); // 16 unauthenticated, 32 per client
        let conns: Vec<Conn> = (0..40).map(|_| adm.accept()).collect();
        conns.iter().for_each(Conn::trust);
        assert!(conns.iter().all(Conn::is_authenticated));
        assert_eq!(adm.unauthenticated(), 0);
        // Trusted connections take nothing from a counted client's share.
        let others: Vec<Conn> = (0..32).map(|_| adm.accept()).collect();
        assert!(others.iter().all(|c| c.authenticate(b"Bearer a")));
        drop(conns);
        assert!(adm.lock().clients.values().all(|n| *n == 32));
    }
}
