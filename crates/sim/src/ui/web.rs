//! The collector (a snapshot every second, with a short history of queue shares) and the
//! loopback web page that shows it.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::Html;
use axum::routing::get;
use gantry_api::kai::Queue;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;
use tokio::task::JoinHandle;

use super::snapshot::{self, GpuReading, Snapshot};
use crate::kubelet::NodeShared;

const HISTORY: usize = 600;
const PAGE: &str = include_str!("page.html");

/// One point of a queue's history.
#[derive(Clone, Debug, Serialize)]
pub struct QueuePoint {
    /// Seconds since the collector started.
    pub t: f64,
    pub queue: String,
    pub allocated: f64,
    pub fair_share: Option<f64>,
}

#[derive(Default)]
struct Shared {
    latest: Snapshot,
    history: VecDeque<QueuePoint>,
}

/// Keeps the latest [`Snapshot`] of a cluster, refreshed every `period`.
#[derive(Clone)]
pub struct Collector {
    shared: Arc<RwLock<Shared>>,
}

impl Collector {
    /// Start collecting from `client` and the sim `nodes` (for GPU readings).
    pub fn start(
        client: kube::Client,
        nodes: Vec<Arc<NodeShared>>,
        period: Duration,
    ) -> (Self, JoinHandle<()>) {
        let c = Collector {
            shared: Arc::default(),
        };
        let me = c.clone();
        let task = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            loop {
                if let Ok(s) = me.collect(&client, &nodes).await {
                    me.record(s, started.elapsed().as_secs_f64());
                }
                tokio::time::sleep(period).await;
            }
        });
        (c, task)
    }

    /// One snapshot now (errors: the API is unreachable).
    pub async fn collect(
        &self,
        client: &kube::Client,
        nodes: &[Arc<NodeShared>],
    ) -> Result<Snapshot, kube::Error> {
        let lp = ListParams::default();
        let node_list = Api::<Node>::all(client.clone()).list(&lp).await?.items;
        let pods = Api::<Pod>::all(client.clone()).list(&lp).await?.items;
        // Queues exist only once the KAI CRDs are installed.
        let queues = Api::<Queue>::all(client.clone())
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        // ClusterPolicies likewise exist only once the operator's CRDs are installed.
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("nvidia.com", "v1", "ClusterPolicy"),
            "clusterpolicies",
        );
        let policies = Api::<kube::core::DynamicObject>::all_with(client.clone(), &ar)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let readings: BTreeMap<String, Vec<GpuReading>> = super::gpu_readings::readings(nodes);
        let mut s = snapshot::build(&node_list, &pods, &queues, &readings);
        s.cluster_policy = super::cluster_state::policy_view(&policies);
        Ok(s)
    }

    fn record(&self, s: Snapshot, t: f64) {
        let Ok(mut sh) = self.shared.write() else {
            return;
        };
        for q in &s.queues {
            sh.history.push_back(QueuePoint {
                t,
                queue: q.name.clone(),
                allocated: q.allocated,
                fair_share: q.fair_share,
            });
        }
        while sh.history.len() > HISTORY * s.queues.len().max(1) {
            sh.history.pop_front();
        }
        sh.latest = s;
    }

    pub fn latest(&self) -> Snapshot {
        self.shared
            .read()
            .map(|s| s.latest.clone())
            .unwrap_or_default()
    }

    pub fn history(&self) -> Vec<QueuePoint> {
        self.shared
            .read()
            .map(|s| s.history.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A running page server.
pub struct UiServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl UiServer {
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a request's `Host` names this loopback server. A page on another site whose
/// name an attacker re-points at 127.0.0.1 (DNS rebinding) sends its own name, so only
/// `127.0.0.1`, `localhost` and `[::1]` (with our port, or none) are served.
pub fn host_allowed(host: Option<&str>, port: u16) -> bool {
    let Some(host) = host else { return false };
    let (name, p) = match host.rsplit_once(':') {
        Some((n, p)) if !p.contains(']') => (n, Some(p)),
        _ => (host, None),
    };
    let port_ok = p.is_none_or(|p| p.parse::<u16>() == Ok(port));
    port_ok
        && matches!(
            name.to_ascii_lowercase().as_str(),
            "127.0.0.1" | "localhost" | "[::1]"
        )
}

/// Serve the page on `127.0.0.1:port` (0 = any free port). Loopback only: the page shows
/// the whole cluster without authentication, and requests for other host names are refused.
pub fn serve(
    collector: Collector,
    port: u16,
) -> futures::future::BoxFuture<'static, std::io::Result<UiServer>> {
    Box::pin(serve_inner(collector, port))
}

async fn serve_inner(collector: Collector, port: u16) -> std::io::Result<UiServer> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let check_host = move |req: axum::extract::Request, next: axum::middleware::Next| async move {
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.to_string()));
        if host_allowed(host.as_deref(), addr.port()) {
            next.run(req).await
        } else {
            use axum::response::IntoResponse;
            (
                http::StatusCode::FORBIDDEN,
                "forbidden: unexpected Host header",
            )
                .into_response()
        }
    };
    let app = axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/api/snapshot",
            get(|State(c): State<Collector>| async move { Json(c.latest()) }),
        )
        .route(
            "/api/history",
            get(|State(c): State<Collector>| async move { Json(c.history()) }),
        )
        .with_state(collector)
        .layer(axum::middleware::from_fn(check_host));
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "ui server stopped");
        }
    });
    Ok(UiServer { addr, task })
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn only_loopback_hosts() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
            "127.0.0.1",
        ] {
            assert!(host_allowed(Some(ok), 8080), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.1:9090",
            "127.0.0.1.evil.example:8080",
            "",
        ] {
            assert!(!host_allowed(Some(bad), 8080), "{bad}");
        }
        assert!(!host_allowed(None, 8080));
    }
}
