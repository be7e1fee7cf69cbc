//! NVIDIA device plugin config file v1 (also read by GPU feature discovery): flags,
//! `resources`, `sharing.timeSlicing` / `sharing.mps`, `imex`. Upstream parses it leniently
//! (unknown keys dropped); Gantry keeps unknown keys on a round trip and its validator
//! reports them, since a misplaced key (e.g. `renameByDefault` at the wrong level) is the
//! most common mistake with this file.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cluster_policy::MigStrategy;
use crate::common::Extra;
use crate::names;
use crate::problem::{Problem, index};
use gantry_k8s_rules::parse_go_duration;

/// The whole file.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevicePluginConfig {
    /// `v1`; absent is treated as `v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Flags>,
    /// Declared resource naming (upstream v0.20 overrides it with defaults; kept for fidelity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<Sharing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imex: Option<Imex>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `flags`, shared by the device plugin and GFD.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Flags {
    /// `none` (default), `single` or `mixed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_strategy: Option<MigStrategy>,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_on_init_error: Option<bool>,
    /// Required for MPS sharing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_root: Option<String>,
    /// Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_driver_root: Option<String>,
    /// Default: the driver root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_dev_root: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdrcopy_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mofed_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_node_feature_api: Option<bool>,
    /// `auto` (default), `nvml`, `tegra` (GFD also `vfio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_discovery_strategy: Option<DeviceDiscoveryStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginFlags>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gfd: Option<GfdFlags>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceDiscoveryStrategy {
    Auto,
    Nvml,
    Tegra,
    Vfio,
}

/// How the plugin passes devices to containers.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceListStrategy {
    Envvar,
    VolumeMounts,
    CdiAnnotations,
    CdiCri,
}

/// A string or a list of strings (e.g. `deviceListStrategy`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceIdStrategy {
    #[default]
    Uuid,
    Index,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AllocationPolicy {
    #[default]
    Distributed,
    Packed,
}

/// `flags.plugin`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginFlags {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_device_specs: Option<bool>,
    /// One strategy or a list (default `envvar`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_list_strategy: Option<OneOrMany<DeviceListStrategy>>,
    #[serde(
        rename = "deviceIDStrategy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub device_id_strategy: Option<DeviceIdStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdi_annotation_prefix: Option<String>,
    #[serde(
        rename = "nvidiaCTKPath",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nvidia_ctk_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_driver_root: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_devices_allocation_policy: Option<AllocationPolicy>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `flags.gfd`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GfdFlags {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oneshot: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_timestamp: Option<bool>,
    /// Go duration (`60s`), a number of nanoseconds, or `infinite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "string_or_number")]
    pub sleep_interval: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type_file: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

fn string_or_number(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"anyOf": [{"type": "string"}, {"type": "number"}]})
}

fn devices_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"anyOf": [
        {"type": "string"},
        {"type": "integer"},
        {"type": "array", "items": {"type": "string"}}
    ]})
}

/// `resources.gpus[]` / `resources.mig[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourcePattern {
    /// Glob (`*` only) on the product name or MIG profile.
    pub pattern: String,
    /// Resource name; `nvidia.com/` is prepended when missing.
    pub name: String,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `resources`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourcesConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<ResourcePattern>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<Vec<ResourcePattern>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `sharing`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sharing {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_slicing: Option<ReplicatedResources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<ReplicatedResources>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Most replicas per shared device. Each replica is one device in ListAndWatch: 1,024 on
/// 8 GPUs is about 0.5 MB, well inside the kubelet's 4 MiB message limit, and far above
/// any useful oversubscription.
pub const MAX_REPLICAS: i64 = 1024;

/// `sharing.timeSlicing` / `sharing.mps`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedResources {
    /// Every entry without `rename` is advertised as `<name>.shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rename_by_default: Option<bool>,
    /// Unset ⇒ false for time-slicing, true for MPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_requests_greater_than_one: Option<bool>,
    pub resources: Vec<ReplicatedResource>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Which devices of a replicated resource are shared.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(untagged)]
pub enum ReplicatedDevices {
    /// `"all"`.
    All(String),
    /// A positive count.
    Count(i64),
    /// GPU index `"0"`, MIG index `"0:1"`, `GPU-…` or `MIG-…` UUIDs.
    List(Vec<String>),
}

/// `sharing.*.resources[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ReplicatedResource {
    pub name: String,
    /// Accepted but ignored upstream (forced to `<name>.shared` under renameByDefault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rename: Option<String>,
    /// Accepted but ignored upstream (forced to all devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "devices_schema")]
    pub devices: Option<ReplicatedDevices>,
    /// ≥ 2.
    pub replicas: i64,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `imex`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Imex {
    /// Only `[]` or `[0]`.
    #[serde(
        rename = "channelIDs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub channel_ids: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// The sharing strategy a config results in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SharingStrategy {
    #[default]
    None,
    TimeSlicing,
    Mps,
}

impl SharingStrategy {
    /// The `nvidia.com/gpu.sharing-strategy` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SharingStrategy::None => "none",
            SharingStrategy::TimeSlicing => "time-slicing",
            SharingStrategy::Mps => "mps",
        }
    }
}

