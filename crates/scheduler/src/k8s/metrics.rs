//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// KAI's queue label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KaiQueueLabel {
    pub queue_name: String,
}

type QueueGauge = Family<KaiQueueLabel, Gauge<f64, AtomicU64>>;

/// KAI's queue metrics under KAI's names (metric namespace `kai`), so KAI's Grafana queue
/// panels work unchanged: the queue controller's (`queue_info`, `queue_deserved_gpus`,
/// `queue_quota_*`, `queue_allocated_*`) and the scheduler's (`queue_fair_share_*`).
#[derive(Default)]
pub struct KaiQueueMetrics {
    pub info: QueueGauge,
    pub deserved_gpus: QueueGauge,
    pub quota_cpu_cores: QueueGauge,
    pub quota_memory_bytes: QueueGauge,
    pub allocated_gpus: QueueGauge,
    pub allocated_cpu_cores: QueueGauge,
    pub allocated_memory_bytes: QueueGauge,
    pub fair_share_gpu: QueueGauge,
    pub fair_share_cpu_cores: QueueGauge,
    pub fair_share_memory_gb: QueueGauge,
    /// KAI's `queue_gpu_usage` & co: the historical usage time-based fair share divides by,
    /// normalised to cluster capacity.
    pub gpu_usage: QueueGauge,
    pub cpu_usage: QueueGauge,
    pub memory_usage: QueueGauge,
    /// Queues last reported, so deleted queues' series go away.
    known: Mutex<BTreeSet<String>>,
}

impl KaiQueueMetrics {
    fn families(&self) -> [&QueueGauge; 13] {
        [
            &self.info,
            &self.deserved_gpus,
            &self.quota_cpu_cores,
            &self.quota_memory_bytes,
            &self.allocated_gpus,
            &self.allocated_cpu_cores,
            &self.allocated_memory_bytes,
            &self.fair_share_gpu,
            &self.fair_share_cpu_cores,
            &self.fair_share_memory_gb,
            &self.gpu_usage,
            &self.cpu_usage,
            &self.memory_usage,
        ]
    }

    fn register(&self, r: &mut Registry) {
        let help = [
            ("queue_info", "Queues info (1 per queue)"),
            (
                "queue_deserved_gpus",
                "Queue deserved GPUs (GPU quota; -1: unlimited)",
            ),
            (
                "queue_quota_cpu_cores",
                "Queue quota CPU in cores (-1: unlimited)",
            ),
            (
                "queue_quota_memory_bytes",
                "Queue quota memory in bytes (-1: unlimited)",
            ),
            ("queue_allocated_gpus", "Queue allocated GPUs"),
            ("queue_allocated_cpu_cores", "Queue allocated CPU in cores"),
            (
                "queue_allocated_memory_bytes",
                "Queue allocated memory in bytes",
            ),
            (
                "queue_fair_share_gpu",
                "Queue fair share of GPUs, in devices",
            ),
            (
                "queue_fair_share_cpu_cores",
                "Queue fair share of CPU, in cores",
            ),
            (
                "queue_fair_share_memory_gb",
                "Queue fair share of memory, in GB",
            ),
            (
                "queue_gpu_usage",
                "Queue historical GPU usage, normalised to cluster capacity",
            ),
            (
                "queue_cpu_usage",
                "Queue historical CPU usage, normalised to cluster capacity",
            ),
            (
                "queue_memory_usage",
                "Queue historical memory usage, normalised to cluster capacity",
            ),
        ];
        for ((name, help), fam) in help.into_iter().zip(self.families()) {
            r.register(name, help, fam.clone());
        }
    }

