//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod chaos;
mod cluster;
mod common;
mod conformance;
mod fairshare;
mod fraction_env;
mod handover;
mod identity;
mod invariants;
mod k8s_affinity;
mod k8s_e2e;
mod k8s_kai;
mod k8s_lenient;
mod k8s_node_lifecycle;
mod k8s_reclaim;
mod k8s_replay;
mod k8s_restart;
mod k8s_time_fairshare;
mod k8s_visibility;
mod kai_semantics;
mod module_graph;
mod scenarios;
mod sharing_grammar;
mod trace_layouts;
