//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueResourceLabel {
    pub queue: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub cycle_seconds: Histogram,
    /// Time per phase of a cycle: `snapshot` (cache -> core input), `actions` (the core's
    /// allocate/consolidate/reclaim/preempt pass), `apply` (dispatching binds, evictions,
    /// status).
    pub phase_seconds: Family<PhaseLabel, Histogram>,
    pub bind_seconds: Histogram,
    pub binds: Counter,
    pub bind_failures: Counter,
    pub evictions: Family<ReasonLabel, Counter>,
    pub pending: Family<QueueLabel, Gauge<f64, AtomicU64>>,
    pub fair_share: Family<QueueResourceLabel, Gauge<f64, AtomicU64>>,
    pub allocated: Family<QueueResourceLabel, Gauge<f64, AtomicU64>>,
    pub leader: Gauge,
    pub ready: AtomicBool,
}

fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("gantry_scheduler");
        let m = Metrics {
            cycle_seconds: seconds(),
            phase_seconds: Family::new_with_constructor(seconds),
            bind_seconds: seconds(),
            binds: Counter::default(),
            bind_failures: Counter::default(),
            evictions: Family::default(),
            pending: Family::default(),
            fair_share: Family::default(),
            allocated: Family::default(),
            leader: Gauge::default(),
            ready: AtomicBool::new(false),
            registry: Registry::default(),
        };
        registry.register(
            "cycle_duration_seconds",
            "Scheduling cycle duration",
            m.cycle_seconds.clone(),
        );
        registry.register(
            "cycle_phase_duration_seconds",
            "Time per cycle phase (snapshot, actions, apply)",
            m.phase_seconds.clone(),
        );
        registry.register(
            "bind_latency_seconds",
            "From decision to pods/binding accepted",
            m.bind_seconds.clone(),
        );
        registry.register("binds", "Pods bound", m.binds.clone());
        registry.register(
            "bind_failures",
            "Binds that failed and were retried later",
            m.bind_failures.clone(),
        );
        registry.register("evictions", "Pods evicted, by reason", m.evictions.clone());
        registry.register("pending_pods", "Pending pods per queue", m.pending.clone());
        registry.register(
            "queue_fair_share",
            "Fair share per queue and resource (GPUs, millicores, bytes)",
            m.fair_share.clone(),
        );
        registry.register(
            "queue_allocated",
            "Allocated per queue and resource (GPUs, millicores, bytes)",
            m.allocated.clone(),
        );
        registry.register(
            "is_leader",
            "1 while this replica holds the leader lease",
            m.leader.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    pub fn set_ready(&self, v: bool) {
        self.ready.store(v, Ordering::Relaxed);
    }
}

/// Serve `/metrics`, `/healthz`, `/readyz` on `listener` until `shutdown` flips.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use axum::{Router, http::StatusCode, routing::get};
    let m1 = metrics.clone();
    let m2 = metrics.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m1.clone();
                async move {
                    (
                        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let m = m2.clone();
                async move {
                    if m.ready.load(Ordering::Relaxed) {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "cache not synced")
                    }
                }
            }),
        );
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|v| *v).await;
        })
        .await;
}
