//! The NVML calls nvml-wrapper 0.13 does not wrap (or wraps wrongly), made through its raw
//! library handle. This is the only module of the workspace allowed `unsafe`.
//!
//! Every call follows one pattern: resolve the symbol (an error, not a crash, when the driver
//! lacks it), pass pointers to locals or to buffers sized for the count passed with them, and
//! turn the return code into an `NvmlError`.
#![allow(unsafe_code)]

use std::os::raw::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_GRID_LICENSE_FEATURE_MAX_COUNT,
    nvmlComputeInstance_t, nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t,
    nvmlEventData_t, nvmlFieldValue_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t,
    nvmlGpuInstancePlacement_t, nvmlGridLicensableFeatures_t,
    nvmlGridLicenseFeatureCode_t_NVML_GRID_LICENSE_FEATURE_CODE_VGPU,
};

/// Enough room for every instance NVML can report per profile.
const MAX_INSTANCES: usize = 32;

/// A GPU instance as NVML reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawGi {
    pub id: u32,
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
}

/// A compute instance as NVML reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCi {
    pub id: u32,
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
}

/// A compute-instance profile of a GPU instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCiProfile {
    pub id: u32,
    pub slices: u32,
    pub sm_count: u32,
}

/// One event with its MIG attribution (nvml-wrapper's `EventData` drops the GI/CI ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    pub uuid: String,
    pub kind: u64,
    pub data: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

fn gi_handle(nvml: &Nvml, dev: &Device<'_>, id: u32) -> Result<nvmlGpuInstance_t, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceById.as_ref())?;
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: `dev.handle()` is a live handle of this `nvml`; `gi` is a local out-pointer.
    unsafe { nvml_try(sym(dev.handle(), id, &mut gi))? };
    Ok(gi)
}

fn gi_info(nvml: &Nvml, gi: nvmlGpuInstance_t) -> Result<RawGi, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlGpuInstanceGetInfo.as_ref())?;
    // SAFETY: all-zero is a valid bit pattern for this plain C struct (pointers become null).
    let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `gi` came from NVML; `info` is a local out-pointer.
    unsafe { nvml_try(sym(gi, &mut info))? };
    Ok(RawGi {
        id: info.id,
        profile_id: info.profileId,
        start: info.placement.start,
        size: info.placement.size,
    })
}

fn ci_info(nvml: &Nvml, ci: nvmlComputeInstance_t) -> Result<RawCi, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlComputeInstanceGetInfo_v2.as_ref())?;
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `ci` came from NVML; `info` is a local out-pointer.
    unsafe { nvml_try(sym(ci, &mut info))? };
    Ok(RawCi {
        id: info.id,
        profile_id: info.profileId,
        start: info.placement.start,
        size: info.placement.size,
    })
}

/// Valid placements of a GI profile (the wrapper's version returns an empty list).
pub fn gi_placements(
    nvml: &Nvml,
    dev: &Device<'_>,
    profile_id: u32,
) -> Result<Vec<(u32, u32)>, NvmlError> {
    let sym = nvml_sym(
        nvml.lib()
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref(),
    )?;
    let mut buf = [nvmlGpuInstancePlacement_t { start: 0, size: 0 }; MAX_INSTANCES];
    let mut count = MAX_INSTANCES as c_uint;
    // SAFETY: `buf` holds `count` elements; NVML writes at most `count` and updates it.
    unsafe { nvml_try(sym(dev.handle(), profile_id, buf.as_mut_ptr(), &mut count))? };
    Ok(buf
        .iter()
        .take((count as usize).min(MAX_INSTANCES))
        .map(|p| (p.start, p.size))
        .collect())
}

/// GPU instances of one profile id.
pub fn gpu_instances(
    nvml: &Nvml,
    dev: &Device<'_>,
    profile_id: u32,
) -> Result<Vec<RawGi>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstances.as_ref())?;
    let mut buf: [nvmlGpuInstance_t; MAX_INSTANCES] = [std::ptr::null_mut(); MAX_INSTANCES];
    let mut count: c_uint = 0;
    // SAFETY: `buf` has room for MAX_INSTANCES handles, more than any profile's instance count.
    unsafe { nvml_try(sym(dev.handle(), profile_id, buf.as_mut_ptr(), &mut count))? };
    buf.iter()
        .take((count as usize).min(MAX_INSTANCES))
        .map(|&gi| gi_info(nvml, gi))
        .collect()
}

