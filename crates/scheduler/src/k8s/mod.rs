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
mod error;
pub mod events;
pub mod explain;
pub mod metrics;
mod options;
pub mod podgrouper;
pub mod run_loop;
pub mod status;
pub mod usage;
pub mod webhook;
pub mod webhook_local;

use std::sync::Arc;

pub use binder::names_hash;
pub use error::Error;
pub use options::Options;
pub use run_loop::run;

/// A client from `kubeconfig`, or in-cluster config, else KUBECONFIG / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, Error> {
    Ok(gantry_runtime::client(kubeconfig).await?)
}

/// Shared handles a running scheduler exposes (tests read the metrics).
#[derive(Clone)]
pub struct Handles {
    pub metrics: Arc<metrics::Metrics>,
}
