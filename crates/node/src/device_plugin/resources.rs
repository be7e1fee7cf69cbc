//! The pure core of advertisement: (inventory, settings) → resource sets, each with the
//! device IDs the kubelet will see. Fixes upstream's silently ignored keys: user
//! `resources` patterns and per-entry `rename` / `devices` of sharing are honoured.

use std::collections::{BTreeMap, HashMap};

use super::error::DevicePluginError;
use super::inventory::{Gpu, Inventory, Mig};
use super::settings::{
    DeviceSelector, MigStrategy, ResourcePattern, Settings, SharingKind, glob_match,
};
use gantry_api::names;

/// The physical thing behind a plugin device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Physical {
    Gpu {
        index: u32,
        uuid: String,
        minor: u32,
    },
    Mig {
        parent: u32,
        parent_minor: u32,
        index: u32,
        uuid: String,
        gi: u32,
        ci: u32,
    },
}

impl Physical {
    /// `GPU-…` or `MIG-…`.
    pub fn uuid(&self) -> &str {
        match self {
            Physical::Gpu { uuid, .. } | Physical::Mig { uuid, .. } => uuid,
        }
    }

    /// NVML index: `"i"` or `"i:j"`.
    pub fn index_id(&self) -> String {
        match self {
            Physical::Gpu { index, .. } => index.to_string(),
            Physical::Mig { parent, index, .. } => format!("{parent}:{index}"),
        }
    }

    /// Index of the physical GPU (the parent for MIG).
    pub fn gpu(&self) -> u32 {
        match self {
            Physical::Gpu { index, .. } => *index,
            Physical::Mig { parent, .. } => *parent,
        }
    }

    pub fn is_mig(&self) -> bool {
        matches!(self, Physical::Mig { .. })
    }

    fn of_gpu(gpu: &Gpu) -> Self {
        Physical::Gpu {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            minor: gpu.minor,
        }
    }

    fn of_mig(mig: &Mig, parent_minor: u32) -> Self {
        Physical::Mig {
            parent: mig.parent,
            parent_minor,
            index: mig.index,
            uuid: mig.uuid.clone(),
            gi: mig.gpu_instance,
            ci: mig.compute_instance,
        }
    }
}

/// One device as advertised to the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginDevice {
    /// `GPU-…`, `MIG-…`, or `<uuid>::<n>` for replicas.
    pub id: String,
    pub physical: Physical,
    pub replica: Option<u32>,
}

/// Sharing that applies to a resource's replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceSharing {
    pub kind: SharingKind,
    pub replicas: u32,
    pub fail_requests_greater_than_one: bool,
}

/// One extended resource, served on its own socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSet {
    /// Full name, e.g. `nvidia.com/gpu.shared`.
    pub name: String,
    pub devices: Vec<PluginDevice>,
    pub sharing: Option<ResourceSharing>,
    by_id: HashMap<String, usize>,
}

impl ResourceSet {
    pub fn new(name: String, devices: Vec<PluginDevice>, sharing: Option<ResourceSharing>) -> Self {
        let by_id = devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), i))
            .collect();
        ResourceSet {
            name,
            devices,
            sharing,
            by_id,
        }
    }

    pub fn device(&self, id: &str) -> Option<&PluginDevice> {
        self.by_id.get(id).map(|&i| &self.devices[i])
    }

    /// Socket file name: `nvidia-<name after nvidia.com/>.sock` (other domains: `/` → `-`).
    pub fn socket_name(&self) -> String {
        socket_name(&self.name)
    }

    /// The name without its domain (`gpu.shared`, `mig-1g.10gb`).
    pub fn short_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

pub fn socket_name(resource: &str) -> String {
    match resource
        .strip_prefix(names::NVIDIA_GROUP)
        .and_then(|r| r.strip_prefix('/'))
    {
        Some(short) => format!("nvidia-{short}.sock"),
        None => format!("{}.sock", resource.replace('/', "-")),
    }
}

