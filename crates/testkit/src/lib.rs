//! Test support shared by every crate's tests.
//!
//! - [`Cluster`]: a simulated cluster set up in one call (control plane, CRDs, namespaces,
//!   simulated nodes, the sim's controllers), owning all of it for as long as the test runs.
//! - [`Recorder`]: a client of such a cluster that records every write it sends.
//! - [`Kubectl`]: the real kubectl against such a cluster, as a user runs it.
//! - [`share`]: fractional-GPU pods that print their share, and checks of what they print.
//! - [`module_graph`]: the import loops between a crate's modules, for the tests that forbid them.
//! - [`eventually`]: the one way to assert something another task writes (a label, an event,
//!   a status, a metric): it waits with a deadline, never assumes the order of two writes, and
//!   on timeout says what it last saw.

mod cluster;
mod kubectl;
pub mod module_graph;
mod recorder;
pub mod share;
mod wait;

pub use cluster::{Cluster, ClusterBuilder};
pub use kubectl::{KUBECTL, Kubectl, stdout_of};
pub use recorder::Recorder;
pub use wait::{IntoLook, Look, Timeout, eventually, eventually_secs};