    /// Set every series from one cycle's queue reports; series of queues no longer reported
    /// are removed.
    pub fn update(&self, queues: &[crate::decisions::QueueReport]) {
        let unlimited = |v: f64, scale: f64| if v < 0.0 { -1.0 } else { v * scale };
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let now: BTreeSet<String> = queues.iter().map(|q| q.name.clone()).collect();
        for gone in known.difference(&now) {
            let l = KaiQueueLabel {
                queue_name: gone.clone(),
            };
            for f in self.families() {
                f.remove(&l);
            }
        }
        *known = now;
        for q in queues {
            let l = KaiQueueLabel {
                queue_name: q.name.clone(),
            };
            let values = [
                1.0,
                unlimited(q.quota[0], 1.0),
                unlimited(q.quota[1], 1e-3),
                unlimited(q.quota[2], 1.0),
                q.allocated[0],
                q.allocated[1] / 1000.0,
                q.allocated[2],
                q.fair_share[0],
                q.fair_share[1] / 1000.0,
                q.fair_share[2] / 1e9,
                q.usage[0],
                q.usage[1],
                q.usage[2],
            ];
            for (f, v) in self.families().into_iter().zip(values) {
                f.get_or_create(&l).set(v);
            }
        }
    }
}

pub struct Metrics {
    pub registry: Registry,
    pub kai: KaiQueueMetrics,
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
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("gantry_scheduler");
        let m = Metrics {
            kai: KaiQueueMetrics::default(),
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
        m.kai.register(root.sub_registry_with_prefix("kai"));
        Arc::new(Metrics {
            registry: root,
            ..m
        })
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
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use gantry_runtime::health::{self, Endpoints};
    let m = metrics.clone();
    let endpoints = Endpoints::new(health::PROMETHEUS_TEXT, move || m.encode()).ready_when(
        move || metrics.ready.load(Ordering::Relaxed),
        "cache not synced",
    );
    let stop = gantry_runtime::shutdown::wait(shutdown);
    if let Err(e) = health::serve(listener, endpoints, stop).await {
        tracing::warn!(error = %e, "metrics server stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decisions::QueueReport;

    fn report(name: &str) -> QueueReport {
        QueueReport {
            name: name.into(),
            quota: [2.0, -1.0, 4e9],
            deserved: [2.0, 8000.0, 4e9],
            fair_share: [3.0, 2500.0, 5e9],
            allocated: [1.5, 500.0, 2e9],
            allocated_non_preemptible: [0.0; 3],
            requested: [4.0, 3000.0, 6e9],
            usage: [0.25, 0.0, 0.125],
        }
    }

    #[test]
    fn kai_queue_metrics_under_kai_names_and_units() {
        let m = Metrics::new();
        m.kai.update(&[report("team-a")]);
        let out = m.encode();
        for line in [
            r#"kai_queue_info{queue_name="team-a"} 1.0"#,
            r#"kai_queue_deserved_gpus{queue_name="team-a"} 2.0"#,
            r#"kai_queue_quota_cpu_cores{queue_name="team-a"} -1.0"#,
            r#"kai_queue_quota_memory_bytes{queue_name="team-a"} 4000000000.0"#,
            r#"kai_queue_allocated_gpus{queue_name="team-a"} 1.5"#,
            r#"kai_queue_allocated_cpu_cores{queue_name="team-a"} 0.5"#,
            r#"kai_queue_allocated_memory_bytes{queue_name="team-a"} 2000000000.0"#,
            r#"kai_queue_fair_share_gpu{queue_name="team-a"} 3.0"#,
            r#"kai_queue_fair_share_cpu_cores{queue_name="team-a"} 2.5"#,
            r#"kai_queue_fair_share_memory_gb{queue_name="team-a"} 5.0"#,
            r#"kai_queue_gpu_usage{queue_name="team-a"} 0.25"#,
            r#"kai_queue_memory_usage{queue_name="team-a"} 0.125"#,
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing in\n{out}");
        }
        // A queue that is gone loses its series.
        m.kai.update(&[report("team-b")]);
        let out = m.encode();
        assert!(!out.contains("team-a"), "{out}");
        assert!(out.contains(r#"kai_queue_info{queue_name="team-b"} 1.0"#));
    }

    #[test]
    fn every_metric_family_has_help_text() {
        let m = Metrics::new();
        m.kai.update(&[report("q")]);
        m.binds.inc();
        let out = m.encode();
        let types: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(types.len() >= 14, "{out}");
        for name in types {
            let help = out
                .lines()
                .find_map(|l| l.strip_prefix(&format!("# HELP {name} ")))
                .unwrap_or_default();
            assert!(
                help.trim_end_matches('.').len() > 3,
                "{name} has no HELP text:\n{out}"
            );
        }
    }
}
