//! The operator's Prometheus metrics (upstream's `gpu_operator_*` names where they exist) and
//! the `/metrics` `/healthz` `/readyz` server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Shared metrics handle; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    reconciles: Counter,
    failures: Counter,
    status: Gauge,
    last_success: Gauge,
    gpu_nodes: Gauge,
    has_nfd: Gauge,
    auto_upgrade: Gauge,
    duration: Histogram,
    writes: Counter,
    ready: AtomicBool,
    leader: AtomicBool,
    written_total: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconciles = Counter::default();
        let failures = Counter::default();
        let status = Gauge::default();
        let last_success = Gauge::default();
        let gpu_nodes = Gauge::default();
        let has_nfd = Gauge::default();
        let auto_upgrade = Gauge::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let writes = Counter::default();
        registry.register(
            "gpu_operator_reconciliation",
            "ClusterPolicy reconciliations",
            reconciles.clone(),
        );
        registry.register(
            "gpu_operator_reconciliation_failed",
            "ClusterPolicy reconciliations that failed",
            failures.clone(),
        );
        registry.register(
            "gpu_operator_reconciliation_status",
            "1: ready, 0: not ready, -1: failed",
            status.clone(),
        );
        registry.register(
            "gpu_operator_reconciliation_last_success_ts_seconds",
            "Unix time of the last reconciliation that reached ready",
            last_success.clone(),
        );
        registry.register(
            "gpu_operator_gpu_nodes_total",
            "GPU nodes found",
            gpu_nodes.clone(),
        );
        registry.register(
            "gpu_operator_reconciliation_has_nfd_labels",
            "1 when some node carries NFD labels",
            has_nfd.clone(),
        );
        registry.register(
            "gpu_operator_driver_auto_upgrade_enabled",
            "1 when driver auto-upgrade is on",
            auto_upgrade.clone(),
        );
        registry.register(
            "gantry_operator_reconcile_duration_seconds",
            "Duration of ClusterPolicy reconciliations",
            duration.clone(),
        );
        registry.register(
            "gantry_operator_api_writes",
            "Create/apply/patch/delete calls the reconciler made",
            writes.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            reconciles,
            failures,
            status,
            last_success,
            gpu_nodes,
            has_nfd,
            auto_upgrade,
            duration,
            writes,
            ready: AtomicBool::new(false),
            leader: AtomicBool::new(false),
            written_total: AtomicU64::new(0),
        }))
    }
}

/// Outcome of one reconciliation, for the gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ready,
    NotReady,
    Failed,
}

impl Metrics {
    pub fn reconciled(&self, outcome: Outcome, seconds: f64) {
        let m = &self.0;
        m.reconciles.inc();
        m.duration.observe(seconds);
        match outcome {
            Outcome::Ready => {
                m.status.set(1);
                m.last_success.set(chrono::Utc::now().timestamp());
            }
            Outcome::NotReady => {
                m.status.set(0);
            }
            Outcome::Failed => {
                m.status.set(-1);
                m.failures.inc();
            }
        }
    }

    pub fn observed(&self, gpu_nodes: usize, nfd: bool, auto_upgrade: bool) {
        self.0.gpu_nodes.set(gpu_nodes as i64);
        self.0.has_nfd.set(i64::from(nfd));
        self.0.auto_upgrade.set(i64::from(auto_upgrade));
    }

    /// One API write (apply, patch, create, delete) by the reconciler.
    pub fn wrote(&self) {
        self.0.writes.inc();
        self.0.written_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Reconciliations so far.
    pub fn reconciles(&self) -> u64 {
        self.0.reconciles.get()
    }

    /// API writes so far.
    pub fn writes(&self) -> u64 {
        self.0.written_total.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::Relaxed)
    }

    pub fn set_leader(&self, leader: bool) {
        self.0.leader.store(leader, Ordering::Relaxed);
    }

    pub fn is_leader(&self) -> bool {
        self.0.leader.load(Ordering::Relaxed)
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.0.registry);
        out
    }
}

/// Serve `/metrics`, `/healthz` and `/readyz` on `addr` until `shutdown` resolves; returns
/// the address bound (port 0: any free port).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<SocketAddr> {
    use gantry_runtime::health::{self, Endpoints};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let m = metrics.clone();
    let endpoints = Endpoints::new(health::OPENMETRICS, move || m.render())
        .ready_when(move || metrics.is_ready(), "not ready");
    tokio::spawn(async move {
        if let Err(e) = health::serve(listener, endpoints, shutdown).await {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_upstream_metrics() {
        let m = Metrics::default();
        m.reconciled(Outcome::Failed, 0.01);
        m.observed(3, true, false);
        m.wrote();
        let text = m.render();
        assert!(
            text.contains("gpu_operator_reconciliation_total 1"),
            "{text}"
        );
        assert!(
            text.contains("gpu_operator_reconciliation_failed_total 1"),
            "{text}"
        );
        assert!(text.contains("gpu_operator_gpu_nodes_total 3"), "{text}");
        assert!(
            text.contains("gantry_operator_reconcile_duration_seconds_count 1"),
            "{text}"
        );
        assert_eq!((m.reconciles(), m.writes()), (1, 1));
    }
}
