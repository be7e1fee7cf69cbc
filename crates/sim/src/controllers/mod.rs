//! Controllers a real cluster's kube-controller-manager runs that Gantry needs: DaemonSet
//! and Job. Each is a pure core (desired state from plain values) plus a thin reconcile shell.

pub mod cache;
pub mod daemonset;
pub mod job;
pub mod runner;

pub use runner::{Controllers, start};
