//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod mig_layouts;
mod mig_props;
mod sim;