pub fn create_gpu_instance(
    nvml: &Nvml,
    dev: &Device<'_>,
    profile_id: u32,
    start: u32,
    size: u32,
) -> Result<RawGi, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceCreateGpuInstanceWithPlacement.as_ref())?;
    let placement = nvmlGpuInstancePlacement_t { start, size };
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: `placement` and `gi` are locals that outlive the call.
    unsafe { nvml_try(sym(dev.handle(), profile_id, &placement, &mut gi))? };
    gi_info(nvml, gi)
}

pub fn destroy_gpu_instance(nvml: &Nvml, dev: &Device<'_>, id: u32) -> Result<(), NvmlError> {
    let gi = gi_handle(nvml, dev, id)?;
    let sym = nvml_sym(nvml.lib().nvmlGpuInstanceDestroy.as_ref())?;
    // SAFETY: `gi` is a live GPU-instance handle just looked up.
    unsafe { nvml_try(sym(gi)) }
}

/// A compute-instance profile (`ci_profile` = NVML_COMPUTE_INSTANCE_PROFILE_* enum) of a GI.
pub fn ci_profile(
    nvml: &Nvml,
    dev: &Device<'_>,
    gi_id: u32,
    ci_profile: u32,
) -> Result<RawCiProfile, NvmlError> {
    let gi = gi_handle(nvml, dev, gi_id)?;
    let sym = nvml_sym(
        nvml.lib()
            .nvmlGpuInstanceGetComputeInstanceProfileInfo
            .as_ref(),
    )?;
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `gi` is live; `info` is a local out-pointer.
    unsafe {
        nvml_try(sym(
            gi,
            ci_profile,
            NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            &mut info,
        ))?
    };
    Ok(RawCiProfile {
        id: info.id,
        slices: info.sliceCount,
        sm_count: info.multiprocessorCount,
    })
}

/// Compute instances of one CI profile id inside a GI.
pub fn compute_instances(
    nvml: &Nvml,
    dev: &Device<'_>,
    gi_id: u32,
    ci_profile_id: u32,
) -> Result<Vec<RawCi>, NvmlError> {
    let gi = gi_handle(nvml, dev, gi_id)?;
    let sym = nvml_sym(nvml.lib().nvmlGpuInstanceGetComputeInstances.as_ref())?;
    let mut buf: [nvmlComputeInstance_t; MAX_INSTANCES] = [std::ptr::null_mut(); MAX_INSTANCES];
    let mut count: c_uint = 0;
    // SAFETY: `buf` has room for MAX_INSTANCES handles, more than a GI can hold.
    unsafe { nvml_try(sym(gi, ci_profile_id, buf.as_mut_ptr(), &mut count))? };
    buf.iter()
        .take((count as usize).min(MAX_INSTANCES))
        .map(|&ci| ci_info(nvml, ci))
        .collect()
}

pub fn create_compute_instance(
    nvml: &Nvml,
    dev: &Device<'_>,
    gi_id: u32,
    ci_profile_id: u32,
) -> Result<RawCi, NvmlError> {
    let gi = gi_handle(nvml, dev, gi_id)?;
    let sym = nvml_sym(nvml.lib().nvmlGpuInstanceCreateComputeInstance.as_ref())?;
    let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
    // SAFETY: `gi` is live; `ci` is a local out-pointer.
    unsafe { nvml_try(sym(gi, ci_profile_id, &mut ci))? };
    ci_info(nvml, ci)
}

pub fn destroy_compute_instance(
    nvml: &Nvml,
    dev: &Device<'_>,
    gi_id: u32,
    ci_id: u32,
) -> Result<(), NvmlError> {
    let gi = gi_handle(nvml, dev, gi_id)?;
    let get = nvml_sym(nvml.lib().nvmlGpuInstanceGetComputeInstanceById.as_ref())?;
    let destroy = nvml_sym(nvml.lib().nvmlComputeInstanceDestroy.as_ref())?;
    let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
    // SAFETY: `gi` is live; `ci` is filled by NVML before it is destroyed.
    unsafe {
        nvml_try(get(gi, ci_id, &mut ci))?;
        nvml_try(destroy(ci))
    }
}

/// (GPU instance id, compute instance id) of a MIG device handle.
pub fn mig_ids(nvml: &Nvml, mig: &Device<'_>) -> Result<(u32, u32), NvmlError> {
    let gi_sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let ci_sym = nvml_sym(nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref())?;
    let (mut gi, mut ci): (c_uint, c_uint) = (0, 0);
    // SAFETY: `mig` is a live MIG device handle; outputs are locals.
    unsafe {
        nvml_try(gi_sym(mig.handle(), &mut gi))?;
        nvml_try(ci_sym(mig.handle(), &mut ci))?;
    }
    Ok((gi, ci))
}

