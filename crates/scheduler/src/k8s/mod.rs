//! The scheduler on a cluster: reflectors feed the [`cache::Cache`] (the core's input kept
//! in place), a cycle runs every second and soon after relevant changes, and its decisions go
//! out through the binder, evictions, Events and status writes — all from one loop that owns
//! the cache, with API writes in spawned tasks that report back.
//!
//! Entry point: [`run`].

pub mod admission;
pub mod binder;
pub mod cache;
pub mod convert;
pub mod events;
pub mod explain;
pub mod metrics;
pub mod podgrouper;
pub mod run_loop;
pub mod status;
pub mod usage;
pub mod webhook;
pub mod webhook_local;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use run_loop::run;

/// 64-bit FNV-1a: stable names (GPU groups, reservation pods) every replica derives alike.
pub fn names_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metrics address {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("leader election: {0}")]
    Lease(#[from] gantry_runtime::lease::LeaseError),
    #[error("lost the leader Lease {namespace}/{name} to another replica; stopping")]
    LostLease { namespace: String, name: String },
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error(transparent)]
    Client(#[from] gantry_runtime::ClientError),
}

/// A client from `kubeconfig`, or in-cluster config, else KUBECONFIG / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, Error> {
    Ok(gantry_runtime::client(kubeconfig).await?)
}

/// Shared handles a running scheduler exposes (tests read the metrics).
#[derive(Clone)]
pub struct Handles {
    pub metrics: Arc<metrics::Metrics>,
}
