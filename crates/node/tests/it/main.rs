//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod containerd_real;
mod device_plugin;
mod discovery_labels;
mod exporter_metrics;
mod mig_apply;
mod mig_e2e;
mod mig_upstream;
mod module_graph;
mod sharing_follow;
mod toolkit_cdi;
mod toolkit_golden;
mod toolkit_props;