/// (correctable rows, uncorrectable rows, pending, failure).
pub fn remapped_rows(nvml: &Nvml, dev: &Device<'_>) -> Result<(u32, u32, bool, bool), NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure): (c_uint, c_uint, c_uint, c_uint) =
        (0, 0, 0, 0);
    // SAFETY: outputs are locals.
    unsafe {
        nvml_try(sym(
            dev.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        ))?
    };
    Ok((corr, unc, pending != 0, failure != 0))
}

// `c_ulong` is 64 bits here but not on every target.
#[allow(clippy::unnecessary_cast)]
/// Field values with a scope id (per NVLink, or `u32::MAX` for all), which the wrapper's
/// `field_values_for` cannot express. `None` where the field is unsupported.
pub fn field_values(
    nvml: &Nvml,
    dev: &Device<'_>,
    fields: &[(u32, u32)],
) -> Result<Vec<Option<u64>>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetFieldValues.as_ref())?;
    let mut values: Vec<nvmlFieldValue_t> = fields
        .iter()
        .map(|&(id, scope)| {
            // SAFETY: all-zero is a valid bit pattern for this plain C struct/union.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = id;
            v.scopeId = scope;
            v
        })
        .collect();
    let len = i32::try_from(values.len()).map_err(|_| NvmlError::InvalidArg)?;
    // SAFETY: `values` holds exactly `len` initialised entries for NVML to fill in place.
    unsafe { nvml_try(sym(dev.handle(), len, values.as_mut_ptr()))? };
    Ok(values
        .iter()
        .map(|v| {
            if v.nvmlReturn != 0 {
                return None;
            }
            // SAFETY: `valueType` says which union member NVML wrote.
            unsafe {
                match v.valueType {
                    0 => Some(v.value.dVal.max(0.0) as u64),
                    1 => Some(u64::from(v.value.uiVal)),
                    2 => Some(v.value.ulVal as u64),
                    3 => Some(v.value.ullVal),
                    4 => Some(v.value.sllVal.max(0) as u64),
                    5 => Some(v.value.siVal.max(0) as u64),
                    6 => Some(u64::from(v.value.usVal)),
                    _ => None,
                }
            }
        })
        .collect())
}

/// Wait for one event on `set`, keeping the GI/CI ids. `Ok(None)` on timeout.
pub fn event_wait(
    nvml: &Nvml,
    set: &EventSet<'_>,
    timeout_ms: u32,
) -> Result<Option<RawEvent>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live event set of this `nvml`; `data` is a local out-pointer.
    match unsafe { nvml_try(sym(set.handle(), &mut data, timeout_ms)) } {
        Ok(()) => {}
        Err(NvmlError::Timeout) => return Ok(None),
        Err(e) => return Err(e),
    }
    // SAFETY: NVML filled `data.device` with a live device handle of this `nvml`.
    let device = unsafe { Device::new(data.device, nvml) };
    Ok(Some(RawEvent {
        uuid: device.uuid()?,
        kind: data.eventType,
        data: data.eventData,
        gpu_instance_id: data.gpuInstanceId,
        compute_instance_id: data.computeInstanceId,
    }))
}

/// State of the vGPU licensable feature; `None` when the GPU has no licensing (not a vGPU).
pub fn vgpu_license_state(nvml: &Nvml, dev: &Device<'_>) -> Result<Option<u32>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGridLicensableFeatures_v4.as_ref())?;
    // SAFETY: all-zero is a valid bit pattern for this plain C struct of ints and char arrays.
    let mut f: nvmlGridLicensableFeatures_t = unsafe { std::mem::zeroed() };
    // SAFETY: `f` is a local out-struct of the size NVML expects for the _v4 call.
    unsafe { nvml_try(sym(dev.handle(), &mut f))? };
    if f.isGridLicenseSupported == 0 {
        return Ok(None);
    }
    let n = f
        .licensableFeaturesCount
        .min(NVML_GRID_LICENSE_FEATURE_MAX_COUNT) as usize;
    Ok(f.gridLicensableFeatures
        .iter()
        .take(n)
        .find(|x| x.featureCode == nvmlGridLicenseFeatureCode_t_NVML_GRID_LICENSE_FEATURE_CODE_VGPU)
        .map(|x| x.featureState))
}