/// Builds every resource the node advertises, sorted by name; empty resources are dropped.
pub fn build(inv: &Inventory, settings: &Settings) -> Result<Vec<ResourceSet>, DevicePluginError> {
    let base = base_devices(inv, settings)?;
    let mut sets: BTreeMap<String, (Vec<PluginDevice>, Option<ResourceSharing>)> = BTreeMap::new();
    // Which physical devices each sharing entry takes (so they are not also advertised whole).
    let mut taken: HashMap<Physical, String> = HashMap::new();

    if let Some(sharing) = &settings.sharing {
        if sharing.kind == SharingKind::Mps {
            if settings.mps_root.is_none() {
                return Err(DevicePluginError::MpsWithoutRoot);
            }
            if settings.mig_strategy == MigStrategy::Mixed {
                return Err(DevicePluginError::MpsWithMixed);
            }
        }
        for entry in &sharing.resources {
            let candidates: Vec<&Physical> = base
                .iter()
                .filter(|(_, r)| *r == entry.name)
                .map(|(p, _)| p)
                .collect();
            let chosen = select(&candidates, &entry.devices, &entry.name)?;
            let target = entry.rename.clone().unwrap_or_else(|| entry.name.clone());
            validate_name(&target)?;
            let share = ResourceSharing {
                kind: sharing.kind,
                replicas: entry.replicas,
                fail_requests_greater_than_one: sharing.fail_requests_greater_than_one,
            };
            let slot = sets
                .entry(target.clone())
                .or_insert_with(|| (Vec::new(), Some(share)));
            slot.1 = Some(share);
            for phys in chosen {
                if sharing.kind == SharingKind::Mps && phys.is_mig() {
                    return Err(DevicePluginError::MpsOnMig {
                        resource: entry.name.clone(),
                        device: phys.uuid().to_string(),
                    });
                }
                if let Some(first) = taken.insert(phys.clone(), entry.name.clone()) {
                    return Err(DevicePluginError::DeviceSharedTwice {
                        device: phys.uuid().to_string(),
                        first,
                        second: entry.name.clone(),
                    });
                }
                for n in 0..entry.replicas {
                    slot.0.push(PluginDevice {
                        id: format!("{}::{n}", phys.uuid()),
                        physical: phys.clone(),
                        replica: Some(n),
                    });
                }
            }
        }
    }

    for (phys, resource) in &base {
        if taken.contains_key(phys) {
            continue;
        }
        validate_name(resource)?;
        sets.entry(resource.clone())
            .or_insert_with(|| (Vec::new(), None))
            .0
            .push(PluginDevice {
                id: phys.uuid().to_string(),
                physical: phys.clone(),
                replica: None,
            });
    }

    Ok(sets
        .into_iter()
        .filter(|(_, (devices, _))| !devices.is_empty())
        .map(|(name, (devices, sharing))| ResourceSet::new(name, devices, sharing))
        .collect())
}

/// Physical devices with the resource each is advertised under before sharing, in
/// index order.
fn base_devices(
    inv: &Inventory,
    settings: &Settings,
) -> Result<Vec<(Physical, String)>, DevicePluginError> {
    let default_gpu = [ResourcePattern {
        pattern: "*".into(),
        name: names::RESOURCE_GPU.into(),
    }];
    let gpu_patterns: &[ResourcePattern] = if settings.gpu_patterns.is_empty() {
        &default_gpu
    } else {
        &settings.gpu_patterns
    };
    let use_mig = |gpu: &Gpu| settings.mig_strategy != MigStrategy::None && gpu.mig_enabled;

    if settings.mig_strategy == MigStrategy::Single {
        check_single(inv)?;
    }

    let mut out = Vec::new();
    for gpu in &inv.gpus {
        if !use_mig(gpu) {
            match first_match(gpu_patterns, &gpu.product) {
                Some(name) => out.push((Physical::of_gpu(gpu), name)),
                None => tracing::warn!(gpu = gpu.index, product = %gpu.product,
                    "no resources.gpus pattern matches this GPU; not advertised"),
            }
            continue;
        }
        if gpu.mig_devices.is_empty() {
            tracing::warn!(
                gpu = gpu.index,
                "MIG enabled but no MIG devices; nothing advertised"
            );
        }
        for mig in &gpu.mig_devices {
            let name = if !settings.mig_patterns.is_empty() {
                first_match(&settings.mig_patterns, &mig.profile)
            } else if settings.mig_strategy == MigStrategy::Single {
                Some(names::RESOURCE_GPU.to_string())
            } else if mig.whole_instance {
                Some(format!(
                    "{}{}",
                    names::RESOURCE_MIG_PREFIX,
                    mig.profile.replace('+', ".")
                ))
            } else {
                None
            };
            match name {
                Some(name) => out.push((Physical::of_mig(mig, gpu.minor), name)),
                None => tracing::warn!(device = %mig.uuid, profile = %mig.profile,
                    "no MIG resource for this profile; not advertised"),
            }
        }
    }
    Ok(out)
}

