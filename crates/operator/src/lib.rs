//! Gantry operator: turns a `ClusterPolicy` into a working GPU cluster.
//!
//! - [`render`]: pure — (ClusterPolicy, cluster facts) -> the objects of every operand state.
//! - [`nodes`]: pure — which `nvidia.com/gpu.*` labels a node should carry.
//! - [`nvdriver`]: per-pool drivers from NVIDIADriver CRs (ownership and status pure, a shell).
//! - reconcile / status / upgrade / migpolicy: the shells that read the cluster, call the pure
//!   cores and write with server-side apply under one field manager ([`FIELD_MANAGER`]).

pub mod metrics;
pub mod migpolicy;
pub mod node_watch;
pub mod nodes;
pub mod nvdriver;
pub mod reconcile;
pub mod render;
pub mod run;
pub mod status;
pub mod upgrade;

/// The one field manager every operator write uses.
pub const FIELD_MANAGER: &str = "gantry-operator";
