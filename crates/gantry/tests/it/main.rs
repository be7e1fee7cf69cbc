//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod chart;
mod chart_upstream;
mod cli_api;
mod demo_cli;
mod dependencies;
mod fractions;
mod image;
mod install;
mod node_agents_cli;
mod observability;
mod prometheus_real;
mod quickstart;
mod up_cli;
mod upstream_corpus;
