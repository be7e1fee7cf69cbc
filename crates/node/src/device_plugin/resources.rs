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
            let mps = gantry_api::device_plugin_config::SharingStrategy::Mps;
            if gantry_api::device_plugin_config::sharing_refused(mps, settings.mig_strategy)
                .is_some()
            {
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
pub(crate) mod tests;
