//! The device plugin's resolved settings: what config file v1 (plus flags and env) means
//! once defaults are applied. Every pure core takes a [`Settings`]; the shell builds it
//! from the parsed config file (`gantry_api`) so that there is one parser only.

use std::collections::BTreeSet;

/// How MIG-enabled GPUs are advertised (the one shared type).
pub use gantry_k8s_rules::MigStrategy;

/// How a container learns which devices it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceListStrategy {
    Envvar,
    VolumeMounts,
    CdiAnnotations,
    CdiCri,
}

impl DeviceListStrategy {
    pub fn is_cdi(self) -> bool {
        matches!(self, Self::CdiAnnotations | Self::CdiCri)
    }
}

/// What goes into the device lists handed to a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceIdStrategy {
    #[default]
    Uuid,
    Index,
}

/// How GetPreferredAllocation picks among shared replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocationPolicy {
    /// Spread new allocations over the least-loaded GPUs (upstream default).
    #[default]
    Distributed,
    /// Fill the fewest GPUs, most-loaded first.
    Packed,
}

/// Which sharing mechanism replicates devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharingKind {
    TimeSlicing,
    Mps,
}

impl SharingKind {
    /// The value GFD and docs use (`time-slicing`, `mps`).
    pub fn as_str(self) -> &'static str {
        match self {
            SharingKind::TimeSlicing => "time-slicing",
            SharingKind::Mps => "mps",
        }
    }
}

/// `resources[].devices` of a replicated resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceSelector {
    #[default]
    All,
    /// The first `n` devices (in index order).
    Count(usize),
    /// GPU index `"0"`, MIG index `"0:1"`, `GPU-…`, `MIG-…` or `MIG-GPU-<uuid>/<gi>/<ci>`.
    List(Vec<String>),
}

/// One `sharing.<kind>.resources[]` entry, names already fully qualified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicatedResource {
    pub name: String,
    /// Resource the replicas are published under; `None` = keep `name`.
    pub rename: Option<String>,
    pub devices: DeviceSelector,
    pub replicas: u32,
}

/// The active sharing configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    pub kind: SharingKind,
    pub fail_requests_greater_than_one: bool,
    /// `rename` already resolved (an explicit rename, else `<name>.shared` under
    /// `renameByDefault`, else none).
    pub resources: Vec<ReplicatedResource>,
}

/// A `resources.gpus[]` / `resources.mig[]` entry: glob (`*` only) → resource name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePattern {
    pub pattern: String,
    pub name: String,
}

/// Everything the pure cores need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mig_strategy: MigStrategy,
    pub device_list_strategies: BTreeSet<DeviceListStrategy>,
    pub device_id_strategy: DeviceIdStrategy,
    pub pass_device_specs: bool,
    pub cdi_annotation_prefix: String,
    /// Host root of the driver installation (`nvidiaDriverRoot`).
    pub driver_root: String,
    /// Host root of `/dev` (`nvidiaDevRoot`); unset = the driver root, as upstream.
    pub dev_root: Option<String>,
    pub gdrcopy_enabled: bool,
    pub gds_enabled: bool,
    pub mofed_enabled: bool,
    pub allocation_policy: AllocationPolicy,
    pub mps_root: Option<String>,
    pub imex: Imex,
    /// User `resources.gpus`; empty = `[{*, nvidia.com/gpu}]`.
    pub gpu_patterns: Vec<ResourcePattern>,
    /// User `resources.mig`; empty = the strategy's defaults.
    pub mig_patterns: Vec<ResourcePattern>,
    pub sharing: Option<Sharing>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mig_strategy: MigStrategy::None,
            device_list_strategies: BTreeSet::from([DeviceListStrategy::Envvar]),
            device_id_strategy: DeviceIdStrategy::Uuid,
            pass_device_specs: false,
            cdi_annotation_prefix: DEFAULT_CDI_ANNOTATION_PREFIX.to_string(),
            driver_root: "/".to_string(),
            dev_root: None,
            gdrcopy_enabled: false,
            gds_enabled: false,
            mofed_enabled: false,
            allocation_policy: AllocationPolicy::Distributed,
            mps_root: None,
            imex: Imex::default(),
            gpu_patterns: Vec::new(),
            mig_patterns: Vec::new(),
            sharing: None,
        }
    }
}

impl Settings {
    /// Where `/dev` is on the host: `nvidiaDevRoot`, else `nvidiaDriverRoot`.
    pub fn dev_root(&self) -> &str {
        self.dev_root.as_deref().unwrap_or(&self.driver_root)
    }
}

/// `imex`: the IMEX channels every container gets. The shell keeps only the channels whose
/// device node exists on the node (failing when `required` and one is missing).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Imex {
    pub channel_ids: Vec<u32>,
    pub required: bool,
}

pub const DEFAULT_CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// Prepends `nvidia.com/` to a resource name without a domain (as upstream does).
pub fn qualify_resource_name(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("nvidia.com/{name}")
    }
}

/// Anchored glob match where only `*` is special (upstream `resources[].pattern`).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_is_anchored_and_star_only() {
        assert!(glob_match("*", "NVIDIA H100 80GB HBM3"));
        assert!(glob_match("*H100*", "NVIDIA H100 80GB HBM3"));
        assert!(!glob_match("H100*", "NVIDIA H100 80GB HBM3"));
        assert!(glob_match("1g.*", "1g.10gb"));
        assert!(!glob_match("1g.10gb", "1g.10gb.me"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(!glob_match("a*b*c", "ac"));
        assert!(!glob_match("ab*ba", "aba"));
        assert!(glob_match("1g.?0gb", "1g.?0gb"));
    }

    #[test]
    fn names_get_the_nvidia_domain() {
        assert_eq!(qualify_resource_name("gpu"), "nvidia.com/gpu");
        assert_eq!(qualify_resource_name("example.com/gpu"), "example.com/gpu");
    }
}
