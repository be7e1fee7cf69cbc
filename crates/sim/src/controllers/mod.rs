//! Controllers a real cluster's kube-controller-manager (and kube-scheduler) runs that Gantry
//! needs: DaemonSet, Job, Deployment, ReplicaSet, node lifecycle (taint-based eviction and the
//! pod GC of deleted nodes), and a default scheduler for pods no other scheduler claims. Each is a pure core (desired state from plain values) plus a thin
//! reconcile shell.

mod apps;
mod apps_runner;
pub mod cache;
pub mod daemonset;
pub mod default_scheduler;
pub mod deployment;
pub mod hash;
pub mod job;
pub mod node_lifecycle;
mod node_lifecycle_runner;
pub mod replicaset;
pub mod runner;
mod writes;

pub use hash::short_hash;
pub use runner::{Controllers, Options, start, start_with};
