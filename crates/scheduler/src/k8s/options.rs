//! The options a running scheduler takes (`gantry scheduler`'s flags, and knobs for tests).

use std::net::SocketAddr;
use std::time::Duration;

/// `gantry scheduler` options (the CLI contract's flags and a few knobs for tests).
#[derive(Clone, Debug)]
pub struct Options {
    pub scheduler_name: String,
    pub reservation_namespace: String,
    /// Image of the reservation pods' container. KAI's `resource-reservation` image reports
    /// the GPU UUID itself; in the sim the kubelet's allocation record is read instead.
    pub reservation_image: String,
    /// ServiceAccount of the reservation pods; empty: the reservation namespace's `default`.
    pub reservation_service_account: String,
    /// How long a bind waits for a reservation pod to learn its GPU.
    pub reservation_timeout: Duration,
    /// `None`: no metrics endpoint.
    pub metrics_address: Option<SocketAddr>,
    pub leader_elect: bool,
    /// Namespace of the Lease.
    pub namespace: String,
    pub lease_duration: Duration,
    pub identity: String,
    pub cycle_period: Duration,
    pub config: crate::Config,
    /// Create KAI's `default-parent-queue` / `default-queue` when missing.
    pub create_default_queues: bool,
    /// Create KAI's PriorityClasses (`train`, `build-preemptible`, `build`, `inference`)
    /// when missing.
    pub create_default_priority_classes: bool,
    /// Create the Queue and PodGroup CRDs when missing (best effort).
    pub install_crds: bool,
    /// Create the Lease's and the reservation pods' namespaces when missing (best effort).
    /// Off where an installer creates them (the Helm chart does not grant the right).
    pub create_namespaces: bool,
    /// API writes in flight at once: binds, and separately the pod grouper's.
    pub bind_concurrency: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scheduler_name: gantry_api::names::DEFAULT_SCHEDULER_NAME.to_string(),
            reservation_namespace: gantry_api::names::DEFAULT_RESERVATION_NAMESPACE.to_string(),
            reservation_image: "ghcr.io/nvidia/kai-scheduler/resource-reservation:v0.17.0".into(),
            reservation_service_account: String::new(),
            reservation_timeout: Duration::from_secs(40),
            metrics_address: None,
            leader_elect: true,
            namespace: "gantry".into(),
            lease_duration: Duration::from_secs(15),
            identity: gantry_runtime::identity("gantry-scheduler"),
            cycle_period: Duration::from_secs(1),
            config: crate::Config::default(),
            create_default_queues: true,
            create_default_priority_classes: true,
            install_crds: true,
            create_namespaces: true,
            bind_concurrency: 64,
        }
    }
}