fn first_match(patterns: &[ResourcePattern], text: &str) -> Option<String> {
    patterns
        .iter()
        .find(|p| glob_match(&p.pattern, text))
        .map(|p| p.name.clone())
}

/// `single`: one MIG mode for all GPUs, ≥ 1 MIG device each, all MIG devices alike.
fn check_single(inv: &Inventory) -> Result<(), DevicePluginError> {
    let (enabled, disabled): (Vec<&Gpu>, Vec<&Gpu>) = inv.gpus.iter().partition(|g| g.mig_enabled);
    if !enabled.is_empty() && !disabled.is_empty() {
        return Err(DevicePluginError::SingleMixedModes {
            enabled: enabled.iter().map(|g| g.index).collect(),
            disabled: disabled.iter().map(|g| g.index).collect(),
        });
    }
    let mut first: Option<&Mig> = None;
    for gpu in enabled {
        if gpu.mig_devices.is_empty() {
            return Err(DevicePluginError::SingleNoMigDevices { gpu: gpu.index });
        }
        for mig in &gpu.mig_devices {
            match first {
                None => first = Some(mig),
                Some(f) if f.profile != mig.profile => {
                    return Err(DevicePluginError::SingleUnlike {
                        first: f.profile.clone(),
                        first_gpu: f.parent,
                        other: mig.profile.clone(),
                        other_gpu: mig.parent,
                    });
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Applies a `devices` selector to a resource's physical devices (index order).
fn select<'a>(
    candidates: &[&'a Physical],
    selector: &DeviceSelector,
    resource: &str,
) -> Result<Vec<&'a Physical>, DevicePluginError> {
    match selector {
        DeviceSelector::All => Ok(candidates.to_vec()),
        DeviceSelector::Count(n) => Ok(candidates.iter().take(*n).copied().collect()),
        DeviceSelector::List(entries) => {
            let mut out: Vec<&Physical> = Vec::new();
            for entry in entries {
                let hit = candidates
                    .iter()
                    .find(|p| selector_matches(p, entry))
                    .ok_or_else(|| DevicePluginError::UnknownDeviceSelector {
                        resource: resource.to_string(),
                        entry: entry.clone(),
                    })?;
                if !out.contains(hit) {
                    out.push(hit);
                }
            }
            out.sort();
            Ok(out)
        }
    }
}

fn selector_matches(phys: &Physical, entry: &str) -> bool {
    if entry == phys.uuid() || entry == phys.index_id() {
        return true;
    }
    // Legacy MIG-GPU-<parent uuid>/<gi>/<ci>: the parent UUID is not in `Physical`, so the
    // shell rewrites those to MIG UUIDs (see `rewrite_legacy_mig_selectors`).
    false
}

/// Rewrites legacy `MIG-GPU-<uuid>/<gi>/<ci>` selectors to the MIG device's own UUID.
pub fn rewrite_legacy_mig_selectors(settings: &mut Settings, inv: &Inventory) {
    let Some(sharing) = settings.sharing.as_mut() else {
        return;
    };
    for entry in &mut sharing.resources {
        let DeviceSelector::List(list) = &mut entry.devices else {
            continue;
        };
        for item in list.iter_mut() {
            let Some(rest) = item.strip_prefix("MIG-") else {
                continue;
            };
            let mut parts = rest.split('/');
            let (Some(parent), Some(gi), Some(ci), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Ok(gi), Ok(ci)) = (gi.parse::<u32>(), ci.parse::<u32>()) else {
                continue;
            };
            let hit = inv
                .gpus
                .iter()
                .filter(|g| g.uuid == parent)
                .flat_map(|g| &g.mig_devices)
                .find(|m| m.gpu_instance == gi && m.compute_instance == ci);
            if let Some(mig) = hit {
                *item = mig.uuid.clone();
            }
        }
    }
}

/// Kubelet rules for an extended resource name: domain-prefixed, ≤ 63 chars, the part
/// after `/` a DNS-subdomain-like name.
pub fn validate_name(name: &str) -> Result<(), DevicePluginError> {
    let bad = |reason: &str| DevicePluginError::BadResourceName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let Some((domain, short)) = name.split_once('/') else {
        return Err(bad("must be <domain>/<name>"));
    };
    if name.len() > 63 {
        return Err(bad("longer than 63 characters"));
    }
    if domain.is_empty() || domain.ends_with("kubernetes.io") {
        return Err(bad("needs a domain outside kubernetes.io"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if short.is_empty()
        || !short.chars().all(ok_char)
        || !alnum(short.chars().next())
        || !alnum(short.chars().last())
    {
        return Err(bad(
            "the part after '/' must be lower-case alphanumerics, '-' or '.'",
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::device_plugin::settings::{ReplicatedResource, Sharing};

    pub(crate) fn gpu(index: u32, migs: &[(&str, u32)]) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-{index:08}"),
            product: "NVIDIA H100 80GB HBM3".into(),
            minor: index,
            mig_enabled: !migs.is_empty(),
            mig_devices: migs
                .iter()
                .enumerate()
                .map(|(j, (profile, gi))| Mig {
                    parent: index,
                    index: j as u32,
                    uuid: format!("MIG-{index}-{j}"),
                    gpu_instance: *gi,
                    compute_instance: 0,
                    profile: profile.to_string(),
                    whole_instance: !profile.contains('c'),
                })
                .collect(),
        }
    }

    pub(crate) fn inv(n: u32) -> Inventory {
        Inventory {
            gpus: (0..n).map(|i| gpu(i, &[])).collect(),
        }
    }

    pub(crate) fn time_sliced(replicas: u32, rename: Option<&str>) -> Settings {
        Settings {
            sharing: Some(Sharing {
                kind: SharingKind::TimeSlicing,
                fail_requests_greater_than_one: false,
                resources: vec![ReplicatedResource {
                    name: names::RESOURCE_GPU.into(),
                    rename: rename.map(str::to_string),
                    devices: DeviceSelector::All,
                    replicas,
                }],
            }),
            ..Settings::default()
        }
    }

    fn summary(sets: &[ResourceSet]) -> Vec<(String, usize)> {
        sets.iter()
            .map(|s| (s.name.clone(), s.devices.len()))
            .collect()
    }

    #[test]
    fn whole_gpus() {
        let sets = build(&inv(8), &Settings::default()).unwrap();
        assert_eq!(summary(&sets), [("nvidia.com/gpu".to_string(), 8)]);
        assert_eq!(sets[0].devices[3].id, "GPU-00000003");
        assert_eq!(sets[0].socket_name(), "nvidia-gpu.sock");
    }

    #[test]
    fn time_slicing_with_and_without_rename() {
        let sets = build(&inv(2), &time_sliced(4, None)).unwrap();
        assert_eq!(summary(&sets), [("nvidia.com/gpu".to_string(), 8)]);
        let ids: Vec<&str> = sets[0].devices.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(
            &ids[..4],
            [
                "GPU-00000000::0",
                "GPU-00000000::1",
                "GPU-00000000::2",
                "GPU-00000000::3"
            ]
        );

        let sets = build(&inv(2), &time_sliced(4, Some("nvidia.com/gpu.shared"))).unwrap();
        assert_eq!(summary(&sets), [("nvidia.com/gpu.shared".to_string(), 8)]);
        assert_eq!(sets[0].socket_name(), "nvidia-gpu.shared.sock");
    }

    #[test]
    fn sharing_devices_selector_is_honoured() {
        let mut s = time_sliced(2, Some("nvidia.com/gpu.shared"));
        if let Some(sh) = s.sharing.as_mut() {
            sh.resources[0].devices = DeviceSelector::List(vec!["1".into(), "GPU-00000003".into()]);
        }
        let sets = build(&inv(4), &s).unwrap();
        assert_eq!(
            summary(&sets),
            [
                ("nvidia.com/gpu".to_string(), 2),
                ("nvidia.com/gpu.shared".to_string(), 4)
            ]
        );
        if let Some(sh) = s.sharing.as_mut() {
            sh.resources[0].devices = DeviceSelector::List(vec!["7".into()]);
        }
        assert!(matches!(
            build(&inv(4), &s),
            Err(DevicePluginError::UnknownDeviceSelector { .. })
        ));
        if let Some(sh) = s.sharing.as_mut() {
            sh.resources[0].devices = DeviceSelector::Count(1);
        }
        let sets = build(&inv(4), &s).unwrap();
        assert_eq!(summary(&sets)[1], ("nvidia.com/gpu.shared".to_string(), 2));
    }

    #[test]
    fn user_resource_patterns_are_honoured() {
        let s = Settings {
            gpu_patterns: vec![ResourcePattern {
                pattern: "*H100*".into(),
                name: "nvidia.com/h100".into(),
            }],
            ..Settings::default()
        };
        let sets = build(&inv(2), &s).unwrap();
        assert_eq!(summary(&sets), [("nvidia.com/h100".to_string(), 2)]);
    }

    #[test]
    fn mig_strategies() {
        let balanced = [
            ("1g.10gb", 7),
            ("1g.10gb", 8),
            ("2g.20gb", 3),
            ("3g.40gb", 2),
        ];
        let inventory = Inventory {
            gpus: vec![gpu(0, &balanced), gpu(1, &balanced)],
        };
        let none = build(&inventory, &Settings::default()).unwrap();
        assert_eq!(summary(&none), [("nvidia.com/gpu".to_string(), 2)]);

        let mixed = Settings {
            mig_strategy: MigStrategy::Mixed,
            ..Settings::default()
        };
        assert_eq!(
            summary(&build(&inventory, &mixed).unwrap()),
            [
                ("nvidia.com/mig-1g.10gb".to_string(), 4),
                ("nvidia.com/mig-2g.20gb".to_string(), 2),
                ("nvidia.com/mig-3g.40gb".to_string(), 2)
            ]
        );

        let single = Settings {
            mig_strategy: MigStrategy::Single,
            ..Settings::default()
        };
        assert!(matches!(
            build(&inventory, &single),
            Err(DevicePluginError::SingleUnlike { .. })
        ));
        let alike = Inventory {
            gpus: vec![gpu(0, &[("1g.10gb", 7); 7]), gpu(1, &[("1g.10gb", 7); 7])],
        };
        let sets = build(&alike, &single).unwrap();
        assert_eq!(summary(&sets), [("nvidia.com/gpu".to_string(), 14)]);
        assert_eq!(sets[0].devices[0].physical.index_id(), "0:0");
        let half = Inventory {
            gpus: vec![gpu(0, &[("1g.10gb", 7)]), gpu(1, &[])],
        };
        assert!(matches!(
            build(&half, &single),
            Err(DevicePluginError::SingleMixedModes { .. })
        ));
    }

    #[test]
    fn mps_rules() {
        let mut s = time_sliced(4, None);
        if let Some(sh) = s.sharing.as_mut() {
            sh.kind = SharingKind::Mps;
        }
        assert!(matches!(
            build(&inv(1), &s),
            Err(DevicePluginError::MpsWithoutRoot)
        ));
        s.mps_root = Some("/run/nvidia/mps".into());
        assert_eq!(build(&inv(1), &s).unwrap()[0].devices.len(), 4);
        s.mig_strategy = MigStrategy::Single;
        let migs = Inventory {
            gpus: vec![gpu(0, &[("1g.10gb", 7)])],
        };
        assert!(matches!(
            build(&migs, &s),
            Err(DevicePluginError::MpsOnMig { .. })
        ));
    }

    #[test]
    fn resource_names_are_checked() {
        assert!(validate_name("nvidia.com/gpu.shared").is_ok());
        assert!(validate_name("gpu").is_err());
        assert!(validate_name("kubernetes.io/gpu").is_err());
        assert!(validate_name("nvidia.com/GPU").is_err());
    }
}
