//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod apiserver_kube;
mod controllers;
mod durability;
mod kubectl;
mod kubectl_tables;
mod kubelet_agents;
mod kubelet_e2e;
mod kubelet_init;
mod kubelet_strict;
mod kubelet_volumes;
mod probe;
mod strictness;
