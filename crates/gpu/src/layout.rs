//! Whole-GPU MIG layouts (`{profile: count}` as in a mig-parted config entry): plan them against
//! the placement rules, read the current one, and apply one through any [`Backend`].
//!
//! Applying validates the whole layout first, so a layout the hardware cannot hold is refused
//! before any instance is destroyed or created.

use std::collections::BTreeMap;

use crate::backend::Backend;
use crate::error::{GpuError, Result};
use crate::mig::{self, PlacementError};
use crate::types::{MigProfile, Placement};

/// What one GPU should look like.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigLayout {
    pub enabled: bool,
    /// Profile string (`1g.10gb`, `1g.10gb+me`, `1c.2g.20gb`) → number of MIG devices.
    pub devices: BTreeMap<String, u32>,
}

impl MigLayout {
    pub fn disabled() -> Self {
        MigLayout::default()
    }

    pub fn enabled<'a>(devices: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        MigLayout {
            enabled: true,
            devices: devices
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(p, n)| (p.to_string(), n))
                .collect(),
        }
    }
}

/// One GPU instance to create, with the compute instances (in compute slices) inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedInstance {
    pub profile: MigProfile,
    pub placement: Placement,
    pub compute_instances: Vec<u32>,
}

/// Turn a layout into GPU instances with placements, or say why the GPU cannot hold it.
/// Compute-instance profiles (`1c.2g.20gb`) are packed into as few GPU instances as fit.
pub fn plan(
    profiles: &[MigProfile],
    layout: &MigLayout,
) -> std::result::Result<Vec<PlannedInstance>, PlacementError> {
    // GI profile -> CI sizes wanted in it.
    let mut by_gi: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (name, &count) in &layout.devices {
        let (ci, gi) = mig::parse_profile(name).ok_or_else(|| PlacementError::UnknownProfile {
            profile: name.clone(),
            valid: profiles
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        let gi_profile = mig::find_profile(profiles, &gi)?;
        if ci > gi_profile.slices {
            return Err(PlacementError::UnknownProfile {
                profile: name.clone(),
                valid: format!("compute instances of at most {} slices", gi_profile.slices),
            });
        }
        by_gi
            .entry(gi)
            .or_default()
            .extend(std::iter::repeat_n(ci, count as usize));
    }
    // First-fit-decreasing packing of CIs into GIs of each profile.
    let mut gi_counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut packed: BTreeMap<String, Vec<Vec<u32>>> = BTreeMap::new();
    for (gi, mut cis) in by_gi {
        let size = mig::find_profile(profiles, &gi)?.slices;
        cis.sort_unstable_by(|a, b| b.cmp(a));
        let mut bins: Vec<Vec<u32>> = Vec::new();
        for ci in cis {
            match bins.iter_mut().find(|b| b.iter().sum::<u32>() + ci <= size) {
                Some(b) => b.push(ci),
                None => bins.push(vec![ci]),
            }
        }
        gi_counts.insert(gi.clone(), bins.len() as u32);
        packed.insert(gi, bins);
    }
    let placed = mig::plan_layout(profiles, &gi_counts)?;
    let mut out = Vec::new();
    for (profile, placement) in placed {
        let compute_instances = packed
            .get_mut(&profile.name)
            .and_then(|bins| bins.pop())
            .unwrap_or_else(|| vec![profile.slices]);
        out.push(PlannedInstance {
            profile,
            placement,
            compute_instances,
        });
    }
    Ok(out)
}

/// The layout a GPU has now (MIG off, or its MIG devices counted by profile).
pub fn current(backend: &dyn Backend, gpu: u32) -> Result<MigLayout> {
    let profiles = backend.mig_profiles(gpu)?;
    if profiles.is_empty() || !backend.mig_mode(gpu)?.current {
        return Ok(MigLayout::disabled());
    }
    let mut devices = BTreeMap::new();
    for d in backend.mig_devices(gpu)? {
        *devices.entry(d.profile).or_insert(0) += 1;
    }
    Ok(MigLayout {
        enabled: true,
        devices,
    })
}

/// Make GPU `gpu` look like `layout`. Checks everything first; then tears down the existing
/// instances and creates the planned ones. MIG mode changes that stay pending (the GPU is busy)
/// are reported as `InUse`.
pub fn apply(backend: &dyn Backend, gpu: u32, layout: &MigLayout) -> Result<()> {
    let profiles = backend.mig_profiles(gpu)?;
    if profiles.is_empty() {
        if !layout.enabled {
            return Ok(());
        }
        let name = backend.device_info(gpu)?.name;
        return Err(GpuError::NotSupported {
            gpu,
            what: format!("MIG ({name})"),
        });
    }
    let planned = if layout.enabled {
        plan(&profiles, layout).map_err(|e| GpuError::MigRefused {
            gpu,
            reason: e.to_string(),
        })?
    } else {
        Vec::new()
    };
    let mode = backend.mig_mode(gpu)?;
    if mode.current {
        clear(backend, gpu)?;
    }
    if mode.current != layout.enabled || mode.pending != layout.enabled {
        let mode = backend.set_mig_mode(gpu, layout.enabled)?;
        if mode.current != layout.enabled {
            return Err(GpuError::InUse {
                gpu,
                reason: format!(
                    "MIG mode change to {} is pending; stop the GPU's processes and reset it",
                    if layout.enabled {
                        "enabled"
                    } else {
                        "disabled"
                    }
                ),
            });
        }
    }
    for p in planned {
        let gi = backend.create_gpu_instance(gpu, &p.profile.name, Some(p.placement))?;
        for slices in p.compute_instances {
            backend.create_compute_instance(gpu, gi.id, slices)?;
        }
    }
    Ok(())
}

/// Destroy every compute and GPU instance of a MIG-enabled GPU.
pub fn clear(backend: &dyn Backend, gpu: u32) -> Result<()> {
    for gi in backend.gpu_instances(gpu)? {
        for ci in backend.compute_instances(gpu, gi.id)? {
            backend.destroy_compute_instance(gpu, gi.id, ci.id)?;
        }
        backend.destroy_gpu_instance(gpu, gi.id)?;
    }
    Ok(())
}
