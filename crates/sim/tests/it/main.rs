//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod apiserver_kube;
mod connections;
mod controllers;
mod deployments;
mod durability;
mod garbage_collection;
mod kubectl;
mod kubectl_explain;
mod kubectl_logs;
mod kubectl_tables;
mod kubectl_top;
mod kubelet_agents;
mod kubelet_e2e;
mod kubelet_init;
mod kubelet_strict;
mod kubelet_volumes;
mod module_graph;
mod node_lifecycle;
mod probe;
mod strictness;
mod up_side_by_side;
mod upstream_defaults;
mod write_paths;
