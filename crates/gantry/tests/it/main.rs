//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod chart;
mod cli_api;
mod observability;
mod quickstart;
mod up_cli;
mod upstream_corpus;
