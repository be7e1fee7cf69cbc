//! The crate's integration tests, one module per former test binary: one link step
//! instead of one per file (docs/testing.md).

mod bad_inputs;
mod crds_drift;
mod parsers_proptest;
mod roundtrip;
