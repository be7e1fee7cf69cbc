//! A simulated kubelet, one per simulated node, all in one process: the device plugin API
//! (kubelet side) and PodResources over real gRPC on real unix sockets, the Node object and its
//! Lease, and the lifecycle of the pods bound to the node. Pod events come from one shared
//! watch (see [`crate::cluster`]); everything per node is a handful of tokio tasks.

pub mod admission;
pub mod component_pods;
pub mod devices;
pub mod driver;
pub mod env;
pub mod error;
pub mod in_process;
mod lock;
pub mod node;
pub mod node_agents;
pub mod node_dirs;
pub mod node_status;
pub mod node_sync;
pub mod plugin_endpoint;
pub mod plugins;
pub mod pod_ref;
pub mod podresources;
pub mod pods;
pub mod probe;
pub mod tools;
pub mod volumes;

pub use error::KubeletError;
pub use in_process::{AgentContext, AgentRegistry, AgentRunner};
pub(crate) use lock::lock;
pub use node::NodeShared;
pub use node_dirs::{CONTAINERD_CONFIG, NodeDirs};
pub use node_status::NodeResources;
pub use pod_ref::PodRef;
