//! The HTTPS accept loop, with the hygiene a server facing careless or hostile clients
//! needs: a bound on open connections, a TLS handshake timeout, idle timeouts on
//! kept-alive connections, back-off when `accept` fails (at the file-descriptor limit it
//! fails at once, every time) and rate-limited logging of repeated errors.

use crate::apiserver::ApiServer;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// A client must finish the TLS handshake within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// An HTTP/1 connection waiting longer than this for a request's headers is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Accept back-off bounds (as Go's net/http: 5 ms doubling to 1 s).
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line per repeated error per this interval.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The most connections served at once: a margin below the open-file limit (the rest is
/// for the store, watches' files and sockets), at most 10,000.
pub fn connection_limit() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(1024);
    soft.saturating_sub(128).clamp(64, 10_000)
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

/// Serves `api` on `listener` over TLS until `stop` changes.
pub async fn serve(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    api: Arc<ApiServer>,
    mut stop: watch::Receiver<bool>,
    max_connections: usize,
) {
    let router = api.router();
    let slots = Arc::new(Semaphore::new(max_connections));
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
        let service = TowerToHyperService::new(router.clone());
        conns.spawn(async move {
            let _permit = permit;
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
                .keep_alive_timeout(HANDSHAKE_TIMEOUT);
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
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
}
