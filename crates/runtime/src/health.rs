//! The `/metrics` `/healthz` `/readyz` server every Gantry process serves.

use std::future::Future;
use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::routing::get;
use futures::FutureExt;
use futures::future::BoxFuture;

/// prometheus-client's OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus' classic text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

type Render = Arc<dyn Fn() -> BoxFuture<'static, String> + Send + Sync>;
type Ready = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the three endpoints answer.
#[derive(Clone)]
pub struct Endpoints {
    content_type: &'static str,
    metrics: Render,
    ready: Ready,
    not_ready: &'static str,
}

impl Endpoints {
    /// `/metrics` answers `render()` as `content_type`; `/readyz` is always ready.
    pub fn new(
        content_type: &'static str,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> Self {
        let render = Arc::new(render);
        Endpoints {
            content_type,
            metrics: Arc::new(move || {
                let r = render.clone();
                async move { r() }.boxed()
            }),
            ready: Arc::new(|| true),
            not_ready: "not ready",
        }
    }

    /// `/metrics` computed by a future (it reads something else first).
    pub fn new_async<F>(
        content_type: &'static str,
        render: impl Fn() -> F + Send + Sync + 'static,
    ) -> Self
    where
        F: Future<Output = String> + Send + 'static,
    {
        Endpoints {
            content_type,
            metrics: Arc::new(move || render().boxed()),
            ready: Arc::new(|| true),
            not_ready: "not ready",
        }
    }

    /// `/readyz` answers 503 with `why` while `ready()` is false.
    pub fn ready_when(
        mut self,
        ready: impl Fn() -> bool + Send + Sync + 'static,
        why: &'static str,
    ) -> Self {
        self.ready = Arc::new(ready);
        self.not_ready = why;
        self
    }

    pub fn router(self) -> axum::Router {
        let Endpoints {
            content_type,
            metrics,
            ready,
            not_ready,
        } = self;
        axum::Router::new()
            .route(
                "/metrics",
                get(move || {
                    let m = metrics.clone();
                    async move { ([(header::CONTENT_TYPE, content_type)], m().await) }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ok = ready();
                    async move {
                        if ok {
                            (StatusCode::OK, "ok")
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, not_ready)
                        }
                    }
                }),
            )
    }
}

/// Serve `endpoints` on `listener` until `shutdown` resolves.
pub fn serve(
    listener: tokio::net::TcpListener,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> futures::future::BoxFuture<'static, std::io::Result<()>> {
    serve_boxed(listener, endpoints, Box::pin(shutdown))
}

// Not generic and never inlined, so the body's state machine is compiled here once, not in
// every crate that calls [`serve`] (docs/benchmarks.md, "Build time").
#[inline(never)]
fn serve_boxed(
    listener: tokio::net::TcpListener,
    endpoints: Endpoints,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> futures::future::BoxFuture<'static, std::io::Result<()>> {
    Box::pin(serve_inner(listener, endpoints, shutdown))
}

async fn serve_inner(
    listener: tokio::net::TcpListener,
    endpoints: Endpoints,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> std::io::Result<()> {
    axum::serve(listener, endpoints.router())
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn metrics_health_and_readiness() {
        let ready = Arc::new(AtomicBool::new(false));
        let r = ready.clone();
        let e = Endpoints::new(PROMETHEUS_TEXT, || "up 1\n".into())
            .ready_when(move || r.load(Ordering::Relaxed), "cache not synced");
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(l, e, async {
            let _ = rx.await;
        }));
        let m = get(addr, "/metrics").await;
        assert!(
            m.starts_with("HTTP/1.1 200") && m.ends_with("up 1\n"),
            "{m}"
        );
        assert!(m.contains(PROMETHEUS_TEXT), "{m}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let nr = get(addr, "/readyz").await;
        assert!(
            nr.starts_with("HTTP/1.1 503") && nr.ends_with("cache not synced"),
            "{nr}"
        );
        ready.store(true, Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
