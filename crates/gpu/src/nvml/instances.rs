//! MIG through NVML: profile table, instances, MIG devices, and the MIG manager's calls.

use nvml_wrapper::Device;

use super::{NvmlBackend, err, optional, raw};
use crate::catalog::mig_memory_gb;
use crate::error::{GpuError, Result};
use crate::mig::{self, Occupant};
use crate::types::{ComputeInstance, Engines, GpuInstance, MigDevice, MigProfile, Placement};

const MIB: u64 = 1024 * 1024;
/// NVML_GPU_INSTANCE_PROFILE_COUNT and NVML_COMPUTE_INSTANCE_PROFILE_COUNT.
const GI_PROFILE_ENUMS: u32 = 18;
const CI_PROFILE_ENUMS: u32 = 8;

/// Profile-name suffix of NVML GI profile enums beyond the plain `<G>g` ones.
fn profile_suffix(nvml_profile: u32) -> &'static str {
    match nvml_profile {
        7 | 8 => "+me",
        10 | 11 | 12 | 17 => "+gfx",
        13 | 14 => "-me",
        15 | 16 => "+me.all",
        _ => "",
    }
}

impl NvmlBackend {
    pub(super) fn gi_profiles(&self, gpu: u32, dev: &Device<'static>) -> Result<Vec<MigProfile>> {
        let total_mib = dev
            .memory_info()
            .map_err(|e| err(gpu, "nvmlDeviceGetMemoryInfo", e))?
            .total
            / MIB;
        let mut out: Vec<MigProfile> = Vec::new();
        for nvml_profile in 0..GI_PROFILE_ENUMS {
            let Some(info) = optional(dev.profile_info(nvml_profile))
                .map_err(|e| err(gpu, "nvmlDeviceGetGpuInstanceProfileInfo", e))?
            else {
                continue;
            };
            if info.instance_count == 0 || out.iter().any(|p| p.id == info.id) {
                continue;
            }
            let placements = optional(raw::gi_placements(self.nvml, dev, info.id))
                .map_err(|e| err(gpu, "nvmlDeviceGetGpuInstancePossiblePlacements", e))?
                .unwrap_or_default();
            let memory_slices = placements.first().map(|p| p.1).unwrap_or(0);
            out.push(MigProfile {
                name: format!(
                    "{}g.{}gb{}",
                    info.slice_count,
                    mig_memory_gb(info.memory_size_mb, total_mib),
                    profile_suffix(nvml_profile)
                ),
                id: info.id,
                nvml_profile,
                slices: info.slice_count,
                memory_slices,
                max_count: info.instance_count,
                memory_mib: info.memory_size_mb,
                sm_count: info.multiprocessor_count,
                engines: Engines {
                    copy: info.copy_engine_count,
                    decoder: info.decoder_count,
                    encoder: info.encoder_count,
                    jpeg: info.jpeg_count,
                    ofa: info.ofa_count,
                },
                placement_starts: placements.iter().map(|p| p.0).collect(),
            });
        }
        Ok(out)
    }

    pub(super) fn raw_gis(
        &self,
        gpu: u32,
        dev: &Device<'static>,
        profiles: &[MigProfile],
    ) -> Result<Vec<(raw::RawGi, MigProfile)>> {
        let mut out = Vec::new();
        for p in profiles {
            for gi in raw::gpu_instances(self.nvml, dev, p.id)
                .map_err(|e| err(gpu, "nvmlDeviceGetGpuInstances", e))?
            {
                out.push((gi, p.clone()));
            }
        }
        out.sort_by_key(|(g, _)| g.id);
        Ok(out)
    }

    /// CI profiles of a GI: (enum, raw profile).
    pub(super) fn ci_profiles(
        &self,
        gpu: u32,
        dev: &Device<'static>,
        gi: u32,
    ) -> Result<Vec<raw::RawCiProfile>> {
        let mut out: Vec<raw::RawCiProfile> = Vec::new();
        for ci_enum in 0..CI_PROFILE_ENUMS {
            if let Some(p) = optional(raw::ci_profile(self.nvml, dev, gi, ci_enum))
                .map_err(|e| err(gpu, "nvmlGpuInstanceGetComputeInstanceProfileInfo", e))?
                && !out.iter().any(|q| q.id == p.id)
            {
                out.push(p);
            }
        }
        Ok(out)
    }

    pub(super) fn cis(
        &self,
        gpu: u32,
        dev: &Device<'static>,
        gi: u32,
    ) -> Result<Vec<(raw::RawCi, raw::RawCiProfile)>> {
        let mut out = Vec::new();
        for p in self.ci_profiles(gpu, dev, gi)? {
            for ci in raw::compute_instances(self.nvml, dev, gi, p.id)
                .map_err(|e| err(gpu, "nvmlGpuInstanceGetComputeInstances", e))?
            {
                out.push((ci, p));
            }
        }
        out.sort_by_key(|(c, _)| c.id);
        Ok(out)
    }