/// Why the device plugin refuses sharing by `strategy` under MIG strategy `mig` (upstream's
/// flag validation), or `None`. The plugin and GPU feature discovery both decide with this,
/// so a config the plugin refuses never yields sharing labels the capacity does not match.
pub fn sharing_refused(strategy: SharingStrategy, mig: MigStrategy) -> Option<&'static str> {
    (strategy == SharingStrategy::Mps && mig == MigStrategy::Mixed)
        .then_some("MPS sharing cannot be combined with flags.migStrategy: mixed")
}

/// `nvidia.com/` is prepended to a resource name without a prefix.
pub fn full_resource_name(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("nvidia.com/{name}")
    }
}

fn has_replicas(r: &Option<ReplicatedResources>) -> bool {
    r.as_ref()
        .is_some_and(|r| r.resources.iter().any(|x| x.replicas > 1))
}

impl DevicePluginConfig {
    pub fn mig_strategy(&self) -> MigStrategy {
        self.flags
            .as_ref()
            .and_then(|f| f.mig_strategy)
            .unwrap_or_default()
    }
    fn plugin(&self) -> Option<&PluginFlags> {
        self.flags.as_ref()?.plugin.as_ref()
    }
    /// `flags.failOnInitError` (default true).
    pub fn fail_on_init_error(&self) -> bool {
        self.flags
            .as_ref()
            .and_then(|f| f.fail_on_init_error)
            .unwrap_or(true)
    }
    pub fn mps_root(&self) -> Option<&str> {
        self.flags
            .as_ref()?
            .mps_root
            .as_deref()
            .filter(|s| !s.is_empty())
    }
    pub fn device_list_strategies(&self) -> Vec<DeviceListStrategy> {
        self.plugin()
            .and_then(|p| p.device_list_strategy.as_ref())
            .map(OneOrMany::to_vec)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec![DeviceListStrategy::Envvar])
    }
    pub fn device_id_strategy(&self) -> DeviceIdStrategy {
        self.plugin()
            .and_then(|p| p.device_id_strategy)
            .unwrap_or_default()
    }
    pub fn pass_device_specs(&self) -> bool {
        self.plugin()
            .and_then(|p| p.pass_device_specs)
            .unwrap_or(false)
    }
    pub fn cdi_annotation_prefix(&self) -> &str {
        self.plugin()
            .and_then(|p| p.cdi_annotation_prefix.as_deref())
            .unwrap_or("cdi.k8s.io/")
    }
    pub fn shared_devices_allocation_policy(&self) -> AllocationPolicy {
        self.plugin()
            .and_then(|p| p.shared_devices_allocation_policy)
            .unwrap_or_default()
    }
    /// `mps` if `sharing.mps` has an entry with replicas > 1, else `time-slicing` if
    /// `sharing.timeSlicing` does, else `none`.
    pub fn sharing_strategy(&self) -> SharingStrategy {
        let s = self.sharing.as_ref();
        if s.is_some_and(|s| has_replicas(&s.mps)) {
            SharingStrategy::Mps
        } else if s.is_some_and(|s| has_replicas(&s.time_slicing)) {
            SharingStrategy::TimeSlicing
        } else {
            SharingStrategy::None
        }
    }
    /// The replicated set in effect: `sharing.mps` whenever it is present, else
    /// `sharing.timeSlicing`.
    pub fn replicated(&self) -> Option<(&ReplicatedResources, SharingStrategy)> {
        let s = self.sharing.as_ref()?;
        if let Some(m) = &s.mps {
            return Some((m, SharingStrategy::Mps));
        }
        s.time_slicing
            .as_ref()
            .map(|t| (t, SharingStrategy::TimeSlicing))
    }
    /// Replicas per device of a resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`); 1 when not shared.
    pub fn replicas_for(&self, resource: &str) -> u32 {
        self.replicated()
            .and_then(|(r, _)| {
                r.resources
                    .iter()
                    .find(|x| full_resource_name(&x.name) == resource)
            })
            .and_then(|x| u32::try_from(x.replicas).ok())
            .filter(|&n| n > 1)
            .unwrap_or(1)
    }
    /// The name a shared resource is advertised under (`<name>.shared` with renameByDefault;
    /// per-entry `rename` is ignored, as upstream).
    pub fn advertised_name(&self, resource: &str) -> String {
        match self.replicated() {
            Some((r, _))
                if r.rename_by_default == Some(true) && self.replicas_for(resource) > 1 =>
            {
                format!("{resource}.shared")
            }
            _ => resource.to_string(),
        }
    }
    /// Whether requests for more than one shared replica fail (default false for
    /// time-slicing, true for MPS).
    pub fn fail_requests_greater_than_one(&self) -> bool {
        match self.replicated() {
            Some((r, SharingStrategy::Mps)) => r.fail_requests_greater_than_one.unwrap_or(true),
            Some((r, _)) => r.fail_requests_greater_than_one.unwrap_or(false),
            None => false,
        }
    }
}

mod check;

#[cfg(test)]
mod tests;
