//! The part of the device plugin config (v1) that discovery labels depend on: which resources
//! are replicated, how many times, whether they are renamed, and by which strategy.

use std::collections::BTreeMap;

pub use gantry_api::device_plugin_config::SharingStrategy;

/// One replicated resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub replicas: u32,
    /// Advertised under another name (`<name>.shared`); then the product gets no `-SHARED`.
    pub renamed: bool,
}

/// Sharing as the device plugin applies it, keyed by full resource name (`nvidia.com/gpu`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sharing {
    pub strategy: SharingStrategy,
    pub resources: BTreeMap<String, Replication>,
}

impl Sharing {
    /// No sharing at all (the default config).
    pub fn none() -> Self {
        Self::default()
    }

    pub fn replication(&self, resource: &str) -> Option<Replication> {
        self.resources.get(resource).copied()
    }
}