    pub(super) fn mig_gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>> {
        let d = self.dev(gpu)?;
        let profiles = self.gi_profiles(gpu, &d)?;
        Ok(self
            .raw_gis(gpu, &d, &profiles)?
            .into_iter()
            .map(|(g, p)| GpuInstance {
                id: g.id,
                profile: p.name,
                profile_id: p.id,
                placement: Placement {
                    start: g.start,
                    size: g.size,
                },
                slices: p.slices,
                memory_mib: p.memory_mib,
            })
            .collect())
    }

    pub(super) fn mig_compute_instances(
        &self,
        gpu: u32,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstance>> {
        let d = self.dev(gpu)?;
        Ok(self
            .cis(gpu, &d, gpu_instance)?
            .into_iter()
            .map(|(c, p)| ComputeInstance {
                gpu_instance_id: gpu_instance,
                id: c.id,
                slices: p.slices,
                start: c.start,
                sm_count: p.sm_count,
            })
            .collect())
    }

    pub(super) fn mig_devices_of(&self, gpu: u32) -> Result<Vec<MigDevice>> {
        let d = self.dev(gpu)?;
        let profiles = self.gi_profiles(gpu, &d)?;
        let gis = self.raw_gis(gpu, &d, &profiles)?;
        let max = d
            .mig_device_count()
            .map_err(|e| err(gpu, "nvmlDeviceGetMaxMigDeviceCount", e))?;
        let mut out = Vec::new();
        for i in 0..max {
            let Some(m) = optional(d.mig_device_by_index(i))
                .map_err(|e| err(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", e))?
            else {
                continue;
            };
            let (gi_id, ci_id) = raw::mig_ids(self.nvml, &m)
                .map_err(|e| err(gpu, "nvmlDeviceGetGpuInstanceId", e))?;
            let Some((gi, p)) = gis.iter().find(|(g, _)| g.id == gi_id) else {
                continue;
            };
            let ci = self
                .cis(gpu, &d, gi_id)?
                .into_iter()
                .find(|(c, _)| c.id == ci_id);
            let (ci_slices, sm) = ci
                .map(|(_, cp)| (cp.slices, cp.sm_count))
                .unwrap_or((p.slices, p.sm_count));
            out.push(MigDevice {
                parent: gpu,
                index: out.len() as u32,
                uuid: m
                    .uuid()
                    .map_err(|e| err(gpu, "nvmlDeviceGetUUID(MIG)", e))?,
                gpu_instance_id: gi_id,
                compute_instance_id: ci_id,
                profile: if ci_slices == p.slices {
                    p.name.clone()
                } else {
                    format!("{ci_slices}c.{}", p.name)
                },
                gi_profile: p.name.clone(),
                placement: Placement {
                    start: gi.start,
                    size: gi.size,
                },
                gi_slices: p.slices,
                ci_slices,
                memory_mib: p.memory_mib,
                sm_count: sm,
                engines: p.engines,
            });
        }
        Ok(out)
    }

    pub(super) fn mig_create_gpu_instance(
        &self,
        gpu: u32,
        profile: &str,
        placement: Option<Placement>,
    ) -> Result<GpuInstance> {
        let d = self.dev(gpu)?;
        let profiles = self.gi_profiles(gpu, &d)?;
        let p = mig::find_profile(&profiles, profile).map_err(|e| GpuError::MigRefused {
            gpu,
            reason: e.to_string(),
        })?;
        let existing: Vec<Occupant> = self
            .raw_gis(gpu, &d, &profiles)?
            .into_iter()
            .map(|(g, q)| Occupant {
                profile: q.name,
                placement: Placement {
                    start: g.start,
                    size: g.size,
                },
                slices: q.slices,
            })
            .collect();
        let at =
            mig::choose_placement(p, placement, &existing).map_err(|e| GpuError::MigRefused {
                gpu,
                reason: e.to_string(),
            })?;
        let gi = raw::create_gpu_instance(self.nvml, &d, p.id, at.start, at.size)
            .map_err(|e| err(gpu, "nvmlDeviceCreateGpuInstanceWithPlacement", e))?;
        Ok(GpuInstance {
            id: gi.id,
            profile: p.name.clone(),
            profile_id: p.id,
            placement: Placement {
                start: gi.start,
                size: gi.size,
            },
            slices: p.slices,
            memory_mib: p.memory_mib,
        })
    }

    pub(super) fn mig_create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        slices: u32,
    ) -> Result<ComputeInstance> {
        let d = self.dev(gpu)?;
        let p = self
            .ci_profiles(gpu, &d, gpu_instance)?
            .into_iter()
            .find(|p| p.slices == slices)
            .ok_or_else(|| GpuError::MigRefused {
                gpu,
                reason: format!(
                    "GPU instance {gpu_instance} has no {slices}-slice compute-instance profile"
                ),
            })?;
        let ci = raw::create_compute_instance(self.nvml, &d, gpu_instance, p.id)
            .map_err(|e| err(gpu, "nvmlGpuInstanceCreateComputeInstance", e))?;
        Ok(ComputeInstance {
            gpu_instance_id: gpu_instance,
            id: ci.id,
            slices: p.slices,
            start: ci.start,
            sm_count: p.sm_count,
        })
    }
}
